"""Arm tasks (reach, push, lift) over any arm backend (the env factory is robolearn/compose/envs.py).

Action mapping (Box(-1, 1), documented here once):
- `action_mode="ee_delta"` (default), shape (4,): `a[:3] * 0.025 m` moves the commanded
  end-effector (grasp point) target in world x, y, z; the new target is clipped to the
  workspace box (`info["workspace_clipped"]`), solved by IK with the gripper pointing down and
  the wrist roll held, and sent as joint targets. `a[3]` is the absolute gripper command:
  -1 fully closed ... +1 fully open (linear in servo angle).
- `action_mode="joint"`, shape (6,): `a[:5] * 0.15 rad` moves the commanded joint targets
  (clipped to the joint range, `info["joint_limit_clipped"]`; a move whose end-effector would
  leave the workspace is shortened to stay inside, `info["workspace_clipped"]`); `a[5]` is the
  gripper as above.
Targets integrate the *commanded* pose (not the measured one), so a zero action holds still
even while a servo sags under load. Servo speed limits apply on every backend.

State vector (float32), the same on every backend (what the servos measure, kinematics, and
the goal the task itself sets): q (5, rad), dq (5, rad/s), gripper (1, rad), ee position
(3, m, forward kinematics of the measured joints), then per task: reach: target (3),
target - ee (3); push: goal (3); lift: nothing more. Hardware cannot see the cube, so a policy
that must find it uses pixels (cameras `wrist`/`front`, same names and sizes on sim and real).

Privileged vector (float32, only with `privileged_obs=True` on `backend="sim"`): the
simulator's grasp-point position (3), then push/lift: cube position (3), cube quaternion
(4, wxyz; of the cube's 24 look-alike orientations the one nearest the identity, w >= 0, see
`robolearn.tasks.cube_orientation`), cube - grasp point (3), and push: goal - cube (3).
On `backend="real"` push/lift reward and success come from a `reward_source`.

Workspace (grasp point, world frame, m): x [0.12, 0.32], y [-0.18, 0.18], z [0.02, 0.20];
the table top is z = 0 and the arm base is at the origin.
"""
from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from robolearn.checks import check_choice
from robolearn.errors import ConfigError
from robolearn.robot import Backend
from robolearn.sim.arm_workspace import (WORKSPACE_LOW, WORKSPACE_HIGH, HOME_EE, EE_STEP,
                                        JOINT_STEP, REACH_RADIUS, DISTANCE_REWARD_SCALE,
                                        REWARD_DISTANCE_CAP, PUSH_RADIUS, LIFT_HEIGHT, CUBE_HALF,
                                        START_YAW_SPREAD, CUBE_REGION_LOW, CUBE_REGION_HIGH,
                                        PUSH_GOAL_LOW, PUSH_GOAL_HIGH)
from robolearn.tasks.base import Evaluation, Task
from robolearn.tasks.cube_orientation import canonical_cube_quat

TASKS = ("reach", "push", "lift")
#: each task in one sentence: the task string of a LeRobot export (meta/tasks.parquet)
DESCRIPTIONS = {"reach": "Move the gripper to the target point.",
                "push": "Push the cube to the goal position on the table.",
                "lift": "Grasp the cube and lift it off the table."}
CUBE_TASKS = ("push", "lift")                    # success needs the cube pose: a reward source on hardware
BACKENDS = ("sim", "real")
ACTION_MODES = ("ee_delta", "joint")
SIM_BACKEND_KWARGS = ("model_path", "timestep")

_HOME_Q_CACHE: dict[str | None, np.ndarray] = {}


def _home_q(kin, key: str | None) -> np.ndarray:
    """Joint angles of the home pose (IK of HOME_EE), solved once per process and model."""
    q = _HOME_Q_CACHE.get(key)
    if q is None:
        q, err = kin.ik(HOME_EE, np.array([0.0, 0.0, 0.4, -0.4, 0.0]), tol=1e-6, max_iters=200)
        if err > 1e-4:
            raise ConfigError(f"home pose {HOME_EE.tolist()} is unreachable for this arm model")
        _HOME_Q_CACHE[key] = q
    return q.copy()


