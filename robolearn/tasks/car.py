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

On `backend="real"` there is no privileged track position. With an external pose tracker
(`backend.tracker`: motion capture / overhead camera, drivers/tracker.py) the same progress,
checkpoints, laps and lap times come from the tracker's pose projected on the `track` laid out
in the tracker's frame, timed by the tracker's capture times; `collisions` counts IMU impacts
(the largest horizontal acceleration of any telemetry frame in the step above
`IMPACT_ACCEL`). While the tracker has lost the car the reward is `MISSING` (NaN, flagged
`reward_missing`: not zero) and the throttle is taken over to brake the car to a stop until
the pose returns (`info["tracker_hold"]`); the policy keeps steering. A tracker stream that
is only late is that too; one silent for its `lost_after` (10 s) is gone and the step raises
`DeviceDisconnectedError` (drivers/tracker.py). Without a tracker, reward
and success come from the `reward_source` you pass and the lap entries stay at their initial
values.
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
HOLD_BRAKE = 0.5                  # |throttle| limit while braking to a stop on a tracker dropout
HOLD_RAMP = 0.25                  # throttle change per control period while taking over
MISSING = float("nan")            # a step's reward when its progress cannot be measured
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
                 collision_penalty: float = 0.0, track=None):
        super().__init__(backend, control_hz)
        self.car = backend.robot
        self.sim = backend.privileged
        #: external pose source on hardware (None in sim: the simulator's pose is the truth)
        self.tracker = getattr(backend, "tracker", None) if self.sim is None else None
        if self.sim is not None:
            self.track = self.sim.track
        elif self.tracker is not None:   # the track as laid out in the tracker's frame
            from robolearn.sim.track import Track

            self.track = track if track is not None else Track()
        else:
            self.track = None
        self.end_on_collision = bool(end_on_collision)
        self.collision_penalty = float(collision_penalty)
        if self.track is not None:     # off_track: outer tyre face within LANE_MARGIN of a wall
            from robolearn.sim.car import HALF_WIDTH

            self._lane = self.track.half_width - getattr(self.sim, "half_width", HALF_WIDTH) - LANE_MARGIN
        self._state_space = gym.spaces.Box(-np.inf, np.inf, shape=(N_PROPRIO,), dtype=np.float32)
        self._privileged_space = gym.spaces.Box(-np.inf, np.inf, shape=(len(PRIVILEGED_LABELS),),
                                                dtype=np.float32)
        self._action_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self._last_action = np.zeros(2)
        self.tracker_missing_total = 0   # missing-progress steps over every episode (reports)
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
        self._fix: tuple[float, float] | None = None   # real: (s, capture time) of the last pose
        self._fix_prev_step = False                    # real: the previous step ended with a pose
        self.tracker_missing_steps = 0
        self._hold_throttle = 0.0

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
        elif self.tracker is not None:
            self._take_peak_impact()          # an impact before the episode is not its collision
            pose = self.tracker.pose()
            if pose is not None:              # (else the first fix anchors the progress)
                self._anchor(pose)
        return self._info()

    def apply_action(self, action: np.ndarray) -> dict[str, Any]:
        self._last_action = action
        steer, throttle = float(action[0]) * self.car.spec.max_steer, float(action[1])
        info: dict[str, Any] = {}
        if self.tracker is not None:
            blind = self.tracker.pose() is None
            if blind:                         # brake to a stop, ramped, until the pose returns
                throttle = self.blind_throttle(self._hold_throttle)
                info["tracker_hold"] = True
            self._hold_throttle = throttle
            self.car.command(steer, throttle)
            if blind:
                self.tracker.check_alive()    # silent past lost_after: gone, not late
            return info
        self.car.command(steer, throttle)
        return info

    def blind_throttle(self, prev: float) -> float:
        """The throttle that brakes the car to a standstill from `prev`, ramped (HOLD_RAMP a
        period, at most HOLD_BRAKE), then neutral: what any driver of this task does without a
        pose (the task on a tracker dropout, pure pursuit without its pose source)."""
        v = self.car.read().speed
        goal = 0.0 if abs(v) < 0.05 else float(np.clip(-2.0 * v, -HOLD_BRAKE, HOLD_BRAKE))
        return float(np.clip(goal, prev - HOLD_RAMP, prev + HOLD_RAMP))

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

    # ------------------------------------------------------------------------- hardware
    def _take_peak_impact(self) -> float:
        """Largest horizontal IMU acceleration since the last call (the driver's peak over every
        telemetry frame when it keeps one, else the newest sample)."""
        peak = getattr(self.car, "peak_impact", None)
        if peak is not None:
            return float(peak())
        st = self.car.read()
        return math.hypot(st.accel[0], st.accel[1])

    def _anchor(self, pose) -> None:
        """First pose of an episode: progress counts from the start line, as in sim."""
        self._s, self._lateral, self._idx, _ = self.track.project(pose.x, pose.y, hint=self._idx)
        self.progress = float(self._s) - self.track.length
        self._fix = (float(self._s), pose.captured_at)
        self._fix_prev_step = True

    def locate(self) -> tuple[float, float, float] | None:
        """(x, y, yaw) of the car in the track frame: the simulator's pose in sim, the tracker's
        on hardware (None while it has lost the car, or without a tracker)."""
        if self.sim is not None:
            return self.sim.pose()
        pose = self.tracker.pose() if self.tracker is not None else None
        return None if pose is None else (pose.x, pose.y, pose.yaw)

    def touching_wall(self) -> bool:
        """Sim: a wall contact during the last advance. Hardware: an IMU impact since the last
        call (a collision is all the car can feel of a wall)."""
        if self.sim is not None:
            return bool(self.sim.wall_contact)
        return self._take_peak_impact() > IMPACT_ACCEL

    def _evaluate_real(self) -> Evaluation:
        hit = self._take_peak_impact() > IMPACT_ACCEL
        new_hit = hit and not self._in_contact
        self._in_contact = hit
        self.collisions += int(new_hit)
        terminated = bool(self.end_on_collision and new_hit)
        if self.tracker is None:
            return Evaluation(reward=0.0, success=False, terminated=terminated, info=self._info())
        pose = self.tracker.pose()
        info_extra = {"tracker": "tracked" if pose is not None else self.tracker.status()}
        if pose is None:
            self.tracker_missing_steps += 1
            self.tracker_missing_total += 1
            self._fix_prev_step = False
            return Evaluation(reward=MISSING, success=self.laps >= 1, terminated=terminated,
                              info={**self._info(), **info_extra})
        if self._fix is None:                # no pose since the episode began: anchor here
            self._anchor(pose)
            self.tracker_missing_steps += 1  # this step's start was not seen
            self.tracker_missing_total += 1
            reward = MISSING
        else:
            s_prev, t_prev = self._fix
            self._s, self._lateral, self._idx, _ = self.track.project(pose.x, pose.y, hint=self._idx)
            L = self.track.length
            ds = (self._s - s_prev + L / 2) % L - L / 2
            p_prev = self.progress
            self.progress += ds              # distance driven blind still counts toward the lap
            self._pass_checkpoints(p_prev, t_prev, pose.captured_at)
            self._fix = (float(self._s), pose.captured_at)
            # a step that began blind has no measured start: its progress is not this action's
            reward = ds - self.collision_penalty * new_hit if self._fix_prev_step else MISSING
            if not self._fix_prev_step:
                self.tracker_missing_steps += 1
                self.tracker_missing_total += 1
            self._fix_prev_step = True
        self.off_track = abs(self._lateral) > self._lane
        return Evaluation(reward=reward, success=self.laps >= 1, terminated=terminated,
                          info={**self._info(), **info_extra})

    def _info(self) -> dict[str, Any]:
        return {"lap_time": self.lap_time, "best_lap_time": self.best_lap_time, "laps": self.laps,
                "collisions": self.collisions, "checkpoint": self.checkpoint,
                "off_track": bool(self.off_track), "progress": self.progress,
                "lateral_offset": self._lateral, "success": self.laps >= 1}

    def scripted_controller(self, env):
        if self.track is None:
            raise ConfigError("the pure-pursuit driver needs the car's pose on the track; on "
                              "backend='real' pass tracker=URL (an external pose tracker), or drive "
                              "with teleop or a trained policy")
        from robolearn.tasks.car_scripted import PurePursuit

        return PurePursuit(env)


def check_car_image_size(image_size) -> None:
    try:
        h, w = (int(v) for v in image_size)
    except (TypeError, ValueError):
        raise ConfigError(f"image_size={image_size!r}: give (height, width) in pixels") from None
    if not (8 <= h <= 480 and 8 <= w <= 640):
        raise ConfigError(f"image_size={image_size!r}: height must be in [8, 480], width in [8, 640]")
