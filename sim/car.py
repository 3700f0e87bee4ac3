"""Simulated 1/10-scale RC car on a walled track: the `Car` backend and simulator handle.

`CarSim` loads `assets/car.xml` (the car) and adds the track from a `Track` with MjSpec
(surface, walls, start line), so any track shape gets exact walls. It implements the `Car`
protocol in physical units and the simulator-handle contract (`model`, `data`, `n_substeps`,
`render(h, w)`). Wall contact (a MuJoCo contact sensor between the car and the `walls` body) is
sampled every few physics steps inside `advance`, so a short bounce off a wall is not missed
between two control steps.
"""
from __future__ import annotations

import math
from pathlib import Path

import mujoco
import numpy as np

from robolearn.errors import ConfigError, InvalidActionError
from robolearn.robot import Backend, CarSpec, CarState
from robolearn.sim.camera import SimCamera, new_renderer
from robolearn.sim.track import Track

ASSET = Path(__file__).with_name("assets") / "car.xml"
WHEELBASE = 0.26          # m, front to rear axle (car.xml)
TRACK_WIDTH = 0.20        # m, left to right wheel centres (car.xml)
WHEEL_RADIUS = 0.05       # m
MAX_STEER = 0.45          # rad, bicycle-equivalent steering limit
MAX_SPEED = 5.0           # m/s, no-load wheel speed at full throttle (100 rad/s * 0.05 m)
RIDE_HEIGHT = 0.04987     # m, chassis origin height at rest (wheels settled 0.13 mm into the floor)
HALF_LENGTH = 0.215       # m, bumper to car centre
HALF_WIDTH = 0.12         # m, outer tyre face to car centre
BATTERY_V = 7.4           # V, 2S LiPo (constant in sim)
WALL_COLOURS = ((0.85, 0.1, 0.1, 1.0), (0.95, 0.95, 0.95, 1.0))


def build_model(track: Track, timestep: float = 0.002, friction: float = 0.9) -> mujoco.MjModel:
    """The car of car.xml on `track`: asphalt surface, red/white walls, start line."""
    spec = mujoco.MjSpec.from_file(str(ASSET))
    spec.option.timestep = timestep
    world = spec.worldbody
    box = mujoco.mjtGeom.mjGEOM_BOX
    half = track.half_width
    # driving surface: thin visual boxes; neighbours alternate in height so that their
    # overlaps on arcs never render as coplanar faces (z-fighting)
    for i, (cx, cy, syaw, hl) in enumerate(track.strip_boxes(0.0, 0.15, 0.05)):
        top = 0.0006 + 0.0002 * (i % 2)
        world.add_geom(type=box, size=[hl, half, top / 2], pos=[cx, cy, top / 2], quat=_yaw_quat(syaw),
                       contype=0, conaffinity=0, rgba=[0.22, 0.22, 0.24, 1])
    x, y, yaw = track.point_at(0.0)
    world.add_geom(name="start_line", type=box, size=[0.03, half, 0.001], pos=[x, y, 0.001],
                   quat=_yaw_quat(yaw), contype=0, conaffinity=0, rgba=[1, 1, 1, 1])
    walls = spec.body("walls")
    for i, (cx, cy, wyaw, hl) in enumerate(track.wall_boxes()):
        walls.add_geom(name=f"wall{i}", type=box, size=[hl, track.wall_thickness / 2, track.wall_height / 2],
                       pos=[cx, cy, track.wall_height / 2], quat=_yaw_quat(wyaw),
                       contype=1, conaffinity=2, friction=[0.6, 0.005, 0.0001],
                       rgba=list(WALL_COLOURS[i % 2]))
    for g in spec.geoms:
        if g.name.startswith("wheel_") or g.name == "floor":
            g.friction = [friction, 0.005, 0.0001]
    return spec.compile()


def _number(name: str, value, lo: float, hi: float, unit: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}={value!r} is not a number") from None
    if not (math.isfinite(v) and lo <= v <= hi):
        raise ConfigError(f"{name}={value!r}: choose a value in [{lo:g}, {hi:g}] {unit}")
    return v


