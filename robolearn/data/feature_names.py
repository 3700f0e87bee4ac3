"""Per-element names of an env's `state` and action vectors, its robot type and its task's
description: what a LeRobot dataset carries in `features[...]["names"]`, `robot_type` and
`meta/tasks.parquet`, so LeRobot's tools can map values to motors (`shoulder_pan.pos`, ...).

One place for the LeRobot export and any importer. The layouts are the tasks' own (documented
in robolearn/tasks/arm.py and robolearn/tasks/car.py); a vector whose length is not the known
layout keeps the known names for its first elements and `state_<i>` / `action_<i>` after them
(e.g. the perception wrapper's 3 extra state entries), so a name never lies about a value.

Arm state (14 + task extras): `<joint>.pos` (rad) x5, `<joint>.vel` (rad/s) x5, `gripper.pos`
(rad), `ee.x|y|z` (m), then reach: `target.x|y|z`, `target_minus_ee.x|y|z`; push: `goal.x|y|z`.
Arm action: `action_mode="joint"` (6): `<joint>.delta` (x 0.15 rad per step) x5, `gripper.cmd`
(-1 closed .. +1 open); `"ee_delta"` (4): `ee.dx|dy|dz` (x 0.025 m per step), `gripper.cmd`.
These are normalised commands in [-1, 1], not LeRobot's absolute `<motor>.pos` targets.
"""
from __future__ import annotations

ARM_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
_XYZ = ("x", "y", "z")
ARM_ENVS = {"robolearn/ArmReach-v0": "reach", "robolearn/ArmPush-v0": "push", "robolearn/ArmLift-v0": "lift"}
ARM_ROBOT_TYPE = "so100"              # robolearn's arm is the SO-100 class (sim/assets/arm.xml)
CAR_ROBOT_TYPE = "rc_car"


def _xyz(prefix: str) -> list[str]:
    return [f"{prefix}.{a}" for a in _XYZ]


def _arm_task(env_id: str) -> str | None:
    return ARM_ENVS.get(env_id)


def _car(env_id: str) -> bool:
    from robolearn.tasks.car import ENV_ID
    return env_id == ENV_ID


def _fill(known: list[str], dim: int, prefix: str) -> list[str]:
    """`known` cut or extended to `dim` names (unknown tail: PREFIX_<i>)."""
    return known[:dim] + [f"{prefix}_{i}" for i in range(len(known), dim)]


def state_names(env_id: str, dim: int) -> list[str]:
    """Names of the `state` vector's `dim` elements of `env_id`."""
    task = _arm_task(env_id)
    if task is not None:
        names = [f"{j}.pos" for j in ARM_JOINTS] + [f"{j}.vel" for j in ARM_JOINTS] + ["gripper.pos"] + _xyz("ee")
        names += {"reach": _xyz("target") + _xyz("target_minus_ee"), "push": _xyz("goal"), "lift": []}[task]
        return _fill(names, dim, "state")
    if _car(env_id):
        names = ["speed", "steer", *_xyz("accel"), *_xyz("gyro"), "last_action.steer", "last_action.throttle"]
        return _fill(names, dim, "state")
    return _fill([], dim, "state")


def action_names(env_id: str, dim: int) -> list[str]:
    """Names of the action vector's `dim` elements (the arm's action mode follows from `dim`)."""
    if _arm_task(env_id) is not None:
        if dim == 6:
            return [f"{j}.delta" for j in ARM_JOINTS] + ["gripper.cmd"]
        if dim == 4:
            return ["ee.dx", "ee.dy", "ee.dz", "gripper.cmd"]
    if _car(env_id) and dim == 2:
        return ["steer", "throttle"]
    return _fill([], dim, "action")


def robot_type(env_id: str) -> str:
    """LeRobot's `robot_type` for an env: "so100" for the arm, "rc_car" for the car, else the
    env's name."""
    if _arm_task(env_id) is not None:
        return ARM_ROBOT_TYPE
    if _car(env_id):
        return CAR_ROBOT_TYPE
    return env_id.split("/")[-1]


def task_description(env_id: str) -> str:
    """The task in one sentence (the arm's and car's tasks define theirs); other envs: the ID."""
    task = _arm_task(env_id)
    if task is not None:
        from robolearn.tasks.arm import DESCRIPTIONS
        return DESCRIPTIONS[task]
    if _car(env_id):
        from robolearn.tasks.car import DESCRIPTION
        return DESCRIPTION
    return env_id
