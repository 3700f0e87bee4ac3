"""The operator confirms or corrects the success classifier during a session (HIL-SERL's loop).

Why: a policy in training searches for whatever the reward pays, including the classifier's
mistakes; the operator watching the robot is the one judge it cannot fool. At the end of every
episode the reward called a success (and of a random share of the others), the operator says
whether it was one; the frame the reward judged becomes a labelled frame in the session's
`LabelStore` (never dropped: a label against a confident classifier is kept and flagged), and
the classifier is retrained from those labels off the loop (`rewards/retrain.py`).

Who answers:
- `EmulatedOperator` (an emulated robot): the person's eyes are the emulator's truth
  (`info["true_success"]` at that frame, drivers/truth.py), and like a person it errs: each
  answer is flipped with probability `error_rate` (default 0.02, seeded), so the loop is
  measured with the noise a real operator brings;
- `DeviceOperator` (a physical arm): the teleop device's success/failure keys between episodes
  (keyboard: Enter = "yes, a success", x = "no"), waiting up to `timeout_s`; no key, no label.

Which frame: the step where the reward fired (the episode ends there); for an episode it did
not call a success, the frame it scored highest (its nearest miss, or the success it missed).
`RUN/reward_labels/episodes.jsonl` keeps one line per episode (steps, the reward's verdict, the
truth at that frame where there is one, the label, the model version) for the session report.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np

from robolearn.errors import ConfigError
from robolearn.rewards.label_store import LabelStore

log = logging.getLogger(__name__)

EPISODES = "episodes.jsonl"


@dataclass
class Seen:
    """One frame the reward judged: what the operator is asked about."""
    step: int
    score: float
    images: dict
    truth: bool | None      # emulated robots only (the emulator's truth): reports and the emulated eyes
    fired: bool             # the reward called it a success


class EmulatedOperator:
    """Answers with the truth at that frame, wrong with probability `error_rate` (seeded)."""

    name = "emulated"

    def __init__(self, error_rate: float = 0.02, seed: int = 0):
        if not 0.0 <= error_rate < 0.5:
            raise ConfigError(f"operator error_rate={error_rate!r}: must be in [0, 0.5)")
        self.error_rate = float(error_rate)
        self.rng = np.random.default_rng(seed)
        self.errors = 0

    def label(self, seen: Seen) -> bool | None:
        if seen.truth is None:
            return None
        wrong = bool(self.rng.random() < self.error_rate)
        self.errors += wrong
        return bool(seen.truth) ^ wrong


class DeviceOperator:
    """A person at the robot answers on the teleop device: "success" event (keyboard Enter) =
    yes, "failure" event (keyboard x) = no; none within `timeout_s` = no label."""

    name = "device"

    def __init__(self, device, timeout_s: float = 5.0, poll_s: float = 0.05, clock=time.monotonic):
        self.device = device
        self.timeout_s = float(timeout_s)
        self.poll_s = float(poll_s)
        self.clock = clock

    def label(self, seen: Seen) -> bool | None:
        verdict = "called a success" if seen.fired else f"scored {seen.score:.2f} (no success)"
        print(f"reward label: the classifier {verdict}: Enter = it was a success, x = it was not "
              f"({self.timeout_s:.0f} s)", flush=True)
        end = self.clock() + self.timeout_s
        while self.clock() < end:
            events = self.device.read(None).events
            if "success" in events:
                return True
            if "failure" in events:
                return False
            time.sleep(self.poll_s)
        return None


def find_in_chain(source, attr: str):
    """The first object of a wrapped reward source (`.inner` chain) that has `attr`."""
    seen = 0
    while source is not None and seen < 10:
        if hasattr(source, attr):
            return source
        source, seen = getattr(source, "inner", None), seen + 1
    return None


class SuccessLabelling(gym.Wrapper):
    """Asks `operator` about the reward's successes (and `sample_others` of the other episodes)
    at each episode's end; labels go to `store`, one line per episode to `episodes.jsonl`."""

    def __init__(self, env: gym.Env, store: LabelStore, operator, sample_others: float = 0.1,
                 seed: int = 0):
        super().__init__(env)
        if not 0.0 <= sample_others <= 1.0:
            raise ConfigError(f"label sample_others={sample_others!r}: must be in [0, 1]")
        source = getattr(env.unwrapped, "reward_source", None)
        if find_in_chain(source, "last_images") is None:
            raise ConfigError("operator labels need a camera success classifier as the env's reward "
                              "([reward] model = DIR, where = \"env\")")
        self.source = source
        self.store, self.operator = store, operator
        self.sample_others = float(sample_others)
        self.rng = np.random.default_rng(seed + 4242)
        self.episodes_path = Path(store.root) / EPISODES
        self.labels = 0
        self._ep = None

    @property
    def scorer(self):
        """The classifier scoring now, looked up on every use: a published retrain replaces the
        model inside the chain (`ReloadingReward.inner`), and a scorer kept from the start would
        hand the operator the old model's last frame and score for every label after the swap
        (stop 45: session 10's 20 labels after v0001 were one stale frame, and v0002 was trained
        on it; docs/bench/finetune/README.md, "Lift: what the operator counts as progress")."""
        return find_in_chain(self.source, "last_images")

    def _version(self) -> str | None:
        v = find_in_chain(self.source, "version")
        return None if v is None else str(v.version)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._ep = {"steps": 0, "fired": None, "best": None, "true_any": None, "vetoes": 0,
                    "version": self._version()}
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        ep = self._ep
        if ep is None:
            return obs, reward, terminated, truncated, info
        ep["steps"] += 1
        truth = info.get("true_success")
        if truth is not None:
            ep["true_any"] = bool(ep["true_any"] or truth)
        vetoer = find_in_chain(self.source, "last_vetoed")
        if vetoer is not None and vetoer.last_vetoed:
            ep["vetoes"] += 1
        scorer = self.scorer
        score, images = float(scorer.last_score), scorer.last_images
        fired = bool(info.get("success")) and "human_label" not in info and not info.get("reward_missing")
        if images is not None:
            best = ep["best"]
            if fired or best is None or (np.isfinite(score) and score > best.score):
                seen = Seen(ep["steps"], score, {c: np.array(v) for c, v in images.items()},
                            None if truth is None else bool(truth), fired)
                if fired and ep["fired"] is None:
                    ep["fired"] = seen
                if not fired:
                    ep["best"] = seen
        if terminated or truncated:
            info["operator_label"] = self._finish(ep)
            self._ep = None
        return obs, reward, terminated, truncated, info

    def _finish(self, ep: dict) -> bool | None:
        seen = ep["fired"]
        if seen is None and ep["best"] is not None and self.rng.random() < self.sample_others:
            seen = ep["best"]
        label = rec = None
        if seen is not None:
            label = self.operator.label(seen)
            if label is not None:
                rec = self.store.append(seen.images, label, seen.score, float(self.scorer.threshold),
                                        step=seen.step, fired=seen.fired, model_version=ep["version"],
                                        operator=self.operator.name, truth=seen.truth, t_wall=time.time())
                self.labels += 1
                if rec["flagged"]:
                    log.warning("operator label %s contradicts the classifier's confident score %.3f "
                                "(label %d kept, flagged)", label, seen.score, rec["id"])
        fired = ep["fired"]
        line = {"steps": ep["steps"], "reward_success": fired is not None,
                "fire_step": fired.step if fired else None,
                "true_at_fire": fired.truth if fired else None, "true_any": ep["true_any"],
                "asked": seen is not None, "label": label, "label_id": rec["id"] if rec else None,
                "flagged": bool(rec and rec["flagged"]), "vetoes": ep["vetoes"],
                "model_version": ep["version"], "pid": os.getpid(), "t_wall": time.time()}
        try:
            with open(self.episodes_path, "a") as f:
                f.write(json.dumps(line) + "\n")
        except OSError as exc:  # the report loses a line; the robot's loop goes on
            log.error("could not append to %s: %s", self.episodes_path, exc)
        return label
