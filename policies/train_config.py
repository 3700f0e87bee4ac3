"""`TrainConfig`: the one place training defaults live.

Launch TOML files and CLI flags are read into it; unknown keys are a `ConfigError`, never
silently ignored. A value here is configuration only: turning it into envs, reward models and
trainers happens in the composition layer (robolearn/compose/training.py).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from robolearn.configs import check_keys, read_toml
from robolearn.errors import ConfigError
from robolearn.reward_config import reward_config

#: how episodes start in training: the env's own resets, learned forward/backward agents,
#: or autonomous practice on physical resets (robolearn/compose/training.py picks the hooks)
RESETS = ("env", "learned", "practice")

#: Replay across Experiments (Tirumala et al.): the share of every batch drawn from earlier runs'
#: data. RaE replays prior and online data at a fixed ratio, 50/50 by default (docs/learners.md)
RAE_PRIOR_FRACTION = 0.5
REPLAY_KEYS = ("prior_runs", "prior_fraction")


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
    buffer_size: int | None = None      # replay capacity (None: steps, at most the preset's replay_capacity)
    max_episode_steps: int | None = None  # None: the env's registered limit
    threads: int = 1                    # torch CPU threads (small nets: 1 is usually fastest)
    device: str | None = None           # cpu | cuda | cuda:N (None: the preset's, cpu); cuda draws
                                        # batches on the GPU and runs the graphed update
    # CUDA: mirror the replay on the GPU and draw batches there; None: for camera observations
    # only, where it measured faster (policies/device_sampling.py)
    device_replay: bool | None = None
                                        # (measured slower than host batches on state obs, H100:
                                        # docs/bench/gpu-train/)
    metrics_every: int | None = None    # updates between metric read-backs + NaN checks
                                        # (None: CPU every update, CUDA every 100)
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
    replay: dict = field(default_factory=dict)  # [replay] table: prior_runs, prior_fraction (RaE)
    init_from: str | None = None        # a run folder: start from its last checkpoint's agent and replay,
                                        # counters at zero (policies/trainer_state.py init_trainer_from)

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
        if self.device is not None and (not isinstance(self.device, str)
                                        or not self.device.startswith(("cpu", "cuda", "mps"))):
            raise ConfigError(f"device={self.device!r}: use 'cpu', 'cuda', 'cuda:N' or 'mps'")
        for name in ("utd", "learning_starts", "buffer_size", "max_episode_steps", "metrics_every"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < (0 if name == "learning_starts" else 1)):
                raise ConfigError(f"{name}={v!r}: must be a positive integer")
        if self.resets not in RESETS:
            raise ConfigError(f"resets={self.resets!r}: choose 'env' (the env's own resets), 'learned' "
                              "(forward/backward agents, robolearn.resets.learned) or 'practice' "
                              "(autonomous practice with physical resets, robolearn.resets.practice_trainer)")
        if self.reward:
            reward_config(self.reward)
        for name in ("env_kwargs", "agent", "reality_gap", "reward", "replay"):
            if not isinstance(getattr(self, name), dict):
                raise ConfigError(f"{name} must be a table of key = value pairs")
        replay_options(self.replay)
        if self.init_from is not None and (not isinstance(self.init_from, str) or not self.init_from):
            raise ConfigError(f"init_from={self.init_from!r}: give a run folder, e.g. init_from = \"runs/push-hard\"")
        return self

    @property
    def prior_runs(self) -> list[str]:
        return replay_options(self.replay)[0]


def replay_options(table: dict) -> tuple[list[str], float | None]:
    """(prior_runs, prior_fraction or None when not given) of a `[replay]` table, checked:
    unknown keys, a non-list of paths or a fraction outside (0, 1) are a ConfigError naming it."""
    check_keys(table, REPLAY_KEYS, "[replay]")
    runs = table.get("prior_runs", [])
    if isinstance(runs, str) or not isinstance(runs, (list, tuple)) or \
            not all(isinstance(p, str) and p for p in runs):
        raise ConfigError(f"[replay] prior_runs={runs!r}: must be a list of run or dataset folder "
                          "paths, e.g. prior_runs = [\"runs/a\", \"datasets/b\"]")
    fraction = table.get("prior_fraction")
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 < fraction < 1.0:
            raise ConfigError(f"[replay] prior_fraction={fraction!r}: must be a number in (0, 1), the "
                              f"share of every batch drawn from the prior runs (default {RAE_PRIOR_FRACTION})")
        if not runs:
            raise ConfigError("[replay] prior_fraction is set but prior_runs is empty: name the earlier "
                              "runs or datasets to mix in, or drop prior_fraction")
    return list(runs), (float(fraction) if fraction is not None else None)


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
