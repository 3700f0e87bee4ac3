"""Prior data for the learners: demonstrations from a recorded dataset, a LeRobot dataset
(`lerobot:UNITS:DIR`, imported on the fly), an .npz of transitions, or rollouts of the task's
scripted controller (`scripted:N`).

Why one module: `train`, the async learner, fine-tuning and the reset-free trainer all seed
replay the same way, with the same checks (no pickles, no NaN rewards, matching spaces).
"""
from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np

from robolearn.errors import ConfigError, DatasetError


def episode_count(spec: str, what: str = "--demos") -> int:
    """N of a `kind:N` prior-data spec (`scripted:20`, `sim:20`), with a clear error."""
    kind, _, count = spec.partition(":")
    try:
        n = int(count)
    except ValueError:
        raise ConfigError(f"{what} {spec!r}: write {kind}:N with N an integer number of episodes") from None
    if n < 1:
        raise ConfigError(f"{what} {spec!r}: N must be >= 1")
    return n


def load_demos(spec: str, env: gym.Env, seed: int = 0) -> dict:
    """Prior transitions from a dataset dir, a LeRobot dataset (`lerobot:UNITS:DIR`), an .npz of
    arrays, or `scripted:N` episodes."""
    if spec.startswith("scripted:"):
        return collect_scripted(env, episode_count(spec), seed=seed)
    if spec.startswith("lerobot:"):
        return load_lerobot_demos(spec, env)
    path = Path(spec)
    if not path.exists():
        raise DatasetError(f"demos {path} not found: pass a recorded dataset folder "
                           "(robolearn record), an .npz of transitions, or scripted:N")
    if path.is_dir():
        if (path / "meta" / "info.json").is_file() and not (path / "meta.json").is_file():
            raise ConfigError(f"demos {path} is a LeRobot dataset: say the units of its joint positions, "
                              f"which LeRobot does not record: --demos lerobot:deg:{path} (degrees, lerobot "
                              f"use_degrees=True), lerobot:m100:{path} (-100..100, lerobot's default) or "
                              f"lerobot:rad:{path}")
        try:
            from robolearn.data.dataset import Dataset, check_compatible, load_transitions
        except ImportError as exc:
            raise DatasetError(f"cannot read dataset folder {path}: robolearn.data.dataset is not "
                               f"available ({exc}); pass an .npz of transitions instead") from None
        # only the keys this env/learner uses (a dataset recorded with cameras can train a
        # state-only learner)
        keys = list(env.observation_space.spaces)
        spec = env.unwrapped.spec or env.spec
        check_compatible(Dataset(path), spec.id if spec else None, env.observation_space,
                         env.action_space, keys)
        out = load_transitions(path, keys=keys)
        if not np.all(np.isfinite(out["reward"])):  # NaN would poison the critic through replay
            n = int((~np.isfinite(out["reward"])).sum())
            raise DatasetError(f"demos {path}: {n} of {len(out['reward'])} steps have no reward (NaN: "
                               "recorded on a robot without a reward model, the human's labels are "
                               "in success_mark); train a reward model on it (robolearn reward train) "
                               "and use other prior data, e.g. sim:N")
        return out
    if path.suffix != ".npz":
        raise DatasetError(f"demos {path}: expected a dataset folder or an .npz file")
    return load_npz_transitions(path)


