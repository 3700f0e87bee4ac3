"""An emulated *reality*: the ways a real robot differs from the simulator it was trained in.

Why: an emulator that runs the training model itself has no reality gap, so nothing about
transfer is tested. A reality file (TOML, `[arm]`, `[car]`, `[camera]` tables, see
launch/reality/) changes the emulator's plant only (the env and the driver never read it):
masses, friction, servo gain / speed / deadband / backlash, per-joint calibration offsets,
sensor noise and latency for the arm; motor gain, tyre friction, steering offset and battery
sag for the car; camera pose / field of view / lighting / colours for the rendered cameras;
the external pose tracker's rate, noise, latency and dropouts for the car (`[tracker]`).

Model parameters are written with `sim.randomization.apply_model_values` (the code domain
randomization uses); what lives between the wire and the physics (offsets, deadband, backlash,
latency, noise, sag) is a plant wrapper here, so the emulator's wire code is unchanged.
"""
from __future__ import annotations

import collections
import dataclasses
import math
import os
from dataclasses import dataclass, field

import numpy as np

from robolearn.configs import check_keys, read_toml
from robolearn.errors import ConfigError


def _num(where: str, value, lo: float = -math.inf, hi: float = math.inf) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{where}={value!r}: give a number")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}={value!r}: give a number") from None
    if not (math.isfinite(v) and lo <= v <= hi):
        raise ConfigError(f"{where}={value!r}: choose a value in [{lo:g}, {hi:g}]")
    return v


def _vec(where: str, value, n: int | tuple[int, ...], lo=-math.inf, hi=math.inf) -> list[float]:
    sizes = (n,) if isinstance(n, int) else n
    if not isinstance(value, (list, tuple)) or len(value) not in sizes:
        raise ConfigError(f"{where}={value!r}: give a list of {' or '.join(map(str, sizes))} numbers")
    return [_num(f"{where}[{i}]", v, lo, hi) for i, v in enumerate(value)]


@dataclass
class ArmReality:
    """The servo arm as built (1.0 / 0 = exactly the training sim)."""

    link_mass_scale: float = 1.0      # x mass of every arm link
    cube_mass_scale: float = 1.0      # x mass of the cube
    friction_scale: float = 1.0       # x sliding friction of every geom
    servo_gain_scale: float = 1.0     # x servo position gain (stiffness of the PD loop)
    max_speed_scale: float = 1.0      # x servo no-load speed
    damping_scale: float = 1.0        # x joint damping
    deadband_rad: float = 0.0         # servo ignores goal errors below this
    backlash_rad: float = 0.0         # gear play: the output lags direction reversals by this
    joint_offsets_rad: list = field(default_factory=lambda: [0.0] * 6)  # reads this much more than true
    sensor_noise_rad: float = 0.0     # std of position read noise
    latency_ms: float = 0.0           # goal positions take effect this late

    def __post_init__(self):
        for name in ("link_mass_scale", "cube_mass_scale", "friction_scale", "servo_gain_scale",
                     "max_speed_scale", "damping_scale"):
            setattr(self, name, _num(f"arm.{name}", getattr(self, name), 0.05, 20.0))
        for name in ("deadband_rad", "backlash_rad", "sensor_noise_rad"):
            setattr(self, name, _num(f"arm.{name}", getattr(self, name), 0.0, 0.5))
        self.latency_ms = _num("arm.latency_ms", self.latency_ms, 0.0, 1000.0)
        offs = _vec("arm.joint_offsets_rad", self.joint_offsets_rad, (5, 6), -0.5, 0.5)
        self.joint_offsets_rad = offs + [0.0] * (6 - len(offs))


@dataclass
class CarReality:
    """The RC car as built."""

    motor_gain: float = 1.0           # x motor torque per unit throttle
    tyre_friction_scale: float = 1.0  # x tyre/floor friction
    steering_offset_rad: float = 0.0  # wheels point this far left at "straight"
    battery_sag_v: float = 0.0        # volts lost per unit |throttle| (less torque, lower reading)
    sensor_noise: float = 0.0         # std of speed (m/s) and gyro (rad/s) noise
    latency_ms: float = 0.0           # commands take effect this late

    def __post_init__(self):
        self.motor_gain = _num("car.motor_gain", self.motor_gain, 0.05, 5.0)
        self.tyre_friction_scale = _num("car.tyre_friction_scale", self.tyre_friction_scale, 0.05, 3.0)
        self.steering_offset_rad = _num("car.steering_offset_rad", self.steering_offset_rad, -0.3, 0.3)
        self.battery_sag_v = _num("car.battery_sag_v", self.battery_sag_v, 0.0, 5.0)
        self.sensor_noise = _num("car.sensor_noise", self.sensor_noise, 0.0, 2.0)
        self.latency_ms = _num("car.latency_ms", self.latency_ms, 0.0, 1000.0)


