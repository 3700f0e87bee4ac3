"""Arm calibration against mechanical stops ("homing"): each servo's offset from where its joint
stalls.

Why: `calibrate_zero_pose` trusts a person to hold the arm in the sim's zero pose, and the few
degrees such an eye-balled pose is off by are exactly the per-joint offsets that make a policy
miss by centimetres while the encoders say it arrived (docs/bench/finetune/). No reward computed
from the encoders can see them, and `calibrate-sim` cannot fit them (replaying actions compares
encoder readings, which an offset does not change). Industrial arms and 3D printers home against
something physical instead, and so does this procedure: drive each joint slowly toward a stop
whose angle is known from the arm's model (the MJCF joint range), notice from the present
position that it stopped following its goal, and

    offset (ticks) = reading at the stop - direction * stop angle / rad-per-tick

It speaks only the servo bus (`ServoBus`: present position, goal position, the angle-limit
registers, torque), so it works on Feetech and Dynamixel arms alike, and writes the calibration
JSON the drivers read (drivers/calibration.py).

Safety: one joint moves at a time, at `approach_speed`, from a posture checked collision-free
(table, base) by the arm's forward kinematics for every angle the joint may sweep, with the other
joints anywhere within `max_offset` of where they are believed to be; the goal never leads the
present position by more than `max_lead`, which bounds how hard a servo pushes into its stop (or
into anything else); a stall far from the expected stop, a joint that never stalls, or a posture
not reached stop the procedure with the arm holding still and the servos' angle limits restored.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from robolearn.drivers.calibration import (LIMIT_MARGIN_RAD, RAD_PER_TICK, Calibration, JointCalibration,
                                           calibrate_zero_pose)
from robolearn.errors import ConfigError, DeviceError, SafetyError
from robolearn.robot import ArmSpec

#: the search window: a horn may be this far (rad) off its believed angle; a stall further from
#: the expected stop than this is an error (re-mount the horn or start from a rough calibration)
MAX_OFFSET_RAD = 0.25
#: each approach starts this far (rad) inside the search window
START_MARGIN_RAD = 0.2
APPROACH_SPEED = 0.2        # rad/s toward a stop ("slowly": about 11 degrees per second)
MOVE_SPEED = 0.6            # rad/s between postures
RATE_HZ = 50.0              # bus reads / goal writes per second
MAX_LEAD_RAD = 0.12         # the goal never leads the present position by more (bounds the push)
STALL_LEAD_RAD = 0.08       # stalled: the goal leads by at least this ...
STILL_WINDOW_S = 0.3        # ... and the position's mean moved less than STILL_RAD between the
STILL_RAD = 0.006           #     two halves of this window (robust to read noise)
HOLD_LEAD_RAD = 0.05        # while the stop is read: a gentle push that keeps the link on it
SETTLE_S = 0.3
MEASURE_S = 0.4
POSTURE_TOL_RAD = 0.06      # a posture is reached when every joint is this close
MIN_HEIGHT_M = 0.05         # clearance checks: every link point this far above the table top
BASE_RADIUS_M = 0.09        # ... and out of this cylinder around the base below BASE_HEIGHT_M
BASE_HEIGHT_M = 0.10


class StopNotFoundError(DeviceError):
    """A joint went past where its stop can be without stalling."""


class UnexpectedStallError(DeviceError):
    """A joint stalled far from its expected stop (something in the way, or the horn is off by
    more than the search window)."""


@dataclass(frozen=True)
class StopMove:
    """One joint driven into one stop, the others holding a posture."""

    joint: str                 # calibration key (joint name, "gripper" last)
    side: int                  # +1: the upper stop, -1: the lower stop
    angle: float               # the stop's angle in the sim's convention (rad)
    posture: tuple             # every joint (gripper last, rad) before the approach; this joint
                               # at its start angle, START_MARGIN + max_offset inside the stop


@dataclass
class StopReading:
    joint: str
    side: int
    stop_angle: float          # rad, the stop's known angle
    reading_ticks: float       # mean present position pressed on the stop
    old_offset: int            # ticks
    new_offset: int            # ticks
    correction_rad: float      # how far the initial calibration was off (new - old, in radians)
    seconds: float             # robot time of this joint's approach + reading


@dataclass
class StopCalibrationResult:
    calibration: Calibration
    readings: list[StopReading] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> dict:
        return {"seconds": round(self.seconds, 2),
                "joints": {r.joint: {"side": "upper" if r.side > 0 else "lower",
                                     "stop_angle_rad": r.stop_angle,
                                     "reading_ticks": round(r.reading_ticks, 2),
                                     "old_offset": r.old_offset, "new_offset": r.new_offset,
                                     "correction_rad": round(r.correction_rad, 5),
                                     "seconds": round(r.seconds, 2)} for r in self.readings}}


# ------------------------------------------------------------------------------- the plan
def joint_names(spec: ArmSpec) -> list[str]:
    return list(spec.joint_names) + ["gripper"]


def spec_ranges(spec: ArmSpec) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) of every servo (gripper last), rad."""
    g_lo, g_hi = sorted((spec.gripper_closed, spec.gripper_open))
    return np.append(np.asarray(spec.lower, float), g_lo), np.append(np.asarray(spec.upper, float), g_hi)


