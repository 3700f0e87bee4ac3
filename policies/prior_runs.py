"""Replay across Experiments (RaE, Tirumala et al.): earlier runs' data as prior data of a new run.

`[replay] prior_runs = ["runs/a", "datasets/b"]` (or `robolearn train --prior-runs ...`) names
run folders written by `robolearn train` / `robolearn learner` and recorded dataset folders.
Each one's transitions are checked against this run (env id, observation keys and shapes,
action size) and loaded; the trainer puts them in the prior buffer sampled at `prior_fraction`
of every batch, or beside rlpd's demos in a buffer with a share of its own
(policies/replay_setup.py: `batch_shares`, `build_replays`).

Why here and why so strict: data from another task, another camera size or another reward would
train the critic on a different problem without a sound. So a mismatch is an error naming the
path and the field, and a stored reward is only kept when it means what this run's reward
means (same env id, same reward definition); otherwise every prior transition is relabelled by
this run's reward model (`relabel`, built by the composition layer: robolearn/compose/training.py,
since reward models live above this layer), or the run stops and says how to fix it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import gymnasium as gym
import numpy as np

from robolearn.data.replay import ReplayBuffer
from robolearn.errors import ConfigError, DatasetError
from robolearn.jsonfile import read_json
from robolearn.policies.checkpoints import find_checkpoint, read_json_file

#: relabel(transitions, what) -> rewards (N,) float32, NaN where the model has no answer
Relabel = Callable[[dict, str], np.ndarray]

BUFFERS = ("replay", "prior")  # what a run's checkpoint holds: online replay, prior data (rlpd)


def reward_definition(env_id: str, reward: dict | None, env_kwargs: dict | None) -> dict:
    """What a stored reward means: the env's own reward, or the reward model it was given.
    ArmPush's `[reward] kind = "cube_finder"` is the env's own reward function at the camera's
    cube position (robolearn/rewards/push_camera.py), so a sim run's stored rewards mean the same."""
    if (reward or {}).get("kind") == "cube_finder":
        reward = None
    source = (env_kwargs or {}).get("reward_source")
    return {"env": env_id, "reward": dict(reward or {}),
            "reward_source": source if isinstance(source, (str, dict)) else None}


def is_run_folder(path: Path) -> bool:
    return any((path / name).exists() for name in ("checkpoints", "config.json", "trainer.json"))


def load_prior_runs(paths: list[str], env: gym.Env, env_id: str, obs_mode: str, reward: dict,
                    env_kwargs: dict, run_dir: Path | None = None,
                    relabel: Relabel | None = None) -> tuple[list[dict], list[dict]]:
    """(transition dicts, one per source buffer, report per path). `env` is this run's training
    env (its spaces are what the replay stores); `reward` / `env_kwargs` say what this run's
    reward is; `relabel` (None: this run has no reward model) scores prior transitions."""
    here = reward_definition(env_id, reward, env_kwargs)
    data, report = [], []
    for spec in paths:
        path = Path(spec)
        if not path.exists():
            raise ConfigError(f"[replay] prior_runs: {path} does not exist; name a run folder written by "
                              "`robolearn train` (or `learner`) or a recorded dataset folder")
        if run_dir is not None and path.resolve() == Path(run_dir).resolve():
            raise ConfigError(f"[replay] prior_runs: {path} is this run's own folder (--out); name an "
                              "earlier run, or continue that one with `robolearn train --resume`")
        if is_run_folder(path):
            parts, kind = _run_transitions(path, env, env_id, obs_mode), "run"
            there = parts.pop("_reward")
        elif (path / "meta.json").is_file():
            parts, kind = _dataset_transitions(path, env, env_id), "dataset"
            there = parts.pop("_reward")
        else:
            raise ConfigError(f"[replay] prior_runs: {path} is neither a run folder (no checkpoints/) nor "
                              "a recorded dataset (no meta.json)")
        buffers = parts.pop("_buffers")
        missing_reward = any(np.isnan(t["reward"]).any() for t in buffers)
        relabelled = there != here or missing_reward
        if relabelled:
            if relabel is None:
                raise ConfigError(_reward_differs(path, there, here, missing_reward))
            for i, t in enumerate(buffers):
                r = np.asarray(relabel(t, str(path)), np.float32)
                if r.shape != t["reward"].shape:
                    raise ConfigError(f"[replay] prior_runs {path}: the reward model gave {r.shape} "
                                      f"rewards for {t['reward'].shape[0]} transitions")
                buffers[i] = {**t, "reward": r}
        dropped = int(sum(np.isnan(t["reward"]).sum() for t in buffers))
        loaded = int(sum(len(t["reward"]) for t in buffers)) - dropped
        if loaded == 0:
            raise DatasetError(f"[replay] prior_runs {path}: no transitions to load"
                               + (f" ({dropped} had no reward)" if dropped else ""))
        data.extend(t for t in buffers if len(t["reward"]))
        report.append({"path": str(path), "kind": kind, "env": there["env"], "transitions": loaded,
                       "relabelled": bool(relabelled), "dropped_missing_reward": dropped,
                       **parts})
    return data, report


