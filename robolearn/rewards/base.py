"""Reward sources: where reward and success come from when the simulator cannot say.

On hardware there is no privileged state, so a task's reward comes from a `RewardSource`
(a learned success classifier, a CLIP/VLM reward, a human label). In sim the task's own
ground-truth evaluation is used unless a source is passed, which is how reward models are
validated in sim before they run on a robot.
"""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class RewardSource(Protocol):
    def reset(self) -> None: ...
    def __call__(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> tuple[float, bool]:
        """Return (reward, success) for the observation just reached."""
