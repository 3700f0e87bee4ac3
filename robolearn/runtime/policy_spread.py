"""How widely the policy a session samples spreads its actions, snapshot by snapshot.

Why: the actor runs the *sampled* policy in training and the evaluations run its mean, so a
session can fail while its mean is fine. The BC anchor holds only the mean, and a fresh critic
can pay a wider spread: lift session 27's pre-tanh std went from 0.4-0.5 to 1.2-3.5 within 600
env steps and stayed wide (sampled actions spread 0.2-0.6 action units all session), and the
operator took over 28 of every 32 episodes; session 28, same file, fell back to 0.1-0.2 by
step 1500 and its rate fell (docs/finetune.md, "The sampled policy's noise"). The session
report carries this curve so that a user sees it, and `scripts/sampled_action_noise.py` prints it.

Each snapshot (RUN/policy_snapshots/step_N, or any checkpoint folder) is rebuilt from its own
options and asked for its spread at the same states: the session's recorded `obs.state` rows.
State policies only (a pixel policy's spread needs its frames: None).
"""
from __future__ import annotations

import glob
from pathlib import Path

import numpy as np

MAX_STATES = 4000   # evenly spaced rows of the session's recorded states: ~1 s a snapshot on this CPU


def recorded_states(episodes: str | Path, last: int = 0,
                    max_states: int = MAX_STATES) -> tuple[np.ndarray, int] | None:
    """(the `obs.state` rows of a dataset's episodes, the action's length): the last `last`
    episodes (0 = all), at most `max_states` rows evenly spaced; None without episodes or a
    state key."""
    paths = sorted(glob.glob(f"{episodes}/episode_*/data.npz"))[-last if last else None:]
    rows, act_dims = [], set()
    for p in paths:
        try:
            with np.load(p) as z:
                if "obs.state" in z.files and "action" in z.files:
                    rows.append(np.asarray(z["obs.state"][:-1], np.float32))
                    act_dims.add(int(z["action"].shape[1]))
        except (OSError, ValueError, IndexError):
            continue        # an unreadable episode costs its rows, not the curve
    rows = [r for r in rows if len(r)]
    if not rows or len({r.shape[1] for r in rows}) != 1 or len(act_dims) != 1:
        return None
    states = np.concatenate(rows)
    if len(states) > max_states:
        states = states[np.linspace(0, len(states) - 1, max_states).astype(int)]
    return states, act_dims.pop()


def checkpoint_spread(checkpoint: str | Path, states: np.ndarray, act_dim: int, samples: int = 16,
                      seed: int = 0) -> dict:
    """The spread of one checkpoint's policy at `states`: per action dim the pre-tanh std and the
    std of `samples` sampled actions (action units), the pre-tanh mean's magnitude, and the
    entropy over all dims."""
    import gymnasium as gym
    import torch

    from robolearn.policies.checkpoints import find_checkpoint, read_json_file, read_tensors_file
    from robolearn.policies.registry import make_agent

    ckpt = find_checkpoint(checkpoint)
    trainer = read_json_file(ckpt / "trainer.json")
    weights = read_tensors_file(ckpt / "policy.safetensors")
    obs_space = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, states.shape[1:], np.float32)})
    act_space = gym.spaces.Box(-1, 1, (act_dim,), np.float32)
    over = {**trainer["agent_overrides"], "device": "cpu", "privileged": "none", "entropy_dims": 0}
    agent = make_agent(trainer["train"]["algo"], obs_space, act_space, seed=seed, **over)
    agent.load_policy_state(weights)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        feat = agent.features({"state": states})
        mean, log_std = agent.actor(feat)
        draws = [agent.actor.sample(feat, gen) for _ in range(samples)]
        actions = torch.stack([d[0] for d in draws])
        entropy = -torch.stack([d[1] for d in draws]).mean()
    return {"checkpoint": str(ckpt), "env": str(trainer["train"].get("env", "")),
            "env_steps": int(trainer["env_steps"]),
            "states": int(len(states)),
            "sampled_action_std": [round(float(x), 3) for x in actions.std(0).mean(0)],
            "pre_tanh_std": [round(float(x), 3) for x in log_std.exp().mean(0)],
            "pre_tanh_abs_mean": [round(float(x), 2) for x in mean.abs().mean(0)],
            "entropy_all_dims": round(float(entropy), 2)}


def session_spread(run_dir: str | Path, max_states: int = MAX_STATES) -> dict | None:
    """The spread of every kept policy snapshot of a finetune run, at the session's recorded
    states (session_report.json's `policy_spread`); None without snapshots or state episodes."""
    from robolearn.runtime.snapshots import kept_snapshots

    run_dir = Path(run_dir)
    snaps = kept_snapshots(run_dir)
    recorded = recorded_states(run_dir / "episodes", max_states=max_states)
    if not snaps or recorded is None:
        return None
    states, act_dim = recorded
    from robolearn.data.feature_names import action_names

    rows = [checkpoint_spread(p, states, act_dim) for p in snaps]
    return {"states": int(len(states)), "action_names": action_names(rows[-1]["env"], act_dim),
            "env_steps": [r["env_steps"] for r in rows],
            "sampled_action_std": [r["sampled_action_std"] for r in rows],
            "pre_tanh_std": [r["pre_tanh_std"] for r in rows]}