def _yaw_quat(yaw: float) -> list[float]:
    return [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]


class CarSim:
    """MuJoCo RC car. `command` takes a steering angle (rad) and throttle in [-1, 1];
    `advance(dt)` integrates physics; `read()` returns odometry and IMU.

    One control period is `n_substeps = max(1, round(1 / (control_hz * timestep)))` physics
    steps, so sim time per step is exact only when the period is a multiple of `timestep`.
    """

    def __init__(self, track: Track | None = None, control_hz: float = 20.0, timestep: float = 0.002,
                 friction: float = 0.9, contact_check_every: int = 5):
        timestep = _number("timestep", timestep, 1e-4, 0.01, "s")
        friction = _number("friction", friction, 0.05, 3.0, "(tyre friction coefficient)")
        control_hz = _number("control_hz", control_hz, 0.1, 1000.0, "Hz")
        if not isinstance(contact_check_every, int) or contact_check_every < 1:
            raise ConfigError(f"contact_check_every={contact_check_every!r}: must be an int >= 1 "
                              "(physics steps between wall-contact checks)")
        if track is not None and not isinstance(track, Track):
            raise ConfigError(f"track={track!r}: pass a robolearn.sim.track.Track (or None for the default)")
        self.track = track if track is not None else Track()
        self.model = build_model(self.track, float(timestep), float(friction))
        self.data = mujoco.MjData(self.model)
        m = self.model
        self.spec = CarSpec(wheelbase=WHEELBASE, max_steer=MAX_STEER, max_speed=MAX_SPEED,
                            mass=float(m.body_subtreemass[m.body("chassis").id]))
        self.timestep = float(m.opt.timestep)
        self.control_dt = 1.0 / float(control_hz)
        self.n_substeps = max(1, int(round(self.control_dt / self.timestep)))
        self.contact_check_every = int(contact_check_every)
        self._act = {n: m.actuator(n).id for n in ("steer_fl", "steer_fr", "motor_rl", "motor_rr")}
        self._sens = {n: int(m.sensor_adr[m.sensor(n).id]) for n in
                      ("accel", "gyro", "spin_rl_vel", "spin_rr_vel", "spin_rl_pos", "spin_rr_pos",
                       "steer_fl_pos", "steer_fr_pos", "wall_contact")}
        self._chassis = m.body("chassis").id
        self.half_width = HALF_WIDTH
        self.half_length = HALF_LENGTH
        self.wall_contact = False      # any wall contact during the last advance()
        self._odo0 = 0.0
        self._cache: tuple[float, CarState] | None = None
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}
        self._render_cam = mujoco.MjvCamera()
        self.reset_pose(*self.track.point_at(0.0)[:2], self.track.point_at(0.0)[2])

    # ------------------------------------------------------------------------ Car protocol
    def read(self) -> CarState:
        d = self.data
        if self._cache is not None and self._cache[0] == d.time:
            return self._cache[1]
        sd, a = d.sensordata, self._sens
        state = CarState(
            speed=0.5 * (sd[a["spin_rl_vel"]] + sd[a["spin_rr_vel"]]) * WHEEL_RADIUS,
            odometer=0.5 * (sd[a["spin_rl_pos"]] + sd[a["spin_rr_pos"]]) * WHEEL_RADIUS - self._odo0,
            accel=sd[a["accel"]:a["accel"] + 3].copy(),
            gyro=sd[a["gyro"]:a["gyro"] + 3].copy(),
            steer=0.5 * (sd[a["steer_fl_pos"]] + sd[a["steer_fr_pos"]]),
            battery_v=BATTERY_V,
            stamp=float(d.time),
        )
        self._cache = (d.time, state)
        return state

    def command(self, steer: float, throttle: float) -> None:
        """Bicycle steering angle (rad, + = left) -> Ackermann wheel angles; throttle -> motors."""
        if not (math.isfinite(steer) and math.isfinite(throttle)):
            raise InvalidActionError(f"car command steer={steer!r}, throttle={throttle!r} must be finite")
        if abs(steer) > MAX_STEER + 1e-9 or abs(throttle) > 1.0 + 1e-9:
            raise InvalidActionError(f"car command steer={steer:.3f} rad (limit +-{MAX_STEER}), "
                                     f"throttle={throttle:.3f} (limit +-1): scale the command")
        t = math.tan(steer)
        if abs(t) < 1e-9:
            left = right = 0.0
        else:
            radius = WHEELBASE / t            # signed turn radius of the rear-axle centre
            left = math.atan(WHEELBASE / (radius - TRACK_WIDTH / 2))
            right = math.atan(WHEELBASE / (radius + TRACK_WIDTH / 2))
        ctrl, a = self.data.ctrl, self._act
        ctrl[a["steer_fl"]] = left
        ctrl[a["steer_fr"]] = right
        ctrl[a["motor_rl"]] = throttle
        ctrl[a["motor_rr"]] = throttle

    def advance(self, dt: float) -> float:
        """Integrate `dt` seconds. For the control period it runs exactly `n_substeps` physics
        steps, so wrappers (control-rate jitter) may change `n_substeps` between calls."""
        n = self.n_substeps if dt == self.control_dt else max(1, int(round(dt / self.timestep)))
        m, d, k = self.model, self.data, self.contact_check_every
        sd, adr = d.sensordata, self._sens["wall_contact"]
        hit = False
        done = 0
        while done < n:
            j = min(k, n - done)
            mujoco.mj_step(m, d, j)
            done += j
            hit = hit or sd[adr] > 0.0
        self.wall_contact = hit
        return 0.0

    def safe_stop(self) -> None:
        try:
            self.data.ctrl[:] = 0.0
        except Exception:  # noqa: BLE001 - must not raise (called from close paths)
            pass

    def close(self) -> None:
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()

    # ------------------------------------------------------------------- simulator handle
    def reset_pose(self, x: float, y: float, yaw: float) -> None:
        """Put the car at rest at (x, y) heading `yaw`, wheels straight, odometer zeroed."""
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        d.qpos[0:3] = (x, y, RIDE_HEIGHT)
        d.qpos[3:7] = _yaw_quat(yaw)
        mujoco.mj_forward(m, d)
        self._odo0 = 0.0
        self._cache = None
        self.wall_contact = False

    def pose(self) -> tuple[float, float, float]:
        """Privileged (x, y, yaw) of the chassis origin (midway between the axles)."""
        q = self.data.qpos
        w, z = q[3], q[6]
        # yaw from the quaternion, exact for a car that is not rolled over
        yaw = math.atan2(2.0 * (w * z + q[4] * q[5]), 1.0 - 2.0 * (q[5] * q[5] + z * z))
        return float(q[0]), float(q[1]), yaw

    def upright(self) -> float:
        """z component of the chassis up axis (1 upright, < 0 upside down)."""
        return float(self.data.xmat[self._chassis][8])

    def render(self, height: int = 240, width: int = 320) -> np.ndarray:
        """Chase-camera view: behind and above the car, turning with its heading."""
        key = (int(height), int(width))
        r = self._renderers.get(key)
        fresh = r is None
        if fresh:
            r = self._renderers[key] = new_renderer(self.model, *key)
        x, y, yaw = self.pose()
        cam = self._render_cam
        cam.type = mujoco.mjtCamera.mjCAMERA_FREE
        cam.lookat[:] = (x + 0.6 * math.cos(yaw), y + 0.6 * math.sin(yaw), 0.0)
        cam.azimuth = math.degrees(yaw)
        cam.elevation = -28.0
        cam.distance = 2.4
        r.update_scene(self.data, camera=cam)
        if fresh:      # a new GL context's first frame is slightly off (see SimCamera.read)
            r.render()
        return r.render().copy()


def make_car_sim_backend(image_size: tuple[int, int] = (84, 84), camera: str | None = "front",
                         **kwargs) -> Backend:
    """A simulated car `Backend` with its first-person camera (`camera=None`: no camera)."""
    sim = CarSim(**kwargs)
    cams = {}
    if camera is not None:
        cams[camera] = SimCamera(sim.model, sim.data, camera, image_size)
    return Backend(robot=sim, cameras=cams, privileged=sim, kind="sim")