@dataclass
class CameraReality:
    """Every rendered camera of the model, as mounted and lit in the real room."""

    pos_offset_m: list = field(default_factory=lambda: [0.0, 0.0, 0.0])  # + camera position
    rot_deg: float = 0.0              # rotation about rot_axis (camera frame)
    rot_axis: list = field(default_factory=lambda: [1.0, 0.0, 0.0])
    fovy_scale: float = 1.0           # x vertical field of view
    light_scale: float = 1.0          # x every light's (and the headlight's) diffuse colour
    tint: list = field(default_factory=lambda: [1.0, 1.0, 1.0])  # x RGB of every geom colour
    size: list = field(default_factory=lambda: [84, 84])  # served image (height, width)
    fps: float = 30.0                 # frames served per second
    quality: int = 90                 # JPEG quality

    def __post_init__(self):
        self.pos_offset_m = _vec("camera.pos_offset_m", self.pos_offset_m, 3, -0.5, 0.5)
        self.rot_deg = _num("camera.rot_deg", self.rot_deg, -90.0, 90.0)
        self.rot_axis = _vec("camera.rot_axis", self.rot_axis, 3)
        if np.linalg.norm(self.rot_axis) < 1e-9:
            raise ConfigError("camera.rot_axis must not be zero")
        self.fovy_scale = _num("camera.fovy_scale", self.fovy_scale, 0.2, 3.0)
        self.light_scale = _num("camera.light_scale", self.light_scale, 0.0, 5.0)
        self.tint = _vec("camera.tint", self.tint, 3, 0.0, 3.0)
        self.size = [int(v) for v in _vec("camera.size", self.size, 2, 8, 1024)]
        self.fps = _num("camera.fps", self.fps, 0.5, 240.0)
        self.quality = int(_num("camera.quality", self.quality, 1, 100))


@dataclass
class TrackerReality:
    """The external pose tracker watching the car (motion capture or an overhead camera):
    how often it publishes, how wrong, how late, and how often it loses the car. The defaults
    are a modest lab system (an overhead camera with a fiducial on the car)."""

    rate_hz: float = 60.0             # poses published per second
    noise_xy_m: float = 0.015         # std of the position noise (each axis)
    noise_yaw_deg: float = 1.0        # std of the heading noise
    latency_ms: list = field(default_factory=lambda: [30.0, 50.0])   # capture -> sent, uniform
    dropout_per_s: float = 0.02       # spontaneous losses of the car per second (occlusion)
    dropout_s: list = field(default_factory=lambda: [0.2, 1.0])      # length of one, uniform

    def __post_init__(self):
        self.rate_hz = _num("tracker.rate_hz", self.rate_hz, 1.0, 1000.0)
        self.noise_xy_m = _num("tracker.noise_xy_m", self.noise_xy_m, 0.0, 1.0)
        self.noise_yaw_deg = _num("tracker.noise_yaw_deg", self.noise_yaw_deg, 0.0, 45.0)
        self.latency_ms = _vec("tracker.latency_ms", self.latency_ms, 2, 0.0, 2000.0)
        self.dropout_per_s = _num("tracker.dropout_per_s", self.dropout_per_s, 0.0, 10.0)
        self.dropout_s = _vec("tracker.dropout_s", self.dropout_s, 2, 0.0, 60.0)
        for name in ("latency_ms", "dropout_s"):
            lo, hi = getattr(self, name)
            if lo > hi:
                raise ConfigError(f"tracker.{name}={[lo, hi]}: give [low, high] with low <= high")


