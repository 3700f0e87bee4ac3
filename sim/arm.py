"""MuJoCo backend of the 5-DoF servo arm: `ArmSim` (the `Arm` protocol + simulator handle) and
`SimCamera` (the `Camera` protocol).

Why a rate-limited set-point: hobby servos move toward a goal at no more than their no-load
speed. The model's actuators (`sim/assets/arm.xml`) are `intvelocity` servos: `ArmSim` turns an
absolute joint target into a set-point velocity clipped to the servo speed, integrated by MuJoCo
and tracked by a torque-limited PD loop. A policy that jumps its target therefore sees the same
lag a real arm shows, and one `mj_step(nstep=n)` call covers a whole control period (the env
step is the hot path; no Python runs per physics sub-step).
"""
from __future__ import annotations

import math
import os

# Headless by default: offscreen EGL unless the user chose a GL backend (must precede `import mujoco`).
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from robolearn.errors import ConfigError, InvalidActionError, SafetyError  # noqa: E402
from robolearn.robot import ArmSpec, ArmState, Backend, Frame  # noqa: E402
from robolearn.sim.camera import new_renderer  # noqa: E402

ASSET_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")
ARM_XML = os.path.join(ASSET_DIR, "arm.xml")

JOINT_NAMES = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
CAMERA_NAMES = ("wrist", "front")
#: finger travel (m) per radian of gripper servo angle (the rack of the parallel gripper)
GRIPPER_M_PER_RAD = 0.0125
#: joint targets may exceed the range by this much (float noise) before `command` refuses them
LIMIT_TOLERANCE = 1e-6
#: default physics step (s); the control period is split into an integer number of these
DEFAULT_TIMESTEP = 0.002


def load_arm_model(path: str | None = None) -> mujoco.MjModel:
    """Compile the arm MJCF (the default asset unless `path` is given)."""
    path = path or ARM_XML
    if not os.path.exists(path):
        raise ConfigError(f"arm model {path!r} not found; pass an existing MJCF file")
    return mujoco.MjModel.from_xml_path(path)


def _check_layout(m: mujoco.MjModel, path: str) -> None:
    """The fast paths index qpos/qvel/act by position: check the MJCF keeps that layout."""
    try:
        qadr = [int(m.jnt_qposadr[m.joint(n).id]) for n in JOINT_NAMES]
        vadr = [int(m.jnt_dofadr[m.joint(n).id]) for n in JOINT_NAMES]
        acts = [m.actuator(n).id for n in JOINT_NAMES + ("gripper",)]
        m.joint("finger_left"), m.joint("finger_right"), m.joint("cube"), m.body("target"), m.site("ee")
    except KeyError as exc:
        raise ConfigError(f"{path}: the arm model lacks {exc}; it needs joints {JOINT_NAMES}, "
                          "finger_left/right, cube, actuators per joint + gripper, body target, site ee") from None
    ok = (qadr == list(range(5)) and vadr == list(range(5)) and acts == list(range(6))
          and [int(m.actuator_actadr[i]) for i in range(6)] == list(range(6))
          and bool(np.all(m.actuator_ctrllimited[:6])))
    if not ok:
        raise ConfigError(f"{path}: the arm joints must come first (base to wrist), followed by six "
                          "intvelocity actuators (5 joints + gripper) with ctrlrange = servo speed")


def arm_spec(model: mujoco.MjModel) -> ArmSpec:
    """The `ArmSpec` of a compiled arm model (limits and servo speeds read from the MJCF)."""
    lower, upper, vmax = [], [], []
    for name in JOINT_NAMES:
        j = model.joint(name)
        lower.append(j.range[0])
        upper.append(j.range[1])
        vmax.append(model.actuator(name).ctrlrange[1])
    g_hi = model.joint("finger_left").range[1] / GRIPPER_M_PER_RAD
    return ArmSpec(joint_names=JOINT_NAMES, lower=np.array(lower), upper=np.array(upper),
                   max_velocity=np.array(vmax), gripper_closed=0.0, gripper_open=float(g_hi))


