"""ArmReach's own reward rule as a reward "model" on disk (`kind = "reach_distance"`).

Why it exists: a session's reward must come through a reward model for the reward server to
have something to serve (`[reward] where = "server"`), and the product has no state-based
learned kind (the classifier and progress models read cameras). This folder holds only a
`reward.json` (no weights): reward -scale x |target - ee| and success within `radius`, read
from the state vector's `target - ee` slice (robolearn/tasks/arm.py, "State vector") -- the
same numbers the task computes from the measured joints. It is loaded by `build_model` like
any model folder, so the server, the learner and the env all take the one loading path.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from robolearn.rewards.base import RewardModelError
from robolearn.rewards.checkpoint import FORMAT, META, read_meta

KIND = "reach_distance"
#: ArmReach's state: q (5), dq (5), gripper (1), ee (3), target (3), target - ee (3)
STATE_DIM = 20
DIFF = (17, 20)


def save_reach_distance(out: str | os.PathLike) -> Path:
    """Write the rule's folder (reward.json) with ArmReach's scale and success radius."""
    from robolearn.jsonfile import write_json_atomic
    from robolearn.sim.arm_workspace import DISTANCE_REWARD_SCALE, REACH_RADIUS

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / META, {"format": FORMAT, "kind": KIND, "scale": DISTANCE_REWARD_SCALE,
                                   "radius": REACH_RADIUS, "state_dim": STATE_DIM,
                                   "diff_slice": list(DIFF)}, indent=2)
    return out


class ReachDistanceReward:
    """RewardSource over `obs["state"]`: (-scale * distance, distance < radius)."""

    cameras: list[str] = []

    def __init__(self, path: str | os.PathLike, threshold: float | None = None):
        meta = read_meta(path, KIND)
        try:
            self.scale = float(meta["scale"])
            self.radius = float(meta["radius"] if threshold is None else threshold)
            self.state_dim = int(meta["state_dim"])
            self.lo, self.hi = (int(i) for i in meta["diff_slice"])
        except (KeyError, TypeError, ValueError) as exc:
            raise RewardModelError(f"reward model {path}: {META} lacks scale/radius/state_dim/diff_slice "
                                   f"({exc}); write it with save_reach_distance") from None
        self.path = str(path)

    def reset(self) -> None:
        pass

    def __call__(self, obs: dict, info: dict) -> tuple[float, bool]:
        state = None if obs is None else obs.get("state")
        if state is None:
            raise RewardModelError(f"reward model {self.path} ({KIND}) reads obs['state']; the observation "
                                   f"has {sorted(obs or {})} (use obs = \"state\" or \"both\")")
        state = np.asarray(state, np.float64).reshape(-1)
        if state.shape[0] != self.state_dim:
            raise RewardModelError(f"reward model {self.path} ({KIND}) reads ArmReach's state of "
                                   f"{self.state_dim} values; got {state.shape[0]} (another task?)")
        diff = state[self.lo:self.hi]
        dist = math.sqrt(float(diff @ diff))
        return -self.scale * dist, dist < self.radius
