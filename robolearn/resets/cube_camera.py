"""Cube reset on a robot without a simulator: look with the camera, pick, place, look again.

Why: `PlaceCube` (cube.py) reads the cube pose from the simulator, so on `backend="real"` the
lift and push tasks could only send the arm home and every episode after the first started
wherever the last one left the cube (often outside the start region, where the policy's
localiser was never trained). This controller does the same pick-and-place with what a robot
has: a camera estimate of the cube's x, y (`policies/cube_finder.CubeFinder`, taken with the
arm folded out of the view), the gripper's measured opening (a gripper that stops short of
closed is holding the cube), and a second look to check where the cube ended up. When any of
it fails it raises `ResetError`; the `ResetSupervisor` then retries, and after that holds the
robot and asks the operator (robolearn/resets/prompt.py; in emulated sessions the emulated
operator's hand, robolearn/teleop/operator.py), counted as a human prompt.

The grasp is top-down at the radial wrist roll (as the policy grasps), without a yaw
estimate (the cube is ~4 px wide at 84x84); the cube is placed at the same roll, so it keeps
its yaw relative to the radial direction. Limitation: the model's gripper opens 4.0 cm and a
3 cm cube's diagonal is 4.2 cm, so a cube turned more than ~25 deg to the fingers wedges
between the open fingers (the simulator's PlaceCube turns the wrist to the cube's faces, which
it knows); the fingers' measured opening shows it and the reset fails with that message.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robolearn.errors import ConfigError
from robolearn.resets.scripted import EeMover, MoveToJoints, move_home
from robolearn.sim.arm_workspace import REACH_HIGH, REACH_LOW, in_reach
from robolearn.errors import ResetError


@dataclass
class PlaceCubeByCamera:
    """Reset controller: cube (seen by `finder`) to a uniform point of the region, arm home."""

    finder: object                     # policies.cube_finder.CubeFinder (camera, look_q, locate)
    region_low: tuple = (0.16, -0.12)
    region_high: tuple = (0.28, 0.12)
    hover: float = 0.06                # m above the table for moves with the cube clear of it
    grasp_z: float = 0.02              # grasp-point height when closing (cube centre 0.015)
    place_z: float = 0.026             # grasp-point height when letting go
    step: float = 0.02                 # m per control period
    close_steps: int = 6
    attempts: int = 3                  # grasps tried before the reset fails
    held_margin: float = 0.35          # rad: a gripper stopped this far from closed holds the cube
    settle_periods: int = 4            # control periods still at the look pose before looking
    # arrival: within `tol` of the target (m) or `max_periods` elapsed; the path is commanded,
    # so a sagging arm (soft servos under load) goes on from where it was told to be
    tol: float = 0.012
    max_periods: int = 60
    check_margin: float = 0.015        # m: the placed cube may lie this far outside the region
    # keep a cube the first look sees inside the region where it lies (arm home only): the push
    # goal is drawn around where the cube is, so a start inside the region is a start the policy
    # trained from, and the ~20 s pick-and-place is only for a cube pushed out of it
    keep_in_region: bool = False
    inset: float = 0.01                # m: "inside" means this far inside the region's edges
    kind = "scripted"

    def camera(self, task):
        cams = getattr(task.backend, "cameras", {}) or {}
        name = self.finder.camera
        if name not in cams:
            raise ConfigError(f"the camera cube reset looks through camera {name!r}; this robot has "
                              f"{sorted(cams)}: add it to the env's camera= option")
        return cams[name]

    def run(self, task, rng):
        cam = self.camera(task)
        task.cube_seen_xy = None          # until this reset has seen the cube placed
        low, high = np.asarray(self.region_low), np.asarray(self.region_high)
        goal_xy = rng.uniform(low, high)
        dt = 1.0 / task.control_hz
        mover = EeMover(task, self.step)
        # let go of a cube the episode may have ended holding, and rise clear of the table
        yield from mover.hold(self.close_steps, open_=True)
        if self.pushed_open(task):
            raise ResetError("the cube is wedged across the open fingers (held by its diagonal, wider "
                             "than the gripper opens); take it out of the gripper")
        yield from self._go(mover, (mover.ee[0], mover.ee[1], max(mover.ee[2], self.hover + 0.02)),
                            open_=True)
        if self.keep_in_region:
            xy = yield from self._look(task, cam, dt)
            if np.all(xy >= low + self.inset) and np.all(xy <= high - self.inset):
                yield from move_home(task)
                task.cube_seen_xy = xy
                return
        for attempt in range(self.attempts):
            xy = yield from self._look(task, cam, dt)
            if not in_reach(xy):
                raise ResetError(f"the camera sees the cube at ({xy[0]:.3f}, {xy[1]:.3f}) m, out of the "
                                 f"arm's reach for a reset (x {REACH_LOW[0]}..{REACH_HIGH[0]}, y "
                                 f"{REACH_LOW[1]}..{REACH_HIGH[1]} m); put it back in the start region")
            yield from MoveToJoints(task.home_q, task.home_gripper, dt=dt).motion(task.arm)
            mover = EeMover(task, self.step)
            yield from self._go(mover, (xy[0], xy[1], self.hover), open_=True, roll=0.0)
            yield from self._go(mover, (xy[0], xy[1], self.grasp_z), open_=True, roll=0.0, speed=0.6)
            yield from mover.hold(self.close_steps, open_=False)
            yield from self._go(mover, (xy[0], xy[1], self.hover), open_=False)
            if self.holding(task):
                break
            yield from mover.hold(2, open_=True)          # closed on nothing: open, look again
            yield from self._go(mover, (xy[0], xy[1], self.hover + 0.02), open_=True)
        else:
            raise ResetError(f"could not grasp the cube in {self.attempts} attempts (the gripper "
                             "closed on nothing each time); put it in the start region by hand")
        yield from self._go(mover, (goal_xy[0], goal_xy[1], self.hover), open_=False)
        yield from self._go(mover, (goal_xy[0], goal_xy[1], self.place_z), open_=False, speed=0.6)
        yield from mover.hold(self.close_steps, open_=True)
        if self.pushed_open(task):
            raise ResetError("the cube stayed wedged across the open fingers (held by its diagonal, "
                             "wider than the gripper opens); take it out of the gripper")
        yield from self._go(mover, (goal_xy[0], goal_xy[1], self.hover), open_=True, speed=0.6)
        xy = yield from self._look(task, cam, dt)
        yield from move_home(task)
        if not (np.all(xy >= low - self.check_margin) and np.all(xy <= high + self.check_margin)):
            raise ResetError(f"after placing, the camera sees the cube at ({xy[0]:.3f}, {xy[1]:.3f}) m, "
                             "outside the start region (slipped, or still in the gripper)")
        task.cube_seen_xy = xy            # where the episode's cube is: push draws its goal around it

    def pushed_open(self, task) -> bool:
        """Fingers held past fully open: a cube across its diagonal is wedged between them."""
        g = float(task.arm.read().gripper)
        closed, opened = float(task.spec.gripper_closed), float(task.spec.gripper_open)
        return (g - opened) * np.sign(opened - closed) > 0.02

    def _go(self, mover, target, **kw):
        return (yield from mover.to(target, tol=self.tol, soft=True, max_periods=self.max_periods, **kw))

    def holding(self, task) -> bool:
        """The fingers stopped short of closed: something (the cube) is between them."""
        g = float(task.arm.read().gripper)
        closed, opened = float(task.spec.gripper_closed), float(task.spec.gripper_open)
        return (g - closed) * np.sign(opened - closed) > self.held_margin

    def _look(self, task, cam, dt):
        """Fold the arm out of the camera's view, wait for it to settle, estimate the cube x, y."""
        q = np.clip(np.asarray(self.finder.look_q, float), task.kin.lower, task.kin.upper)
        yield from MoveToJoints(q, task.home_gripper, dt=dt).motion(task.arm)
        for _ in range(self.settle_periods):
            task.arm.command(q, task.home_gripper)
            task.arm.advance(dt)
            yield dt
        from robolearn.policies.cube_finder import CubeNotSeenError

        try:
            return np.asarray(self.finder.locate(cam), dtype=np.float64)
        except CubeNotSeenError as exc:
            raise ResetError(f"{exc} (fallen off, hidden, or still in the gripper); put it back in the "
                             "start region") from None
