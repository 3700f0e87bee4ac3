"""Leader-arm teleop: a second servo-bus arm, moved by hand, that the robot follows.

Why: joint-space teleop with a kinematic replica is the most natural way to demonstrate
manipulation (ALOHA, SO-100/LeRobot). The leader's servos are read through the same Feetech
driver as the follower (`robolearn.drivers.servo_bus`) with torque off, converted to radians
with its own calibration file, and turned into the env's normalised action:

- `action_mode="joint"`: a[:5] = (q_leader - q_commanded) / JOINT_STEP, clipped to [-1, 1]
  (the follower tracks the leader at up to JOINT_STEP rad per control step);
- `action_mode="ee_delta"`: the leader's end-effector position (forward kinematics) is the
  target: a[:3] = (fk(q_leader) - ee_commanded) / EE_STEP;
- the gripper dim is absolute: the leader's gripper angle mapped linearly from the follower's
  closed..open range to -1..+1.

The leader is always "engaged" (a human holding it is driving).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robolearn.errors import ConfigError, DeviceError
from robolearn.teleop.base import DeviceCommand, DeviceNotFoundError


@dataclass
class LeaderArmConfig:
    port: str | None = None          # serial port of the leader's servo bus, e.g. /dev/ttyACM1
    calibration: str | None = None   # leader calibration JSON; None: default mounting (centre ticks)
    baudrate: int = 1_000_000
    timeout: float = 0.02


class LeaderArmDevice:
    name = "leader"

    def __init__(self, env, config: LeaderArmConfig | None = None):
        self.config = cfg = config or LeaderArmConfig()
        task = getattr(env.unwrapped, "task", None)
        if task is None or not hasattr(task, "action_mode") or not hasattr(task, "kin"):
            raise ConfigError("the leader arm drives the arm envs (robolearn/Arm*-v0) only")
        if cfg.port is None:
            raise DeviceNotFoundError("leader arm needs the serial port of its servo bus: "
                                      "--leader-port /dev/ttyACM1 (ls /dev/ttyACM* /dev/ttyUSB*)")
        from robolearn.drivers.calibration import Calibration
        from robolearn.drivers.servo_bus import ServoBus
        from robolearn.tasks import arm as arm_task

        self.task = task
        self._arm = arm_task
        spec = task.spec
        names = list(spec.joint_names) + ["gripper"]
        if cfg.calibration:
            self.calibration = Calibration.load(cfg.calibration, required=names)
        else:
            lower = list(spec.lower) + [min(spec.gripper_closed, spec.gripper_open)]
            upper = list(spec.upper) + [max(spec.gripper_closed, spec.gripper_open)]
            self.calibration = Calibration.default(names, lower, upper)
        self.names = names
        self.ids = [self.calibration[n].id for n in names]
        try:
            self.bus = ServoBus(cfg.port, baudrate=cfg.baudrate, timeout=cfg.timeout)
        except DeviceError as exc:
            raise DeviceNotFoundError(f"leader arm: {exc}") from None
        try:
            self.bus.set_torque(self.ids, False)   # limp, so a human can move it
        except DeviceError:
            self.bus.close()
            raise
        self._g_closed = float(spec.gripper_closed)
        self._g_span = float(spec.gripper_open - spec.gripper_closed)

    def read_joints(self) -> tuple[np.ndarray, float]:
        """Leader joint angles (rad, follower convention) and gripper angle (rad)."""
        ticks = self.bus.read_positions(self.ids)
        rad = np.array([float(self.calibration[n].to_rad(ticks[self.calibration[n].id])) for n in self.names])
        return rad[:-1], float(rad[-1])

    def action_from(self, q: np.ndarray, gripper: float) -> np.ndarray:
        t = self.task
        if t.action_mode == "joint":
            move = (q - t.q_cmd) / self._arm.JOINT_STEP
        else:
            move = (t.kin.fk(q) - t.ee_cmd) / self._arm.EE_STEP
        g = 2.0 * (gripper - self._g_closed) / self._g_span - 1.0
        return np.clip(np.append(move, g), -1.0, 1.0).astype(np.float32)

    def read(self, obs=None) -> DeviceCommand:
        q, g = self.read_joints()
        return DeviceCommand(self.action_from(q, g), True, set())

    def reset(self) -> None:
        pass

    def help(self) -> str:
        return (f"leader arm on {self.config.port}: move it by hand, the robot follows "
                f"({self.task.action_mode} actions); Ctrl-C stops")

    def close(self) -> None:
        self.bus.close()
