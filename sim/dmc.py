"""dm_control suite adapter: every suite task as `robolearn/dmc-<domain>-<task>-v0`.

These are the standard continuous-control benchmarks for the learners, so they follow the same
contract as the robot envs (dict observations, Box(-1, 1) actions, `info["success"]`/`t_obs`/
`overrun`, `env.unwrapped.sim`) and the reality-gap wrappers work on them unchanged.

Why the physics loop is re-implemented here instead of calling `dm_control`'s `Environment.step`:
the simulator-handle contract says a step runs `sim.n_substeps` physics steps, and the
control-rate-jitter and sub-step latency wrappers change that number per step. The loop does what
`control.Environment.step` does (task.before_step -> physics.step -> task.after_step -> reward,
termination) once per action repeat, with the substeps split evenly between the repeats.

Registration uses a static list (`DMC_TASKS`) because importing `dm_control.suite` costs about
0.7 s, too much for `import robolearn`; a test checks the list equals `suite.ALL_TASKS`.
"""
from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

import gymnasium as gym
import numpy as np

from robolearn.checks import check_obs_mode, validate_action
from robolearn.errors import ConfigError, EnvClosedError

# (domain, task) pairs of dm_control.suite.ALL_TASKS (dm-control 1.0.x); tests compare them.
DMC_TASKS: tuple[tuple[str, str], ...] = (
    ("acrobot", "swingup"), ("acrobot", "swingup_sparse"),
    ("ball_in_cup", "catch"),
    ("cartpole", "balance"), ("cartpole", "balance_sparse"), ("cartpole", "swingup"),
    ("cartpole", "swingup_sparse"), ("cartpole", "two_poles"), ("cartpole", "three_poles"),
    ("cheetah", "run"),
    ("dog", "stand"), ("dog", "walk"), ("dog", "trot"), ("dog", "run"), ("dog", "fetch"),
    ("finger", "spin"), ("finger", "turn_easy"), ("finger", "turn_hard"),
    ("fish", "upright"), ("fish", "swim"),
    ("hopper", "stand"), ("hopper", "hop"),
    ("humanoid", "stand"), ("humanoid", "walk"), ("humanoid", "run"), ("humanoid", "run_pure_state"),
    ("humanoid_CMU", "stand"), ("humanoid_CMU", "walk"), ("humanoid_CMU", "run"),
    ("lqr", "lqr_2_1"), ("lqr", "lqr_6_2"),
    ("manipulator", "bring_ball"), ("manipulator", "bring_peg"), ("manipulator", "insert_ball"),
    ("manipulator", "insert_peg"),
    ("pendulum", "swingup"),
    ("point_mass", "easy"), ("point_mass", "hard"),
    ("quadruped", "walk"), ("quadruped", "run"), ("quadruped", "escape"), ("quadruped", "fetch"),
    ("reacher", "easy"), ("reacher", "hard"),
    ("stacker", "stack_2"), ("stacker", "stack_4"),
    ("swimmer", "swimmer6"), ("swimmer", "swimmer15"),
    ("walker", "stand"), ("walker", "walk"), ("walker", "run"),
)

# Tasks whose per-step reward is exactly "the goal is reached" (1 inside the target, else 0):
# for these `info["success"]` is that indicator; every other task reports success=False.
SUCCESS_TASKS = frozenset({
    ("ball_in_cup", "catch"), ("reacher", "easy"), ("reacher", "hard"),
    ("finger", "turn_easy"), ("finger", "turn_hard"),
})

# Pixel observations use the camera the DrQ / DrQ-v2 papers use: 2 for quadruped, else 0.
DEFAULT_CAMERA = {"quadruped": 2}
# Action specs this large mean "unbounded" (lqr: +-1e10); [-1, 1] maps to [-1, 1] there.
UNBOUNDED = 1e6
# Episode length (in the task's own control steps) where the suite sets no time limit (lqr).
DEFAULT_STEPS_IF_UNLIMITED = 1000


