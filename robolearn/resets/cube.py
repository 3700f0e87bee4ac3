"""Scripted cube reset for ArmPush / ArmLift: pick the cube up wherever it lies and put it down
at a random point of the start region, then go home. No teleport: only arm commands.

Why pick-and-place rather than pushing it back: a top-down grasp works from any side and leaves
the cube at an exact, uniformly sampled point of the region and yaw (the same start distribution
the teleport reset draws from), where pushing would bias it toward the region's edge.
It needs the cube pose: the simulator provides it (the sim is the "sensor" here, it does not
move anything); on hardware pass a pose estimate or use a learned backward agent / the prompt.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from robolearn.resets.scripted import EeMover, move_home
from robolearn.sim.arm_workspace import REACH_HIGH, REACH_LOW, in_reach
from robolearn.errors import ResetError


@dataclass
class PlaceCube:
    """Reset controller: cube to a uniform point of [region_low, region_high] (x, y, m), arm home."""

    region_low: tuple = (0.16, -0.12)
    region_high: tuple = (0.28, 0.12)
    hover: float = 0.06          # m above the table for moves with the cube clear of the table
    grasp_z: float = 0.02        # grasp-point height when closing (the cube centre is at 0.015)
    place_z: float = 0.024       # grasp-point height when letting go
    step: float = 0.02           # m per control period (slower than a policy's 0.025 m)
    close_steps: int = 5
    attempts: int = 3            # grasps tried before the reset fails

    kind = "scripted"

    def run(self, task, rng):
        from robolearn.sim.arm_workspace import CUBE_HALF, START_YAW_SPREAD

        pose = _cube(task)
        if pose is None:
            raise ResetError("the cube reset needs the cube pose, which this backend cannot "
                             "measure; use the operator prompt or a learned backward agent")
        low, high = np.asarray(self.region_low), np.asarray(self.region_high)
        goal_xy = rng.uniform(low, high)
        mover = EeMover(task, self.step)
        # let go of a cube the episode may have ended holding, and let it settle
        yield from mover.to(mover.ee + np.array([0.0, 0.0, 0.01]), open_=True, max_periods=5, soft=True)
        yield from mover.hold(self.close_steps, open_=True)
        if not _resting(_cube(task)[0]):   # still in the hand: set it down in the region, free it
            yield from self._set_down(task, mover, goal_xy)
        for attempt in range(self.attempts):
            cube, quat = _cube(task)
            if not in_reach(cube):
                raise ResetError(f"the cube is at ({cube[0]:.3f}, {cube[1]:.3f}) m, out of the arm's "
                                 f"reach for a reset (x {REACH_LOW[0]}..{REACH_HIGH[0]}, y "
                                 f"{REACH_LOW[1]}..{REACH_HIGH[1]} m); put it back in the start region")
            if not _resting(cube):
                raise ResetError(f"the cube is at height {cube[2]:.3f} m, not resting on the table "
                                 "(fallen off or stuck); put it back in the start region")
            roll = yaw_off_radial(cube, quat)   # fingers square to the faces
            # straight up first: a diagonal climb from where the episode left the hand, turning
            # the wrist on the way, swept the cube out of reach
            yield from mover.to((mover.ee[0], mover.ee[1], max(mover.ee[2], self.hover)), open_=True)
            yield from mover.to((cube[0], cube[1], self.hover), open_=True, roll=roll)
            if not (yield from mover.to((cube[0], cube[1], self.grasp_z), open_=True, roll=roll, speed=0.6,
                                        max_periods=40, soft=True)):
                # fingers landed on the cube: back up and try again from its new pose
                yield from mover.to((mover.ee[0], mover.ee[1], self.hover), open_=True)
                continue
            yield from mover.hold(self.close_steps, open_=False)
            yield from mover.to((cube[0], cube[1], self.hover), open_=False)
            if _cube(task)[0][2] > CUBE_HALF + 0.02:
                break
            yield from mover.hold(2, open_=True)           # missed: open and look again
        else:
            raise ResetError(f"could not grasp the cube in {self.attempts} attempts; put it in the "
                             "start region by hand")
        yield from mover.to((goal_xy[0], goal_xy[1], self.hover), open_=False)
        # turn the wrist so the cube goes down a face toward the arm, yaw drawn like a teleport
        # start's: carried over from the grasp it could sit 45 deg off and offer the fingers an edge
        # (the held cube turns with the wrist: its yaw off the radial direction follows the roll)
        cube, quat = _cube(task)
        yaw = rng.uniform(-START_YAW_SPREAD, START_YAW_SPREAD)
        yield from mover.to((goal_xy[0], goal_xy[1], self.hover), open_=False,
                            roll=mover.roll - mover.roll0 + yaw - yaw_off_radial(cube, quat))
        yield from mover.to((goal_xy[0], goal_xy[1], self.place_z), open_=False, speed=0.6)
        yield from mover.hold(self.close_steps, open_=True)
        yield from self._set_down(task, mover, goal_xy)
        yield from mover.to((goal_xy[0], goal_xy[1], self.hover), open_=True)
        yield from move_home(task)
        cube = _cube(task)[0]
        if not (np.all(cube[:2] >= low - 0.01) and np.all(cube[:2] <= high + 0.01)
                and abs(cube[2] - CUBE_HALF) < 0.005):
            raise ResetError(f"the cube ended at ({cube[0]:.3f}, {cube[1]:.3f}, {cube[2]:.3f}) m, "
                             "outside the start region (slipped while placing)")

    def _set_down(self, task, mover, goal_xy):
        """Open over the goal; if the cube stays between the fingers, press it down and twist."""
        from robolearn.sim.arm_workspace import CUBE_HALF

        for wiggle in (0.4, -0.4, 0.8, -0.8):
            yield from mover.to((goal_xy[0], goal_xy[1], 0.05), open_=True)
            if _cube(task)[0][2] < CUBE_HALF + 0.01:
                break
            # still wedged between the open fingers (held across a diagonal): press it onto the
            # table, which tips it flat, and twist the wrist free
            yield from mover.to((goal_xy[0], goal_xy[1], self.place_z - 0.012), open_=True, speed=0.4,
                                soft=True, max_periods=15)
            yield from mover.to((goal_xy[0], goal_xy[1], self.place_z), open_=True, soft=True,
                                roll=mover.roll - mover.roll0 + wiggle, max_periods=10)


def _resting(cube) -> bool:
    """On the table (any face down, or tipped on an edge: a grasp squares it up)."""
    from robolearn.sim.arm_workspace import CUBE_HALF

    return CUBE_HALF - 0.005 <= cube[2] <= CUBE_HALF * 1.45


def _cube(task):
    """Fresh cube pose (the task caches its measurement per env step; resets step on their own)."""
    task._fresh = False
    return task.cube_pose()


def yaw_off_radial(cube: np.ndarray, quat: np.ndarray) -> float:
    """How far (rad) the cube's faces are turned from the radial direction, folded into +-45 deg
    (a cube face normal that lies flat, whichever face is up). It is also the wrist-roll offset
    from home that squares the fingers to the faces: the fingers' closing axis turns with the
    roll, and at home it is tangential, square to a radially aligned cube.
    (Until 2026-11-24 the grasp used minus this: fingers 2x the yaw off, a cube 22 deg off met
    them across its diagonal and stuck between the open fingers.)"""
    w, x, y, z = (float(v) for v in quat)
    # columns of the cube's rotation matrix: its x and y axes in the world
    axes = ((1 - 2 * (y * y + z * z), 2 * (x * y + w * z), 2 * (x * z - w * y)),
            (2 * (x * y - w * z), 1 - 2 * (x * x + z * z), 2 * (y * z + w * x)))
    ax = min(axes, key=lambda a: abs(a[2]))          # the more horizontal of the two
    rel = math.atan2(ax[1], ax[0]) - math.atan2(cube[1], cube[0])
    return (rel + math.pi / 4) % (math.pi / 2) - math.pi / 4
