"""RobotEnv: a Gymnasium env made of a task (over a sim or real backend) and ready objects.

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


import gymnasium as gym
import numpy as np

from robolearn.checks import check_obs_mode, validate_action
from robolearn.errors import ConfigError, EnvClosedError
from robolearn.reset_report import ResetReport
from robolearn.robot import Backend
from robolearn.tasks.base import Task

PRIVILEGED_KEY = "privileged"  # the observation key of simulator-only truth


def env_control_hz(env: gym.Env, default: float | None = None) -> float | None:
    """The control rate an env declares: `metadata["control_hz"]` (the contract above), or for a
    Gymnasium env from elsewhere its `render_fps`, else `default`. Why one function: the actor
    loop, the fleet, deploy, recordings and the robot-time accounting each read it, and with
    their own fallbacks a foreign env was paced at its render rate by the actor and run free by
    the fleet."""
    hz = env.unwrapped.metadata.get("control_hz") or env.metadata.get("render_fps")
    return float(hz) if hz else default


class RobotEnv(gym.Env):
    """Gymnasium env over any backend. Build it with `gymnasium.make` (robolearn/compose/envs.py)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10, "control_hz": 10.0}

    def __init__(
        self,
        task: Task,
        obs: str = "state",
        render_mode: str | None = None,
        reward_source=None,
        render_size: tuple[int, int] = (240, 320),
        privileged_obs: bool = False,
        reset_mode: str = "teleport",
        resets=None,
    ):
        """Every argument is a ready object or a plain value; nothing here reads a file.

        task: the `Task` (owns its backend: robot, cameras, simulator handle).
        obs: "state" | "pixels" | "both"; privileged_obs: add simulator truth (sim only).
        reward_source: None (the task's own reward) or a reward-source object: called as
            `source(obs, info) -> (reward, success)`, `reset()` at each episode, `bind(env)` if
            it has one (it may read cameras the policy does not see). Folder paths and
            `[reward]` tables become such objects in robolearn/compose/envs.py.
        reset_mode: "teleport" (the simulator writes the start state) or "physical" (the
            task's reset controller runs under `resets`).
        resets: a `ResetSupervisor` (robolearn/resets/supervisor.py); needed for physical mode.
        """
        check_obs_mode(obs)
        if not isinstance(privileged_obs, bool):
            raise ConfigError(f"privileged_obs={privileged_obs!r}: pass True or False")
        if render_mode not in (None, "rgb_array"):
            raise ConfigError(f"render_mode={render_mode!r}: only None or 'rgb_array' is supported")
        if reset_mode not in ("teleport", "physical"):
            raise ConfigError(f"reset_mode={reset_mode!r}: 'teleport' or 'physical'")
        if reset_mode == "physical" and resets is None:
            raise ConfigError("reset_mode='physical' needs resets= (a ResetSupervisor)")
        if isinstance(reward_source, (str, dict)) or hasattr(reward_source, "__fspath__"):
            raise ConfigError(f"reward_source={reward_source!r}: RobotEnv takes a reward-source object; "
                              "make the env with gymnasium.make(...) to load a model folder or table")
        self.task = task
        self.backend: Backend = task.backend
        self.obs_mode = obs
        self.render_mode = render_mode
        if reward_source is not None and hasattr(reward_source, "bind"):
            reward_source.bind(self)  # may read cameras the policy does not observe
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
        self.reset_mode = reset_mode
        self.resets = resets

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
        if reward != reward:  # NaN: no answer (a reward model's, or a task's blind sensor: MISSING)
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
    def paces_itself(self) -> bool:
        """Whether the backend waits to its own period deadline inside `step` (robolearn/robot.py):
        a runtime loop then counts the backend's late steps as its overruns."""
        return bool(getattr(self.backend.robot, "paces_itself", False))

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
