"""Human labels as a reward (HIL-SERL's human classifier): a key or button says "success".

During `actor`, `teleop`, `train --intervene` sessions the operator's device emits events
(keyboard: Enter = episode success, `g` = "success now" on this step, `x` = failure). This
RewardSource turns them into reward 1 + success for the step they arrive on, 0 otherwise.

It reads the device's events one of two ways, so that only one reader ever consumes a
terminal's keys: `tap(device)` returns a device that forwards every `read()` (e.g. to the
intervention wrapper, which drives the robot with it) and copies its events here; or, when
nothing else reads the device, it reads the device itself once per step (`HumanLabelReward(device)`).
"""
from __future__ import annotations

import gymnasium as gym

SUCCESS_EVENTS = frozenset({"success", "mark"})


class _Tap:
    """A Device that forwards to `device` and copies its events into `labels`."""

    def __init__(self, device, labels: "HumanLabelReward"):
        self._device, self._labels = device, labels
        self.name = device.name

    def read(self, obs=None):
        cmd = self._device.read(obs)
        self._labels.push(cmd.events)
        return cmd

    def __getattr__(self, item):  # reset, close, help, observe...
        return getattr(self._device, item)


class HumanLabelReward:
    def __init__(self, device=None, success_reward: float = 1.0):
        self.device = device
        self.success_reward = float(success_reward)
        self._pending: set[str] = set()
        self.labels = {"success": 0, "failure": 0}

    def tap(self, device):
        """Share `device` with another reader (the intervention wrapper) instead of reading it."""
        self.device = None
        return _Tap(device, self)

    def push(self, events) -> None:
        self._pending |= set(events)

    def reset(self) -> None:
        self._pending.clear()

    def __call__(self, obs: dict, info: dict) -> tuple[float, bool]:
        if self.device is not None:
            self.push(self.device.read(obs).events)
        ev, self._pending = self._pending, set()
        if ev & SUCCESS_EVENTS:
            self.labels["success"] += 1
            return self.success_reward, True
        if "failure" in ev:
            self.labels["failure"] += 1
        return 0.0, False


def attach_human_labels(env: gym.Env, device_name: str = "keyboard") -> gym.Env:
    """Make `device_name` the env's reward (its marks) and let it take over (interventions):
    one device, one reader. Returns the InterventionWrapper around `env`."""
    from robolearn.teleop import make_device
    from robolearn.teleop.intervention import InterventionWrapper

    base = env.unwrapped
    labels = HumanLabelReward()
    device = make_device(device_name, env)
    base.reward_source = labels
    return InterventionWrapper(env, labels.tap(device))
