"""`robolearn/CarLap-v0`: drive laps of a walled track, fast and without touching the walls.

Actions, Box(-1, 1) of shape (2,):
- `action[0]` steer: `steer_rad = action[0] * car.spec.max_steer` (0.45 rad in sim), + = left;
- `action[1]` throttle: fraction of full ESC effort, + = forward; negative brakes, then reverses.

Reward (sim): metres of progress along the track centre line during the step (negative when
driving backwards), minus `collision_penalty` for each new wall contact. `info` carries
`lap_time` (s, the last completed lap; None before the first), `best_lap_time`, `laps`,
`collisions` (count of wall contacts begun), `checkpoint` (index of the last checkpoint passed,
in order; -1 before the start line, 0 is the start line), `off_track` (a tyre within
`LANE_MARGIN` of a wall, or the car rolled over), `progress` (m from the start line),
`lateral_offset` (m, + = left). Success = at least one lap completed (`laps >= 1`).
The car starts just behind the start line; lap timing starts when it crosses it (flying lap).
Episodes end on a wall contact only with `end_on_collision=True` (for benchmarking).

Observation, the same on every backend: `state` (float32, 10) is what the car's controller
measures and the policy commanded: speed (m/s, wheel odometry), steer (rad), IMU accel (3,
m/s^2) and gyro (3, rad/s), last action (2). The track-relative entries need the car's pose on
the track, which the car cannot measure, so they are the `privileged` vector (float32, 6; only
with `privileged_obs=True` on `backend="sim"`): lateral offset / half width, sin and cos of
the heading error, track curvature 0.5, 1 and 2 m ahead. The camera is `front` on both.

On `backend="real"` there is no privileged track position: reward and success come from the
`reward_source` you pass, `collisions` counts IMU impacts above `IMPACT_ACCEL`, and the lap
entries stay at their initial values.
"""
from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from robolearn.errors import ConfigError
from robolearn.robot import Backend
from robolearn.tasks.base import Evaluation, Task

ENV_ID = "robolearn/CarLap-v0"
#: the task in one sentence: the task string of a LeRobot export (meta/tasks.parquet)
DESCRIPTION = "Drive laps around the track as fast as possible without touching the walls."
MAX_EPISODE_STEPS = 1200          # 60 s at 20 Hz: the pure-pursuit driver needs about 25 s for 3 laps
START_BEHIND_LINE = 0.4           # m behind the start line at reset
START_NOISE = (0.1, 0.1, 0.1)     # uniform half-ranges: along track (m), lateral (m), yaw (rad)
LANE_MARGIN = 0.05                # m: off_track when a tyre is closer than this to a wall
IMPACT_ACCEL = 30.0               # m/s^2 horizontal IMU acceleration counted as a crash (real)
LOOKAHEAD = (0.5, 1.0, 2.0)       # m ahead where the sim state samples the track curvature
SIM_KWARGS = ("track", "timestep", "friction", "contact_check_every")
N_PROPRIO = 10
STATE_LABELS = ("speed", "steer", "accel_x", "accel_y", "accel_z", "gyro_x", "gyro_y", "gyro_z",
                "last_steer", "last_throttle")
PRIVILEGED_LABELS = ("lateral", "sin_heading_err", "cos_heading_err", "curv_0.5m", "curv_1m",
                     "curv_2m")