class _QuietCompilerDeprecation(logging.Filter):
    """dm_control's cheetah/... MJCF use `settotalmass`, which MuJoCo 3 reports through absl on
    every load; it is dm_control's to fix and says nothing a robolearn user can act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "'settotalmass' is deprecated" not in record.getMessage()


def _quiet_absl() -> None:
    log = logging.getLogger("absl")
    if not any(isinstance(f, _QuietCompilerDeprecation) for f in log.filters):
        log.addFilter(_QuietCompilerDeprecation())


def env_id(domain: str, task: str) -> str:
    return f"robolearn/dmc-{domain}-{task}-v0"


def registrations() -> list[tuple[str, dict]]:
    """(env ID, DmcEnv kwargs) of every suite task, for robolearn.registry."""
    return [(env_id(domain, task), {"domain": domain, "task": task}) for domain, task in DMC_TASKS]


class DmcSim:
    """Simulator handle (docs/DEVELOPING.md): raw MuJoCo `model`/`data`, `n_substeps`, `render`.

    `n_substeps` = the suite's physics steps per control step x action_repeat; wrappers may
    change it for one step (rate jitter, sub-step latency) and the env honours it.
    """

    def __init__(self, physics, n_substeps: int, camera_id: int):
        self.physics = physics            # the dm_control Physics, for named access
        self.model = physics.model.ptr    # mujoco.MjModel
        self.data = physics.data.ptr      # mujoco.MjData
        self.n_substeps = int(n_substeps)
        self.camera_id = camera_id

    def render(self, height: int, width: int, camera_id: int | None = None) -> np.ndarray:
        cam = self.camera_id if camera_id is None else camera_id
        return np.ascontiguousarray(self.physics.render(height, width, camera_id=cam), dtype=np.uint8)


class DmcEnv(gym.Env):
    """One dm_control suite task behind the robolearn env contract.

    Options: `obs="state"|"pixels"|"both"` (`state`: the task's observation dict flattened in
    its own key order to float32; `pixels`: uint8 HxWx3 from `physics.render`), `action_repeat`
    (default 1; 2/4/8 are the usual choices for pixel-based learners, 1 for state-based SAC),
    `image_size=(84, 84)`, `camera_id`, `time_limit` (seconds; default: the suite's),
    `render_mode="rgb_array"` with `render_size=(240, 320)`.
    Actions in [-1, 1] map linearly onto the task's action bounds.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 100, "control_hz": 100.0}

    def __init__(self, domain: str, task: str, obs: str = "state", action_repeat: int = 1,
                 image_size: tuple[int, int] = (84, 84), camera_id: int | None = None,
                 time_limit: float | None = None, render_mode: str | None = None,
                 render_size: tuple[int, int] = (240, 320), **unknown: Any):
        if unknown:
            raise ConfigError(f"unknown option(s) {', '.join(sorted(unknown))} for dm_control envs; "
                              "valid: obs, action_repeat, image_size, camera_id, time_limit, "
                              "render_mode, render_size")
        if (domain, task) not in DMC_TASKS:
            near = [f"{d}-{t}" for d, t in DMC_TASKS if d == domain] or sorted({d for d, _ in DMC_TASKS})
            raise ConfigError(f"dm_control has no task {domain}-{task}; choose one of: {', '.join(near)}")
        check_obs_mode(obs)
        if render_mode not in (None, "rgb_array"):
            raise ConfigError(f"render_mode={render_mode!r}: only None or 'rgb_array' is supported")
        if isinstance(action_repeat, bool) or not isinstance(action_repeat, (int, np.integer)) \
                or action_repeat < 1:
            raise ConfigError(f"action_repeat={action_repeat!r}: must be an integer >= 1 (usually 1, 2, 4 or 8)")
        self.image_size = _check_size("image_size", image_size)
        self.render_size = _check_size("render_size", render_size)
        if time_limit is not None:
            try:
                time_limit = float(time_limit)
            except (TypeError, ValueError):
                raise ConfigError(f"time_limit={time_limit!r} is not a number (seconds)") from None
            if not (time_limit > 0 and math.isfinite(time_limit)):
                raise ConfigError(f"time_limit={time_limit!r}: must be a positive number of seconds")

        from dm_control import suite  # heavy import (0.7 s): only when an env is made

        _quiet_absl()

        self.domain, self.task_name = domain, task
        self.obs_mode, self.render_mode = obs, render_mode
        self.action_repeat = int(action_repeat)
        # A fixed construction seed: lqr draws its *model* from the task RNG at load time, so
        # two envs must be built alike for "same seed + same actions -> same obs". Episode
        # randomness is re-seeded in place on reset(seed=...) (RandomState.seed == new RandomState).
        kwargs = {"time_limit": time_limit} if time_limit is not None else {}
        self._dm = suite.load(domain, task, task_kwargs={"random": 0, **kwargs})
        self._physics, self._task = self._dm.physics, self._dm.task
        n_sub = int(self._dm._n_sub_steps)  # dm_control exposes no public getter for this
        self.control_timestep = float(self._dm.control_timestep()) * self.action_repeat
        base_steps = float(self._dm._step_limit)
        if not math.isfinite(base_steps):
            base_steps = DEFAULT_STEPS_IF_UNLIMITED
        self.max_episode_steps = int(math.ceil(base_steps / self.action_repeat - 1e-9))

        ncam = self._physics.model.ncam
        cam = DEFAULT_CAMERA.get(domain, 0) if camera_id is None else camera_id
        if isinstance(cam, bool) or not isinstance(cam, (int, np.integer)) or not -1 <= cam < ncam:
            raise ConfigError(f"camera_id={camera_id!r}: {domain} has cameras 0..{ncam - 1} (-1 = free camera)")
        self.sim = DmcSim(self._physics, n_sub * self.action_repeat, int(cam))

        spec = self._dm.action_spec()
        low, high = spec.minimum.astype(np.float64), spec.maximum.astype(np.float64)
        unbounded = (np.abs(low) >= UNBOUNDED) | (np.abs(high) >= UNBOUNDED)
        act_low = np.where(unbounded, -1.0, np.broadcast_to(low, spec.shape))
        act_high = np.where(unbounded, 1.0, np.broadcast_to(high, spec.shape))
        # command = offset + scale * a maps [-1, 1] onto [low, high]
        self._act_scale = 0.5 * (act_high - act_low)
        self._act_offset = 0.5 * (act_high + act_low)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=spec.shape, dtype=np.float32)

        spaces: dict[str, gym.Space] = {}
        if obs in ("state", "both"):
            n = sum(int(np.prod(v.shape)) for v in self._dm.observation_spec().values())
            spaces["state"] = gym.spaces.Box(-np.inf, np.inf, shape=(n,), dtype=np.float32)
        if obs in ("pixels", "both"):
            spaces["pixels"] = gym.spaces.Box(0, 255, shape=(*self.image_size, 3), dtype=np.uint8)
        self.observation_space = gym.spaces.Dict(spaces)

        hz = 1.0 / self.control_timestep
        self.metadata = {**DmcEnv.metadata, "control_hz": hz, "render_fps": int(round(hz))}
        self._spec = None
        self._chunks: tuple[int, list[int]] = (-1, [])
        self._steps = 0
        self._needs_reset = True
        self._seeded = False
        self._closed = False

    # `gymnasium.make` sets `spec` with max_episode_steps=None (the env truncates itself at the
    # suite's time limit); report the real episode length, which depends on action_repeat.
    @property
    def spec(self):
        return self._spec

    @spec.setter
    def spec(self, value):
        if value is not None and value.max_episode_steps is None:
            value = dataclasses.replace(value, max_episode_steps=self.max_episode_steps)
        self._spec = value

    # ----------------------------------------------------------------------------- gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._check_open()
        super().reset(seed=seed)
        if seed is not None:
            self._task.random.seed(seed)
        elif not self._seeded:
            self._task.random.seed(int(self.np_random.integers(2**31 - 1)))
        self._seeded = True
        self._dm.reset()  # physics.reset_context() + task.initialize_episode, as dm_control does
        self._steps = 0
        self._needs_reset = False
        return self._observe(), {"success": False, "t_obs": self._time(), "overrun": 0.0}

    def step(self, action):
        self._check_open()
        if self._needs_reset:
            raise gym.error.ResetNeeded("call reset() before step() (also after an episode ends)")
        a = validate_action(action, self.action_space)
        command = self._act_offset + self._act_scale * a
        reward, last_reward, discount = 0.0, 0.0, None
        n_sub = int(self.sim.n_substeps)
        if self._chunks[0] != n_sub:
            self._chunks = (n_sub, _split(n_sub, self.action_repeat))
        for n in self._chunks[1]:
            self._task.before_step(command, self._physics)
            if n > 0:
                self._physics.step(n)
            self._task.after_step(self._physics)
            last_reward = float(self._task.get_reward(self._physics))
            reward += last_reward
            discount = self._task.get_termination(self._physics)
            if discount is not None:
                break
        self._steps += 1
        terminated = discount is not None and float(discount) == 0.0
        truncated = not terminated and (discount is not None or self._steps >= self.max_episode_steps)
        self._needs_reset = terminated or truncated
        success = (self.domain, self.task_name) in SUCCESS_TASKS and last_reward >= 1.0
        info = {"success": bool(success), "t_obs": self._time(), "overrun": 0.0}
        return self._observe(), float(reward), bool(terminated), bool(truncated), info

    def render(self):
        self._check_open()
        if self.render_mode != "rgb_array":
            return None
        return self.sim.render(*self.render_size)

    def close(self):
        if self._closed:
            return
        self._closed = True
        free = getattr(self._physics, "free", None)
        if free is not None:
            free()  # releases the GL context dm_control made for rendering

    # ----------------------------------------------------------------------------- helpers
    def _observe(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        if "state" in self.observation_space.spaces:
            parts = self._task.get_observation(self._physics).values()
            out["state"] = np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in parts]
                                          ).astype(np.float32)
        if "pixels" in self.observation_space.spaces:
            out["pixels"] = self.sim.render(*self.image_size)
        return out

    def _time(self) -> float:
        return float(self.sim.data.time)

    def _check_open(self):
        if self._closed:
            raise EnvClosedError("this env was closed; make a new one with gymnasium.make(...)")


def _split(total: int, parts: int) -> list[int]:
    """`total` physics steps over `parts` action repeats, as evenly as possible."""
    base, extra = divmod(max(total, 0), parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _check_size(name: str, size) -> tuple[int, int]:
    try:
        h, w = (int(x) for x in size)
        ok = h > 0 and w > 0 and all(float(x) == int(x) for x in size)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ConfigError(f"{name}={size!r}: give (height, width) as two positive integers")
    return h, w


def make_dmc(domain: str, task: str, **kwargs: Any) -> gym.Env:
    """`gymnasium.make` for a (domain, task) pair."""
    eid = env_id(domain, task)
    if eid not in gym.registry:
        gym.register(id=eid, entry_point="robolearn.sim.dmc:DmcEnv", kwargs={"domain": domain, "task": task})
    return gym.make(eid, **kwargs)