@dataclass
class Reality:
    arm: ArmReality = field(default_factory=ArmReality)
    car: CarReality = field(default_factory=CarReality)
    camera: CameraReality = field(default_factory=CameraReality)
    tracker: TrackerReality = field(default_factory=TrackerReality)
    source: str = "<default: no reality gap>"

    @classmethod
    def from_dict(cls, data: dict, source: str = "reality") -> "Reality":
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: a reality is a table with [arm], [car], [camera], [tracker]")
        parts = {"arm": ArmReality, "car": CarReality, "camera": CameraReality,
                 "tracker": TrackerReality}
        check_keys(data, parts, source)
        kwargs = {}
        for name, sub in data.items():
            if not isinstance(sub, dict):
                raise ConfigError(f"{source}: [{name}] must be a table, got {sub!r}")
            check_keys(sub, {f.name for f in dataclasses.fields(parts[name])}, f"{source} [{name}]")
            kwargs[name] = parts[name](**sub)
        return cls(**kwargs, source=source)

    @classmethod
    def from_toml(cls, path) -> "Reality":
        data = read_toml(path, what="reality file", example="launch/reality/mild.toml")
        return cls.from_dict(data, source=str(path))


def load_reality(value) -> Reality:
    """A `Reality` from None (no gap), a Reality, a dict, a TOML path, or a shipped name
    ("mild", "hard": launch/reality/NAME.toml)."""
    if value is None:
        return Reality()
    if isinstance(value, Reality):
        return value
    if isinstance(value, dict):
        return Reality.from_dict(value)
    if isinstance(value, (str, os.PathLike)):
        path = str(value)
        if path in SHIPPED:
            path = shipped_path(path)
        return Reality.from_toml(path)
    raise ConfigError(f"reality={value!r}: give a TOML path, 'mild', 'hard', a dict or None")


SHIPPED = ("mild", "hard")


def shipped_path(name: str) -> str:
    """launch/reality/NAME.toml of this checkout (the repository root is two levels up)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(root, "launch", "reality", f"{name}.toml")


# ----------------------------------------------------------------------- model parameters
def _apply_camera(model, cam: CameraReality, values: dict) -> None:
    if model.ncam:
        values["camera_pos_add"] = np.tile(np.asarray(cam.pos_offset_m, float), (model.ncam, 1))
        axis = np.asarray(cam.rot_axis, float) / np.linalg.norm(cam.rot_axis)
        values["camera_rot_deg"] = np.full(model.ncam, cam.rot_deg)
        values["camera_rot_axis"] = np.tile(axis, (model.ncam, 1))
    values["light_diffuse_scale"] = np.full(model.nlight + 1, cam.light_scale)


def _finish(model, data, values: dict, cam: CameraReality) -> None:
    from robolearn.sim.randomization import apply_model_values, nominal_model_values, set_const

    apply_model_values(model, nominal_model_values(model), values)
    model.cam_fovy[:] = model.cam_fovy * cam.fovy_scale
    model.geom_rgba[:, :3] = np.clip(model.geom_rgba[:, :3] * np.asarray(cam.tint), 0.0, 1.0)
    model.mat_rgba[:, :3] = np.clip(model.mat_rgba[:, :3] * np.asarray(cam.tint), 0.0, 1.0)
    set_const(model, data)


def apply_arm_model(sim, reality: Reality) -> None:
    """Write the arm reality's physical and visual parameters into an `ArmSim`'s model."""
    import mujoco

    m, a = sim.model, reality.arm
    cube = m.body("cube").id
    arm_root = m.body_rootid[m.body(m.jnt_bodyid[m.joint("shoulder_pan").id]).id]
    mass = np.where(m.body_rootid == arm_root, a.link_mass_scale, 1.0)   # the arm's links only
    mass[cube] = a.cube_mass_scale
    values = {"mass_scale": mass, "friction_scale": np.full(m.ngeom, a.friction_scale),
              "actuator_gain_scale": np.full(m.nu, a.servo_gain_scale),
              "joint_damping_scale": np.full(m.nv, a.damping_scale)}
    _apply_camera(m, reality.camera, values)
    m.actuator_ctrlrange[:] = m.actuator_ctrlrange * a.max_speed_scale
    _finish(m, sim.data, values, reality.camera)
    mujoco.mj_forward(m, sim.data)


def apply_car_model(sim, reality: Reality) -> None:
    """Write the car reality's parameters (motor gain, tyre friction, camera) into a `CarSim`."""
    m, c = sim.model, reality.car
    values = {"actuator_gain_scale": np.ones(m.nu)}
    for name in ("motor_rl", "motor_rr"):
        values["actuator_gain_scale"][m.actuator(name).id] = c.motor_gain
    fr = np.ones(m.ngeom)
    for g in range(m.ngeom):
        nm = m.geom(g).name
        if nm.startswith("wheel_") or nm == "floor":
            fr[g] = c.tyre_friction_scale
    values["friction_scale"] = fr
    _apply_camera(m, reality.camera, values)
    _finish(m, sim.data, values, reality.camera)


