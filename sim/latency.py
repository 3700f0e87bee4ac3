"""Timing reality gaps: action latency and control-rate jitter, as Gymnasium wrappers.

Real robots act late (USB/serial round trips, camera exposure, inference time) and at an
uneven rate (a Python loop on a busy computer). A policy trained without either tends to
oscillate on hardware, so these wrappers put both into simulation.

How the sub-step part works: every sim backend runs `sim.n_substeps` physics steps per env step
(the simulator-handle contract) and sets its actuators through `data.ctrl`. A delay of
`D` physics steps = `k` whole control periods + `m` extra physics steps is applied as
- `k`: a queue, the action given at step t is applied at step t + k (zeros before that);
- `m`: at the start of each step the physics runs `m` steps with the previous command still in
  `data.ctrl` (`coast`: the backend's `sim.coast(m)` where it models its servos, else
  `mujoco.mj_step` on the shared model/data; then `mj_forward` to resync), and the
  env then steps the remaining `n_substeps - m` with the new command.
The wrappers check that simulated time moved by exactly the number of physics steps they asked
for, and raise `ConfigError` on a backend that ignores `n_substeps`.
"""
from __future__ import annotations

import math
from collections import deque

import gymnasium as gym
import mujoco
import numpy as np

from robolearn.checks import validate_action
from robolearn.errors import ConfigError

# Per-wrapper salts: one reset seed gives each wrapper its own independent stream.
SALT_JITTER = 0x4A17


def require_sim(env: gym.Env, what: str):
    """The simulator handle of `env`, or ConfigError if it is real hardware / has none."""
    sim = getattr(env.unwrapped, "sim", None)
    if sim is None or not hasattr(sim, "model") or not hasattr(sim, "data"):
        raise ConfigError(f"{what} needs a simulated env (env.unwrapped.sim with MuJoCo model/data); "
                          f"{env.unwrapped!r} has none. Use it on backend='sim' envs only.")
    return sim


