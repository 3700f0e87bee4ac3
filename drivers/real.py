"""Real-hardware backends: what tasks call when `backend="real"`.

    make_arm_backend(port, camera=None, image_size=(84, 84), calibration=None, ...) -> Backend
    make_car_backend(port, camera=None, image_size=(84, 84), ...) -> Backend

Both return `Backend(kind="real", privileged=None)`: no simulator, so tasks take their reward
from kinematics (arm reach) or a `RewardSource`. `camera` is None, one source (device index,
URL or video file; named "front") or a dict {name: source}.
"""
from __future__ import annotations

import sys
from pathlib import Path

from robolearn.errors import ConfigError
from robolearn.robot import ArmSpec, Backend, CarSpec


def _cameras(camera, image_size, camera_options: dict | None) -> dict:
    from robolearn.drivers.camera import OpenCVCamera

    if camera is None:
        return {}
    sources = camera if isinstance(camera, dict) else {"front": camera}
    cams = {}
    try:
        for name, src in sources.items():
            cams[name] = OpenCVCamera(src, name=name, image_size=image_size, **(camera_options or {}))
    except Exception:
        for c in cams.values():
            c.close()
        raise
    return cams


def default_arm_spec() -> ArmSpec:
    """The sim arm's spec (same joint order and limits), read from its MJCF."""
    from robolearn.sim.arm import arm_spec, load_arm_model

    return arm_spec(load_arm_model())


def default_car_spec() -> CarSpec:
    """The sim car's geometry and limits (mass nominal: the real car is weighed, not modelled)."""
    try:
        from robolearn.sim.car import MAX_SPEED, MAX_STEER, WHEELBASE
        return CarSpec(wheelbase=WHEELBASE, max_steer=MAX_STEER, max_speed=MAX_SPEED, mass=4.0)
    except ImportError:
        from robolearn.drivers.emulator_car import DEFAULT_SPEC
        return DEFAULT_SPEC


BUS_PROTOCOLS = ("feetech", "dynamixel")


def bus_protocol(name: str):
    """The packet module of a servo-bus protocol name ("feetech" or "dynamixel")."""
    if name == "feetech":
        from robolearn.drivers import feetech
        return feetech
    if name == "dynamixel":
        from robolearn.drivers import dynamixel
        return dynamixel
    raise ConfigError(f"protocol={name!r}: choose one of {list(BUS_PROTOCOLS)} (Feetech STS3215 arms "
                      "such as SO-100, or Dynamixel Protocol 2.0 arms such as Koch)")


def _load_calibration(path, names, protocol: str, spec):
    """robolearn's calibration JSON, or LeRobot's converted (IDs 1..n, directions +1)."""
    from robolearn.drivers.calibration import Calibration
    from robolearn.drivers.lerobot_calibration import calibration_from_lerobot, is_lerobot_calibration
    from robolearn.jsonfile import read_json

    raw = read_json(Path(path), ConfigError,
                    f"calibration file {path} not found: run the calibration procedure "
                    "(docs/drivers.md) or pass calibration=None for defaults",
                    corrupt="run the calibration again or restore the file")
    if is_lerobot_calibration(raw):
        cal, notes = calibration_from_lerobot(str(path), protocol, spec=spec)
        for line in notes:
            print(f"calibration {path}: {line}", file=sys.stderr)
        return cal
    return Calibration.from_dict(raw, source=str(path), required=names)


