"""The single-process training loop: env + agent + replay at the agent's update-to-data ratio.

Why it looks like this:
- `TrainConfig` is the one place training defaults live; launch TOML files and CLI flags are
  read into it (unknown keys are a `ConfigError`, never silently ignored).
- The agent (from `robolearn.policies.registry.make_agent`) owns the maths; this loop owns the
  order of events: act -> step -> store -> `utd` updates -> log / evaluate / checkpoint.
- Checkpoints resume *exactly*: agent (weights, targets, optimizers, its RNG), replay contents
  (and the replay's sampling RNG), counters, and every RNG the loop touches (numpy, torch,
  python, the env's). They are written at the first episode boundary after each
  `checkpoint_every` env steps, so a resumed run starts the same next episode the
  uninterrupted run would have started, and continues bit-identically. Files are safetensors,
  .npy (allow_pickle=False) and JSON: nothing is ever unpickled.
- Interventions: when a step's `info["intervention"]` is True, the human's action
  (`info["intervention_action"]`) is what gets stored, flagged; with a prior buffer (RLPD) the
  step is also added to the prior data, as HIL-SERL does.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import random
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from robolearn.configs import check_keys, read_toml
from robolearn.errors import ConfigError, DatasetError, TrainingError
from robolearn.resets.supervisor import ResetError
from robolearn.policies import evaluation
from robolearn.policies.serialize import load_state, save_state

CHECKPOINTS = "checkpoints"
EVAL_VIDEO_EPISODES = 3  # episodes in a finished run's eval.mp4 (docs/training.md says so)
LATEST = "latest.json"
# what a run writes into its folder (a new run refuses to start over them unless overwrite=True)
RUN_FILES = ("config.json", "metrics.jsonl", "tb", CHECKPOINTS, "summary.json", "learning_curve.png",
             "eval.mp4", "eval_strip.png")


# =============================================================================== config
@dataclass
class TrainConfig:
    """Everything a training run needs. Agent hyper-parameters come from the algorithm preset;
    `agent` overrides them (any key of the agent's config), `utd`/`learning_starts` are
    shortcuts for the two most tuned ones."""

    env: str = "robolearn/ArmReach-v0"
    algo: str = "sac"
    steps: int = 10_000                 # env steps in total (a resumed run continues to this)
    seed: int = 0
    obs: str = "state"                  # robolearn envs: state | pixels | both
    demos: str | None = None            # dataset dir, .npz file, or "scripted:N"
    out: str | None = None              # run folder; default runs/<env>-<algo>-s<seed>
    eval_every: int = 1000              # env steps between evaluations (0: only at the end)
    eval_episodes: int = 10
    checkpoint_every: int = 1000        # env steps; written at the next episode boundary (0: end only)
    log_every: int = 250                # env steps between training-metric records
    utd: int | None = None              # gradient updates per env step (None: the preset's)
    profile: str | None = None          # named hardware profile (policies.registry.PROFILES), e.g. cpu
    learning_starts: int | None = None  # random-action steps before updates (None: the preset's)
    buffer_size: int | None = None      # replay capacity (None: steps)
    max_episode_steps: int | None = None  # None: the env's registered limit
    threads: int = 1                    # torch CPU threads (small nets: 1 is usually fastest)
    video: bool = True                  # record eval.mp4 (or a PNG strip) at the end
    progress: bool = True               # tqdm progress bar
    env_kwargs: dict = field(default_factory=dict)
    agent: dict = field(default_factory=dict)
    reality_gap: dict = field(default_factory=dict)  # [reality_gap] table: robolearn.sim.randomization
    sim_params: str | None = None       # fitted sim physics (`robolearn calibrate-sim --out FILE`)
    intervene: str | None = None        # teleop device a human may take over with (robolearn.teleop)
    overwrite: bool = False             # a new run may replace an earlier run in `out`
    resets: str = "env"                 # env: the env's own | learned: forward/backward agents | practice
    reward: dict = field(default_factory=dict)  # [reward] table: a learned reward (robolearn.rewards)

    def run_dir(self) -> Path:
        if self.out:
            return Path(self.out)
        return Path("runs") / f"{self.env.split('/')[-1]}-{self.algo}-s{self.seed}"

    def validate(self) -> "TrainConfig":
        for name in ("steps", "eval_episodes", "threads", "log_every"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)!r}: must be an integer >= 1")
        for name in ("eval_every", "checkpoint_every"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ConfigError(f"{name}={getattr(self, name)!r}: must be an integer >= 0")
        for name in ("utd", "learning_starts", "buffer_size", "max_episode_steps"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < (0 if name == "learning_starts" else 1)):
                raise ConfigError(f"{name}={v!r}: must be a positive integer")
        if self.resets not in ("env", "learned", "practice"):
            raise ConfigError(f"resets={self.resets!r}: choose 'env' (the env's own resets), 'learned' "
                              "(forward/backward agents, robolearn.resets.learned) or 'practice' "
                              "(autonomous practice with physical resets, robolearn.resets.practice_trainer)")
        if self.reward:
            from robolearn.rewards.serving import reward_config

            reward_config(self.reward)
        for name in ("env_kwargs", "agent", "reality_gap", "reward"):
            if not isinstance(getattr(self, name), dict):
                raise ConfigError(f"{name} must be a table of key = value pairs")
        return self


def config_from_dict(d: dict, source: str = "config") -> TrainConfig:
    """Build a TrainConfig, naming any unknown keys (a typo must not be silently ignored)."""
    check_keys(d, (f.name for f in dataclasses.fields(TrainConfig)), source)
    return TrainConfig(**d).validate()


def load_launch(path: str | Path) -> TrainConfig:
    """Read a launch TOML: top-level keys (or a `[train]` table) are TrainConfig fields;
    `[agent]` and `[env_kwargs]` tables pass through to make_agent / gymnasium.make."""
    data = read_toml(path)
    if "train" in data:
        extra = sorted(set(data) - {"train"})
        if extra:
            raise ConfigError(f"launch file {path}: unknown table(s)/key(s) {extra} beside [train]")
        data = data["train"]
    return config_from_dict(data, source=f"launch file {path}")


# ================================================================================== envs
def _perception_digest(env: gym.Env) -> str | None:
    """sha256 of the frozen localiser's weights in `env` (None without perception)."""
    from robolearn.policies.perception import find_localiser

    loc = find_localiser(env)
    return loc.digest if loc is not None else None


class DictObs(gym.ObservationWrapper):
    """Expose a plain Box observation as {"state": obs} so any Gymnasium env (Pendulum-v1,
    ...) fits the dict-observation contract the learners use."""

    def __init__(self, env):
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Dict({"state": gym.spaces.Box(
            space.low.astype(np.float32), space.high.astype(np.float32), dtype=np.float32)})

    def observation(self, obs):
        return {"state": np.asarray(obs, dtype=np.float32)}


def make_env(env_id: str, obs: str = "state", render_mode: str | None = None,
             max_episode_steps: int | None = None, env_kwargs: dict | None = None,
             reality_gap: dict | None = None, sim_params: str | None = None) -> gym.Env:
    """gymnasium.make with a clear error for unknown IDs; robolearn envs get `obs=`;
    `sim_params` (a calibrate-sim TOML) sets the sim's fitted physics; a non-empty
    `reality_gap` table wraps the env with domain randomization / latency / jitter."""
    from robolearn.env import registered_ids, resolve_env_id

    ours = registered_ids()
    env_id = resolve_env_id(env_id)  # "module:EnvId-v0" imports module first, as gymnasium does
    if env_id not in gym.registry:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"unknown env {env_id!r}.{hint} Registered robolearn envs: "
                          f"{', '.join(ours) or '(none)'} (run `robolearn envs`).")
    kwargs = dict(env_kwargs or {})
    if env_id.startswith("robolearn/"):
        kwargs.setdefault("obs", obs)
    elif obs != "state":
        raise ConfigError(f"obs={obs!r} is only supported for robolearn/ envs; {env_id} gives state vectors")
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    # env_kwargs perception = DIR: a frozen sim-pretrained localiser appends its estimate to state
    from robolearn.policies.perception import PerceptionFeatures, wrap_env_kwargs

    kwargs, localiser = wrap_env_kwargs(env_id, obs, kwargs)
    try:
        env = gym.make(env_id, render_mode=render_mode, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"env {env_id}: bad env_kwargs {env_kwargs}: {exc}") from None
    if localiser is not None:
        env = PerceptionFeatures(env, localiser, keep_images=obs in ("pixels", "both"))
    if not isinstance(env.observation_space, gym.spaces.Dict):
        if not isinstance(env.observation_space, gym.spaces.Box):
            raise ConfigError(f"env {env_id}: observation space {env.observation_space} is neither Dict nor Box")
        env = DictObs(env)
    if not isinstance(env.action_space, gym.spaces.Box):
        raise ConfigError(f"env {env_id}: the SAC family needs a continuous Box action space, "
                          f"got {env.action_space}")
    if not (np.all(env.action_space.low == -1) and np.all(env.action_space.high == 1)):
        # learners emit [-1, 1]; map it onto the env's bounds (robolearn envs already are [-1, 1])
        env = gym.wrappers.RescaleAction(env, -1.0, 1.0)
    if sim_params:
        from robolearn.sim.sysid import apply_sim_params, load_sim_params

        try:
            env = apply_sim_params(env, load_sim_params(sim_params))
        except BaseException:
            env.close()
            raise
    if reality_gap:
        from robolearn.sim.randomization import RealityGapConfig, apply_reality_gap

        try:
            env = apply_reality_gap(env, RealityGapConfig.from_dict(reality_gap))
        except BaseException:
            env.close()
            raise
    return env