def wrapper_rng(seed: int | None, salt: int) -> np.random.Generator:
    """An RNG for one wrapper, derived from the reset seed (None: fresh entropy)."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng(np.random.SeedSequence([int(seed), salt]))


def step_with_substeps(env: gym.Env, sim, n: int, action):
    """`env.step(action)` with `sim.n_substeps = n` for this one step (restored afterwards);
    raises ConfigError if the env did not advance exactly `n` physics steps (a terminal step
    may stop early, e.g. inside an action repeat, and is not checked)."""
    nominal = sim.n_substeps
    t0 = float(sim.data.time)
    sim.n_substeps = int(n)
    try:
        out = env.step(action)
    finally:
        sim.n_substeps = nominal
    if not out[2]:
        check_advanced(sim, t0, n)
    return out


def coast(sim, n: int) -> None:
    """n physics steps on the command already in `data.ctrl`, through the backend's own servo
    model where it has one (`sim.coast(n)`: ArmSim re-planning servos), else `mj_step`."""
    step = getattr(sim, "coast", None)
    if step is not None:
        step(n)
    else:
        mujoco.mj_step(sim.model, sim.data, nstep=n)


def check_advanced(sim, t0: float, n: int) -> None:
    dt = float(sim.model.opt.timestep)
    moved = float(sim.data.time) - t0
    if not math.isclose(moved, n * dt, rel_tol=1e-6, abs_tol=1e-9):
        raise ConfigError(
            f"the env advanced {moved:.6g} s in one step, expected {n} physics steps = {n * dt:.6g} s: "
            f"its backend ignores sim.n_substeps, which rate jitter and millisecond latency need "
            f"(make the backend's advance() run sim.n_substeps physics steps per control period)")


class ActionLatency(gym.Wrapper):
    """Apply each action `steps` control periods late, or `ms` milliseconds late.

    `info["applied_action"]` is the action that actually drove the robot this step (zeros
    until the first delayed action arrives); `info["randomization"]` carries `latency_steps`,
    `latency_substeps` and `latency_ms` (the delay after rounding to whole physics steps).
    Invalid actions are rejected when given, not when they would be applied.
    """

    def __init__(self, env: gym.Env, steps: int = 0, ms: float = 0.0):
        super().__init__(env)
        steps, ms = check_latency(steps, ms)
        if steps and ms:
            raise ConfigError(f"latency: give steps={steps} or ms={ms}, not both")
        self.steps, self.ms = steps, ms
        self._sim = require_sim(env, "millisecond latency") if ms > 0 else getattr(env.unwrapped, "sim", None)
        self._k, self._m = steps, 0
        self._queue: deque[np.ndarray] = deque()
        self._hold = np.zeros(self.action_space.shape, dtype=np.float64)
        self._values: dict = {}

    def _delay(self) -> tuple[int, int]:
        if self.ms <= 0:
            return self.steps, 0
        dt = float(self._sim.model.opt.timestep)
        total = int(round(self.ms / 1000.0 / dt))
        return divmod(total, int(self._sim.n_substeps))

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._queue.clear()
        self._k, self._m = self._delay()
        self._values = {"latency_steps": self._k, "latency_substeps": self._m, "latency_ms": self._effective_ms()}
        info["randomization"] = {**info.get("randomization", {}), **self._values}
        return obs, info

    def _effective_ms(self) -> float:
        if self._sim is None:  # hardware: whole control periods only
            return 1000.0 * self._k / float(self.env.metadata.get("control_hz", float("nan")))
        dt = float(self._sim.model.opt.timestep)
        return 1000.0 * dt * (self._k * int(self._sim.n_substeps) + self._m)

    def step(self, action):
        a = validate_action(action, self.action_space)
        self._queue.append(a)
        applied = self._queue.popleft() if len(self._queue) > self._k else self._hold
        if self._m > 0:
            sim = self._sim
            n = int(sim.n_substeps)          # this step's period (rate jitter may have set it)
            m = min(self._m, n - 1)          # the new command always gets >= 1 physics step
            t0 = float(sim.data.time)
            if m > 0:
                coast(sim, m)                                  # the previous command still acts
                mujoco.mj_forward(sim.model, sim.data)         # resync derived quantities
            obs, reward, terminated, truncated, info = step_with_substeps(self.env, sim, n - m, applied)
            if not terminated:
                check_advanced(sim, t0, n)
        else:
            obs, reward, terminated, truncated, info = self.env.step(applied)
        info["applied_action"] = np.asarray(applied, dtype=np.float64).copy()
        info["randomization"] = {**info.get("randomization", {}), **self._values}
        return obs, reward, terminated, truncated, info


class ControlRateJitter(gym.Wrapper):
    """Vary the control period per step: `n_substeps = round(nominal * u)`, u ~ U(period_scale).

    The physics keeps its time step; the robot simply gets its next command a little early or
    late, as on a jittery real-time loop. `info["n_substeps"]` and `info["control_dt"]` (s) say
    what this step used. The stream is seeded by `reset(seed=...)` (or `seed` here).
    """

    def __init__(self, env: gym.Env, period_scale: tuple[float, float], seed: int | None = None):
        super().__init__(env)
        self.period_scale = check_range("rate_jitter.period_scale", period_scale, positive=True)
        self._sim = require_sim(env, "control-rate jitter")
        self.nominal_substeps = int(self._sim.n_substeps)
        self._seed = seed
        self._rng: np.random.Generator | None = None

    @property
    def substep_range(self) -> tuple[int, int]:
        lo, hi = self.period_scale
        return max(1, round(self.nominal_substeps * lo)), max(1, round(self.nominal_substeps * hi))

    def reset(self, *, seed=None, options=None):
        if seed is not None or self._rng is None:
            self._rng = wrapper_rng(seed if seed is not None else self._seed, SALT_JITTER)
        obs, info = self.env.reset(seed=seed, options=options)
        info["randomization"] = {**info.get("randomization", {}), "period_scale": self.period_scale}
        return obs, info

    def step(self, action):
        if self._rng is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        u = self._rng.uniform(*self.period_scale)
        n = max(1, int(round(self.nominal_substeps * u)))
        obs, reward, terminated, truncated, info = step_with_substeps(self.env, self._sim, n, action)
        info["n_substeps"] = n
        info["control_dt"] = n * float(self._sim.model.opt.timestep)
        return obs, reward, terminated, truncated, info


# ------------------------------------------------------------------------------ validation
def check_latency(steps, ms) -> tuple[int, float]:
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ConfigError(f"latency.steps={steps!r}: must be a whole number of control steps >= 0")
    try:
        ms_f = float(ms)
    except (TypeError, ValueError):
        raise ConfigError(f"latency.ms={ms!r} is not a number of milliseconds") from None
    if isinstance(ms, bool) or not math.isfinite(ms_f) or ms_f < 0:
        raise ConfigError(f"latency.ms={ms!r}: must be a finite number of milliseconds >= 0")
    return int(steps), ms_f


def check_range(name: str, value, positive: bool = False, nonneg: bool = False,
                limit: float | None = None) -> tuple[float, float]:
    """A (low, high) pair of finite floats with low <= high, or ConfigError."""
    try:
        if isinstance(value, (str, bytes)) or len(value) != 2:
            raise TypeError
        lo, hi = float(value[0]), float(value[1])
    except (TypeError, ValueError):
        raise ConfigError(f"{name}={value!r}: give a range as [low, high] (two numbers)") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ConfigError(f"{name}={value!r}: low and high must be finite")
    if lo > hi:
        raise ConfigError(f"{name}={value!r}: low ({lo}) is above high ({hi}); swap them")
    if positive and lo <= 0:
        raise ConfigError(f"{name}={value!r}: a scale range must be > 0 (1.0 = nominal)")
    if nonneg and lo < 0:
        raise ConfigError(f"{name}={value!r}: must be >= 0")
    if limit is not None and max(abs(lo), abs(hi)) > limit:
        raise ConfigError(f"{name}={value!r}: must stay within [-{limit}, {limit}]")
    return lo, hi
