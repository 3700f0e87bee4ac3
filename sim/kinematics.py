"""Forward kinematics and damped-least-squares IK of the arm, from the same MJCF as the sim.

Why separate from the simulator: on hardware only joint angles are measured, so end-effector
positions, workspace checks and Cartesian actions must come from kinematics alone. This class
owns its own `MjData` and only runs `mj_kinematics` / `mj_comPos` / `mj_jacSite` on it, so it
works with no simulation running and never disturbs one that is.

IK solves for the grasp point (`ee` site) position with the gripper pointing straight down
(the approach axis, site -z, aligned with world -z), over pan, lift, elbow and wrist flex; the
wrist roll is held at the value given (it does not move the grasp point or the approach axis).
"""
from __future__ import annotations

import math

import mujoco
import numpy as np

from robolearn.errors import ConfigError
from robolearn.sim.arm import JOINT_NAMES, load_arm_model

#: joints the IK moves (indices into JOINT_NAMES); wrist_roll (4) is held
IK_JOINTS = (0, 1, 2, 3)
DOWN = np.array([0.0, 0.0, -1.0])


class ArmKinematics:
    """FK/IK for the 5 arm joints. `q` is always the 5-vector in `JOINT_NAMES` order (rad)."""

    def __init__(self, model: mujoco.MjModel | None = None, site: str = "ee",
                 orientation_weight: float = 0.5, damping: float = 0.02):
        self.model = model if model is not None else load_arm_model()
        self.data = mujoco.MjData(self.model)
        self.site_id = self.model.site(site).id
        m = self.model
        self._qadr = np.array([m.jnt_qposadr[m.joint(n).id] for n in JOINT_NAMES])
        self._vadr = np.array([m.jnt_dofadr[m.joint(n).id] for n in JOINT_NAMES])
        self.lower = np.array([m.joint(n).range[0] for n in JOINT_NAMES])
        self.upper = np.array([m.joint(n).range[1] for n in JOINT_NAMES])
        # IK buffers: one (6, nv) Jacobian whose row blocks MuJoCo fills in place.
        self._jac = np.zeros((6, m.nv))
        self._jac_p, self._jac_r = self._jac[:3], self._jac[3:]
        self._e = np.zeros(5)
        self._dq = np.zeros(4)
        self._jtj = np.zeros((4, 4))
        self._rhs = np.zeros(4)
        self.w_rot = float(orientation_weight)
        self._damp_eye = float(damping) ** 2 * np.eye(len(IK_JOINTS))
        # the IK writes qpos[:5] and reads the Jacobian's first 4 columns directly
        if list(self._qadr) != list(range(5)) or list(self._vadr) != list(range(5)):
            raise ConfigError(f"arm model: joints {JOINT_NAMES} must be the first five (base to wrist)")

    # ------------------------------------------------------------------------------ FK
    def _set(self, q) -> None:
        self.data.qpos[:5] = q
        mujoco.mj_kinematics(self.model, self.data)

    def fk(self, q) -> np.ndarray:
        """Grasp-point position (m, world frame) for joint angles `q`."""
        self._set(q)
        return self.data.site_xpos[self.site_id].copy()

    def camera_pose(self, q, camera: str) -> tuple[np.ndarray, np.ndarray]:
        """(position, 3x3 rotation camera -> world) of a camera of the model for joint angles
        `q`: where a camera on the arm (the wrist's) looks from, from the measured joints."""
        self._set(q)
        mujoco.mj_camlight(self.model, self.data)  # camera poses are not part of mj_kinematics
        cid = self.model.camera(camera).id
        return self.data.cam_xpos[cid].copy(), self.data.cam_xmat[cid].reshape(3, 3).copy()

    def camera_on_arm(self, camera: str) -> bool:
        """Whether a camera of the model is mounted on a link (moves with the joints); False for
        a camera fixed to the world, and for a name the model does not have."""
        try:
            cid = self.model.camera(camera).id
        except KeyError:
            return False
        return int(self.model.cam_bodyid[cid]) != 0

    def link_points(self, q) -> np.ndarray:
        """(n, 3) world positions of the body origins, geom centres and sites of the links that
        swing (everything past the shoulder's turntable) for joint angles `q`: what a motion's
        clearance check (table, base) looks at."""
        self._set(q)
        m, d = self.model, self.data
        if not hasattr(self, "_link_ids"):
            turntable = m.jnt_bodyid[m.joint(JOINT_NAMES[0]).id]

            def swings(b):
                while b > 0:
                    if m.body_parentid[b] == turntable:
                        return True
                    b = m.body_parentid[b]
                return False

            moving = {b for b in range(m.nbody) if swings(b)}
            self._link_ids = (sorted(moving),
                              [g for g in range(m.ngeom) if m.geom_bodyid[g] in moving],
                              [s for s in range(m.nsite) if m.site_bodyid[s] in moving])
        bodies, geoms, sites = self._link_ids
        return np.concatenate((d.xpos[bodies], d.geom_xpos[geoms], d.site_xpos[sites]))

    def fk_pose(self, q) -> tuple[np.ndarray, np.ndarray]:
        """Grasp-point position and 3x3 rotation matrix (columns: site axes in world)."""
        self._set(q)
        return (self.data.site_xpos[self.site_id].copy(),
                self.data.site_xmat[self.site_id].reshape(3, 3).copy())

    # ------------------------------------------------------------------------------ IK
    def ik(self, target, q_init, tol: float = 5e-4, max_iters: int = 20,
           max_step: float = 0.5) -> tuple[np.ndarray, float]:
        """Joint angles placing the grasp point at `target` with the gripper pointing down.

        Damped least squares, warm-started at `q_init` (pass the previous solution: a control
        step moves the target by centimetres, so 1-3 iterations suffice), clipped to the joint
        limits at every iteration. Returns (q, residual position error in metres).
        This runs inside every env step, so it avoids numpy calls on tiny arrays where it can
        (MuJoCo's Cholesky instead of `np.linalg.solve`, preallocated buffers).
        """
        m, d, sid = self.model, self.data, self.site_id
        tx, ty, tz = float(target[0]), float(target[1]), float(target[2])
        q = np.array(q_init, dtype=np.float64)
        lo, hi = self.lower, self.upper
        jac, e, dq, jtj, rhs = self._jac, self._e, self._dq, self._jtj, self._rhs
        jacp, jacr = self._jac_p, self._jac_r
        w = self.w_rot
        qpos, xpos, xmat = d.qpos, d.site_xpos[sid], d.site_xmat[sid]
        tol2 = tol * tol
        err2 = math.inf
        for it in range(max_iters + 1):
            qpos[:5] = q
            mujoco.mj_kinematics(m, d)
            ex, ey, ez = tx - xpos[0], ty - xpos[1], tz - xpos[2]
            err2 = ex * ex + ey * ey + ez * ez
            # approach axis a = -(site z) = -(xmat[2], xmat[5], xmat[8]); error a x (0, 0, -1)
            ax, ay = -xmat[2], -xmat[5]
            if (err2 < tol2 and ax * ax + ay * ay < 1e-6) or it == max_iters:
                break
            mujoco.mj_comPos(m, d)
            mujoco.mj_jacSite(m, d, jacp, jacr, sid)
            e[0], e[1], e[2], e[3], e[4] = ex, ey, ez, -w * ay, w * ax
            # Rows: position (3) and the x, y components of the angular velocity. The z
            # component only spins the gripper about its (vertical) approach axis, which the
            # pointing-down constraint does not care about: keeping it would penalise the pan.
            j = jac[:5, :4]
            if w != 1.0:
                j[3:] *= w
            np.matmul(j.T, j, out=jtj)
            jtj += self._damp_eye
            np.matmul(j.T, e, out=rhs)
            mujoco.mju_cholFactor(jtj, 0.0)
            mujoco.mju_cholSolve(dq, jtj, rhs)
            if err2 > 0.0025:  # far target (> 5 cm): limit the step so DLS stays in its basin
                n = max(dq.max(), -dq.min())
                if n > max_step:
                    dq *= max_step / n
            q[:4] += dq
            np.minimum(q, hi, out=q)
            np.maximum(q, lo, out=q)
        return q, math.sqrt(err2)
