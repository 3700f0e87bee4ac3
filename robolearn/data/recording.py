"""Record every episode an env runs, as it runs: the on-robot session's black box.

Why a wrapper: the actor's control loop only sees a Gymnasium env, so wrapping that env is
the one place that sees every reset, action, observation and `info` without the loop or the
learner knowing. Episodes go through `DatasetWriter` (each one whole on disk or absent), so a
crash, a killed learner or Ctrl-C never costs an earlier episode; `close()` commits the
episode in progress as truncated, so a stopped session leaves a complete dataset.

Per episode it also keeps what the session report needs and the learner never sees:
ground truth (`info["true_success"]`, from a simulator or an emulator's oracle: at any step, and
at the last step, where a reward's success ended the episode), the reward
model's verdict, reward-missing steps, interventions and the reset's statistics.
"""
from __future__ import annotations

import logging
from pathlib import Path

import gymnasium as gym
import numpy as np

from robolearn.env import env_control_hz
from robolearn.data.dataset_writer import DatasetWriter

log = logging.getLogger("robolearn.data.recording")

#: info keys summarised per episode into episode.json (absent keys are left out)
EPISODE_KEYS = ("true_success", "true_success_last", "reward_missing")
#: info values whose last value in an episode goes into episode.json (the car's laps, lap times
#: and collisions, for the session report's per-episode curves)
LAST_VALUE_KEYS = ("laps", "collisions", "best_lap_time", "practice_trigger", "progress")


class RecordingWrapper(gym.Wrapper):
    """Writes each episode of `env` to the dataset at `root` (appending if it exists)."""

    def __init__(self, env: gym.Env, root: str | Path, *, env_id: str, device: str = "policy",
                 obs_mode: str | None = None):
        super().__init__(env)
        hz = env_control_hz(env, 0.0)
        self.writer = DatasetWriter(root, env_id=env_id, control_hz=hz,
                                    observation_space=env.observation_space,
                                    action_space=env.action_space, obs_mode=obs_mode)
        self.device = device
        self._ep = None
        self._flags: dict = {}
        self.saved = 0
        self.discarded: dict[str, int] = {}  # reason -> episodes dropped on purpose (discard_episode)

    def reset(self, *, seed=None, options=None):
        self._end_episode()
        obs, info = self.env.reset(seed=seed, options=options)
        ctx = {k: info[k] for k in ("reset",) if k in info}
        self._flags = {"true_success": None, "true_success_last": None, "reward_missing": 0}
        if "progress" in info:  # the car: distance driven = last progress - this
            self._flags["progress_start"] = info["progress"]
        try:
            self._ep = self.writer.start_episode(seed=seed, device=self.device, reset_info=info,
                                                 extra=ctx)
            self._ep.add_reset(obs, info)
        except Exception as exc:  # disk full at the episode's start (its folder, a video file)
            log.error("recording failed at step 0 (%s): episode dropped, session goes on", exc)
            if self._ep is not None:
                self._ep.discard()
            self._ep = None
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._ep is not None:
            try:
                self._ep.add_step(np.asarray(info.get("intervention_action", action), np.float32),
                                  obs, reward, terminated, truncated, info,
                                  device=info.get("device", self.device))
                if "true_success" in info:
                    self._flags["true_success"] = bool(self._flags["true_success"] or
                                                       info["true_success"])
                    # the truth at the episode's last step: where a reward's success ended it
                    self._flags["true_success_last"] = bool(info["true_success"])
                if info.get("reward_missing"):
                    self._flags["reward_missing"] += 1
                self._flags.update({k: info[k] for k in LAST_VALUE_KEYS if k in info})
            except Exception as exc:  # a recording fault must never stop the robot's loop
                log.error("recording failed at step %d (%s): episode dropped, session goes on",
                          self._ep.steps, exc)
                self._ep.discard()
                self._ep = None
            if terminated or truncated:
                self._end_episode()
        return obs, reward, terminated, truncated, info

    def discard_episode(self, reason: str) -> int | None:
        """Drop the episode in progress on purpose (e.g. "camera_dropped": its last frames are
        stale or missing), so that `reset` does not commit it; earlier episodes are untouched.
        Returns its steps, None when none was in progress."""
        ep, self._ep = self._ep, None
        if ep is None or ep.done:
            return None
        steps = ep.steps
        ep.discard()
        self.discarded[reason] = self.discarded.get(reason, 0) + 1
        log.warning("discarded episode in progress (%d steps): %s", steps, reason)
        return steps

    def _end_episode(self) -> None:
        ep, self._ep = self._ep, None
        if ep is None or ep.done:
            return
        if ep.steps == 0:
            ep.discard()
            return
        ep.meta.update({k: v for k, v in self._flags.items() if v is not None})
        try:
            ep.finish()
            self.saved += 1
            # the session's own count of completed episodes (a soak checks the disk against it)
            log.info("recorded episode %d (%d steps)", ep.index, ep.steps)
        except Exception as exc:  # disk full, ...: say so, keep going, earlier episodes intact
            log.error("could not write episode %d: %s", ep.index, exc)
            ep.discard()

    def close(self):
        try:
            self._end_episode()  # the episode in progress is kept, marked truncated
        finally:
            self.writer.close()
            super().close()