class ArmSim:
    """Simulated arm: implements `Arm` and the simulator handle (`model`, `data`, `n_substeps`,
    `render`). One instance owns one MjModel/MjData; the task resets it through `set_state`."""

    def __init__(self, control_hz: float = 10.0, model_path: str | None = None,
                 timestep: float = DEFAULT_TIMESTEP):
        if not (isinstance(timestep, (int, float)) and math.isfinite(timestep) and 0 < timestep <= 0.01):
            raise ConfigError(f"timestep={timestep!r}: choose a physics step in (0, 0.01] s")
        try:
            hz = float(control_hz)
        except (TypeError, ValueError):
            hz = float("nan")
        if not (math.isfinite(hz) and hz > 0):
            raise ConfigError(f"control_hz={control_hz!r}: must be a positive number")
        self.model = m = load_arm_model(model_path)
        _check_layout(m, model_path or ARM_XML)
        self.control_dt = 1.0 / hz
        # An integer number of sub-steps per control period, with the step adjusted so that
        # simulated time advances by exactly one period.
        self.n_substeps = max(1, int(math.ceil(self.control_dt / timestep - 1e-9)))
        m.opt.timestep = self.control_dt / self.n_substeps
        self.data = mujoco.MjData(m)
        self.spec = arm_spec(m)
        self._finger_q = int(m.jnt_qposadr[m.joint("finger_left").id])
        self._finger_r = int(m.jnt_qposadr[m.joint("finger_right").id])
        self._cube_q = int(m.jnt_qposadr[m.joint("cube").id])
        self._target_mocap = int(m.body_mocapid[m.body("target").id])
        self._target = np.zeros(6)          # set-points: 5 joints (rad) + finger travel (m)
        self._lo_tol = self.spec.lower - LIMIT_TOLERANCE
        self._hi_tol = self.spec.upper + LIMIT_TOLERANCE
        self._g_lo = self.spec.gripper_closed - LIMIT_TOLERANCE
        self._g_hi = self.spec.gripper_open + LIMIT_TOLERANCE
        self._state: ArmState | None = None
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}
        self._scene_option = mujoco.MjvOption()
        self._closed = False
        #: simulator state writes (`set_state`) so far: physical resets must leave it unchanged
        self.teleports = 0
        self._servo_steps: int | None = None     # servo re-planning period (physics steps); None: per period
        mujoco.mj_forward(m, self.data)
        self._target[:] = self.data.act[:6]

    # ----------------------------------------------------------------------- Arm protocol
    def read(self) -> ArmState:
        """Measured state. Cached until time passes (the env and the task both read once per
        step); the arrays are read-only so the shared object cannot be changed by a caller."""
        st = self._state
        if st is None:
            d = self.data
            q, dq = d.qpos[:5].copy(), d.qvel[:5].copy()
            q.flags.writeable = False
            dq.flags.writeable = False
            st = self._state = ArmState(q=q, dq=dq, gripper=float(d.qpos[self._finger_q]) / GRIPPER_M_PER_RAD,
                                        stamp=float(d.time))
        return st

    def command(self, q: np.ndarray, gripper: float) -> None:
        """Absolute joint targets (rad) and gripper angle (rad). Targets outside the joint
        range raise `SafetyError`: the caller (task, teleop) must clip and report."""
        q = np.asarray(q, dtype=np.float64)
        if q.shape != (5,):
            raise InvalidActionError(f"arm command q has shape {q.shape}, expected (5,) for {JOINT_NAMES}")
        g = float(gripper)
        # NaN fails every comparison, so one test covers range and finiteness on the hot path.
        if not (self._g_lo <= g <= self._g_hi and ((q >= self._lo_tol) & (q <= self._hi_tol)).all()):
            self._refuse(q, g)
        self._target[:5] = q
        self._target[5] = g * GRIPPER_M_PER_RAD

    def _refuse(self, q: np.ndarray, g: float) -> None:
        if not (np.all(np.isfinite(q)) and math.isfinite(g)):
            raise InvalidActionError(f"arm command has NaN/inf: q={q.tolist()}, gripper={g}")
        spec = self.spec
        bad = [f"{JOINT_NAMES[i]}={q[i]:.3f} not in [{spec.lower[i]:.3f}, {spec.upper[i]:.3f}]"
               for i in np.flatnonzero((q < self._lo_tol) | (q > self._hi_tol))]
        if not self._g_lo <= g <= self._g_hi:
            bad.append(f"gripper={g:.3f} not in [{spec.gripper_closed:.3f}, {spec.gripper_open:.3f}]")
        raise SafetyError("target outside the joint range: " + "; ".join(bad)
                          + " (clip targets to ArmSpec limits before commanding)")

    def advance(self, dt: float) -> float:
        """Integrate physics for `dt` seconds; overrun is 0 in sim.

        One control period (`dt == control_dt`) runs `self.n_substeps` physics steps, read at
        call time so timing wrappers (rate jitter, latency) may change it; any other `dt` is
        rounded to whole physics steps.
        """
        if self._closed:
            return 0.0
        ts = self.model.opt.timestep
        n = self.n_substeps if dt == self.control_dt else int(round(dt / ts))
        if n <= 0:
            return 0.0
        d = self.data
        if self._servo_steps is None or self._servo_steps >= n:
            # Set-point velocity that lands exactly on the target after n sub-steps; MuJoCo
            # clamps ctrl to ctrlrange = the servo speed, so a far target is approached at full
            # speed over several periods.
            d.ctrl[:6] = (self._target - d.act[:6]) * (1.0 / (n * ts))
            mujoco.mj_step(self.model, d, nstep=n)
        else:
            self._replan(n)
        # Leave a ctrl that keeps heading for the target without passing it, for anyone who
        # steps the physics outside `advance` (latency wrappers use `coast`).
        d.ctrl[:6] = (self._target - d.act[:6]) * (1.0 / self.control_dt)
        self._state = None
        return 0.0

    def _replan(self, n: int) -> None:
        """n physics steps of a servo that re-plans every `_servo_steps`: each time it heads
        for the target at up to its speed, landing on it within one servo period."""
        d, k, ts = self.data, self._servo_steps, self.model.opt.timestep
        done = 0
        while done < n:
            c = min(k, n - done)
            d.ctrl[:6] = (self._target - d.act[:6]) * (1.0 / (c * ts))
            mujoco.mj_step(self.model, d, nstep=c)
            done += c

    def set_servo_rate(self, hz: float | None) -> None:
        """How often the servos re-plan toward their goal. None (the default, the training
        sim): once per control period, so a small move is spread over the whole period. A
        real servo re-plans at its own loop rate (hundreds of Hz and more) and so reaches a
        small new goal at once, which `robolearn calibrate-sim` can fit (`servo_rate_hz`).
        Rates at or below the control rate are the default behaviour."""
        if hz is None:
            self._servo_steps = None
            return
        if not (isinstance(hz, (int, float)) and math.isfinite(hz) and hz > 0):
            raise ConfigError(f"servo rate {hz!r}: give a positive number of Hz (or None)")
        self._servo_steps = max(1, int(round(1.0 / (float(hz) * self.model.opt.timestep))))

    def coast(self, n: int) -> None:
        """n physics steps on the command already given (what latency wrappers run before a
        delayed command takes over), with the same servo model as `advance`."""
        if n <= 0:
            return
        if self._servo_steps is None:
            mujoco.mj_step(self.model, self.data, nstep=n)
        else:
            self._replan(n)
        self._state = None

    def safe_stop(self) -> None:
        """Hold: the set-point stops where it is (servos keep torque, nothing moves on)."""
        try:
            self._target[:] = self.data.act[:6]
            self.data.ctrl[:6] = 0.0
            self._state = None
        except Exception:  # must not raise
            pass

    def close(self) -> None:
        self._closed = True
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()

    # --------------------------------------------------------------------- sim-only helpers
    def allow_past_stops(self, travel: float) -> None:
        """Let servo set-points go up to `travel` rad past each joint's range (the gripper: the
        same angle of its servo), so the MJCF joint range acts as a *mechanical stop*: a joint
        limit the link presses against while its servo pushes on, as on a built arm whose horn
        could turn further than the link can. Limits become as stiff as the physics step
        allows (a plastic or metal stop, not a spring). For the emulators' plants (the
        "physical" arm, whose servo firmware limits goals by its own registers); sim envs keep
        the default, where a target outside the range is refused."""
        t = float(travel)
        if not (math.isfinite(t) and 0.0 <= t <= 1.0):
            raise ConfigError(f"travel={travel!r}: choose 0..1 rad past the joint range")
        m = self.model
        arm_acts = [m.actuator(n).id for n in JOINT_NAMES]
        g = m.actuator("gripper").id
        m.actuator_actrange[arm_acts, 0] = self.spec.lower - t
        m.actuator_actrange[arm_acts, 1] = self.spec.upper + t
        lo_m, hi_m = m.joint("finger_left").range
        m.actuator_actrange[g] = (lo_m - t * GRIPPER_M_PER_RAD, hi_m + t * GRIPPER_M_PER_RAD)
        self._lo_tol = self.spec.lower - t - LIMIT_TOLERANCE
        self._hi_tol = self.spec.upper + t + LIMIT_TOLERANCE
        self._g_lo = self.spec.gripper_closed - t - LIMIT_TOLERANCE
        self._g_hi = self.spec.gripper_open + t + LIMIT_TOLERANCE
        stops = [m.joint(n).id for n in JOINT_NAMES + ("finger_left", "finger_right")]
        m.jnt_solref[stops, 0] = 2.5 * m.opt.timestep     # MuJoCo's stiffest stable time constant
        m.jnt_solref[stops, 1] = 1.0

    def set_state(self, q: np.ndarray, gripper: float, cube_pos=None, cube_quat=None,
                  target_pos=None) -> None:
        """Teleport to a joint configuration at rest (sim reset); set-points follow.
        Counted in `teleports` (a physical reset must never call this)."""
        self.teleports += 1
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        d.qpos[:5] = q
        s = float(gripper) * GRIPPER_M_PER_RAD
        d.qpos[self._finger_q] = s
        d.qpos[self._finger_r] = s
        if cube_pos is not None:
            d.qpos[self._cube_q:self._cube_q + 3] = cube_pos
        if cube_quat is not None:
            d.qpos[self._cube_q + 3:self._cube_q + 7] = cube_quat
        if target_pos is not None:
            d.mocap_pos[self._target_mocap] = target_pos
        d.act[:5] = q
        d.act[5] = s
        self._target[:5] = q
        self._target[5] = s
        mujoco.mj_forward(m, d)
        self._state = None

    def cube_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Ground-truth cube position and quaternion (w, x, y, z): privileged, sim only."""
        a = self._cube_q
        q = self.data.qpos
        return q[a:a + 3].copy(), q[a + 3:a + 7].copy()

    def set_target_marker(self, pos, visible: bool = True) -> None:
        """Move the goal marker (visual only) and show/hide it in renders. Kinematics are
        recomputed at once so the next render (frame 0 after a reset) shows the new goal."""
        self.data.mocap_pos[self._target_mocap] = pos
        self.model.geom_rgba[self.model.geom("target").id, 3] = 0.5 if visible else 0.0
        mujoco.mj_kinematics(self.model, self.data)

    def set_cube_visible(self, visible: bool) -> None:
        """Show or hide the cube in renders (tasks without the cube park it out of the way)."""
        self.model.geom_rgba[self.model.geom("cube").id, 3] = 1.0 if visible else 0.0

    def set_marker_radius(self, radius: float, height: float | None = None) -> None:
        """Sphere marker (reach) or flat disc marker (push region) for the goal."""
        gid = self.model.geom("target").id
        if height is None:
            self.model.geom_type[gid] = mujoco.mjtGeom.mjGEOM_SPHERE
            self.model.geom_size[gid] = (radius, 0, 0)
        else:
            self.model.geom_type[gid] = mujoco.mjtGeom.mjGEOM_CYLINDER
            self.model.geom_size[gid] = (radius, height, 0)

    def render(self, height: int, width: int, camera: str | int = "front") -> np.ndarray:
        """uint8 HxWx3 RGB image from a named camera (default: the front camera)."""
        if self._closed:
            raise ConfigError("render() after close(): make a new env")
        key = (int(height), int(width))
        r = self._renderers.get(key)
        if r is None:
            g = self.model.vis.global_
            g.offheight = max(g.offheight, key[0])
            g.offwidth = max(g.offwidth, key[1])
            r = new_renderer(self.model, *key)
            self._renderers[key] = r
        r.update_scene(self.data, camera=camera, scene_option=self._scene_option)
        return r.render()


class SimCamera:
    """`Camera` over one of the MJCF's cameras; the renderer is created on first `read`."""

    def __init__(self, sim: ArmSim, name: str, image_size: tuple[int, int] = (84, 84)):
        if name not in CAMERA_NAMES:
            raise ConfigError(f"camera {name!r}: the arm model has {', '.join(CAMERA_NAMES)}")
        h, w = check_image_size(image_size)
        self.sim = sim
        self.name = name
        self.shape = (h, w, 3)

    def read(self) -> Frame:
        return Frame(image=self.sim.render(self.shape[0], self.shape[1], camera=self.name),
                     stamp=float(self.sim.data.time))

    def close(self) -> None:
        pass  # renderers belong to the sim and are closed with it


def check_image_size(image_size) -> tuple[int, int]:
    try:
        h, w = (int(v) for v in image_size)
    except (TypeError, ValueError):
        raise ConfigError(f"image_size={image_size!r}: give (height, width) in pixels") from None
    if not (8 <= h <= 2048 and 8 <= w <= 2048):
        raise ConfigError(f"image_size={image_size!r}: height and width must be in [8, 2048]")
    return h, w


def make_arm_sim_backend(control_hz: float = 10.0, cameras: tuple[str, ...] = CAMERA_NAMES,
                         image_size: tuple[int, int] = (84, 84), model_path: str | None = None,
                         timestep: float = DEFAULT_TIMESTEP) -> Backend:
    """A `Backend` with the simulated arm, its cameras, and the sim as privileged handle."""
    sim = ArmSim(control_hz=control_hz, model_path=model_path, timestep=timestep)
    cams = {name: SimCamera(sim, name, image_size) for name in cameras}
    return Backend(robot=sim, cameras=cams, privileged=sim, kind="sim")
