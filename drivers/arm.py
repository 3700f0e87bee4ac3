"""`ServoArm`: the `Arm` protocol on a servo bus (joints in the sim arm's order, then gripper).

Why so thin: the bus handles bytes and failures, the calibration handles ticks <-> radians,
the safety supervisor handles limits; this class only wires them to the protocol so that a
task cannot tell it from `ArmSim`. One `read` is one sync read (position + speed of every
servo in one round trip) and one `command` one unacknowledged sync write, which is what
keeps a control tick to about a millisecond of bus time at 1 Mbaud. The bus's protocol module
(Feetech or Dynamixel) names the registers, so the same class drives both servo families.
"""
from __future__ import annotations

import time

import numpy as np

from robolearn.drivers.calibration import RAD_PER_TICK, Calibration
from robolearn.drivers.pacing import Pacer
from robolearn.drivers.safety import ArmSafety
from robolearn.drivers.servo_bus import ServoBus
from robolearn.errors import ConfigError, DeviceError
from robolearn.robot import ArmSpec, ArmState


class ServoArm:
    """Arm over a `ServoBus`. `calibration` must list the spec's joints then "gripper"."""

    paces_itself = True   # `advance` waits to the period deadline (robolearn/robot.py)

    def __init__(self, bus: ServoBus, spec: ArmSpec, calibration: Calibration,
                 safety: ArmSafety | None = None, write_limits: bool = True,
                 enable_torque: bool = True):
        self.bus = bus
        self.proto = bus.proto
        self.spec = spec
        names = list(spec.joint_names) + ["gripper"]
        if calibration.names != names:
            raise ConfigError(f"calibration lists servos {calibration.names}, the arm needs {names} "
                              "in that order")
        self.calibration = calibration
        self.cals = [calibration[n] for n in names]
        self.ids = calibration.ids
        self._dir = np.array([c.direction for c in self.cals], dtype=np.float64)
        g_range = (spec.gripper_closed, spec.gripper_open)
        self.safety = safety or ArmSafety(spec.joint_names, spec.lower, spec.upper,
                                          spec.max_velocity, gripper_range=g_range)
        self.safety.add_stop(self._torque_off)
        self.pacer = Pacer()
        self.torque_on = False
        self._closed = False
        self._check_range(names)
        missing = [sid for sid in self.ids if not bus.ping(sid)]
        if missing:
            raise DeviceError(
                f"servo ID(s) {missing} did not answer on {bus.port} (found: "
                f"{[s for s in self.ids if s not in missing]}). Check power, IDs and cabling; "
                "the calibration file says which ID each joint uses.")
        for c in self.cals:              # the frame the ticks were calibrated in (e.g. LeRobot's)
            if c.homing_offset is not None and bus.read_register(c.id, self.proto.HOMING_OFFSET) != c.homing_offset:
                bus.set_homing_offset(c.id, c.homing_offset)
        if write_limits:                 # EEPROM has limited write cycles: only when they differ
            for c in self.cals:
                if (bus.read_register(c.id, self.proto.MIN_LIMIT) != c.min
                        or bus.read_register(c.id, self.proto.MAX_LIMIT) != c.max):
                    bus.set_limits(c.id, c.min, c.max)
        if enable_torque:
            self.enable_torque()

    def _check_range(self, names):
        """The calibrated tick range must cover the spec's joint limits (else commands the
        task considers legal would be clamped by the servo firmware)."""
        lows = np.append(self.spec.lower, min(self.spec.gripper_closed, self.spec.gripper_open))
        highs = np.append(self.spec.upper, max(self.spec.gripper_closed, self.spec.gripper_open))
        for name, c, lo, hi in zip(names, self.cals, lows, highs):
            r_lo, r_hi = c.rad_range
            if lo < r_lo - 2 * RAD_PER_TICK or hi > r_hi + 2 * RAD_PER_TICK:
                raise ConfigError(
                    f"calibration of {name!r} covers [{r_lo:.3f}, {r_hi:.3f}] rad but the arm "
                    f"spec needs [{lo:.3f}, {hi:.3f}]: widen min/max ticks or re-calibrate")

    # ----------------------------------------------------------------------- torque
    def enable_torque(self) -> None:
        """Hold the present pose first, so enabling torque never jerks the arm."""
        present = self.bus.read_positions(self.ids)
        self.bus.write_positions(present)
        self.bus.set_torque(self.ids, True)
        self.torque_on = True

    def _torque_off(self) -> None:
        """Broadcast torque-off, twice (a corrupted packet is simply ignored by the servos)."""
        self.torque_on = False
        self.bus.broadcast_write(self.proto.TORQUE_ENABLE, 0)
        self.bus.broadcast_write(self.proto.TORQUE_ENABLE, 0)

    # ------------------------------------------------------------------ Arm protocol
    def read(self) -> ArmState:
        pos, vel_reg = self.proto.PRESENT_POSITION, self.proto.PRESENT_VELOCITY
        first, last = sorted((pos, vel_reg), key=lambda r: r.address)   # one contiguous block
        block = self.bus.sync_read_block(self.ids, first, last)
        stamp = time.monotonic()
        ticks = np.array([block[sid][pos.name] for sid in self.ids], dtype=np.float64)
        speed = np.array([block[sid][vel_reg.name] for sid in self.ids], dtype=np.float64)
        rad = np.array([c.to_rad(t) for c, t in zip(self.cals, ticks)])
        vel = self._dir * speed * self.proto.RAD_S_PER_VELOCITY_UNIT
        n = self.spec.n_joints
        self.safety.check_state(rad[:n], vel[:n], stamp, now=stamp)
        return ArmState(q=rad[:n], dq=vel[:n], gripper=float(rad[n]), stamp=stamp)

    def command(self, q: np.ndarray, gripper: float) -> None:
        q = np.asarray(q, dtype=np.float64)
        self.safety.check_command(q, float(gripper))
        if not self.torque_on:
            raise DeviceError("arm torque is off (after safe_stop or e-stop): call "
                              "enable_torque() once the arm is clear")
        targets = np.append(q, float(gripper))
        ticks = {c.id: int(np.clip(c.to_ticks(t), c.min, c.max)) for c, t in zip(self.cals, targets)}
        self.bus.write_positions(ticks)

    def advance(self, dt: float) -> float:
        return self.pacer.advance(dt)

    def safe_stop(self) -> None:
        """Torque off on every servo. Never raises (an unplugged bus is already limp)."""
        try:
            self._torque_off()
        except Exception:  # noqa: BLE001 - must not raise
            pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.safe_stop()
        self.bus.close()