# ============================================================================ demos/prior
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
    """Prior transitions from a dataset dir, an .npz of arrays, or `scripted:N` episodes."""
    if spec.startswith("scripted:"):
        return collect_scripted(env, episode_count(spec), seed=seed)
    path = Path(spec)
    if not path.exists():
        raise DatasetError(f"demos {path} not found: pass a recorded dataset folder "
                           "(robolearn record), an .npz of transitions, or scripted:N")
    if path.is_dir():
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


# ============================================================================ rng states
def _json_rng(state: Any) -> Any:
    """numpy bit-generator / legacy states -> JSON-able."""
    if isinstance(state, dict):
        return {k: _json_rng(v) for k, v in state.items()}
    if isinstance(state, np.ndarray):
        return {"__uint_array__": state.tolist(), "dtype": str(state.dtype)}
    if isinstance(state, np.generic):
        return state.item()
    return state


def _unjson_rng(state: Any) -> Any:
    if isinstance(state, dict):
        if "__uint_array__" in state:
            return np.asarray(state["__uint_array__"], dtype=state["dtype"])
        return {k: _unjson_rng(v) for k, v in state.items()}
    return state


def _py_random_state() -> list:
    version, internal, gauss = random.getstate()
    return [version, list(internal), gauss]


def _set_py_random_state(s: list) -> None:
    random.setstate((s[0], tuple(s[1]), s[2]))


