"""RobotEnv: a Gymnasium env made of a backend (sim or real) and a task, plus registration.

Contract (relied on by learners, teleop, recording and the runtime):
- observations are a Dict: `state` (float32 vector) and/or one uint8 HxWx3 array per camera,
  chosen by `obs="state" | "pixels" | "both"`; `state` and the cameras are the same on every
  backend. `privileged_obs=True` (sim backends only) adds `privileged`, a float32 vector of
  simulator-only truth (cube pose, track position) for critics and studies, never for a
  policy that must run on hardware;
- actions are Box(-1, 1); the task documents the mapping to physical commands;
- `metadata["control_hz"]` is the control rate; one `step` is one control period;
- every `info` carries `success` (bool), `t_obs` (timestamp of the observation, s) and
  `overrun` (s the backend was late for the control period; 0 in sim).
Bad actions (NaN/inf, wrong shape, out of [-1, 1]) raise `InvalidActionError`: a policy that
emits garbage must be noticed, not silently clamped onto a robot.

Resets: `reset_mode="teleport"` (sim default) writes the start state; `"physical"` (the only
mode on hardware) runs the task's reset controller under a `ResetSupervisor` and starts the
episode from wherever the world is (see robolearn/resets). The reset info carries
`info["reset"]` = {kind, ok, seconds, wall_s, failures, human_prompts, teleports, message}.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from robolearn.errors import ConfigError, EnvClosedError, InvalidActionError
from robolearn.rewards.base import RewardSource
from robolearn.robot import Backend
from robolearn.tasks.base import Task

OBS_MODES = ("state", "pixels", "both")
PRIVILEGED_KEY = "privileged"  # the observation key of simulator-only truth
# Actions are rejected beyond this (float32 rounding of a tanh squash stays inside it).
ACTION_TOLERANCE = 1e-5


class RobotEnv(gym.Env):
    """Gymnasium env over any backend. Build it with `make_task_env` or `gymnasium.make`."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10, "control_hz": 10.0}

    def __init__(
        self,
        task: Task,
        obs: str = "state",
        render_mode: str | None = None,
        reward_source: RewardSource | None = None,
        render_size: tuple[int, int] = (240, 320),
        privileged_obs: bool = False,
        reset_mode: str | None = None,
        reset_on_failure: str | None = None,
        reset_timeout: float = 60.0,
        reset_prompt=None,
    ):
        check_obs_mode(obs)
        if not isinstance(privileged_obs, bool):
            raise ConfigError(f"privileged_obs={privileged_obs!r}: pass True or False")
        if render_mode not in (None, "rgb_array"):
            raise ConfigError(f"render_mode={render_mode!r}: only None or 'rgb_array' is supported")
        self.task = task
        self.backend: Backend = task.backend
        self.obs_mode = obs
        self.render_mode = render_mode
        if reward_source is not None:  # an object, a model folder path, or a [reward] table
            from robolearn.rewards.serving import make_reward_source

            reward_source = make_reward_source(reward_source)
            if hasattr(reward_source, "bind"):  # may read cameras the policy does not observe
                reward_source.bind(self)
        self.reward_source = reward_source
        self.render_size = render_size
        hz = task.control_hz
        self.metadata = {**RobotEnv.metadata, "control_hz": hz, "render_fps": int(round(hz))}
        self.action_space = task.action_space
        spaces: dict[str, gym.Space] = {}
        if obs in ("state", "both"):
            spaces["state"] = task.state_space
        if obs in ("pixels", "both"):
            if not self.backend.cameras:
                raise ConfigError(f"obs={obs!r} needs cameras, but this backend has none")
            for name, cam in self.backend.cameras.items():
                spaces[name] = gym.spaces.Box(0, 255, shape=cam.shape, dtype=np.uint8)
        if privileged_obs:
            spaces[PRIVILEGED_KEY] = privileged_space(task)
        self.privileged_obs = privileged_obs
        self.observation_space = gym.spaces.Dict(spaces)
        self._closed = False
        self._needs_reset = True
        self._last_obs: dict[str, np.ndarray] | None = None
        self._setup_resets(reset_mode, reset_on_failure, reset_timeout, reset_prompt)

    def _setup_resets(self, reset_mode, on_failure, timeout, prompt) -> None:
        import sys

        from robolearn.resets.modes import check_on_failure, resolve_reset_mode
        from robolearn.resets.supervisor import ResetSupervisor

        self.reset_mode = resolve_reset_mode(reset_mode, self.backend.kind)
        if isinstance(prompt, str):  # from a launch file: "terminal", "operator:URL" or "operator:sim"
            from robolearn.teleop.operator import make_prompt

            prompt = make_prompt(prompt, sim=self.backend.privileged)
        if on_failure is None:  # an operator can only be asked where there is a terminal
            on_failure = "prompt" if (prompt is not None or sys.stdin.isatty()) else "raise"
        check_on_failure(on_failure)
        if on_failure == "prompt" and prompt is None:
            from robolearn.resets.prompt import HumanPrompt

            prompt = HumanPrompt()
        try:
            timeout = float(timeout)
        except (TypeError, ValueError):
            raise ConfigError(f"reset_timeout={timeout!r}: give seconds (a number > 0)") from None
        self.resets = ResetSupervisor(self.backend.robot, on_failure=on_failure, timeout_s=timeout,
                                      wall_timeout_s=max(2.0 * timeout, 30.0), prompt=prompt,
                                      teleports=self.teleport_count)

    def teleport_count(self) -> int:
        """Simulator state writes so far (0 on hardware): physical mode must never add any."""
        return int(getattr(self.backend.privileged, "teleports", 0))

    # ----------------------------------------------------------------------------- gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._check_open()
        super().reset(seed=seed)
        self._needs_reset = True       # stays set if the reset fails: no stepping from a bad start
        info = self._reset_world(options or {})
        if self.reward_source is not None:
            self.reward_source.reset()
        obs, t_obs = self._observe()
        self._needs_reset = False
        info.setdefault("success", False)
        info.update(t_obs=t_obs, overrun=0.0)
        return obs, info

    #: `options={"reset_controller": None}` starts the episode where the world is (no controller:
    #: e.g. a learned backward agent just ran); any other value replaces the task's controller
    _TASK_CONTROLLER = object()

    def _reset_world(self, options: dict) -> dict:
        from robolearn.resets.stats import ResetReport

        unknown = sorted(set(options) - {"reset_controller"})
        if unknown:
            raise ConfigError(f"unknown reset option(s) {unknown}; accepted: reset_controller")
        if self.reset_mode == "teleport":
            n0 = self.teleport_count()
            info = dict(self.task.reset(self.np_random))
            report = ResetReport(kind="teleport", teleports=self.teleport_count() - n0)
        else:
            controller = options.get("reset_controller", self._TASK_CONTROLLER)
            if controller is self._TASK_CONTROLLER:
                controller = self.task.reset_controller()
            if controller is None:
                report = ResetReport(kind="none")
            else:
                report = self.resets.run(controller, self.task, self.np_random)
            if report.teleports:
                raise RuntimeError(f"physical reset teleported the simulator {report.teleports} time(s): "
                                   "a reset controller wrote sim state (a bug: it must only command the robot)")
            info = dict(self.task.start_episode(self.np_random))
        info["reset"] = report.as_dict()
        return info

    def step(self, action):
        self._check_open()
        if self._needs_reset:
            raise gym.error.ResetNeeded("call reset() before step()")
        action = self.validate_action(action)
        info = dict(self.task.apply_action(action))
        overrun = self.backend.robot.advance(1.0 / self.task.control_hz)
        obs, t_obs = self._observe()
        ev = self.task.evaluate()
        reward, success = float(ev.reward), bool(ev.success)
        info.update(ev.info)
        terminated = bool(ev.terminated)
        if self.reward_source is not None:
            reward, success = self.reward_source(obs, {**info, "task_success": success})
            reward, success = float(reward), bool(success)
            if getattr(self.task, "success_terminates", False):
                terminated = success  # the source's verdict, not the simulator's
            if reward != reward:  # NaN: the model had no answer (robolearn.rewards.base.MISSING)
                info["reward_missing"] = True
        info.update(success=success, t_obs=t_obs, overrun=float(overrun or 0.0))
        return obs, reward, terminated, False, info

    def render(self):
        self._check_open()
        if self.render_mode != "rgb_array":
            return None
        render = getattr(self.backend.privileged, "render", None)
        if render is not None:
            return render(*self.render_size)
        if self.backend.cameras:
            return next(iter(self.backend.cameras.values())).read().image
        return None

    def close(self):
        if self._closed:
            return
        self._closed = True
        try:
            self.backend.robot.safe_stop()
        finally:
            self.backend.close()

    @property
    def sim(self):
        """The simulator handle (`model`, `data`, `n_substeps`, `render`) or None on hardware."""
        return self.backend.privileged

    def scripted_controller(self):
        """The task's scripted controller (IK reacher, pure pursuit...) bound to this env."""
        return self.task.scripted_controller(self)

    # ----------------------------------------------------------------------------- helpers
    def validate_action(self, action) -> np.ndarray:
        """Return the action as float64 of the right shape, or raise InvalidActionError."""
        return validate_action(action, self.action_space)

    def _observe(self) -> tuple[dict[str, np.ndarray], float]:
        obs: dict[str, np.ndarray] = {}
        t_obs = self.backend.robot.read().stamp if hasattr(self.backend.robot, "read") else 0.0
        if "state" in self.observation_space.spaces:
            obs["state"] = np.asarray(self.task.state(), dtype=np.float32)
        for name in self.observation_space.spaces:
            if name == PRIVILEGED_KEY:
                obs[name] = np.asarray(self.task.privileged_observation(), dtype=np.float32)
            elif name != "state":
                obs[name] = self.backend.cameras[name].read().image
        self._last_obs = obs
        return obs, float(t_obs)

    def _check_open(self):
        if self._closed:
            raise EnvClosedError("this env was closed; make a new one with gymnasium.make(...)")


