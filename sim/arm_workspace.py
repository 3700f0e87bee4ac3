"""Arm workspace geometry and task thresholds (metres, world frame; the arm base at the origin).

Why a module of its own at the bottom: the emulated robot (drivers/), the resets, the cube
finder and the tasks all measure against the same box, table and cube, and none of them may
import the tasks layer above the drivers to learn it.
"""
import math

import numpy as np

WORKSPACE_LOW = np.array([0.12, -0.18, 0.02])
WORKSPACE_HIGH = np.array([0.32, 0.18, 0.20])
HOME_EE = np.array([0.20, 0.0, 0.15])           # grasp point at reset, gripper open, pointing down
EE_STEP = 0.025                                  # m per unit action per control step
JOINT_STEP = 0.15                                # rad per unit action per control step
REACH_RADIUS = 0.02                              # reach success: within 2 cm
# Dense rewards are distances in decimetres (10x metres), so a step's reward is O(1) like the
# entropy bonus SAC adds to it (alpha * |A| nats); in metres (about -0.1 a step) the bonus
# swamped the task and default SAC learnt to wander instead of reaching (docs/arm.md).
DISTANCE_REWARD_SCALE = 10.0
#: distances beyond this (m) count as this in dense rewards: the table is 0.8 m across and the arm
#: reaches 0.54 m, so only a lost cube (off the table, flung by a contact blow-up in the sim) is
#: farther, and one unbounded step reward would swamp a critic for the rest of a run
REWARD_DISTANCE_CAP = 0.5
PUSH_RADIUS = 0.03                               # push success: cube centre within 3 cm of goal
LIFT_HEIGHT = 0.05                               # lift success: cube 5 cm above resting height
CUBE_HALF = 0.015                                # the cube is 3 cm
#: a start cube's yaw is the radial direction +- this (rad): a face toward the arm, as a person
#: setting it down for the gripper would (teleport resets and the scripted `PlaceCube` alike)
START_YAW_SPREAD = 0.3
CUBE_REGION_LOW = np.array([0.16, -0.12])        # where the cube is placed on reset (x, y)
CUBE_REGION_HIGH = np.array([0.28, 0.12])
PUSH_GOAL_LOW = np.array([0.14, -0.15])          # where push goals may lie (x, y)
PUSH_GOAL_HIGH = np.array([0.30, 0.15])

#: where the reset may reach for the cube (beyond the policy's workspace box: the arm can)
REACH_LOW = (0.10, -0.24)
REACH_HIGH = (0.36, 0.24)


def in_reach(cube) -> bool:
    return bool(REACH_LOW[0] <= cube[0] <= REACH_HIGH[0] and REACH_LOW[1] <= cube[1] <= REACH_HIGH[1]
                and math.hypot(cube[0], cube[1]) <= 0.37)