class ArmTask(Task):
    """Common machinery: action mapping, workspace, kinematics, state. Subclasses add the goal."""

    name = "arm"
    needs_cube = False
    success_terminates = True

    def __init__(self, backend: Backend, control_hz: float = 10.0, action_mode: str = "ee_delta",
                 model_path: str | None = None):
        super().__init__(backend, control_hz)
        from robolearn.sim.arm import load_arm_model
        from robolearn.sim.kinematics import ArmKinematics

        check_choice("action_mode", action_mode, ACTION_MODES)
        self.action_mode = action_mode
        self.arm = backend.robot
        self.spec = self.arm.spec
        self.sim = backend.privileged
        # Kinematics from the same MJCF as the sim (own MjData), limited to what the backend
        # accepts (a calibrated real arm may have narrower ranges than the model).
        self.kin = ArmKinematics(load_arm_model(model_path))
        self.kin.lower = np.maximum(self.kin.lower, self.spec.lower)
        self.kin.upper = np.minimum(self.kin.upper, self.spec.upper)
        self.home_q = np.clip(_home_q(self.kin, model_path), self.kin.lower, self.kin.upper)
        self.home_gripper = float(self.spec.gripper_open)
        self._g_lo = float(self.spec.gripper_closed)
        self._g_span = float(self.spec.gripper_open - self.spec.gripper_closed)
        n_act = 4 if action_mode == "ee_delta" else 6
        self._action_space = gym.spaces.Box(-1.0, 1.0, shape=(n_act,), dtype=np.float32)
        self._state_space = gym.spaces.Box(-np.inf, np.inf, shape=(self.state_dim(),), dtype=np.float32)
        self._privileged_space = gym.spaces.Box(-np.inf, np.inf, shape=(3 + self.cube_dim(),),
                                                dtype=np.float32)
        self._ee_site = self.sim.model.site("ee").id if self.sim is not None else None
        self.q_cmd = self.home_q.copy()
        self.ee_cmd = HOME_EE.copy()
        self.gripper_cmd = self.home_gripper
        self.goal = np.zeros(3)
        self._fresh = False
        self._q = self._dq = self._ee = None
        self._gripper = 0.0
        if self.sim is not None and not self.needs_cube:
            # World assembly, not a reset: a task without the cube starts with it parked out of
            # reach (physical mode never moves it again); not counted as a teleport.
            self.sim.set_state(self.home_q, self.home_gripper, *self.sample_cube(np.random.default_rng(0)))
            self.sim.set_cube_visible(False)
            self.sim.teleports = 0

    # ------------------------------------------------------------------------ spaces
    def state_dim(self) -> int:
        return 14 + self.extra_state_dim()

    def extra_state_dim(self) -> int:
        return 0

    def cube_dim(self) -> int:
        """Length of the cube part of the privileged vector."""
        return 0

    # ------------------------------------------------------------------------ reset
    def reset(self, rng: np.random.Generator) -> dict[str, Any]:
        if self.sim is None:
            raise ConfigError("a real arm cannot be teleported: use reset_mode='physical'")
        self.q_cmd = self.home_q.copy()
        self.gripper_cmd = self.home_gripper
        cube_pos, cube_quat = self.sample_cube(rng)
        self.sim.set_state(self.home_q, self.home_gripper, cube_pos=cube_pos, cube_quat=cube_quat)
        self.sim.set_cube_visible(self.needs_cube)
        self.ee_cmd = self.kin.fk(self.q_cmd)
        return self._begin(rng)

    #: a camera cube finder (policies/cube_finder.py) for resets that cannot ask the simulator;
    #: attached by the composition layer (robolearn/compose/envs.py)
    cube_finder = None
    #: "place" or "keep_in_region": see `robolearn.compose.envs.make_arm_env`
    cube_reset = "place"
    #: where the reset's last camera look saw the cube (x, y, m; set by PlaceCubeByCamera once the
    #: cube is placed, None otherwise): a robot's push goal is drawn around it, as the sim's is
    #: around the simulator's cube
    cube_seen_xy = None

    def start_state_features(self) -> tuple[str, list[int]]:
        """(observation key, entries) a start-state classifier looks at (learned resets): the
        object's x, y in `privileged` when there is one (sim only: hardware would need a camera
        model here; the arm is homed by script, and the cube's height would give teleported
        starts away: a spawned cube sits at exactly 15 mm, a settled one a hair lower), else the
        joints in `state`."""
        if self.needs_cube and self.sim is not None:
            return "privileged", [3, 4]   # after the grasp point (3): cube x, y
        return "state", list(range(5))

    def start_state_true(self) -> bool:
        """Ground truth (sim): is the world in the start distribution? (the cube resting in its
        start region; the arm is homed by script). Validates the learned success model."""
        if not (self.needs_cube and self.sim is not None):
            return True
        self._fresh = False
        pos = self.cube_pose()[0]
        return bool(np.all(pos[:2] >= CUBE_REGION_LOW) and np.all(pos[:2] <= CUBE_REGION_HIGH)
                    and abs(pos[2] - CUBE_HALF) < 0.005)

    def start_episode(self, rng: np.random.Generator) -> dict[str, Any]:
        st = self.arm.read()
        self.q_cmd = np.clip(np.array(st.q, dtype=np.float64), self.kin.lower, self.kin.upper)
        self.gripper_cmd = float(st.gripper)
        self.ee_cmd = self.kin.fk(self.q_cmd)
        return self._begin(rng)

    def _begin(self, rng: np.random.Generator) -> dict[str, Any]:
        self.goal = self.sample_goal(rng)
        self.show_goal()
        self._fresh = False
        self._measure()
        return {"ee_pos": self._ee.copy(), "goal": self.goal.copy(), "workspace_clipped": False}

    def sample_cube(self, rng: np.random.Generator):
        """Cube pose for a sim reset: on the table, yaw near the radial direction so the
        top-down parallel gripper (whose fingers close tangentially) can take it."""
        xy = rng.uniform(CUBE_REGION_LOW, CUBE_REGION_HIGH)
        yaw = math.atan2(xy[1], xy[0]) + rng.uniform(-START_YAW_SPREAD, START_YAW_SPREAD)
        quat = np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])
        if not self.needs_cube:  # park it out of reach, hidden (still simulated, deterministic)
            return np.array([0.5, 0.3, CUBE_HALF]), quat
        return np.array([xy[0], xy[1], CUBE_HALF]), quat

    def sample_goal(self, rng: np.random.Generator) -> np.ndarray:
        return np.zeros(3)

    def show_goal(self) -> None:
        if self.sim is not None:
            self.sim.set_target_marker(self.goal, visible=False)

    # ------------------------------------------------------------------------ actions
    def apply_action(self, action: np.ndarray) -> dict[str, Any]:
        clipped = False
        info: dict[str, Any] = {}
        if self.action_mode == "ee_delta":
            want = self.ee_cmd + action[:3] * EE_STEP
            target = np.minimum(np.maximum(want, WORKSPACE_LOW), WORKSPACE_HIGH)
            clipped = not (target == want).all()
            q, _ = self.kin.ik(target, self.q_cmd)
            self.ee_cmd = target
        else:
            want = self.q_cmd + action[:5] * JOINT_STEP
            q = np.minimum(np.maximum(want, self.kin.lower), self.kin.upper)
            info["joint_limit_clipped"] = bool((q != want).any())
            q, self.ee_cmd, clipped = self._keep_in_workspace(self.q_cmd, q)
        self.q_cmd = q
        self.gripper_cmd = self._g_lo + 0.5 * (float(action[-1]) + 1.0) * self._g_span
        self.arm.command(q, self.gripper_cmd)
        self._fresh = False
        info["workspace_clipped"] = clipped
        return info

    def _keep_in_workspace(self, q0, q1):
        """Shorten the joint move q0 -> q1 so the end effector stays in the workspace box."""
        ee = self.kin.fk(q1)
        if np.all(ee >= WORKSPACE_LOW - 1e-9) and np.all(ee <= WORKSPACE_HIGH + 1e-9):
            return q1, ee, False
        lo_a, hi_a = 0.0, 1.0
        for _ in range(12):
            mid = 0.5 * (lo_a + hi_a)
            ee_mid = self.kin.fk(q0 + mid * (q1 - q0))
            if np.all(ee_mid >= WORKSPACE_LOW - 1e-9) and np.all(ee_mid <= WORKSPACE_HIGH + 1e-9):
                lo_a = mid
            else:
                hi_a = mid
        q = q0 + lo_a * (q1 - q0)
        return q, self.kin.fk(q), True

    # ------------------------------------------------------------------------ state
    def _measure(self) -> None:
        if self._fresh:
            return
        st = self.arm.read()
        self._q, self._dq, self._gripper = st.q, st.dq, st.gripper
        self._ee = self.kin.fk(st.q)
        if self.needs_cube and self.sim is not None:
            self._cube_pos, self._cube_quat = self.sim.cube_pose()
        self._fresh = True

    @property
    def ee_pos(self) -> np.ndarray:
        """Measured grasp-point position (forward kinematics of the measured joints)."""
        self._measure()
        return self._ee

    @property
    def measured_gripper(self) -> float:
        """Measured gripper servo angle (rad, the encoder's reading; `gripper_cmd` is the command)."""
        self._measure()
        return float(self._gripper)

    def cube_pose(self):
        """Ground-truth cube (position, quaternion) in sim; None on hardware."""
        if self.sim is None:
            return None
        if self.needs_cube:
            self._measure()
            return self._cube_pos, self._cube_quat
        return self.sim.cube_pose()

    def state(self) -> np.ndarray:
        self._measure()
        out = np.empty(self._state_space.shape[0], dtype=np.float32)
        out[0:5] = self._q
        out[5:10] = self._dq
        out[10] = self._gripper
        out[11:14] = self._ee
        if len(out) > 14:
            out[14:] = self.extra_state()
        return out

    def extra_state(self) -> np.ndarray:
        return np.zeros(0)

    def privileged_observation(self) -> np.ndarray:
        self._measure()
        ee = self.sim.data.site_xpos[self._ee_site]
        if not self.cube_dim():
            return ee.astype(np.float32)
        pos = self._cube_pos
        quat = canonical_cube_quat(self._cube_quat)
        return np.concatenate((ee, pos, quat, pos - ee, self.cube_extra(pos))).astype(np.float32)

    def cube_extra(self, cube_pos: np.ndarray) -> np.ndarray:
        return np.zeros(0)

    def base_info(self) -> dict[str, Any]:
        return {"ee_pos": self._ee.copy()}

    # ------------------------------------------------------------------------ scripted
    def scripted_controller(self, env):
        from robolearn.tasks import arm_scripted

        return arm_scripted.make_controller(self, env)