class CarLap(Task):
    """Lap task over a car backend; reads the track and simulator only when there is one."""

    default_control_hz = 20.0

    def __init__(self, backend: Backend, control_hz: float = 20.0, end_on_collision: bool = False,
                 collision_penalty: float = 0.0):
        super().__init__(backend, control_hz)
        self.car = backend.robot
        self.sim = backend.privileged
        self.track = getattr(self.sim, "track", None)
        self.end_on_collision = bool(end_on_collision)
        self.collision_penalty = float(collision_penalty)
        if self.track is not None:     # off_track: outer tyre face within LANE_MARGIN of a wall
            self._lane = self.track.half_width - self.sim.half_width - LANE_MARGIN
        self._state_space = gym.spaces.Box(-np.inf, np.inf, shape=(N_PROPRIO,), dtype=np.float32)
        self._privileged_space = gym.spaces.Box(-np.inf, np.inf, shape=(len(PRIVILEGED_LABELS),),
                                                dtype=np.float32)
        self._action_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self._last_action = np.zeros(2)
        self._reset_counters()

    # ---------------------------------------------------------------------------- episode
    def _reset_counters(self) -> None:
        self.laps = 0
        self.collisions = 0
        self.checkpoint = -1
        self.lap_time: float | None = None
        self.best_lap_time: float | None = None
        self.progress = 0.0
        self.off_track = False
        self._in_contact = False
        self._next_cp = 0                 # unwrapped index j of the next checkpoint to pass
        self._lap_start = 0.0
        self._proj_time = -1.0
        self._s = 0.0
        self._lateral = 0.0
        self._idx: int | None = None

    def reset(self, rng: np.random.Generator) -> dict[str, Any]:
        self.car.safe_stop()
        self._reset_counters()
        self._last_action = np.zeros(2)
        if self.sim is not None:
            ds, dl, dyaw = (rng.uniform(-h, h) for h in START_NOISE)
            s0 = -START_BEHIND_LINE + ds
            x, y, th = self.track.point_at(s0)
            self.sim.reset_pose(x - dl * math.sin(th), y + dl * math.cos(th), th + dyaw)
            self._project()
            self._s_eval = self._s
            self.progress = s0               # progress is measured from the start line
            self._t_prev = self.car.read().stamp
        return self._info()

    def start_episode(self, rng: np.random.Generator) -> dict[str, Any]:
        self._reset_counters()
        self._last_action = np.zeros(2)
        if self.sim is not None:
            self._project()
            self._s_eval = self._s
            # progress is measured from the start line: the car is this far before its next crossing
            self.progress = float(self._s) - self.track.length
            self._in_contact = self.sim.wall_contact
            self._t_prev = self.car.read().stamp
        return self._info()

    def apply_action(self, action: np.ndarray) -> dict[str, Any]:
        self._last_action = action
        self.car.command(float(action[0]) * self.car.spec.max_steer, float(action[1]))
        return {}

    # ------------------------------------------------------------------------ observation
    def _project(self) -> None:
        """Track position of the car for the current sim time (computed once per step)."""
        t = self.sim.data.time
        if t == self._proj_time:
            return
        x, y, yaw = self.sim.pose()
        self._s, self._lateral, self._idx, self._heading = self.track.project(x, y, hint=self._idx)
        self._yaw = yaw
        self._proj_time = t

    def state(self) -> np.ndarray:
        st = self.car.read()
        out = np.empty(self._state_space.shape[0], dtype=np.float32)
        out[0] = st.speed
        out[1] = st.steer
        out[2:5] = st.accel
        out[5:8] = st.gyro
        out[8:10] = self._last_action
        return out

    def privileged_observation(self) -> np.ndarray:
        self._project()
        tr = self.track
        herr = tr.heading_error(self._yaw, self._heading)
        out = np.empty(len(PRIVILEGED_LABELS), dtype=np.float32)
        out[0] = self._lateral / tr.half_width
        out[1] = math.sin(herr)
        out[2] = math.cos(herr)
        for i, ahead in enumerate(LOOKAHEAD):
            out[3 + i] = tr.curvature_at(self._s + ahead)
        return out

    # -------------------------------------------------------------------------- evaluate
    def evaluate(self) -> Evaluation:
        if self.sim is None:
            return self._evaluate_real()
        st = self.car.read()
        s_prev = self._s_eval
        self._project()
        self._s_eval = self._s
        L = self.track.length
        ds = (self._s - s_prev + L / 2) % L - L / 2
        p_prev = self.progress
        self.progress += ds
        new_hit = self.sim.wall_contact and not self._in_contact
        self._in_contact = self.sim.wall_contact
        self.collisions += int(new_hit)
        self._pass_checkpoints(p_prev, self._t_prev, st.stamp)
        self._t_prev = st.stamp
        self.off_track = abs(self._lateral) > self._lane or self.sim.upright() < 0.5
        reward = ds - self.collision_penalty * new_hit
        return Evaluation(reward=reward, success=self.laps >= 1,
                          terminated=bool(self.end_on_collision and new_hit), info=self._info())

    def _pass_checkpoints(self, p_prev: float, t_prev: float, t_now: float) -> None:
        """Advance through every checkpoint whose position the progress crossed this step,
        timing each crossing by linear interpolation inside the step."""
        spacing = self.track.length / self.track.n_checkpoints
        while self.progress >= self._next_cp * spacing:
            target = self._next_cp * spacing
            frac = (target - p_prev) / (self.progress - p_prev) if self.progress > p_prev else 1.0
            t_cross = t_prev + min(max(frac, 0.0), 1.0) * (t_now - t_prev)
            self.checkpoint = self._next_cp % self.track.n_checkpoints
            if self.checkpoint == 0:
                if self._next_cp > 0:
                    self.laps += 1
                    self.lap_time = t_cross - self._lap_start
                    if self.best_lap_time is None or self.lap_time < self.best_lap_time:
                        self.best_lap_time = self.lap_time
                self._lap_start = t_cross
            self._next_cp += 1

    def _evaluate_real(self) -> Evaluation:
        st = self.car.read()
        hit = math.hypot(st.accel[0], st.accel[1]) > IMPACT_ACCEL
        new_hit = hit and not self._in_contact
        self._in_contact = hit
        self.collisions += int(new_hit)
        return Evaluation(reward=0.0, success=False, terminated=bool(self.end_on_collision and new_hit),
                          info=self._info())

    def _info(self) -> dict[str, Any]:
        return {"lap_time": self.lap_time, "best_lap_time": self.best_lap_time, "laps": self.laps,
                "collisions": self.collisions, "checkpoint": self.checkpoint,
                "off_track": bool(self.off_track), "progress": self.progress,
                "lateral_offset": self._lateral, "success": self.laps >= 1}

    def scripted_controller(self, env):
        if self.sim is None:
            raise ConfigError("the pure-pursuit driver needs the simulator's car pose; on "
                              "backend='real' drive with teleop or a trained policy")
        from robolearn.tasks.car_scripted import PurePursuit

        return PurePursuit(env)


def check_car_image_size(image_size) -> None:
    try:
        h, w = (int(v) for v in image_size)
    except (TypeError, ValueError):
        raise ConfigError(f"image_size={image_size!r}: give (height, width) in pixels") from None
    if not (8 <= h <= 480 and 8 <= w <= 640):
        raise ConfigError(f"image_size={image_size!r}: height must be in [8, 480], width in [8, 640]")
