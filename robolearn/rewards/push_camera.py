"""ArmPush's reward on a robot: the cube's table position from the fixed camera's cube finder.

Why not a learned classifier as for lift: push has a dense reward and a success region that are
geometry (cube-goal and grasp point-cube distances), and every term but the cube's position is
known on a robot without a simulator: the goal is chosen by the software, the grasp point is the
arm's kinematics at the measured joints. The cube stays on the table, which is exactly what the
cube finder measures (policies/cube_finder.py: the red blob's centre through a table homography
the session's camera calibration fits, ~7 mm held-out on the emulated hard robot). So the reward
here is the simulator task's own (`robolearn.tasks.arm.push_reward`) at the finder's position,
and nothing is learned that a policy could fool.

A frame where the finder sees no cube, or only part of it (the arm in front of it, the cube pushed
off the table), or where the gripper holds the cube (off the table: the homography cannot place
it)
gives a MISSING reward (NaN), never a made-up number: the env flags the step
(`info["reward_missing"]`), the learner drops it, and the session report counts it
(`reward_missing_steps`); such a step is never a success. `not_seen` and `in_hand` count them here.

`hidden = "last_seen"` ([reward] table) gives a hidden frame the reward at the cube's last whole
sighting in this episode instead (never a success; `filled` counts them). Why: dropped steps are
where a push policy gets stuck with the arm in front of the cube (sessions 6-8: 18-36 % of the
robot's transitions, most of them in failed episodes), so the critic never saw those states
score badly and fine-tuning could not learn to leave them. The last sighting is what the policy
itself is shown there (policies/finder_estimate.py), and a cube the arm rests against has not moved.
A cube held in the gripper stays MISSING either way (it is off the table).
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from robolearn.rewards.base import MISSING, RewardModelError, camera_images
from robolearn.rewards.grasp_check import GripperHold
from robolearn.sim.arm_workspace import PUSH_RADIUS

log = logging.getLogger(__name__)

#: a blob under this share of the whole cube's area (the arm in front of part of it) is not a
#: sighting for the reward: its centre is pulled off the cube (policies/cube_finder.py)
WHOLE_SHARE = 0.7
#: the reward's success: the camera puts the cube this much inside the task's 3 cm (m): about the
#: finder's 90th-percentile error, so a success it reports is a true one (measured on a push
#: policy's episodes in sim: precision 0.94 -> 1.00 plain, 0.88 -> 1.00 with the hard camera)
SUCCESS_MARGIN = 0.005
#: ... and at least this many times the finder's own held-out mean error (its calibration report):
#: a 2-D error with independent Gaussian axes has a Rayleigh length, whose 90th percentile is 1.71
#: x its mean. On the emulated hard robot the refitted finder is 8.6 mm off on held-out frames
#: (sim: 1.9 mm), so 5 mm let through successes seen at 2.2-2.5 cm that were > 3 cm true (5 of 12
#: in a session, docs/bench/finetune/README.md "Push"); 1.71 x 8.6 = 14.7 mm keeps them out.
P90_PER_MEAN_ERROR = 1.71


def success_margin_for(finder) -> float:
    """How far inside the task's 3 cm the seen cube must be for a success: `SUCCESS_MARGIN`, or
    `P90_PER_MEAN_ERROR` x the finder's held-out mean error (its fit report) where that is more."""
    heldout = float((getattr(finder, "report", None) or {}).get("heldout_error_m") or 0.0)
    if not np.isfinite(heldout):
        heldout = 0.0
    return float(min(max(SUCCESS_MARGIN, P90_PER_MEAN_ERROR * heldout), 0.5 * PUSH_RADIUS))