def _reward_differs(path: Path, there: dict, here: dict, missing: bool) -> str:
    if missing:
        why = "holds steps without a reward (NaN: recorded with human labels only)"
    elif there["env"] != here["env"]:
        why = f"was rewarded by {there['env']}'s task, this run by {here['env']}'s"
    else:
        def name(d):
            if d["reward"]:
                return f"[reward] {d['reward']}"
            return f"reward_source {d['reward_source']!r}" if d["reward_source"] else "the task's own reward"
        why = f"was rewarded by {name(there)}, this run by {name(here)}"
    return (f"[replay] prior_runs {path}: its data {why}, and this run has no reward model to relabel "
            "it with: add a [reward] model (a table with model = \"DIR\", kind classifier/progress/clip) "
            "that scores every prior transition, or drop this path from prior_runs")


def _space_problems(obs_spec: dict, action_dim: int, env: gym.Env) -> list[str]:
    """What differs between a stored buffer's spec and this run's spaces ([] when they match)."""
    here = {k: (tuple(s.shape), np.dtype(s.dtype).str) for k, s in env.observation_space.spaces.items()}
    there = {k: (tuple(v[0]), v[1]) for k, v in obs_spec.items()}
    problems = []
    if set(there) != set(here):
        problems.append(f"observation keys are {sorted(there)} there, {sorted(here)} here")
    for k in sorted(set(there) & set(here)):
        if there[k][0] != here[k][0]:
            problems.append(f"observation {k!r} has shape {there[k][0]} there, {here[k][0]} here")
        elif there[k][1] != here[k][1]:
            problems.append(f"observation {k!r} has dtype {there[k][1]} there, {here[k][1]} here")
    adim = int(np.prod(env.action_space.shape))
    if int(action_dim) != adim:
        problems.append(f"action has {action_dim} dimensions there, {adim} here")
    return problems


def _run_transitions(path: Path, env: gym.Env, env_id: str, obs_mode: str) -> dict:
    try:
        ckpt = find_checkpoint(path)
    except DatasetError:
        raise ConfigError(f"[replay] prior_runs: {path} is a run folder without a checkpoint (it stopped "
                          "before its first one, or checkpoints/ was removed); name a run that wrote "
                          "checkpoints/latest.json") from None
    state = read_json_file(ckpt / "trainer.json")
    train = state.get("train", {}) if isinstance(state, dict) else {}
    run_env, run_obs = train.get("env"), train.get("obs", "state")
    out = {"_buffers": [], "checkpoint": str(ckpt), "env_steps": int(state.get("env_steps", 0))}
    for sub in BUFFERS:
        folder = ckpt / sub
        if sub == "prior" and not folder.is_dir():
            continue
        meta = read_json(folder / "meta.json", DatasetError,
                         f"{folder / 'meta.json'} not found: the checkpoint of prior run {path} has no "
                         f"{sub} buffer (incomplete checkpoint)")
        problems = _space_problems(meta.get("obs_spec", {}), meta.get("action_dim", -1), env)
        if problems:
            mode = (f" (obs mode {run_obs!r} there, {obs_mode!r} here)" if run_obs != obs_mode else "")
            raise ConfigError(f"[replay] prior_runs {path}: recorded on {run_env}, this run uses {env_id}"
                              f"{mode}: " + "; ".join(problems)
                              + ". Name a run of the same task, --obs mode and env options")
        spaces = env.observation_space.spaces
        space = gym.spaces.Dict({k: spaces[k] for k in meta["obs_keys"]})
        buffer = ReplayBuffer(space, env.action_space, int(meta["capacity"]),
                              n_step=int(meta.get("n_step", 1)), gamma=float(meta.get("gamma", 0.99)))
        buffer.load(folder)
        out["_buffers"].append(buffer.transitions())
        del buffer
    out["_reward"] = reward_definition(run_env, train.get("reward"), train.get("env_kwargs"))
    return out


def _dataset_transitions(path: Path, env: gym.Env, env_id: str) -> dict:
    from robolearn.data.dataset import Dataset, check_compatible, load_transitions

    try:
        ds = Dataset(path)
    except DatasetError as exc:
        raise DatasetError(f"[replay] prior_runs {path}: not a readable dataset ({exc})") from None
    keys = list(env.observation_space.spaces)
    missing = [k for k in keys if k not in ds.observation_space.spaces]
    if missing:
        raise DatasetError(f"[replay] prior_runs {path}: recorded on {ds.env_id} without observation "
                           f"key(s) {missing} this run uses (recorded: {sorted(ds.observation_space.spaces)}); "
                           "record with the same --obs mode")
    import warnings

    with warnings.catch_warnings():  # another env id with the same shapes: the reward check says it
        warnings.simplefilter("ignore")
        try:
            check_compatible(ds, env_id, env.observation_space, env.action_space, keys)
        except DatasetError as exc:
            raise DatasetError("[replay] prior_runs " + str(exc).replace(
                "Record demos on the same task (and --obs mode), or pick another --demos",
                "Name a dataset of the same task and --obs mode, or drop it from prior_runs")) from None
    t = load_transitions(path, keys=keys)
    for k in keys:  # dtype too: a float image would pass the shape check
        want = np.dtype(env.observation_space[k].dtype)
        if t["obs"][k].dtype != want and not (t["obs"][k].dtype.kind == want.kind == "f"):
            raise DatasetError(f"[replay] prior_runs {path}: observation {k!r} has dtype "
                               f"{t['obs'][k].dtype} there, {want} here")
    return {"_buffers": [t], "episodes": len(ds),
            "_reward": reward_definition(ds.env_id, None, None)}