# ================================================================================ progress
class Eta:
    """Time left, from what the steps still to come will cost: random-action steps (before
    `learning_starts`) are far cheaper than learning steps (act + `utd` updates + periodic
    evaluations), so one average rate (tqdm's own estimate) is wrong by up to the UTD factor.
    Each phase's cost per step is measured as wall time per step in that phase."""

    MIN_LEARNING_STEPS = 10  # measured learning steps before a learning-phase ETA is given
    REFRESH_S = 1.0          # the bar's eta is recomputed at most this often

    def __init__(self, total: int, learning_starts: int, start: int = 0, clock=time.perf_counter):
        self.total, self.learning_starts = int(total), int(learning_starts)
        self.clock = clock
        self.step, self._t = int(start), clock()
        self.n = [0, 0]      # steps measured: random phase, learning phase
        self.t = [0.0, 0.0]  # seconds in each phase

    def update(self, step: int) -> None:
        """Called after env step `step` (all updates / evaluations of that step done)."""
        now = self.clock()
        phase = 1 if step > self.learning_starts else 0
        self.n[phase] += step - self.step
        self.t[phase] += now - self._t
        self.step, self._t = step, now

    def remaining_s(self) -> float | None:
        """Seconds left, or None while the learning phase's cost is still unknown."""
        left_random = max(0, min(self.total, self.learning_starts) - self.step)
        left_learn = self.total - self.step - left_random
        secs = left_random * (self.t[0] / self.n[0]) if left_random and self.n[0] else 0.0
        if left_learn:
            if self.n[1] < self.MIN_LEARNING_STEPS:
                return None
            secs += left_learn * self.t[1] / self.n[1]
        return secs

    def text(self) -> str:
        s = self.remaining_s()
        if s is None:
            return "?"
        s = int(round(s))
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


# ================================================================================ trainer
#: env options that only say how episodes are reset: a sim evaluation drops them
RESET_OPTIONS = ("reset_mode", "reset_on_failure", "reset_prompt")


def evaluation_env_kwargs(env_kwargs: dict) -> dict:
    """The eval env's options: the training env's, but in sim always with teleport resets, so a
    policy trained from physical, practice or learned resets is judged from the task's own start
    distribution, the same starts as a teleport-trained one (on `backend="real"` physical resets
    are the only kind and nothing changes)."""
    if env_kwargs.get("backend", "sim") == "real":
        return dict(env_kwargs)
    return {k: v for k, v in env_kwargs.items() if k not in RESET_OPTIONS}