def rest_posture(spec: ArmSpec) -> np.ndarray:
    """The zero pose (upper arm vertical, forearm level, gripper down), gripper half open:
    where the procedure starts each joint's posture from and ends."""
    return np.append(np.zeros(spec.n_joints), 0.5 * (spec.gripper_open + spec.gripper_closed))


def arm_stop_plan(spec: ArmSpec, max_offset: float = MAX_OFFSET_RAD,
                  stops: dict[str, float] | None = None) -> list[StopMove]:
    """The stop each joint of the SO-100-class arm (sim/assets/arm.xml) is driven into, and the
    posture the others hold, chosen so that the swept links stay clear of the table and the
    base, and so that gravity (about the horizontal axes) presses toward the stop, not away:

    - shoulder_pan -> upper stop, arm upright (the zero pose: upper arm vertical, forearm
      level, gripper down; the gripper sweeps a level circle 24 cm above the table);
    - shoulder_lift -> lower stop (leaning back), the elbow bent so the forearm stands up;
    - elbow_flex -> lower stop, the forearm rising to vertical above the upright upper arm;
    - wrist_flex -> upper stop, the gripper swinging back and up from pointing down;
    - wrist_roll -> upper stop, the gripper pointing down (gravity does not act on the roll);
    - gripper -> closed (the fingers' stop), in the zero pose.

    `stops` overrides a stop's angle (rad) for an arm whose stops differ from the model's
    joint range. `check_plan_clearance` verifies the postures against the model."""
    names = joint_names(spec)
    lower, upper = spec_ranges(spec)
    stops = dict(stops or {})
    unknown = sorted(set(stops) - set(names))
    if unknown:
        raise ConfigError(f"stop angle(s) for unknown joint(s) {unknown}; joints: {names}")
    home = dict(zip(names, rest_posture(spec)))
    sides = {"shoulder_pan": +1, "shoulder_lift": -1, "elbow_flex": -1, "wrist_flex": +1,
             "wrist_roll": +1, "gripper": -1 if spec.gripper_closed < spec.gripper_open else +1}
    d = max_offset + START_MARGIN_RAD
    plan = []
    for i, n in enumerate(names):
        side = sides.get(n, +1)
        angle = float(stops.get(n, upper[i] if side > 0 else lower[i]))
        pose = dict(home)
        if n == "shoulder_lift":       # forearm up: lift + elbow = -pi/2 at the stop
            pose["elbow_flex"] = float(np.clip(-math.pi / 2 - angle, lower[2], upper[2]))
        pose[n] = angle - side * d
        plan.append(StopMove(joint=n, side=side, angle=angle,
                             posture=tuple(float(pose[k]) for k in names)))
    return plan


def _too_close(points: np.ndarray) -> str | None:
    z = points[:, 2]
    if z.min() < MIN_HEIGHT_M:
        return f"a link comes within {100 * max(z.min(), 0):.1f} cm of the table"
    r = np.hypot(points[:, 0], points[:, 1])
    near = (z < BASE_HEIGHT_M) & (r < BASE_RADIUS_M)
    if near.any():
        return "a link comes too close to the base"
    return None


