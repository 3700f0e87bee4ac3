"""Gamepad teleop through Linux evdev (`pip install evdev`; imported only when used).

Why evdev: it reads /dev/input/event* directly, with no display or SDL window, so it works on
a headless robot computer. Unlike a terminal, a gamepad reports button releases, so the
takeover switch is a real "hold to drive" button (dead-man style).

Default mapping (Xbox/PS-style pads, names from linux/input-event-codes.h):
    action dims, in order: -ABS_Y (left stick up = +), -ABS_X (left = +), -ABS_RY (right stick
    up = +), ABS_RX, ABS_Z, ABS_RZ     ('-' inverts an axis)
    hold BTN_TL (left bumper): engaged / takeover
    BTN_SOUTH (A/cross): success   BTN_EAST (B/circle): failure
    BTN_WEST (X/square): discard   BTN_START: quit
"""
from __future__ import annotations

import errno
from dataclasses import dataclass

import numpy as np

from robolearn.errors import ConfigError, DeviceDisconnectedError
from robolearn.teleop.base import DeviceCommand, DeviceNotFoundError


@dataclass
class GamepadConfig:
    path: str | None = None      # /dev/input/eventN; None: the first device with analog sticks
    axes: tuple[str, ...] = ("-ABS_Y", "-ABS_X", "-ABS_RY", "ABS_RX", "ABS_Z", "ABS_RZ")
    deadzone: float = 0.1        # |stick| below this reads 0 (sticks never rest exactly at 0)
    engage_button: str = "BTN_TL"
    buttons: tuple[tuple[str, str], ...] = (("BTN_SOUTH", "success"), ("BTN_EAST", "failure"),
                                            ("BTN_WEST", "discard"), ("BTN_START", "quit"))


class GamepadState:
    """Pure mapping from evdev (type, code name, value) events to a DeviceCommand."""

    def __init__(self, action_dim: int, config: GamepadConfig, ranges: dict[str, tuple[int, int]]):
        if action_dim > len(config.axes):
            raise ConfigError(f"GamepadConfig.axes maps {len(config.axes)} dims, the env has {action_dim}")
        self.config = config
        self.dim = action_dim
        self.ranges = ranges
        self.axes = []
        for spec in config.axes[:action_dim]:
            sign = -1.0 if spec.startswith("-") else 1.0
            self.axes.append((spec.lstrip("+-"), sign))
        self.values: dict[str, float] = {}
        self.engaged = False
        self.events: set[str] = set()
        self.event_buttons = dict(config.buttons)

    def apply(self, kind: str, code: str, value: int) -> None:
        if kind == "EV_ABS":
            lo, hi = self.ranges.get(code, (-32768, 32767))
            x = (2.0 * (value - lo) / max(hi - lo, 1)) - 1.0
            self.values[code] = 0.0 if abs(x) < self.config.deadzone else float(np.clip(x, -1, 1))
        elif kind == "EV_KEY":
            if code == self.config.engage_button:
                self.engaged = value != 0
            elif value == 1 and code in self.event_buttons:
                self.events.add(self.event_buttons[code])

    def command(self) -> DeviceCommand:
        a = np.array([sign * self.values.get(code, 0.0) for code, sign in self.axes], np.float32)
        events, self.events = self.events, set()
        return DeviceCommand(np.clip(a, -1, 1), self.engaged, events)


class GamepadDevice:
    name = "gamepad"

    def __init__(self, action_dim: int, config: GamepadConfig | None = None):
        self.config = cfg = config or GamepadConfig()
        try:
            import evdev
        except ImportError:
            raise DeviceNotFoundError("gamepad support needs the `evdev` package (Linux): "
                                      "pip install evdev; or use --device keyboard") from None
        self._evdev = evdev
        paths = [cfg.path] if cfg.path else evdev.list_devices()
        self.dev = None
        for p in paths:
            try:
                d = evdev.InputDevice(p)
            except (OSError, PermissionError) as exc:
                if cfg.path:
                    raise DeviceNotFoundError(f"cannot open gamepad {p}: {exc}; check the path and that "
                                              "your user is in the 'input' group") from None
                continue
            abs_caps = dict(d.capabilities(absinfo=True).get(evdev.ecodes.EV_ABS, []))
            if abs_caps:
                self.dev = d
                break
            d.close()
        if self.dev is None:
            raise DeviceNotFoundError("no gamepad found under /dev/input (is it plugged in, and readable "
                                      "by your user: 'input' group?); pass GamepadConfig.path to choose one")
        ranges = {}
        for code, info in self.dev.capabilities(absinfo=True).get(evdev.ecodes.EV_ABS, []):
            name = evdev.ecodes.ABS.get(code)
            for n in (name if isinstance(name, list) else [name]):
                ranges[n] = (info.min, info.max)
        self.state = GamepadState(action_dim, cfg, ranges)

    def read(self, obs=None) -> DeviceCommand:
        ec = self._evdev.ecodes
        try:
            while True:
                ev = self.dev.read_one()
                if ev is None:
                    break
                if ev.type == ec.EV_ABS:
                    names = ec.ABS.get(ev.code)
                    kind = "EV_ABS"
                elif ev.type == ec.EV_KEY:
                    names = ec.BTN.get(ev.code) or ec.KEY.get(ev.code)
                    kind = "EV_KEY"
                else:
                    continue
                for n in (names if isinstance(names, list) else [names]):
                    self.state.apply(kind, n, ev.value)
        except OSError as exc:
            if exc.errno in (errno.ENODEV, errno.EIO):
                raise DeviceDisconnectedError(f"gamepad {self.dev.path} was disconnected; plug it back in "
                                              "and restart") from None
            raise
        return self.state.command()

    def reset(self) -> None:
        self.state.events.clear()

    def help(self) -> str:
        c = self.config
        return (f"gamepad {self.dev.name!r}: sticks -> {', '.join(c.axes[:self.state.dim])}; hold "
                f"{c.engage_button} to take over; " + ", ".join(f"{b}: {e}" for b, e in c.buttons))

    def close(self) -> None:
        try:
            self.dev.close()
        except Exception:  # noqa: BLE001
            pass