class Trainer:
    """One training run in one folder. `Trainer(cfg).run()` or `Trainer.resume(dir).run()`."""

    def __init__(self, cfg: TrainConfig, _resumed_state: dict | None = None):
        self.cfg = cfg.validate()
        self._resumed_from = _resumed_state
        self._eval_env: gym.Env | None = None
        self.env = None
        try:
            self._build(cfg, _resumed_state)
        except BaseException:
            self.close()
            raise

    def _build(self, cfg: TrainConfig, _resumed_state: dict | None) -> None:
        from robolearn.data.replay import MixedSampler, ReplayBuffer, transitions_to_buffer
        from robolearn.policies.registry import ALGOS, make_agent

        if cfg.algo not in ALGOS:  # before building an env: a typo should fail fast
            raise ConfigError(f"unknown algo {cfg.algo!r}; choose one of: {', '.join(ALGOS)} "
                              "(see `robolearn algos`)")
        torch.set_num_threads(cfg.threads)
        self.dir = cfg.run_dir()
        self._eval_kwargs = evaluation_env_kwargs(cfg.env_kwargs)
        # [reward]: the training env's reward and termination come from the reward model; the
        # eval env keeps the task's own (in sim: the ground truth the model is judged by)
        human = cfg.reward.get("kind") == "human"
        train_kwargs = ({**cfg.env_kwargs, "reward_source": dict(cfg.reward)} if cfg.reward and not human
                        else cfg.env_kwargs)
        self.env = make_env(cfg.env, cfg.obs, None, cfg.max_episode_steps, train_kwargs, cfg.reality_gap,
                            cfg.sim_params)
        if human:  # the --intervene device (default keyboard) both drives and labels success
            from robolearn.rewards.human import attach_human_labels

            self.env = attach_human_labels(self.env, cfg.intervene or "keyboard")
        else:
            from robolearn.teleop.intervention import maybe_intervene  # --intervene DEVICE (no-op if unset)
            self.env = maybe_intervene(self.env, cfg.intervene)
        from robolearn.policies.registry import profile_overrides

        self.profile = profile_overrides(cfg.profile, cfg.algo)  # under the user's own options
        overrides = {**self.profile, **cfg.agent}
        if cfg.obs != "state":  # camera observations: the DrQ conv encoder composes with any preset
            overrides.setdefault("pixels", True)
        if cfg.utd is not None:
            overrides["utd"] = cfg.utd
        if cfg.learning_starts is not None:
            overrides["learning_starts"] = cfg.learning_starts
        self.agent = make_agent(cfg.algo, self.env.observation_space, self.env.action_space,
                                seed=cfg.seed, **overrides)
        self.agent.require_learning()
        self.agent_overrides = overrides
        if cfg.profile:  # said at start and kept in summary.json: never a silent change of preset
            used = {k: getattr(self.agent.config, k) for k in self.profile}
            print(f"profile {cfg.profile}: {cfg.algo} runs with {used or 'its preset unchanged'} "
                  "(lighter than the paper's settings to fit this machine; docs/learners.md)", flush=True)
        ac = self.agent.config
        n_step, gamma = int(getattr(ac, "n_step", 1)), float(getattr(ac, "gamma", 0.99))
        prior_fraction = getattr(ac, "prior_fraction", None)
        demos = None
        if _resumed_state is None:
            if cfg.demos:
                demos = load_demos(cfg.demos, self.env, seed=cfg.seed)
            self.demo_count = len(demos["action"]) if demos is not None else 0
            use_prior = bool(demos is not None and prior_fraction)
            # RLPD: demos (+ interventions) are the prior half of every batch. Other algos: the
            # demos simply seed the online replay, which is sized to hold them too.
            self.replay_capacity = (cfg.buffer_size or cfg.steps) + (0 if use_prior else self.demo_count)
            self.prior_capacity = self.demo_count + cfg.steps if use_prior else 0
        else:
            self.demo_count = int(_resumed_state["demo_count"])
            self.replay_capacity = int(_resumed_state["replay_capacity"])
            self.prior_capacity = int(_resumed_state["prior_capacity"])
        self.replay = ReplayBuffer(self.env.observation_space, self.env.action_space, self.replay_capacity,
                                   n_step=n_step, gamma=gamma, seed=cfg.seed)
        self.prior = None
        self.sampler = self.replay
        if self.prior_capacity:
            self.prior = ReplayBuffer(self.env.observation_space, self.env.action_space, self.prior_capacity,
                                      n_step=n_step, gamma=gamma, seed=cfg.seed + 1)
            self.sampler = MixedSampler(self.replay, self.prior, prior_fraction=prior_fraction)
        if demos is not None:
            transitions_to_buffer(demos, self.prior if self.prior is not None else self.replay)
        # counters and loop state
        self.env_steps = 0
        self.episodes = 0
        # steps whose reward model had no answer (not stored), demos labelled by it included
        self.rejected_missing_reward = int(np.isnan(demos["reward"]).sum()) if demos is not None else 0
        self.wall_before = 0.0
        self.update_time = 0.0  # seconds spent in agent.update (for gradient updates/s)
        self.rng = np.random.default_rng(cfg.seed)
        self.last_eval: dict | None = None
        self._obs = None
        self._loss_acc: dict[str, list] = {}  # metric -> [sum, count] since the last log record
        self._ep_info: tuple[float, bool] | None = None  # last training episode (return, success)
        self._writer = None
        self._metrics_f = None

    # ------------------------------------------------------------------------ properties
    @property
    def updates(self) -> int:
        return int(self.agent.num_updates)

    @property
    def eval_env(self) -> gym.Env:
        if self._eval_env is None:
            c = self.cfg
            self._eval_env = make_env(c.env, c.obs, "rgb_array", c.max_episode_steps, self._eval_kwargs,
                                      c.reality_gap, c.sim_params)
        return self._eval_env

    def policy(self, obs: dict) -> np.ndarray:
        return self.agent.act(obs, deterministic=True)

    # ----------------------------------------------------------------------------- loop
    def run(self, stop_at: int | None = None) -> dict:
        """Train to `cfg.steps` env steps (or stop early at `stop_at`, e.g. for tests).
        Returns the summary (also written to summary.json when the run completes)."""
        cfg = self.cfg
        if self.env_steps == 0 and self._resumed_from is None:
            self._clear_earlier_run()
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            if not (self.dir / "config.json").exists():
                self._write_json("config.json", {"train": dataclasses.asdict(cfg),
                                                 "agent": _config_dict(self.agent.config)})
            self._open_logs()
        except OSError as exc:
            self._close_logs()
            raise ConfigError(f"cannot write the run folder {self.dir} ({exc.strerror or exc}): "
                              "pick a writable --out") from None
        ac = self.agent.config
        utd, bs = int(ac.utd), int(ac.batch_size)
        learning_starts = int(getattr(ac, "learning_starts", 0))
        target = cfg.steps if stop_at is None else min(stop_at, cfg.steps)
        t0 = time.perf_counter()
        bar = self._progress_bar()
        eta = Eta(target, learning_starts, start=self.env_steps)
        last_eta = 0.0
        if self._obs is None:
            self._obs, info0 = self.env.reset(seed=cfg.seed)
            self._note_reset(info0)
        ep_ret, ep_len, ep_success = 0.0, 0, False
        upd_time, upd_count = 0.0, 0
        next_ckpt = (self.env_steps // cfg.checkpoint_every + 1) * cfg.checkpoint_every if cfg.checkpoint_every else None
        a_low, a_high = self.env.action_space.low, self.env.action_space.high
        self._interrupted = None
        old_handlers = self._catch_stop_signals()
        try:
            while self.env_steps < target and self._interrupted is None:
                obs = self._obs
                if self.env_steps < learning_starts:
                    action = self.rng.uniform(a_low, a_high).astype(np.float32)
                else:
                    action = self.agent.act(obs)
                nxt, reward, terminated, truncated, info = self.env.step(action)
                intervened = bool(info.get("intervention", False))
                if intervened:  # store what the human did, not what the policy proposed
                    if "intervention_action" not in info:
                        raise ConfigError("the env set info['intervention'] without "
                                          "info['intervention_action'] (the action actually applied)")
                    action = np.asarray(info["intervention_action"], dtype=np.float32)
                if math.isfinite(reward):  # NaN: the reward model had no answer -> never stored
                    self.replay.add(obs, action, reward, nxt, bool(terminated), bool(truncated), intervention=intervened)
                    if intervened and self.prior is not None:
                        self.prior.add(obs, action, reward, nxt, bool(terminated), bool(truncated), intervention=True)
                else:
                    self.rejected_missing_reward += 1
                    reward = 0.0  # for the episode return shown in logs only
                self.env_steps += 1
                ep_ret += float(reward)
                ep_len += 1
                ep_success = ep_success or bool(info.get("success", False))
                self._obs = nxt

                if self.env_steps >= learning_starts and len(self.replay) >= 1:
                    t_u = time.perf_counter()
                    for _ in range(utd):
                        out = self._update(self.sampler.sample(bs))
                        for k, v in out.items():  # running sums, checkpointed with the run
                            acc = self._loss_acc.setdefault(k, [0.0, 0])
                            acc[0] += float(v)
                            acc[1] += 1
                    dt = time.perf_counter() - t_u
                    upd_time += dt
                    self.update_time += dt
                    upd_count += utd

                if self.env_steps % cfg.log_every == 0:
                    ups = upd_count / upd_time if upd_time > 0 else 0.0
                    rec = {"kind": "train", "step": self.env_steps, "updates": self.updates,
                           "updates_per_s": ups, **{k: t / n for k, (t, n) in self._loss_acc.items()}}
                    self._log(rec)
                    bar.set_postfix(self._postfix(ups), refresh=False)
                    upd_time, upd_count, self._loss_acc = 0.0, 0, {}

                if cfg.eval_every and self.env_steps % cfg.eval_every == 0:
                    self._evaluate()
                    bar.set_postfix(self._postfix(None), refresh=False)

                if terminated or truncated:
                    self.episodes += 1
                    self._log({"kind": "episode", "step": self.env_steps, "episode": self.episodes,
                               "return": ep_ret, "length": ep_len, "success": ep_success,
                               **({"reset": self._last_reset} if self._last_reset else {})})
                    self._ep_info = (ep_ret, ep_success)
                    ep_ret, ep_len, ep_success = 0.0, 0, False
                    if next_ckpt is not None and self.env_steps >= next_ckpt:
                        self.wall_before += time.perf_counter() - t0
                        t0 = time.perf_counter()
                        self.save_checkpoint()
                        next_ckpt = (self.env_steps // cfg.checkpoint_every + 1) * cfg.checkpoint_every
                    try:
                        self._obs, info0 = self.env.reset()
                    except ResetError as exc:  # robot held by the supervisor: keep what was learned
                        self.wall_before += time.perf_counter() - t0
                        self._stop_on_failed_reset(exc)
                    self._note_reset(info0)
                eta.update(self.env_steps)
                if cfg.progress and time.perf_counter() - last_eta > Eta.REFRESH_S:
                    last_eta = time.perf_counter()
                    self._eta = eta.text()
                    bar.set_postfix(self._postfix(None), refresh=False)
                bar.update(1)
            if self._interrupted is not None:  # Ctrl-C / SIGTERM: keep what was learned
                bar.close()
                self.wall_before += time.perf_counter() - t0
                self.save_checkpoint()
                return self._finish_interrupted()
            if self.env_steps < cfg.steps:  # stopped early on request
                self.wall_before += time.perf_counter() - t0
                return {"env_steps": self.env_steps, "updates": self.updates}
            if self.last_eval is None or self.last_eval["step"] != self.env_steps:
                self._evaluate()
            self.wall_before += time.perf_counter() - t0
            self.save_checkpoint(final=True)
            return self._finish()
        finally:
            for signum, handler in old_handlers.items():
                signal.signal(signum, handler)
            bar.close()
            self._close_logs()

    def _catch_stop_signals(self) -> dict:
        """SIGINT/SIGTERM end the loop at the next env step (then a checkpoint and the summary
        are written); a second signal aborts at once. Only the main thread may install them."""
        import threading

        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum, frame):
            if self._interrupted is not None:
                raise KeyboardInterrupt
            self._interrupted = signal.Signals(signum).name
            print(f"\n{self._interrupted}: stopping at env step {self.env_steps}, saving a checkpoint "
                  "(send it again to abort without saving)", file=sys.stderr, flush=True)

        return {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    def _stop_on_failed_reset(self, exc: Exception):
        """A physical reset failed for good (reset_on_failure='raise', or the operator quit at
        the prompt) at an episode boundary: write a checkpoint and summary.json, then raise
        with the reason and the command that continues the run."""
        self.save_checkpoint()
        summary = self._finish_interrupted()
        summary.update(signal=None, stopped="reset failed", message=str(exc))
        self._write_json("summary.json", summary)
        raise type(exc)(f"{exc}. Training stopped at env step {self.env_steps}; the checkpoint and "
                        f"metrics are saved in {self.dir}: put the scene right and continue with "
                        f"`robolearn train --resume {self.dir}`") from exc

    def _finish_interrupted(self) -> dict:
        """summary.json of a run stopped by a signal: where it stopped and how to go on."""
        summary = {
            "env": self.cfg.env, "algo": self.cfg.algo, "seed": self.cfg.seed, "obs": self.cfg.obs,
            "interrupted": True, "signal": self._interrupted,
            "env_steps": self.env_steps, "steps": self.cfg.steps, "updates": self.updates,
            "episodes": self.episodes, "wall_s": round(self.wall_before, 3),
            "eval_return": self.last_eval["return"] if self.last_eval else None,
            "eval_success_rate": self.last_eval["success_rate"] if self.last_eval else None,
            "checkpoint": str(find_checkpoint(self.dir)),
            "resume": f"robolearn train --resume {self.dir}",
        }
        self._write_json("summary.json", summary)
        return summary

    def _clear_earlier_run(self) -> None:
        """A run folder is never wiped unless the user said so (`--overwrite`): checkpoints,
        metrics and TensorBoard logs of an earlier run are results."""
        found = [name for name in RUN_FILES if (self.dir / name).exists()]
        if not found:
            return
        if not self.cfg.overwrite:
            finished = (self.dir / "summary.json").exists()
            raise ConfigError(
                f"run folder {self.dir} already holds a{' finished' if finished else 'n unfinished'} run "
                f"({', '.join(found)}): pick another --out, "
                + ("" if finished else f"continue it with `robolearn train --resume {self.dir}`, ")
                + "or pass --overwrite to delete it and start again")
        print(f"--overwrite: deleting the earlier run in {self.dir}")
        for name in found:
            p = self.dir / name
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)

    def _note_reset(self, info: dict) -> None:
        """Keep the episode's reset record (robolearn envs: kind, seconds, failures, prompts)
        for its `episode` line in metrics.jsonl and the totals in summary.json."""
        from robolearn.resets.stats import ResetStats

        if not hasattr(self, "reset_stats"):
            self.reset_stats = ResetStats()
        rec = info.get("reset")
        # wall-clock time stays out of metrics.jsonl: a resumed run must log what a straight one does
        self._last_reset = {k: v for k, v in rec.items() if k != "wall_s"} if rec else None
        if rec:
            self.reset_stats.add(rec)

    _last_reset: dict | None = None

    def _update(self, batch) -> dict:
        try:
            out = self.agent.update(batch)
        except TrainingError as exc:
            raise TrainingError(f"at env step {self.env_steps} (update {self.updates}): {exc}. "
                                "Check rewards/observations for NaN/inf, or lower the learning "
                                f"rate; the last good checkpoint is in {self.dir / CHECKPOINTS}") from exc
        bad = {k: v for k, v in out.items() if not math.isfinite(float(v))}
        if bad:
            raise TrainingError(f"non-finite training metric(s) {bad} at env step {self.env_steps} "
                                f"(update {self.updates}); training stopped instead of training through it")
        return out

    # ------------------------------------------------------------------------ evaluation
    def _evaluate(self) -> dict:
        res = evaluation.evaluate(self.eval_env, self.policy, self.cfg.eval_episodes, seed=self.cfg.seed)
        rec = {"kind": "eval", "step": self.env_steps, "updates": self.updates, **res.as_dict()}
        self.last_eval = rec
        self._log(rec)
        return rec

    def _postfix(self, ups: float | None) -> dict:
        p = {"eta": getattr(self, "_eta", "?")}
        if self._ep_info:
            p["ret"] = f"{self._ep_info[0]:.1f}"
        if self.last_eval:
            p["eval_ret"] = f"{self.last_eval['return']:.1f}"
            p["success"] = f"{self.last_eval['success_rate']:.0%}"
        if ups is not None:
            self._last_ups = ups
        if getattr(self, "_last_ups", None):
            p["upd/s"] = f"{self._last_ups:.0f}"
        return p

    def _progress_bar(self):
        from tqdm import tqdm

        # tqdm's own remaining-time guess averages cheap random steps with learning steps; the
        # bar shows `eta` from `Eta` instead (per-phase cost, updates and evaluations included)
        return tqdm(total=self.cfg.steps, initial=self.env_steps, disable=not self.cfg.progress,
                    desc=f"{self.cfg.algo} {self.cfg.env}", unit="step", dynamic_ncols=True,
                    mininterval=1.0,
                    bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]")

    # --------------------------------------------------------------------------- logging
    def _open_logs(self):
        from torch.utils.tensorboard import SummaryWriter

        path = self.dir / "metrics.jsonl"
        if path.exists():  # resumed: drop records written after the checkpoint we resumed from
            keep = [ln for ln in path.read_text().splitlines()
                    if ln.strip() and _safe_step(ln) <= self.env_steps]
            path.write_text("".join(ln + "\n" for ln in keep))
        self._metrics_f = open(path, "a", buffering=1)
        self._writer = SummaryWriter(str(self.dir / "tb"), purge_step=self.env_steps or None)

    def _close_logs(self):
        if self._metrics_f:
            self._metrics_f.close()
            self._metrics_f = None
        if self._writer:
            self._writer.close()
            self._writer = None

    def _log(self, rec: dict) -> None:
        self._metrics_f.write(json.dumps(rec) + "\n")
        kind = rec["kind"]
        for k, v in rec.items():
            if k not in ("kind", "step") and isinstance(v, (int, float)) and not isinstance(v, bool):
                self._writer.add_scalar(f"{kind}/{k}", v, rec["step"])
            elif isinstance(v, bool):
                self._writer.add_scalar(f"{kind}/{k}", float(v), rec["step"])

    def _write_json(self, name: str, obj: dict) -> None:
        write_json_atomic(self.dir / name, obj, indent=2)

    # ------------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, final: bool = False) -> Path:
        """Write checkpoints/step_<N>/ then atomically point checkpoints/latest.json at it, so a
        kill at any moment leaves the previous checkpoint usable. Older ones are removed."""
        env_rng = self.env.unwrapped.np_random.bit_generator.state
        # Envs with randomness outside `np_random` (e.g. dm_control's task RandomState) can
        # expose get_rng_state()/set_rng_state(state) (JSON-able) to be resumed exactly too.
        get_extra = getattr(self.env.unwrapped, "get_rng_state", None)
        state = {
            "env_steps": self.env_steps, "updates": self.updates, "episodes": self.episodes,
            "wall_s": self.wall_before, "update_time_s": self.update_time, "demo_count": self.demo_count, "final": final,
            "replay_capacity": self.replay_capacity, "prior_capacity": self.prior_capacity,
            "last_eval": self.last_eval, "loss_acc": self._loss_acc,
            "rng": {"loop": _json_rng(self.rng.bit_generator.state), "env": _json_rng(env_rng),
                    "env_extra": _json_rng(get_extra()) if get_extra else None,
                    "numpy_global": _json_rng(np.random.get_state(legacy=False)),
                    "python": _py_random_state()},
            "train": dataclasses.asdict(self.cfg), "agent_overrides": self.agent_overrides,
            "perception_sha256": _perception_digest(self.env),
        }
        from safetensors.torch import save_file

        def torch_rng(folder: Path) -> None:
            save_file({"torch_rng": torch.get_rng_state()}, str(folder / "torch_rng.safetensors"))

        return write_checkpoint(self.dir / CHECKPOINTS, self.env_steps, self.agent,
                                {"replay": self.replay, "prior": self.prior}, state, torch_rng)

    @classmethod
    def resume(cls, run_dir: str | Path, steps: int | None = None, progress: bool | None = None,
               video: bool | None = None) -> "Trainer":
        """Rebuild a run from its latest checkpoint; `steps` may extend the total budget."""
        ckpt = find_checkpoint(run_dir)
        state = read_json_file(ckpt / "trainer.json")
        train = dict(state["train"])
        train["out"] = str(Path(run_dir))
        if steps is not None:
            train["steps"] = steps
        for key, value in (("progress", progress), ("video", video)):
            if value is not None:
                train[key] = value
        cfg = config_from_dict(train, source=f"checkpoint {ckpt}")
        if cfg.steps < state["env_steps"]:
            raise ConfigError(f"--steps {cfg.steps} is below the checkpoint's {state['env_steps']} env steps")
        if cls is Trainer and cfg.resets != "env":  # the run's own kind of trainer, not a plain one
            from robolearn.resets.learned import trainer_class

            cls = trainer_class(cfg.resets)
        self = cls(cfg, _resumed_state=state)
        # the replay holds the perception model's features: another model's would silently mix in
        saved, now = state.get("perception_sha256"), _perception_digest(self.env)
        if "perception_sha256" in state and saved != now:
            self.close()
            raise ConfigError(f"checkpoint {ckpt}: the perception model "
                              f"{cfg.env_kwargs.get('perception')!r} is not the one this run was trained "
                              f"with (sha256 {str(now)[:12]}, the run used {str(saved)[:12]}); "
                              "restore that model folder, or start a new run")
        self.agent.load_state_dict(load_state(ckpt / "agent.safetensors"))
        self.replay.load(ckpt / "replay")
        if self.prior is not None:
            self.prior.load(ckpt / "prior")
        self.env_steps = int(state["env_steps"])
        self.episodes = int(state["episodes"])
        self.wall_before = float(state["wall_s"])
        self.update_time = float(state["update_time_s"])
        self.last_eval = state["last_eval"]
        self._loss_acc = state["loss_acc"]
        if self.updates != int(state["updates"]):
            raise DatasetError(f"checkpoint {ckpt}: agent has {self.updates} updates, "
                               f"trainer.json says {state['updates']}; the checkpoint is inconsistent")
        rng = state["rng"]
        self.rng.bit_generator.state = _unjson_rng(rng["loop"])
        np.random.set_state(_unjson_rng(rng["numpy_global"]))
        _set_py_random_state(rng["python"])
        torch.set_rng_state(read_tensors_file(ckpt / "torch_rng.safetensors")["torch_rng"])
        # The checkpoint was taken at an episode boundary just before reset(): seed the env
        # once (the first reset must be seeded in gymnasium), then restore its RNG and reset
        # so the next episode is the one the uninterrupted run would have started.
        self.env.reset(seed=cfg.seed)
        self.env.unwrapped.np_random.bit_generator.state = _unjson_rng(rng["env"])
        if rng.get("env_extra") is not None and hasattr(self.env.unwrapped, "set_rng_state"):
            self.env.unwrapped.set_rng_state(_unjson_rng(rng["env_extra"]))
        self._obs, info0 = self.env.reset()
        self._note_reset(info0)
        return self

    def _finish(self) -> dict:
        summary = {
            "env": self.cfg.env, "algo": self.cfg.algo, "seed": self.cfg.seed, "obs": self.cfg.obs,
            "env_steps": self.env_steps, "updates": self.updates, "episodes": self.episodes,
            "wall_s": round(self.wall_before, 3),
            "updates_per_s": self.updates / self.update_time if self.update_time > 0 else None,
            "eval_return": self.last_eval["return"], "eval_success_rate": self.last_eval["success_rate"],
            "eval_episodes": self.last_eval["episodes"],
            "utd": int(self.agent.config.utd), "demo_transitions": self.demo_count,
            "checkpoint": str(find_checkpoint(self.dir)),
            "rejected_missing_reward": self.rejected_missing_reward,
        }
        if self.cfg.profile:
            summary["profile"] = self.cfg.profile
            summary["profile_options"] = {k: getattr(self.agent.config, k) for k in self.profile}
        if getattr(self, "reset_stats", None) is not None and self.reset_stats.episodes:
            summary["resets"] = self.reset_stats.as_dict()   # this session's resets (not resumed ones)
        evals = read_metrics(self.dir / "metrics.jsonl", "eval")
        if evals:
            best = max(evals, key=lambda r: r["return"])
            summary["best_eval_return"] = best["return"]
            hit = [r["step"] for r in evals if r["success_rate"] >= 0.9]
            summary["steps_to_90pct_success"] = hit[0] if hit else None
        plot_learning_curve(self.dir / "metrics.jsonl", self.dir / "learning_curve.png",
                            title=f"{self.cfg.algo} on {self.cfg.env} (seed {self.cfg.seed})")
        summary["learning_curve"] = "learning_curve.png"
        if self.cfg.video:
            try:
                path, _ = evaluation.record(self.eval_env, self.policy, self.dir / "eval.mp4",
                                            episodes=EVAL_VIDEO_EPISODES, seed=self.cfg.seed)
                summary["video"] = path.name
            except Exception as exc:  # noqa: BLE001 - the video is optional: no GL, no ffmpeg,
                # a renderer-less env... must not throw away a finished run; say why instead
                print(f"could not record an evaluation video: {exc}")
                summary["video"] = None
        self._write_json("summary.json", summary)
        return summary

    def close(self):
        for env in (self.env, self._eval_env):
            if env is not None:
                env.close()
        self._eval_env = None


def _config_dict(c) -> dict:
    if dataclasses.is_dataclass(c):
        return {k: (v if isinstance(v, (int, float, str, bool, type(None), list, dict)) else repr(v))
                for k, v in dataclasses.asdict(c).items()}
    return dict(c) if isinstance(c, dict) else {"repr": repr(c)}


def _safe_step(line: str) -> float:
    try:
        return json.loads(line).get("step", 0)
    except json.JSONDecodeError:  # a line torn by a kill
        return math.inf


def write_checkpoint(root: Path, env_steps: int, agent, buffers: dict, state: dict,
                     write_extra=None) -> Path:
    """Write root/step_<N>/ (agent state, policy weights, each buffer, trainer.json) in a temp
    folder, swap it in, then atomically point root/latest.json at it and remove older ones: a
    kill at any moment leaves the previous checkpoint usable. Shared by `train` and the
    async learner so `robolearn eval` and resume read one layout."""
    from safetensors.torch import save_file

    name = f"step_{env_steps:09d}"
    final, tmp = root / name, root / (name + ".tmp")
    ptr = root / (LATEST + ".tmp")
    try:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        save_state(tmp / "agent.safetensors", agent.state_dict())
        save_file({k: v.detach().cpu().contiguous() for k, v in agent.policy_state().items()},
                  str(tmp / "policy.safetensors"))
        for sub, buffer in buffers.items():
            if buffer is not None:
                buffer.save(tmp / sub)
        if write_extra is not None:
            write_extra(tmp)
        (tmp / "trainer.json").write_text(json.dumps(state, indent=1))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        ptr.write_text(json.dumps({"checkpoint": name, "env_steps": env_steps}))
        os.replace(ptr, root / LATEST)
    except OSError as exc:  # disk full, read-only, quota: keep the previous checkpoint intact
        shutil.rmtree(tmp, ignore_errors=True)
        ptr.unlink(missing_ok=True)
        try:
            prev = str(find_checkpoint(root))
        except DatasetError:
            prev = None
        kept = (f"the previous checkpoint {prev} is kept (continue from it with `robolearn train "
                f"--resume {root.parent}`)" if prev else "there is no earlier checkpoint")
        raise DatasetError(f"cannot write checkpoint {final} ({exc.strerror or exc}): free disk "
                           f"space or pick a writable folder; {kept}") from None
    for old in root.glob("step_*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return final


def write_json_atomic(path: Path, obj: Any, indent: int | None = None) -> None:
    """Write a JSON file via a temp file + rename; the temp file never outlives a failure."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(obj, indent=indent))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_json_file(path: Path) -> Any:
    """A JSON file of a run/checkpoint; a truncated or corrupt one is a DatasetError naming it."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise DatasetError(f"{path} is missing: the checkpoint is incomplete") from None
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path} is truncated or corrupt ({exc}); restore it from a copy or "
                           "use an earlier run") from None


