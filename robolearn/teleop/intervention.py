"""Human interventions (HIL-SERL style): a device takes over while it is engaged.

`InterventionWrapper(env, device)` reads the device every step. While the device is engaged
(a key/button held or takeover toggled on) its action replaces the policy's. Every step's
info carries:

    info["intervention"]         True on steps the human drove
    info["intervention_action"]  the action actually applied (the device's on those steps,
                                 the policy's otherwise), float32

Learners and the actor store `intervention_action` and the flag; RLPD adds flagged steps to
its demo buffer. Device events are passed on in `info["teleop_events"]`; a "success" event
also ends the episode as a success (terminated, `info["success"] = True`) and "failure" /
"discard" truncate it, so a human can label outcomes during training.

Hook for commands (`train`, `actor`, `eval`)::

    from robolearn.teleop.intervention import add_intervene_argument, maybe_intervene
    add_intervene_argument(parser)          # --intervene DEVICE
    env = maybe_intervene(env, args)        # no-op unless --intervene was given
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from robolearn.teleop.base import Device


class InterventionWrapper(gym.Wrapper):
    def __init__(self, env: gym.Env, device: Device):
        super().__init__(env)
        self.device = device
        self._obs = None
        self.interventions = 0   # steps driven by the human since creation
        self.quit_requested = False

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._obs = obs
        self.device.reset()
        info["intervention"] = False
        return obs, info

    def step(self, action):
        cmd = self.device.read(self._obs)
        if cmd.engaged:
            applied = np.asarray(cmd.action, dtype=np.float32)
            self.interventions += 1
        else:
            applied = np.asarray(action, dtype=np.float32)
        obs, reward, terminated, truncated, info = self.env.step(applied)
        info["intervention"] = bool(cmd.engaged)
        info["intervention_action"] = applied
        events = set(cmd.events)
        if events:
            info["teleop_events"] = sorted(events)
        if "success" in events:
            terminated = True
            info["success"] = True
            info["human_label"] = "success"
        elif events & {"failure", "discard"}:
            truncated = True
            info["human_label"] = "failure" if "failure" in events else "discard"
        if "quit" in events:
            self.quit_requested = True
            truncated = True
        observe = getattr(self.device, "observe", None)
        if observe is not None:
            observe(info)
        self._obs = obs
        return obs, reward, terminated, truncated, info

    def close(self):
        try:
            self.device.close()
        finally:
            super().close()


def add_intervene_argument(parser) -> None:
    """`--intervene DEVICE`: let a human take over with that device (hold/toggle to drive)."""
    from robolearn.teleop import DEVICES

    parser.add_argument("--intervene", choices=DEVICES, default=None, metavar="DEVICE",
                        help=f"let a human take over with this input device ({', '.join(DEVICES)}); "
                             "steps they drive are flagged intervention=True for the learner")


def maybe_intervene(env: gym.Env, args_or_device) -> gym.Env:
    """Wrap `env` with an InterventionWrapper if `--intervene` (or a device name) was given."""
    from robolearn.teleop import make_device

    name = getattr(args_or_device, "intervene", args_or_device)
    if not name:
        return env
    return InterventionWrapper(env, make_device(name, env))