# ------------------------------------------------------------------------- plant wrappers
class _Delay:
    """Values take effect `delay` seconds of plant time after they were given."""

    def __init__(self, delay_s: float, initial):
        self.delay, self.t = float(delay_s), 0.0
        self._queue: collections.deque = collections.deque()
        self.current = initial

    def __call__(self, value, dt: float):
        self.t += dt
        if self.delay <= 0:
            self.current = value
            return value
        self._queue.append((self.t + self.delay, value))
        while self._queue and self._queue[0][0] <= self.t + 1e-12:
            self.current = self._queue.popleft()[1]
        return self.current


class RealArmPlant:
    """An `ArmSimPlant` as the built arm: calibration offsets, latency, backlash, deadband and
    read noise between the servo's goal register and the physics."""

    def __init__(self, plant, reality: Reality, seed: int = 0):
        self.inner, self.reality = plant, reality
        a = reality.arm
        apply_arm_model(plant.sim, reality)
        self.sim = plant.sim
        self.names, self.lower, self.upper, self.vmax = plant.names, plant.lower, plant.upper, plant.vmax
        self.offsets = np.asarray(a.joint_offsets_rad[:len(self.names)], float)
        self.rng = np.random.default_rng(seed)
        self._true_goal = plant.q.copy()
        self._delay = _Delay(a.latency_ms / 1000.0, plant.q.copy())
        self._play = plant.q.copy()           # output-side goal after backlash
        self.q = plant.q + self.offsets

    def step(self, goal: np.ndarray, torque: np.ndarray, dt: float):
        a = self.reality.arm
        goal = self._delay(np.asarray(goal, float) - self.offsets, dt)
        if a.backlash_rad > 0:                # play operator: reversals eat half the play each way
            half = a.backlash_rad / 2
            self._play = np.clip(self._play, goal - half, goal + half)
            goal = self._play
        if a.deadband_rad > 0:
            q_true = self.inner.q
            goal = np.where(np.abs(goal - q_true) < a.deadband_rad, q_true, goal)
        q, dq, load = self.inner.step(goal, torque, dt)
        meas = q + self.offsets
        if a.sensor_noise_rad > 0:
            meas = meas + self.rng.normal(0.0, a.sensor_noise_rad, size=meas.shape)
        self.q = meas
        return meas, dq, load

    def true_positions(self) -> np.ndarray:
        return self.inner.q.copy()

    def close(self):
        self.inner.close()


class RealCarPlant:
    """A `CarSim` as the built car: steering offset, battery sag, latency and sensor noise
    around the physics (motor gain and tyre friction are in the model)."""

    def __init__(self, sim, reality: Reality, seed: int = 0):
        apply_car_model(sim, reality)
        self.inner, self.reality = sim, reality
        self.spec = sim.spec
        self.rng = np.random.default_rng(seed)
        self._delay = _Delay(reality.car.latency_ms / 1000.0, (0.0, 0.0))
        self._cmd = (0.0, 0.0)
        self._applied_throttle = 0.0

    def __getattr__(self, name):              # pose(), track, model, data, ... of the sim
        return getattr(self.inner, name)

    def command(self, steer: float, throttle: float) -> None:
        self._cmd = (float(steer), float(throttle))

    def advance(self, dt: float) -> float:
        c = self.reality.car
        steer, throttle = self._delay(self._cmd, dt)
        from robolearn.sim.car import BATTERY_V, MAX_STEER

        steer = float(np.clip(steer + c.steering_offset_rad, -MAX_STEER, MAX_STEER))
        throttle = float(np.clip(throttle * (1.0 - c.battery_sag_v * abs(throttle) / BATTERY_V), -1, 1))
        self._applied_throttle = throttle
        self.inner.command(steer, throttle)
        return self.inner.advance(dt)

    def read(self):
        st = self.inner.read()
        c = self.reality.car
        noise = self.rng.normal(0.0, c.sensor_noise, size=4) if c.sensor_noise > 0 else np.zeros(4)
        return dataclasses.replace(st, speed=st.speed + noise[0], gyro=np.asarray(st.gyro) + noise[1:],
                                   battery_v=st.battery_v - c.battery_sag_v * abs(self._applied_throttle))

    def safe_stop(self) -> None:
        self._cmd = (0.0, 0.0)
        self.inner.safe_stop()

    def close(self) -> None:
        self.inner.close()