def _corners(q: np.ndarray, skip: int, spread: float) -> list[np.ndarray]:
    """q, and q with every joint but `skip` off by +spread / -spread (the believed angles may be
    that far from the true ones)."""
    out = [q]
    for s in (spread, -spread):
        p = q + s
        p[skip] = q[skip]
        out.append(p)
    return out


def sweep_clear(kin, q_from, q_to, n: int = 24) -> str | None:
    """None if every link point stays clear along the straight joint-space move, else why not."""
    q_from, q_to = np.asarray(q_from, float)[:5], np.asarray(q_to, float)[:5]
    for a in np.linspace(0.0, 1.0, n):
        why = _too_close(kin.link_points(q_from + a * (q_to - q_from)))
        if why:
            return f"{why} at q={np.round(q_from + a * (q_to - q_from), 3).tolist()}"
    return None


def check_plan_clearance(plan: list[StopMove], kin, max_offset: float = MAX_OFFSET_RAD) -> None:
    """Every approach of `plan` is collision-free for the arm model behind `kin` (an
    `ArmKinematics`), whatever the true angles within `max_offset` of the believed ones:
    the swept joint from its (true) start to its stop, the others at each corner."""
    from robolearn.sim.arm import JOINT_NAMES

    for mv in plan:
        i = JOINT_NAMES.index(mv.joint) if mv.joint in JOINT_NAMES else None
        q = np.asarray(mv.posture, float)
        if i is None:                 # the gripper moves no link
            for c in _corners(q, 5, max_offset):
                why = _too_close(kin.link_points(c[:5]))
                if why:
                    raise ConfigError(f"stop plan, {mv.joint}: posture not clear: {why}")
            continue
        for c in _corners(q, i, max_offset):
            start = c.copy()
            start[i] = q[i] - mv.side * max_offset     # true start, the farthest from the stop
            end = c.copy()
            end[i] = mv.angle
            why = sweep_clear(kin, start, end)
            if why:
                raise ConfigError(f"stop plan, {mv.joint} toward its {'upper' if mv.side > 0 else 'lower'} "
                                  f"stop {mv.angle:+.3f} rad: {why}")