def read_tensors_file(path: Path) -> dict:
    """A safetensors file of a checkpoint; a truncated or corrupt one is a DatasetError naming it."""
    from safetensors.torch import load_file

    if not Path(path).is_file():
        raise DatasetError(f"{path} is missing: the checkpoint is incomplete")
    try:
        return load_file(str(path))
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
        raise DatasetError(f"{path} is truncated or corrupt ({exc}); restore it from a copy or "
                           "use an earlier run") from None


def find_checkpoint(path: str | Path) -> Path:
    """A run folder, its checkpoints/ folder, or one step_* folder -> the checkpoint folder."""
    p = Path(path)
    for root in (p / CHECKPOINTS, p):
        if (root / LATEST).is_file():
            ptr = read_json_file(root / LATEST)
            if not isinstance(ptr, dict) or not isinstance(ptr.get("checkpoint"), str):
                raise DatasetError(f"{root / LATEST} is truncated or corrupt (no 'checkpoint' entry)")
            return root / ptr["checkpoint"]
    if (p / "trainer.json").is_file():
        return p
    raise DatasetError(f"no checkpoint in {p}: pass a run folder written by `robolearn train` "
                       f"(it holds {CHECKPOINTS}/{LATEST})")


def read_metrics(path: str | Path, kind: str) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for ln in path.read_text().splitlines():
        try:
            rec = json.loads(ln)
        except json.JSONDecodeError:
            continue
        if rec.get("kind") == kind:
            out.append(rec)
    return out


