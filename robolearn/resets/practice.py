"""Autonomous practice for the car (FastRLAP): end the episode on a crash or a stall, let the
physical reset (the recovery controller) back the car out, and hand control back.

Why a wrapper: the learner must not see the recovery's actions as its own, and a crash or a
stall is exactly where an episode should end. A crash *terminates* it: for the learner the
attempt is over and worth nothing more (bootstrapping through it, as a time limit would, would
tell a learner paid for progress that hitting the wall costs nothing). A stall is *truncated*:
nothing went wrong that the state alone could tell, the car just stopped making progress. With
`reset_mode="physical"` the next `reset()` runs `RecoverOntoTrack`, so practice runs for as long
as you like with no teleport and no human, unless a recovery itself fails (then the reset
supervisor holds the car and asks the operator).
"""
from __future__ import annotations

import gymnasium as gym

from robolearn.errors import ConfigError


class AutonomousPractice(gym.Wrapper):
    """Terminate on a new wall collision, truncate when `progress` gains less than
    `min_progress` m in `no_progress_s` seconds. `info["practice_trigger"]` says which
    ("collision", "no_progress")."""

    def __init__(self, env: gym.Env, no_progress_s: float = 3.0, min_progress: float = 0.3):
        super().__init__(env)
        base = env.unwrapped
        if getattr(base, "reset_mode", None) != "physical":
            raise ConfigError("autonomous practice needs reset_mode='physical' (the recovery controller "
                              "is the reset); make the env with gymnasium.make(..., reset_mode='physical')")
        if not (hasattr(base.task, "progress") and hasattr(base.task, "collisions")):
            raise ConfigError(f"autonomous practice needs a task that reports `progress` and `collisions` "
                              f"(CarLap); {type(base.task).__name__} does not")
        if no_progress_s <= 0 or min_progress <= 0:
            raise ConfigError("no_progress_s and min_progress must be > 0")
        self.window = max(1, int(round(no_progress_s * base.task.control_hz)))
        self.min_progress = float(min_progress)
        self.collisions = 0
        self.stalls = 0

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._hist = [float(info.get("progress", 0.0))]
        self._coll = int(info.get("collisions", 0))
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        trigger = None
        if int(info.get("collisions", 0)) > self._coll:
            trigger = "collision"
            self.collisions += 1
        self._coll = int(info.get("collisions", 0))
        self._hist.append(float(info.get("progress", 0.0)))
        if trigger is None and len(self._hist) > self.window:
            if self._hist[-1] - self._hist[-1 - self.window] < self.min_progress:
                trigger = "no_progress"
                self.stalls += 1
        if trigger == "collision":
            terminated = True
        elif trigger is not None and not terminated:
            truncated = True
        info["practice_trigger"] = trigger
        return obs, reward, terminated, truncated, info