# --------------------------------------------------------------------------- the procedure
class StopCalibrator:
    """Runs a stop plan on a servo bus. `initial`: ids, directions and rough offsets (e.g.
    `Calibration.default`, horns at the centre tick, or a `calibrate_zero_pose` file); the
    result replaces the offsets of the joints it calibrated."""

    def __init__(self, bus, spec: ArmSpec, initial: Calibration, plan: list[StopMove] | None = None,
                 kin=None, max_offset: float = MAX_OFFSET_RAD, approach_speed: float = APPROACH_SPEED,
                 move_speed: float = MOVE_SPEED, rate_hz: float = RATE_HZ, joint_timeout_s: float = 30.0,
                 log: Callable[[str], None] | None = None):
        names = joint_names(spec)
        if initial.names != names:
            raise ConfigError(f"calibration lists servos {initial.names}, the arm needs {names} in that order")
        for name, v in (("max_offset", max_offset), ("approach_speed", approach_speed),
                        ("move_speed", move_speed), ("rate_hz", rate_hz)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ConfigError(f"{name}={v!r}: must be a positive number")
        if not 0.02 <= approach_speed <= 0.5:
            raise ConfigError(f"approach_speed={approach_speed}: choose 0.02..0.5 rad/s (slow enough "
                              "to stop on a stall within one bus read)")
        if max_offset > 0.5:
            raise ConfigError(f"max_offset={max_offset}: at most 0.5 rad; a horn further off needs "
                              "re-mounting or a rough calibration (calibrate_zero_pose) first")
        if kin is None:
            from robolearn.sim.kinematics import ArmKinematics
            kin = ArmKinematics()
        self.bus, self.spec, self.kin, self.names = bus, spec, kin, names
        self.proto = bus.proto
        self.initial = initial
        self.cal = Calibration(dict(initial.servos))       # working copy: offsets improve as we go
        self.ids = initial.ids
        self.max_offset, self.speed, self.move_speed = float(max_offset), float(approach_speed), float(move_speed)
        self.dt = 1.0 / float(rate_hz)
        self.joint_timeout_s = float(joint_timeout_s)
        self.plan = plan if plan is not None else arm_stop_plan(spec, max_offset)
        self.lower, self.upper = spec_ranges(spec)
        self.log = log or (lambda line: None)
        self._goal = None             # rad, every servo, in the working calibration
        self._limits: dict[int, tuple[int, int]] = {}

    # ---------------------------------------------------------------------- bus helpers
    def _read(self) -> np.ndarray:
        """Present positions (rad, working calibration) and keeps the raw ticks."""
        ticks = self.bus.read_positions(self.ids)
        self._ticks = np.array([ticks[sid] for sid in self.ids], float)
        return np.array([self.cal[n].to_rad(t) for n, t in zip(self.names, self._ticks)])

    def _write(self, q: np.ndarray) -> None:
        self._goal = np.asarray(q, float).copy()
        goals = {}
        for n, sid, v in zip(self.names, self.ids, self._goal):
            lo, hi = self._limits[sid]                 # a goal outside the limits: refused or clamped
            goals[sid] = int(np.clip(self.cal[n].to_ticks(v), lo, hi))
        self.bus.write_positions(goals)

    def _tick(self, t_next: float) -> float:
        t_next += self.dt
        delay = t_next - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            t_next = time.monotonic()
        return t_next

    def _search_limits(self) -> dict[int, tuple[int, int]]:
        """Tick limits wide enough for every posture and search window (joint range +
        max_offset + the push lead on both sides), within the servo's 0..MAX_TICK."""
        span = self.max_offset + MAX_LEAD_RAD + 0.05
        out = {}
        for n, lo, hi in zip(self.names, self.lower, self.upper):
            c = self.initial[n]
            a, b = c.to_ticks(lo - span), c.to_ticks(hi + span)
            out[c.id] = (int(max(0, min(a, b))), int(min(self.proto.MAX_TICK, max(a, b))))
        return out

    def _set_limits(self, limits: dict[int, tuple[int, int]]) -> None:
        """Write angle limits; protocols that need torque off for it (Dynamixel) get torque
        back on holding the present pose."""
        for sid, (lo, hi) in limits.items():
            self.bus.set_limits(sid, lo, hi)
        self._limits = dict(limits)
        self._hold()

    def _hold(self) -> None:
        """Goal = present position on every servo, torque on: the arm holds still."""
        q = self._read()
        self._write(q)
        self.bus.set_torque(self.ids, True)

    # ------------------------------------------------------------------------ motions
    def _move_to(self, target: np.ndarray, what: str) -> None:
        q0 = self._read()
        target = np.asarray(target, float)
        why = sweep_clear(self.kin, q0, target)
        if why:
            raise SafetyError(f"stop calibration: the move to the {what} posture is not clear ({why}); "
                              "move the arm by hand toward its zero pose (upper arm up, forearm level) "
                              "and start again")
        duration = float(np.max(np.abs(target - q0))) / self.move_speed
        t0 = t_next = time.monotonic()
        while True:
            a = min(1.0, (time.monotonic() - t0) / max(duration, 1e-9))
            self._write(q0 + a * (target - q0))
            q = self._read()
            if a >= 1.0 and np.all(np.abs(q - target) < POSTURE_TOL_RAD):
                return
            if time.monotonic() - t0 > duration + 5.0:
                bad = [f"{n} at {v:+.3f} (goal {g:+.3f})" for n, v, g in zip(self.names, q, target)
                       if abs(v - g) >= POSTURE_TOL_RAD]
                raise UnexpectedStallError(
                    f"stop calibration: the {what} posture was not reached within {duration + 5:.0f} s: "
                    f"{', '.join(bad)} rad. Something blocks the arm, or a servo is unpowered or "
                    "its direction in the calibration is wrong.")
            t_next = self._tick(t_next)

    def _find_stop(self, mv: StopMove) -> float:
        """Drive `mv.joint` toward its stop; returns the mean raw tick reading pressed on it."""
        i = self.names.index(mv.joint)
        s = mv.side
        q = self._read()
        goal = self._goal.copy()
        goal[i] = q[i]
        window_end = mv.angle + s * self.max_offset
        hist: list[tuple[float, float]] = []
        t0 = t_next = time.monotonic()
        while True:
            q = self._read()
            now = time.monotonic()
            hist.append((now, q[i]))
            if s * (q[i] - window_end) > 0:
                raise StopNotFoundError(
                    f"stop calibration: {mv.joint} moved to {q[i]:+.3f} rad, past every place its "
                    f"{'upper' if s > 0 else 'lower'} stop ({mv.angle:+.3f} rad) can be within "
                    f"{self.max_offset} rad, without stalling. Check that the stop exists on this arm "
                    "(or give its angle with --stop), the servo's direction in the calibration, and "
                    "that nothing slips (a loose horn).")
            if now - t0 > self.joint_timeout_s:
                raise StopNotFoundError(
                    f"stop calibration: {mv.joint} did not stall within {self.joint_timeout_s:.0f} s "
                    f"(at {q[i]:+.3f} rad, stop expected at {mv.angle:+.3f}). Is the servo powered "
                    "and its torque enabled?")
            lead = s * (goal[i] - q[i])
            recent = [v for t, v in hist if t >= now - STILL_WINDOW_S]
            if (lead >= STALL_LEAD_RAD and now - t0 >= STILL_WINDOW_S and len(recent) >= 6
                    and abs(np.mean(recent[len(recent) // 2:]) - np.mean(recent[:len(recent) // 2])) < STILL_RAD):
                break
            goal[i] += s * self.speed * self.dt
            if s * (goal[i] - q[i]) > MAX_LEAD_RAD:       # bound the push (and any collision)
                goal[i] = q[i] + s * MAX_LEAD_RAD
            self._write(goal)
            t_next = self._tick(t_next)
        stalled_at = float(np.mean(recent))
        if abs(stalled_at - mv.angle) > self.max_offset:
            self._hold()
            raise UnexpectedStallError(
                f"stop calibration: {mv.joint} stalled at {stalled_at:+.3f} rad, "
                f"{abs(stalled_at - mv.angle):.3f} rad from its expected {'upper' if s > 0 else 'lower'} "
                f"stop ({mv.angle:+.3f} rad; the search allows {self.max_offset} rad). Something is in "
                "the way, or the horn is mounted that far off: clear the arm, or start from a rough "
                "calibration (calibrate_zero_pose) or give the stop's angle with --stop.")
        # a gentle push keeps the link on the stop while it is read
        goal[i] = stalled_at + s * HOLD_LEAD_RAD
        self._write(goal)
        t_end, t_next = time.monotonic() + SETTLE_S, time.monotonic()
        while time.monotonic() < t_end:
            self._read()
            t_next = self._tick(t_next)
        ticks = []
        t_end = time.monotonic() + MEASURE_S
        while time.monotonic() < t_end:
            self._read()
            ticks.append(self._ticks[i])
            t_next = self._tick(t_next)
        # back off (from where the stop really is): stop pushing before anything else moves
        goal[i] = stalled_at - s * START_MARGIN_RAD
        self._write(goal)
        return float(np.mean(ticks))

    # ------------------------------------------------------------------------------ run
    def run(self, joints: list[str] | None = None) -> StopCalibrationResult:
        """Calibrate `joints` (default: every joint in the plan) and return the new calibration."""
        moves = self.plan if joints is None else [m for m in self.plan if m.joint in joints]
        if joints is not None:
            unknown = sorted(set(joints) - {m.joint for m in self.plan})
            if unknown:
                raise ConfigError(f"joints {unknown} are not in the stop plan "
                                  f"({[m.joint for m in self.plan]})")
        missing = [sid for sid in self.ids if not self.bus.ping(sid)]
        if missing:
            raise DeviceError(f"servo ID(s) {missing} did not answer on {self.bus.port}: check power, "
                              "IDs and cabling (the calibration file says which ID each joint uses)")
        for c in self.initial.servos.values():     # read ticks in the initial calibration's frame
            if c.homing_offset is not None and self.bus.read_register(c.id, self.proto.HOMING_OFFSET) != c.homing_offset:
                self.bus.set_homing_offset(c.id, c.homing_offset)
        saved = {sid: (self.bus.read_register(sid, self.proto.MIN_LIMIT),
                       self.bus.read_register(sid, self.proto.MAX_LIMIT)) for sid in self.ids}
        self._limits = dict(saved)
        t_start = time.monotonic()
        result = StopCalibrationResult(calibration=self.initial)
        offsets = {n: c.offset for n, c in self.initial.servos.items()}
        done = False
        try:
            self._set_limits(self._search_limits())
            for mv in moves:
                t0 = time.monotonic()
                self.log(f"{mv.joint}: to its posture, then toward its "
                         f"{'upper' if mv.side > 0 else 'lower'} stop at {mv.angle:+.3f} rad")
                self._move_to(np.asarray(mv.posture), f"{mv.joint} approach")
                ticks = self._find_stop(mv)
                c = self.cal[mv.joint]
                new = int(round(ticks - c.direction * mv.angle / RAD_PER_TICK))
                old = self.initial[mv.joint].offset
                offsets[mv.joint] = new
                self.cal = Calibration({**self.cal.servos, mv.joint: replace(c, offset=new)})
                rec = StopReading(joint=mv.joint, side=mv.side, stop_angle=mv.angle, reading_ticks=ticks,
                                  old_offset=old, new_offset=new,
                                  correction_rad=float(-c.direction * (new - old) * RAD_PER_TICK),
                                  seconds=time.monotonic() - t0)
                result.readings.append(rec)
                self.log(f"{mv.joint}: stop read at {ticks:.1f} ticks -> offset {new} "
                         f"(was {old}: the old calibration read {-rec.correction_rad:+.4f} rad off)")
            self._move_to(rest_posture(self.spec), "rest")
            result.calibration = self._final(offsets, {m.joint for m in moves})
            done = True
        finally:
            try:
                if done:
                    c = result.calibration
                    self._set_limits({s.id: (s.min, s.max) for s in c.servos.values()})
                else:
                    self._hold()                        # stop pushing first
                    self._set_limits(saved)
            except DeviceError as exc:
                self.log(f"could not restore the servos' angle limits: {exc}")
        result.seconds = time.monotonic() - t_start
        return result

    def _final(self, offsets: dict[str, int], calibrated: set[str]) -> Calibration:
        """Calibrated joints: new offset, tick range = joint range + LIMIT_MARGIN_RAD; the
        others keep their initial entry."""
        names = self.names
        fresh = calibrate_zero_pose(
            {n: offsets[n] for n in calibrated},
            {n: self.initial[n].id for n in calibrated},
            {n: self.initial[n].direction for n in calibrated},
            dict(zip(names, self.lower)), dict(zip(names, self.upper)), margin=LIMIT_MARGIN_RAD)
        servos: dict[str, JointCalibration] = {}
        for n in names:
            # the new ticks are read in the frame the initial calibration names (its homing offset)
            servos[n] = replace(fresh[n], homing_offset=self.initial[n].homing_offset) if n in calibrated \
                else self.initial[n]
        return Calibration(servos)


def calibrate_against_stops(bus, spec: ArmSpec | None = None, initial: Calibration | None = None,
                            joints: list[str] | None = None, stops: dict[str, float] | None = None,
                            log=None, **options) -> StopCalibrationResult:
    """The whole procedure on an open `ServoBus`: plan (checked against the arm model), run,
    return the result (`.calibration.save(path)` writes the JSON the drivers read)."""
    from robolearn.drivers.real import default_arm_spec
    from robolearn.sim.kinematics import ArmKinematics

    spec = spec or default_arm_spec()
    names = joint_names(spec)
    lower, upper = spec_ranges(spec)
    if initial is None:
        initial = Calibration.default(names, lower, upper)
    max_offset = options.get("max_offset", MAX_OFFSET_RAD)
    kin = ArmKinematics()
    plan = arm_stop_plan(spec, max_offset, stops)
    check_plan_clearance(plan, kin, max_offset)
    cal = StopCalibrator(bus, spec, initial, plan=plan, kin=kin, log=log, **options)
    return cal.run(joints)
