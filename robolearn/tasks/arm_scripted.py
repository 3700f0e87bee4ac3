"""Scripted controllers for the arm tasks: IK toward a waypoint, through the policy's action map.

Why through the action mapping: the controller emits `ee_delta` actions in [-1, 1] exactly as a
policy would, so its success proves the tasks are solvable *through the env's interface*, and
teleop / demo recording can reuse it unchanged. The waypoint logic steers the task's commanded
end-effector target (`task.ee_cmd`), which the task's IK turns into joint targets.

- reach: straight to the target.
- lift: above the cube, descend, close, lift (needs the cube pose: sim only).
- push: above a point behind the cube (seen from the goal), descend, push along the
  cube-to-goal line; re-approach from above when the cube slides off that line (sim only).
"""
from __future__ import annotations

import numpy as np

from robolearn.errors import ConfigError
from robolearn.sim.arm_workspace import CUBE_HALF, EE_STEP, LIFT_HEIGHT, WORKSPACE_HIGH, WORKSPACE_LOW

OPEN, CLOSED = 1.0, -1.0


class _ArmController:
    """Base: turns a desired grasp-point position into an ee_delta action."""

    #: how near the commanded target must be to a goal to count as there: exact for a fixed goal;
    #: a goal that follows a noisy estimate moves every step, so the target never lands on it
    cmd_tol = 1e-6

    def __init__(self, task, env):
        if task.action_mode != "ee_delta":
            raise ConfigError("the arm scripted controllers emit action_mode='ee_delta' actions; "
                              f"this env uses {task.action_mode!r}")
        self.task = task
        self.env = env

    def reset(self) -> None:
        pass

    def cube(self) -> np.ndarray:
        """Where the cube is (m): the sim's truth here; an operator who sees the table
        (robolearn/teleop/operator.py) overrides it with what they see."""
        return self.task.cube_pose()[0]

    def toward(self, goal, gripper: float, speed: float = 1.0) -> np.ndarray:
        goal = np.clip(goal, WORKSPACE_LOW, WORKSPACE_HIGH)
        delta = (goal - self.task.ee_cmd) / EE_STEP
        n = float(np.abs(delta).max())
        if n > speed:
            delta *= speed / n
        return np.append(delta, gripper).astype(np.float32)

    def at(self, goal, tol: float = 0.004) -> bool:
        """Commanded target at `goal` and the measured grasp point close to it."""
        goal = np.clip(goal, WORKSPACE_LOW, WORKSPACE_HIGH)
        return (float(np.abs(self.task.ee_cmd - goal).max()) < self.cmd_tol
                and float(np.linalg.norm(self.task.ee_pos - goal)) < tol)


class ReachController(_ArmController):
    def act(self, obs) -> np.ndarray:
        return self.toward(self.task.goal, OPEN)


class LiftController(_ArmController):
    """Phases: above -> descend -> close -> lift. Restarts from `above` if the grasp slips."""

    hover = 0.07          # m above the cube centre before descending
    grasp_z = 0.02        # grasp-point height when closing (the cube centre is at 0.015)
    close_steps = 6       # control steps to let the fingers close

    def reset(self) -> None:
        self.phase = "above"
        self.count = 0

    def act(self, obs) -> np.ndarray:
        cube = self.cube()
        if self.phase == "above":
            goal = np.array([cube[0], cube[1], cube[2] + self.hover])
            if self.at(goal, tol=0.01):
                self.phase = "descend"
            return self.toward(goal, OPEN)
        if self.phase == "descend":
            goal = np.array([cube[0], cube[1], self.grasp_z])
            if self.at(goal, tol=0.006):
                self.phase, self.count = "close", 0
            return self.toward(goal, OPEN, speed=0.6)
        if self.phase == "close":
            self.count += 1
            if self.count >= self.close_steps:
                self.phase = "lift"
            return self.toward(self.task.ee_cmd, CLOSED)
        # lift
        goal = np.array([self.task.ee_cmd[0], self.task.ee_cmd[1], CUBE_HALF + LIFT_HEIGHT + 0.05])
        if self.task.ee_pos[2] - cube[2] > 0.04:  # the cube stayed on the table: grasp missed
            self.phase = "reopen"
            self.count = 0
        return self.toward(goal, CLOSED, speed=0.6)


class LiftControllerWithRetry(LiftController):
    def act(self, obs) -> np.ndarray:
        if self.phase == "reopen":
            self.count += 1
            if self.count >= 3:
                self.phase = "above"
            return self.toward(self.task.ee_cmd + np.array([0, 0, 0.02]), OPEN)
        return super().act(obs)


class PushController(_ArmController):
    """Pushes with the closed fingers, keeping the grasp point on the goal-cube line."""

    hover = 0.07
    push_z = 0.02
    standoff = CUBE_HALF + 0.014   # grasp point to cube centre while pushing
    lateral_tol = 0.012

    def reset(self) -> None:
        self.phase = "above"

    def act(self, obs) -> np.ndarray:
        cube = self.cube()
        goal = self.task.goal
        d = goal[:2] - cube[:2]
        dist = float(np.linalg.norm(d))
        u = d / max(dist, 1e-6)
        behind = cube[:2] - u * (self.standoff + 0.01)
        ee = self.task.ee_pos
        rel = ee[:2] - cube[:2]
        along = float(rel @ u)
        lateral = abs(float(rel[0] * u[1] - rel[1] * u[0]))
        if self.phase == "push" and (lateral > self.lateral_tol or along > -CUBE_HALF):
            self.phase = "up"
            self.up = np.array([self.task.ee_cmd[0], self.task.ee_cmd[1], cube[2] + self.hover])
        if self.phase == "up":
            up = self.up
            if self.at(up, tol=0.02):
                self.phase = "above"
            return self.toward(up, CLOSED)
        if self.phase == "above":
            target = np.array([behind[0], behind[1], cube[2] + self.hover])
            if self.at(target, tol=0.01):
                self.phase = "descend"
            return self.toward(target, CLOSED)
        if self.phase == "descend":
            target = np.array([behind[0], behind[1], self.push_z])
            if self.at(target, tol=0.008):
                self.phase = "push"
            return self.toward(target, CLOSED, speed=0.6)
        # push: aim the grasp point at the spot that leaves the cube on the goal
        aim = goal[:2] - u * self.standoff
        # steer back onto the line through cube and goal
        line_pt = cube[:2] - u * self.standoff
        target_xy = aim + 0.8 * (line_pt - (line_pt @ u) * u - (aim - (aim @ u) * u))
        target = np.array([target_xy[0], target_xy[1], self.push_z])
        return self.toward(target, CLOSED, speed=0.5)


def make_controller(task, env):
    """The scripted controller of an arm task (called by `Task.scripted_controller`)."""
    if task.name == "reach":
        ctrl = ReachController(task, env)
    elif task.sim is None:
        raise ConfigError(f"the scripted {task.name} controller needs the cube pose, which only the "
                          "sim provides; on hardware use teleop or a learned policy")
    elif task.name == "lift":
        ctrl = LiftControllerWithRetry(task, env)
    elif task.name == "push":
        ctrl = PushController(task, env)
    else:
        raise ConfigError(f"no scripted controller for arm task {task.name!r}")
    ctrl.reset()
    return ctrl