class ArmReach(ArmTask):
    """Move the grasp point to a sampled target: reward -distance in decimetres (-10 x metres),
    success (and episode end) within 2 cm."""

    name = "reach"
    #: reach targets are sampled this far inside the workspace box
    margin = 0.01

    def extra_state_dim(self) -> int:
        return 6

    def sample_goal(self, rng):
        return rng.uniform(WORKSPACE_LOW + self.margin, WORKSPACE_HIGH - self.margin)

    def show_goal(self) -> None:
        if self.sim is not None:
            self.sim.set_marker_radius(REACH_RADIUS)
            self.sim.set_target_marker(self.goal, visible=True)

    def extra_state(self):
        return np.concatenate((self.goal, self.goal - self._ee))

    def evaluate(self) -> Evaluation:
        self._measure()
        diff = self.goal - self._ee
        dist = math.sqrt(float(diff @ diff))
        success = dist < REACH_RADIUS
        return Evaluation(reward=-DISTANCE_REWARD_SCALE * dist, success=success, terminated=success,
                          info={"ee_pos": self._ee.copy(), "distance": dist})


class ArmPush(ArmTask):
    """Push the cube into a 3 cm goal region on the table. Dense reward in decimetres:
    -10 x ((cube-goal distance) + 0.5 (grasp point-cube distance) in m), each distance capped at
    `REWARD_DISTANCE_CAP`; success within 3 cm."""

    name = "push"
    needs_cube = True

    def extra_state_dim(self) -> int:
        return 3

    def cube_dim(self) -> int:
        return 13

    def sample_goal(self, rng):
        if self.sim is not None:
            cube = self.sim.cube_pose()[0][:2]
        elif self.cube_seen_xy is not None:   # the camera reset's last look (robolearn/resets/cube_camera.py)
            cube = np.asarray(self.cube_seen_xy, dtype=np.float64)
        else:   # no look (a person placed the cube): the start region's centre
            cube = 0.5 * (CUBE_REGION_LOW + CUBE_REGION_HIGH)
        for _ in range(100):
            ang = rng.uniform(-math.pi, math.pi)
            dist = rng.uniform(0.06, 0.12)
            xy = cube + dist * np.array([math.cos(ang), math.sin(ang)])
            if np.all(xy >= PUSH_GOAL_LOW) and np.all(xy <= PUSH_GOAL_HIGH):
                return np.array([xy[0], xy[1], CUBE_HALF])
        xy = np.clip(xy, PUSH_GOAL_LOW, PUSH_GOAL_HIGH)
        return np.array([xy[0], xy[1], CUBE_HALF])

    def show_goal(self) -> None:
        if self.sim is not None:
            self.sim.set_marker_radius(PUSH_RADIUS, height=0.001)
            self.sim.set_target_marker((self.goal[0], self.goal[1], 0.001), visible=True)

    def extra_state(self):
        return self.goal

    def cube_extra(self, cube_pos):
        return self.goal - cube_pos

    def evaluate(self) -> Evaluation:
        self._measure()
        info = {"ee_pos": self._ee.copy()}
        if self.sim is None:  # no cube pose on hardware: the reward source decides
            return Evaluation(reward=0.0, success=False, info=info)
        pos = self._cube_pos
        reward, success, d_goal = push_reward(pos, self._ee, self.goal)
        info["distance"] = d_goal
        info["cube_pos"] = pos
        return Evaluation(reward=reward, success=success, terminated=success, info=info)