# ------------------------------------------------------------------------------ factories
def env_owning_backend(backend: Backend, make_task: Callable[[Backend], Task], **env_kwargs) -> RobotEnv:
    """A `RobotEnv` on `make_task(backend)` that closes the backend if the task or the env
    cannot be built, so a bad option never leaves a serial port, camera or emulator open."""
    try:
        return RobotEnv(make_task(backend), **env_kwargs)
    except Exception:
        backend.close()
        raise


def validate_action(action, space: gym.spaces.Box) -> np.ndarray:
    """Return `action` as float64 of `space`'s shape, or raise InvalidActionError.

    Module-level so every env and action wrapper (dm_control adapter, latency) rejects bad
    actions the same way `RobotEnv` does.
    """
    try:
        a = np.asarray(action, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidActionError(f"action {action!r} is not numeric: {exc}") from None
    shape = space.shape
    if a.shape != shape:
        raise InvalidActionError(f"action has shape {a.shape}, expected {shape}")
    lo, hi = space.low, space.high
    # One comparison pass on the hot path; NaN fails it too and is reported as NaN below.
    if not ((a >= lo - ACTION_TOLERANCE) & (a <= hi + ACTION_TOLERANCE)).all():
        if not np.all(np.isfinite(a)):
            bad = np.flatnonzero(~np.isfinite(a)).tolist()
            raise InvalidActionError(f"action has NaN/inf at indices {bad}: {a.tolist()}")
        bad = np.flatnonzero((a < lo - ACTION_TOLERANCE) | (a > hi + ACTION_TOLERANCE)).tolist()
        raise InvalidActionError(
            f"action out of range [-1, 1] at indices {bad}: {a.tolist()} "
            "(squash or clip in the policy; the env does not clamp silently)")
    return np.minimum(np.maximum(a, lo), hi)  # == np.clip(a, lo, hi), without its overhead


def privileged_space(task: Task) -> gym.spaces.Box:
    """The task's `privileged` space, or a ConfigError saying why there is none."""
    if task.backend.privileged is None:
        raise ConfigError("privileged_obs=True needs a simulator backend (backend='sim'): hardware "
                          "has no cube pose or track position; drop privileged_obs for the robot "
                          "(a policy trained with privileged='critic' runs without it)")
    space = task.privileged_space
    if space is None:
        raise ConfigError(f"{type(task).__name__} has no privileged observation; drop privileged_obs")
    return space


def check_obs_mode(obs: str) -> None:
    if obs not in OBS_MODES:
        raise ConfigError(f"obs={obs!r}: choose one of {', '.join(OBS_MODES)}")


def check_control_hz(control_hz: float, max_hz: float = 1000.0) -> float:
    try:
        hz = float(control_hz)
    except (TypeError, ValueError):
        raise ConfigError(f"control_hz={control_hz!r} is not a number") from None
    if not np.isfinite(hz) or hz <= 0 or hz > max_hz:
        raise ConfigError(f"control_hz={control_hz!r}: must be in (0, {max_hz}]")
    return hz


def check_choice(name: str, value: Any, choices: tuple) -> Any:
    if value not in choices:
        raise ConfigError(f"{name}={value!r}: choose one of {', '.join(map(repr, choices))}")
    return value


# ---------------------------------------------------------------------------- registration
# Each module's `register()` calls gymnasium.register with string entry points, so importing
# robolearn stays cheap. New env families add their module here.
ENV_MODULES = ("robolearn.tasks.arm", "robolearn.tasks.car", "robolearn.sim.dmc")


def register_all() -> None:
    for mod in ENV_MODULES:
        try:
            module = importlib.import_module(mod)
        except ModuleNotFoundError as exc:  # a family not built yet (development only)
            if exc.name == mod:
                continue
            raise
        module.register()


def resolve_env_id(env_id: str) -> str:
    """Gymnasium's `module:EnvId-v0` syntax: import `module` (which registers its envs) and
    return the plain ID; a plain ID is returned as it is."""
    if ":" not in env_id:
        return env_id
    import importlib

    from robolearn.errors import ConfigError

    module, _, plain = env_id.partition(":")
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"env {env_id!r}: cannot import module {module!r} ({exc}); install it "
                          "or put it on PYTHONPATH") from None
    return plain


def registered_ids() -> list[str]:
    """Env IDs in the `robolearn/` namespace, sorted."""
    register_all()
    return sorted(k for k in gym.registry if k.startswith("robolearn/"))


def register_once(env_id: str, entry_point: str | Callable, **kwargs) -> None:
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=entry_point, **kwargs)
