"""Backend protocols: what a robot must offer, in physical units.

A *backend* is either MuJoCo (`robolearn.sim`) or real hardware (`robolearn.drivers`). Tasks and
the env only talk to these protocols, which is what makes `backend="sim"` -> `backend="real"`
the whole sim-to-real step. Units: radians, rad/s, metres, m/s, seconds (monotonic clock).

Time: `advance(dt)` is the one place time passes. The sim integrates physics for `dt`; a real
backend waits until `dt` has elapsed since the previous `advance` (the fixed-rate runtime loop
may do that waiting instead and call `advance(0)`). It returns the overrun in seconds (how late
the backend was for that period; always 0.0 in sim). A backend that waits in `advance` says so
with `paces_itself = True`: a runtime loop stepping it then takes the backend's overrun as the
tick's, since every tick ends at the backend's deadline, not before the loop's (runtime/loop.py,
through `RobotEnv.paces_itself`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np


# ----------------------------------------------------------------------------------- arm
@dataclass(frozen=True)
class ArmSpec:
    """Static description of an arm. Joint order is base -> wrist; the gripper is separate."""

    joint_names: tuple[str, ...]
    lower: np.ndarray            # rad, per joint
    upper: np.ndarray            # rad, per joint
    max_velocity: np.ndarray     # rad/s, per joint (servo no-load speed)
    gripper_closed: float        # gripper servo angle (rad) when fully closed
    gripper_open: float          # gripper servo angle (rad) when fully open

    @property
    def n_joints(self) -> int:
        return len(self.joint_names)


@dataclass(frozen=True)
class ArmState:
    q: np.ndarray                # joint positions, rad
    dq: np.ndarray               # joint velocities, rad/s
    gripper: float               # gripper servo angle, rad
    stamp: float                 # time.monotonic() (real) or sim time (s) when measured


@runtime_checkable
class Arm(Protocol):
    spec: ArmSpec

    def read(self) -> ArmState: ...
    def command(self, q: np.ndarray, gripper: float) -> None:
        """Absolute joint position targets (rad) and gripper target (rad)."""
    def advance(self, dt: float) -> float: ...
    def safe_stop(self) -> None:
        """Make the robot harmless now (torque off / hold). Must not raise."""
    def close(self) -> None: ...


# ----------------------------------------------------------------------------------- car
@dataclass(frozen=True)
class CarSpec:
    wheelbase: float             # m
    max_steer: float             # rad, symmetric steering limit
    max_speed: float             # m/s at full throttle on flat ground (informative)
    mass: float                  # kg


@dataclass(frozen=True)
class CarState:
    speed: float                 # m/s from wheel odometry (signed)
    odometer: float              # m travelled since reset (wheel odometry)
    accel: np.ndarray            # IMU linear acceleration, m/s^2, body frame (3,)
    gyro: np.ndarray             # IMU angular rate, rad/s, body frame (3,)
    steer: float                 # measured / commanded steering angle, rad
    battery_v: float             # volts
    stamp: float


@runtime_checkable
class Car(Protocol):
    spec: CarSpec

    def read(self) -> CarState: ...
    def command(self, steer: float, throttle: float) -> None:
        """Steering angle (rad) and throttle as a fraction of full ESC effort in [-1, 1]."""
    def advance(self, dt: float) -> float: ...
    def safe_stop(self) -> None:
        """Neutral throttle, straight wheels. Must not raise."""
    def close(self) -> None: ...


# -------------------------------------------------------------------------------- camera
@dataclass(frozen=True)
class Frame:
    image: np.ndarray            # uint8 HxWx3, RGB
    stamp: float                 # when the frame was captured


@runtime_checkable
class Camera(Protocol):
    name: str
    shape: tuple[int, int, int]  # (H, W, 3) of the frames `read` returns

    def read(self) -> Frame: ...
    def close(self) -> None: ...


@dataclass
class Backend:
    """A robot (arm or car) with its cameras: what a task is bound to.

    `privileged` is the simulator (an object with MuJoCo `model`/`data`) when the backend is
    simulated, and None on hardware: tasks may use it for ground-truth rewards and resets only
    when present, and must take a reward source / reset controller otherwise.
    """

    robot: Arm | Car
    cameras: dict[str, Camera] = field(default_factory=dict)
    privileged: object | None = None
    kind: str = "sim"            # "sim" | "real"
    #: an external pose source on hardware (`pose() -> pose or None`, `close()`): the car's
    #: motion capture / overhead camera (drivers/tracker.py); None in sim and without one
    tracker: object | None = None

    def close(self) -> None:
        for cam in self.cameras.values():
            cam.close()
        if self.tracker is not None:
            self.tracker.close()
        self.robot.close()