class CubeFinderPushReward:
    """`(reward, success)` of ArmPush from one frame of the finder's camera (`bind(env)` first:
    the env's task gives the goal and the measured grasp point, its backend the camera)."""

    def __init__(self, finder, whole_share: float = WHOLE_SHARE, success_margin: float | None = None,
                 hidden: str = "missing"):
        from robolearn.policies.cube_finder import CubeFinder
        from robolearn.reward_config import HIDDEN

        if hidden not in HIDDEN:
            raise RewardModelError(f"hidden={hidden!r}: choose one of {', '.join(HIDDEN)}")
        self.hidden = hidden

        if isinstance(finder, (str, Path)):
            finder = CubeFinder.load(finder)
        self.finder = finder
        self.whole_share = float(whole_share)
        if success_margin is None:   # from the finder's calibration: its held-out error on this camera
            success_margin = success_margin_for(finder)
        self.success_margin = float(success_margin)
        log.info("push reward: success when the camera sees the cube within %.1f mm of the goal",
                 1000 * (PUSH_RADIUS - self.success_margin))
        self.cameras = [finder.camera]
        self.env = None
        self.not_seen = 0
        self.in_hand = 0
        self.filled = 0      # hidden frames given the last sighting's reward (hidden = "last_seen")
        self.calls = 0
        self.last_xy: np.ndarray | None = None
        self._sighting: np.ndarray | None = None   # the last whole sighting this episode
        self._hold = GripperHold()

    def bind(self, env) -> None:
        task = getattr(env, "task", None)
        if getattr(task, "name", None) != "push":
            raise RewardModelError(f"[reward] kind = \"cube_finder\" is ArmPush's reward (the cube on the table); "
                                   f"this env's task is {getattr(task, 'name', None)!r}")
        cams = getattr(env.backend, "cameras", None) or {}
        if self.finder.camera not in cams:
            raise RewardModelError(f"cube finder {self.finder.source or ''} looks through camera "
                                   f"{self.finder.camera!r}; the env has {sorted(cams) or 'no cameras'} "
                                   f"(add camera {self.finder.camera!r})")
        self.env = env

    def reset(self) -> None:
        self.last_xy = None
        self._sighting = None
        self._hold.reset()

    def _holds(self, task) -> bool:
        """The gripper closed on something (rewards/grasp_check.py) and at rest (not still
        closing, which a slow servo takes several steps to do): a push policy that grasps and
        carries the cube (seen in sim with the hard reality: the finder then put a lifted cube
        29-95 mm off, and fired a false success)."""
        return self._hold(task)

    def __call__(self, obs: dict, info: dict) -> tuple[float, bool]:
        from robolearn.policies.cube_finder import CubeNotSeenError
        from robolearn.sim.arm_workspace import CUBE_HALF
        from robolearn.tasks.arm import push_reward

        if self.env is None:
            raise RewardModelError("the cube-finder push reward reads the env's goal and arm: bind(env) first "
                                   "(gymnasium.make(..., reward_source=...) does)")
        self.calls += 1
        task = self.env.task
        if self._holds(task):   # the cube in the hand is off the table: the homography cannot place it
            self.in_hand += 1
            self.last_xy = self._sighting = None
            return MISSING, False
        cam = self.finder.camera
        image = camera_images(obs, [cam], tuple(self.finder.image_shape), self.env)[cam]
        try:
            xy = self.finder.estimate(image, whole_share=self.whole_share)
        except CubeNotSeenError:
            self.not_seen += 1
            self.last_xy = None
            if self.hidden == "last_seen" and self._sighting is not None:
                self.filled += 1
                reward, _, _ = push_reward((self._sighting[0], self._sighting[1], CUBE_HALF), task.ee_pos, task.goal)
                return reward, False
            if self.not_seen in (1, 10, 100, 1000, 10000):
                log.warning("push reward: the cube finder saw no cube in %d of %d frames so far "
                            "(reward missing on those steps)", self.not_seen, self.calls)
            return MISSING, False
        self.last_xy = self._sighting = xy
        reward, success, d_goal = push_reward((xy[0], xy[1], CUBE_HALF), task.ee_pos, task.goal)
        if self.success_margin:
            success = d_goal < PUSH_RADIUS - self.success_margin
        return reward, success