def make_arm_backend(port: str, camera=None, image_size=(84, 84), calibration=None,
                     baudrate: int = 1_000_000, spec: ArmSpec | None = None,
                     timeout: float = 0.02, retries: int = 2, write_limits: bool = True,
                     safety_options: dict | None = None, camera_options: dict | None = None,
                     protocol: str = "feetech", **kw) -> Backend:
    """Servo arm on `port`. calibration: None (horns at centre tick), a JSON path (robolearn's
    format, or a LeRobot `MotorCalibration` file, converted for `protocol`: drivers/
    lerobot_calibration.py) or a `Calibration`. safety_options: kwargs for `ArmSafety` (tolerance, velocity_margin,
    workspace, stale_after). protocol: "feetech" (STS3215, SO-100 class) or "dynamixel"
    (Protocol 2.0 X-series, Koch class)."""
    from robolearn.drivers.arm import ServoArm
    from robolearn.drivers.calibration import Calibration
    from robolearn.drivers.safety import ArmSafety
    from robolearn.drivers.servo_bus import ServoBus

    if kw:
        raise ConfigError(f"unknown real arm option(s) {sorted(kw)}; accepted: calibration, baudrate, "
                          "spec, timeout, retries, write_limits, safety_options, camera_options, protocol")
    proto = bus_protocol(protocol)
    if not port:
        raise ConfigError("backend='real' needs port= (the servo bus, e.g. /dev/ttyACM0)")
    spec = spec or default_arm_spec()
    names = list(spec.joint_names) + ["gripper"]
    g_lo, g_hi = sorted((spec.gripper_closed, spec.gripper_open))
    if calibration is None:
        cal = Calibration.default(names, list(spec.lower) + [g_lo], list(spec.upper) + [g_hi])
    elif isinstance(calibration, Calibration):
        cal = Calibration.from_dict(calibration.to_dict(), source="<Calibration>", required=names)
    elif isinstance(calibration, (str, Path)):
        cal = _load_calibration(calibration, names, protocol, spec)
    else:
        raise ConfigError(f"calibration={calibration!r}: give None, a JSON file path or a Calibration")
    safety = ArmSafety(spec.joint_names, spec.lower, spec.upper, spec.max_velocity,
                       gripper_range=(g_lo, g_hi), **(safety_options or {}))
    bus = ServoBus(port, baudrate=baudrate, timeout=timeout, retries=retries, protocol=proto)
    try:
        arm = ServoArm(bus, spec, cal, safety=safety, write_limits=write_limits)
    except Exception:
        bus.close()
        raise
    try:
        cams = _cameras(camera, image_size, camera_options)
    except Exception:
        arm.close()
        raise
    return Backend(robot=arm, cameras=cams, privileged=None, kind="real")


def make_car_backend(port: str, camera=None, image_size=(84, 84), baudrate: int = 115_200,
                     timeout_ms: int | None = None, telemetry_period_ms: int | None = None,
                     spec: CarSpec | None = None, max_throttle: float = 1.0,
                     stale_after: float = 0.25, camera_options: dict | None = None,
                     tracker: str | None = None, tracker_stale_after: float = 0.15,
                     tracker_lost_after: float = 10.0, write_timeout: float = 0.5,
                     write_retries: int = 2, **kw) -> Backend:
    """Car controller on `port`. timeout_ms: firmware failsafe (no command -> neutral);
    max_throttle: cap enforced by the safety supervisor; stale_after: telemetry watchdog (s);
    tracker: URL of an external pose tracker's NDJSON stream (drivers/tracker.py), whose pose
    gives the task its lap progress; tracker_stale_after: s without a frame that count as a
    dropout (reward missing, car braked); tracker_lost_after: s without any frame that end the
    run (a tracker gone, not late); write_timeout / write_retries: a serial write that takes no
    bytes this long is written again this many times before the controller counts as
    disconnected."""
    from robolearn.drivers import car_protocol as cp
    from robolearn.drivers.car import SerialCar
    from robolearn.drivers.safety import CarSafety

    if kw:
        raise ConfigError(f"unknown real car option(s) {sorted(kw)}; accepted: baudrate, timeout_ms, "
                          "telemetry_period_ms, spec, max_throttle, stale_after, camera_options, "
                          "tracker, tracker_stale_after, tracker_lost_after, write_timeout, write_retries")
    if not port:
        raise ConfigError("backend='real' needs port= (the car controller, e.g. /dev/ttyACM0)")
    spec = spec or default_car_spec()
    timeout_ms = cp.DEFAULT_TIMEOUT_MS if timeout_ms is None else int(timeout_ms)
    period = cp.DEFAULT_TELEMETRY_PERIOD_MS if telemetry_period_ms is None else int(telemetry_period_ms)
    if not 10 <= timeout_ms <= 5000:
        raise ConfigError(f"timeout_ms={timeout_ms}: choose 10..5000 ms (the failsafe delay)")
    if not 1 <= period <= 1000:
        raise ConfigError(f"telemetry_period_ms={period}: choose 1..1000 ms")
    if not 0 < max_throttle <= 1:
        raise ConfigError(f"max_throttle={max_throttle}: choose a cap in (0, 1]")
    safety = CarSafety(max_steer=spec.max_steer, max_throttle=max_throttle, stale_after=stale_after)
    car = SerialCar(port, spec, baudrate=baudrate, timeout_ms=timeout_ms,
                    telemetry_period_ms=period, safety=safety, write_timeout=write_timeout,
                    write_retries=write_retries)
    cams, pose_tracker = {}, None
    try:
        cams = _cameras(camera, image_size, camera_options)
        if tracker is not None:
            from robolearn.drivers.tracker import PoseTracker

            pose_tracker = PoseTracker(tracker, stale_after=tracker_stale_after,
                                       lost_after=tracker_lost_after)
    except Exception:
        for c in cams.values():
            c.close()
        car.close()
        raise
    return Backend(robot=car, cameras=cams, privileged=None, kind="real", tracker=pose_tracker)