def load_lerobot_demos(spec: str, env: gym.Env) -> dict:
    """`lerobot:UNITS:DIR`: import the LeRobot dataset DIR for this env's task (its action mode
    and control rate; ArmReach goal in hindsight) into a temporary robolearn dataset and load it."""
    import tempfile

    from robolearn.data.lerobot_import import UNITS, import_lerobot

    _, units, path = spec.split(":", 2) if spec.count(":") >= 2 else (None, None, None)
    if units not in UNITS or not path:
        raise ConfigError(f"--demos {spec!r}: write lerobot:UNITS:DIR with UNITS one of {list(UNITS)}")
    task = getattr(env.unwrapped, "task", None)
    env_spec = env.unwrapped.spec or env.spec
    if task is None or env_spec is None or not hasattr(task, "action_mode"):
        raise ConfigError(f"--demos {spec!r}: LeRobot demos need an arm env (robolearn/ArmReach-v0)")
    with tempfile.TemporaryDirectory(prefix="robolearn-lerobot-") as tmp:
        out = Path(tmp) / "demos"
        rep = import_lerobot(path, out, units=units, env_id=env_spec.id,
                             env_kwargs={"action_mode": task.action_mode, "control_hz": task.control_hz})
        print(rep.line())
        return load_demos(str(out), env)


def load_npz_transitions(path: Path) -> dict:
    """An .npz with obs_<key>, next_obs_<key>, action, reward, terminated, truncated."""
    arrays, key = {}, None
    try:
        with np.load(path, allow_pickle=False) as z:
            for key in z.files:
                arrays[key] = z[key]
    except ValueError as exc:
        if "pickle" in str(exc):  # never offer to unpickle: a demo file must not run code
            raise DatasetError(f"demos {path}: array {key!r} holds Python objects (pickled); robolearn "
                               "reads only plain numeric/bool arrays - save them with "
                               "np.savez(path, obs_state=np.asarray(x, np.float32), ...)") from None
        raise DatasetError(f"cannot read demos {path}: {exc}") from None
    except Exception as exc:  # truncated zip, not an npz, ...
        raise DatasetError(f"cannot read demos {path}: {exc}") from None
    need = ("action", "reward", "terminated", "truncated")
    missing = [k for k in need if k not in arrays]
    if missing or not any(k.startswith("obs_") for k in arrays):
        raise DatasetError(f"demos {path}: missing arrays {missing or ['obs_<key>']}; "
                           f"found {sorted(arrays)}")
    out = {k: arrays[k] for k in need}
    out["obs"] = {k[4:]: v for k, v in arrays.items() if k.startswith("obs_")}
    out["next_obs"] = {k[9:]: v for k, v in arrays.items() if k.startswith("next_obs_")}
    if "intervention" in arrays:
        out["intervention"] = arrays["intervention"]
    return out


def collect_scripted(env: gym.Env, episodes: int, seed: int = 0) -> dict:
    """Roll out the task's scripted controller for `episodes` episodes into a transitions dict."""
    from robolearn.tasks.scripted import make_scripted

    ctrl = make_scripted(env)
    return collect_rollouts(env, ctrl.act, episodes, seed=seed, on_reset=ctrl.reset)


def collect_rollouts(env: gym.Env, act, episodes: int, seed: int = 0, on_reset=None) -> dict:
    """Roll out `act(obs) -> action` for `episodes` episodes into a transitions dict."""
    keys = list(env.observation_space.spaces)
    obs_l: dict[str, list] = {k: [] for k in keys}
    nxt_l: dict[str, list] = {k: [] for k in keys}
    act_l, rew, term, trunc = [], [], [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + 20_000 + ep)
        if on_reset is not None:
            on_reset()
        while True:
            a = np.clip(np.asarray(act(obs), dtype=np.float32), -1.0, 1.0)
            nxt, r, te, tr, _ = env.step(a)
            for k in keys:
                obs_l[k].append(obs[k])
                nxt_l[k].append(nxt[k])
            act_l.append(a)
            rew.append(r)
            term.append(te)
            trunc.append(tr)
            obs = nxt
            if te or tr:
                break
    return {"obs": {k: np.stack(v) for k, v in obs_l.items()},
            "next_obs": {k: np.stack(v) for k, v in nxt_l.items()},
            "action": np.stack(act_l).astype(np.float32), "reward": np.asarray(rew, np.float32),
            "terminated": np.asarray(term, bool), "truncated": np.asarray(trunc, bool)}
