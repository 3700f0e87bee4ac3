"""What an input device is: something that turns a human (or a script) into env actions.

Every device returns a `DeviceCommand` per control step: a normalised action in the env's
[-1, 1] action space, whether the human is actively driving (`engaged`: the intervention
switch), and one-shot `events` such as marking an episode a success. Recording, live teleop
and interventions only use this protocol, so a new device is one class.

`read(obs)` receives the current observation because the scripted "device" (the task's
scripted controller) needs it; human devices ignore it. A device may also define
`observe(info)`, which the recorder and the intervention wrapper call after every step (the
scripted device uses it to emit "success" when the env reports it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from robolearn.errors import DeviceError

#: one-shot events a device can emit
#: ("mark": "success now" on this step, a per-frame label that does not end the episode)
EVENTS = frozenset({"success", "failure", "discard", "quit", "mark"})


class DeviceNotFoundError(DeviceError):
    """The input device (or the library needed to read it) is not available."""


@dataclass
class DeviceCommand:
    action: np.ndarray                       # float32, in the env action space [-1, 1]
    engaged: bool = False                    # the human is driving (hold / toggle)
    events: set[str] = field(default_factory=set)


@runtime_checkable
class Device(Protocol):
    #: short id stored per step in datasets ("keyboard", "scripted", ...)
    name: str

    def read(self, obs: dict | None = None) -> DeviceCommand: ...
    def reset(self) -> None:
        """A new episode starts (scripted controllers re-plan; human devices forget held keys)."""
    def close(self) -> None: ...
    def help(self) -> str:
        """One-paragraph description of the controls, printed by `record`/`teleop`."""


def clip_action(a, dim: int) -> np.ndarray:
    """Shape-check a device action and keep it inside [-1, 1] (a device's own saturation)."""
    a = np.asarray(a, dtype=np.float32).reshape(-1)
    if a.shape != (dim,):
        raise DeviceError(f"device produced an action of shape {a.shape}, the env needs ({dim},)")
    if not np.all(np.isfinite(a)):
        raise DeviceError(f"device produced a non-finite action {a.tolist()}; check its calibration")
    return np.clip(a, -1.0, 1.0).astype(np.float32)


def action_dim(env) -> int:
    return int(np.prod(env.action_space.shape))
