"""3Dconnexion SpaceMouse teleop through hidapi (`pip install hidapi`; imported only when used).

Why a 6-DoF puck: end-effector teleop wants simultaneous x/y/z (+ rotation) rates, which a
keyboard cannot give. The HID reports are parsed here (`parse_report`) so the byte layout is
tested without the device:

    report 1: x, y, z translation as int16 little-endian (newer models append rx, ry, rz: 13 bytes)
    report 2: rx, ry, rz rotation as int16 little-endian
    report 3: button bitmask (bit 0 left, bit 1 right)

Full deflection is about +-350 counts (`scale`). Defaults map push forward -> dim 0 +, push
left -> dim 1 +, lift -> dim 2 +; the left button closes and the right opens the gripper on
`button_dim`; both buttons together mark success. Any deflection engages takeover.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from robolearn.errors import ConfigError, DeviceDisconnectedError
from robolearn.teleop.base import DeviceCommand, DeviceNotFoundError

VENDOR_IDS = (0x256F, 0x046D)  # 3Dconnexion, and Logitech (older 3Dconnexion pucks)
AXES = ("x", "y", "z", "rx", "ry", "rz")


@dataclass
class SpaceMouseConfig:
    vendor_id: int | None = None
    product_id: int | None = None
    scale: float = 350.0
    deadzone: float = 0.05
    axes: tuple[str, ...] = ("-y", "-x", "-z", "rx", "ry", "rz")  # source axis per action dim
    button_dim: int | None = -1    # dim driven by the buttons (gripper); None: buttons only mark events


def parse_report(data: bytes | list[int], state: dict[str, float]) -> int | None:
    """Update `state` (raw counts per axis, 'buttons') from one HID report; return its id."""
    data = bytes(data)
    if not data:
        return None
    rid = data[0]
    if rid == 1 and len(data) >= 7:
        state["x"], state["y"], state["z"] = struct.unpack_from("<hhh", data, 1)
        if len(data) >= 13:
            state["rx"], state["ry"], state["rz"] = struct.unpack_from("<hhh", data, 7)
    elif rid == 2 and len(data) >= 7:
        state["rx"], state["ry"], state["rz"] = struct.unpack_from("<hhh", data, 1)
    elif rid == 3 and len(data) >= 2:
        state["buttons"] = data[1]
    return rid


class SpaceMouseMapper:
    """Raw counts -> DeviceCommand (pure; the device class only feeds it reports)."""

    def __init__(self, action_dim: int, config: SpaceMouseConfig):
        self.config = config
        self.dim = action_dim
        self.map = []
        for spec in config.axes:
            name = spec.lstrip("+-")
            if name not in AXES:
                raise ConfigError(f"SpaceMouseConfig.axes: unknown axis {spec!r}; use {AXES} ('-' inverts)")
            self.map.append((name, -1.0 if spec.startswith("-") else 1.0))
        self.button_dim = None if config.button_dim is None else config.button_dim % action_dim
        self.state: dict[str, float] = {a: 0.0 for a in AXES} | {"buttons": 0}
        self._prev_buttons = 0

    def command(self) -> DeviceCommand:
        a = np.zeros(self.dim, np.float32)
        k = 0
        for d in range(self.dim):
            if d == self.button_dim:
                continue
            if k < len(self.map):
                name, sign = self.map[k]
                v = sign * self.state[name] / self.config.scale
                a[d] = 0.0 if abs(v) < self.config.deadzone else v
                k += 1
        b = int(self.state["buttons"])
        if self.button_dim is not None:
            a[self.button_dim] = -1.0 if b & 1 else (1.0 if b & 2 else 0.0)
        events = {"success"} if (b & 3) == 3 and (self._prev_buttons & 3) != 3 else set()
        self._prev_buttons = b
        a = np.clip(a, -1, 1)
        return DeviceCommand(a, bool(np.any(a != 0)), events)


class SpaceMouseDevice:
    name = "spacemouse"

    def __init__(self, action_dim: int, config: SpaceMouseConfig | None = None):
        self.config = cfg = config or SpaceMouseConfig()
        try:
            import hid
        except ImportError:
            raise DeviceNotFoundError("SpaceMouse support needs the `hidapi` package: pip install hidapi "
                                      "(and the libhidapi system library); or use --device keyboard") from None
        if not hasattr(hid, "device"):  # the unrelated ctypes `hid` package shadows hidapi's module
            raise DeviceNotFoundError("the installed `hid` module is not hidapi's: pip uninstall hid; "
                                      "pip install hidapi")
        vendors = (cfg.vendor_id,) if cfg.vendor_id else VENDOR_IDS
        found = [d for d in hid.enumerate() if d["vendor_id"] in vendors
                 and (cfg.product_id is None or d["product_id"] == cfg.product_id)]
        if not found:
            raise DeviceNotFoundError("no SpaceMouse found (USB vendor 0x256f/0x046d); plug it in and allow "
                                      "access with a udev rule for /dev/hidraw*")
        self.dev = hid.device()
        try:
            self.dev.open_path(found[0]["path"])
        except OSError as exc:
            raise DeviceNotFoundError(f"cannot open SpaceMouse {found[0]['path']!r}: {exc}; check the "
                                      "udev permissions of /dev/hidraw*") from None
        self.dev.set_nonblocking(True)
        self.product = found[0].get("product_string") or "SpaceMouse"
        self.mapper = SpaceMouseMapper(action_dim, cfg)

    def read(self, obs=None) -> DeviceCommand:
        try:
            while True:
                data = self.dev.read(64)
                if not data:
                    break
                parse_report(data, self.mapper.state)
        except (OSError, ValueError) as exc:
            raise DeviceDisconnectedError(f"SpaceMouse disconnected ({exc}); plug it back in and restart") from None
        return self.mapper.command()

    def reset(self) -> None:
        pass

    def help(self) -> str:
        return (f"{self.product}: push/lift the puck to move ({', '.join(self.config.axes)}); left button "
                "closes, right opens the gripper; both buttons: success; Ctrl-C: quit")

    def close(self) -> None:
        try:
            self.dev.close()
        except Exception:  # noqa: BLE001
            pass