def push_reward(cube_pos, ee, goal) -> tuple[float, bool, float]:
    """ArmPush's reward, success and cube-goal distance from the cube's position (m), the grasp
    point and the goal: one definition for the simulator's cube pose and for a camera's estimate
    of it on the robot (robolearn/rewards/push_camera.py)."""
    pos = np.asarray(cube_pos, dtype=np.float64)
    gx, gy = pos[0] - goal[0], pos[1] - goal[1]
    d_goal = math.sqrt(gx * gx + gy * gy)
    rel = pos - np.asarray(ee, dtype=np.float64)
    d_ee = math.sqrt(float(rel @ rel))
    cost = min(d_goal, REWARD_DISTANCE_CAP) + 0.5 * min(d_ee, REWARD_DISTANCE_CAP)
    return -DISTANCE_REWARD_SCALE * cost, d_goal < PUSH_RADIUS, d_goal


class ArmLift(ArmTask):
    """Grasp the cube and lift it 5 cm above its resting height. Sparse: reward 1 and episode
    end on success, 0 otherwise."""

    name = "lift"
    needs_cube = True

    def cube_dim(self) -> int:
        return 10

    def evaluate(self) -> Evaluation:
        self._measure()
        info = {"ee_pos": self._ee.copy()}
        if self.sim is None:
            return Evaluation(reward=0.0, success=False, info=info)
        pos = self._cube_pos
        height = float(pos[2] - CUBE_HALF)
        success = height >= LIFT_HEIGHT
        info["height"] = height
        info["cube_pos"] = pos
        return Evaluation(reward=1.0 if success else 0.0, success=success, terminated=success, info=info)


TASK_CLASSES = {"reach": ArmReach, "push": ArmPush, "lift": ArmLift}


MAX_EPISODE_STEPS = {"reach": 50, "push": 120, "lift": 100}
