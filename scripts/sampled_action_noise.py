"""How noisy is the policy a session samples? The sampled actions' spread per action dim, at the
states a session's episodes recorded, for one or more checkpoints (docs/bench/finetune/README.md,
"Why the intervention rate does not fall").

    python scripts/sampled_action_noise.py runs/lift-camera-7/episodes runs/lift-wrist-perception runs/lift-camera-7

Why: the deterministic final policy can lift 17 of 20 while the sampled policy the actor runs in
training dithers near the cube, and the operator's no-progress rule takes over. This prints, per
checkpoint, the std of 16 sampled actions per state (action units; the arm moves 25 mm a step per
unit), the pre-tanh mean magnitude and std, and the entropy over all dims. State observations
only (the episodes' `obs.state`); the agent is rebuilt from the checkpoint's own options.
"""
from __future__ import annotations

import argparse
import glob
import json

import gymnasium as gym
import numpy as np
import torch


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("episodes", help="a dataset's episodes folder (episode_*/data.npz)")
    p.add_argument("checkpoints", nargs="+", help="run folders or checkpoint folders")
    p.add_argument("--last", type=int, default=20, help="the last N episodes' states (default 20)")
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--near", type=float, default=0.0,
                   help="ArmLift with the localiser's estimate appended (state[11:14] the hand, "
                        "state[14:17] the estimate): only states with the hand this near the cube (m)")
    a = p.parse_args()
    from robolearn.policies.checkpoints import find_checkpoint, read_json_file, read_tensors_file
    from robolearn.policies.registry import make_agent

    eps = sorted(glob.glob(f"{a.episodes}/episode_*"))[-a.last:]
    if not eps:
        raise SystemExit(f"no episode_* folders in {a.episodes}")
    data = [np.load(f"{d}/data.npz") for d in eps]
    states = np.concatenate([z["obs.state"][:-1] for z in data]).astype(np.float32)
    if a.near > 0:
        if states.shape[1] < 17:
            raise SystemExit(f"--near needs ArmLift states with the estimate (17 values), not {states.shape[1]}")
        states = states[np.linalg.norm(states[:, 11:14] - states[:, 14:17], axis=1) < a.near]
        if not len(states):
            raise SystemExit(f"no state with the hand within {a.near} m of the cube")
    act_dim = data[0]["action"].shape[1]
    obs_space = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, states.shape[1:], np.float32)})
    act_space = gym.spaces.Box(-1, 1, (act_dim,), np.float32)
    torch.manual_seed(0)
    for run in a.checkpoints:
        ckpt = find_checkpoint(run)
        state = read_json_file(ckpt / "trainer.json")
        over = {**state["agent_overrides"], "device": "cpu", "privileged": "none", "entropy_dims": 0}
        agent = make_agent(state["train"]["algo"], obs_space, act_space, seed=0, **over)
        agent.load_policy_state(read_tensors_file(ckpt / "policy.safetensors"))
        with torch.no_grad():
            feat = agent._features(agent._obs_to_torch({"state": states}, augment=False))
            mean, log_std = agent.actor(feat)
            draws = [agent.actor.sample(feat) for _ in range(a.samples)]
            actions = torch.stack([d[0] for d in draws])
            entropy = -torch.stack([d[1] for d in draws]).mean()
        print(json.dumps({"checkpoint": str(ckpt), "states": len(states),
                          "sampled_action_std": [round(float(x), 3) for x in actions.std(0).mean(0)],
                          "pre_tanh_abs_mean": [round(float(x), 2) for x in mean.abs().mean(0)],
                          "pre_tanh_std": [round(float(x), 2) for x in log_std.exp().mean(0)],
                          "entropy_all_dims": round(float(entropy), 2)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