def plot_learning_curve(metrics: str | Path, png: str | Path, title: str = "") -> Path:
    """Eval return and success rate against env steps (plus training-episode returns)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evals = read_metrics(metrics, "eval")
    eps = read_metrics(metrics, "episode")
    fig, ax = plt.subplots(figsize=(7, 4))
    if eps:
        ax.plot([e["step"] for e in eps], [e["return"] for e in eps], ".", ms=2, alpha=0.3,
                color="gray", label="training episode return")
    if evals:
        ax.plot([e["step"] for e in evals], [e["return"] for e in evals], "o-", label="eval return")
    ax.set_xlabel("env steps")
    ax.set_ylabel("return")
    ax.grid(alpha=0.3)
    if evals and not all(math.isnan(e["success_rate"]) for e in evals):
        ax2 = ax.twinx()
        ax2.plot([e["step"] for e in evals], [e["success_rate"] for e in evals], "s--", color="tab:green",
                 label="eval success rate")
        ax2.set_ylim(-0.05, 1.05)
        ax2.set_ylabel("success rate")
        ax2.legend(loc="lower right")
    ax.legend(loc="upper left")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return Path(png)


def train(cfg: TrainConfig) -> dict:
    """Run a whole training (convenience for scripts and the benchmark)."""
    from robolearn.resets.learned import make_trainer

    trainer = make_trainer(cfg)
    try:
        return trainer.run()
    finally:
        trainer.close()


def load_agent(checkpoint: str | Path, render_mode: str | None = None,
               env_kwargs: dict | None = None):
    """(agent, env, TrainConfig) from a run folder: rebuilds the agent from the saved config
    and loads only the policy weights (`policy.safetensors`), as an actor would.

    `env_kwargs` override the training env's options, e.g. {"backend": "real", "port": ...} to
    run a sim-trained policy on hardware. The `privileged` observation is dropped unless the
    policy's actor reads it (privileged="actor_and_critic", a sim-only study mode)."""
    from robolearn.policies.registry import make_agent

    ckpt = find_checkpoint(checkpoint)
    state = read_json_file(ckpt / "trainer.json")
    weights = read_tensors_file(ckpt / "policy.safetensors")
    cfg = config_from_dict(state["train"], source=f"checkpoint {ckpt}")
    torch.set_num_threads(cfg.threads)
    kwargs = {**cfg.env_kwargs, **(env_kwargs or {})}
    if state["agent_overrides"].get("privileged") != "actor_and_critic" and not (env_kwargs or {}).get("privileged_obs"):
        kwargs.pop("privileged_obs", None)  # acting never needs it: runs where it does not exist
    env = make_env(cfg.env, cfg.obs, render_mode, cfg.max_episode_steps, kwargs, cfg.reality_gap,
                   cfg.sim_params)
    try:
        agent = make_agent(cfg.algo, env.observation_space, env.action_space, seed=cfg.seed,
                           **state["agent_overrides"])
        agent.load_policy_state(weights)
    except BaseException:
        env.close()
        raise
    return agent, env, cfg


def load_policy(checkpoint: str | Path, render_mode: str | None = None,
                env_kwargs: dict | None = None):
    """(act_fn, env, TrainConfig): the deterministic policy of a run folder (see load_agent)."""
    agent, env, cfg = load_agent(checkpoint, render_mode, env_kwargs)
    return (lambda obs: agent.act(obs, deterministic=True)), env, cfg
