"""Keyboard teleop in a plain terminal (works over SSH, no display, no X/pygame).

Why the "hold window": a terminal sends no key-up events, only the characters of a held key's
auto-repeat (after an initial delay of ~250-600 ms). So an axis counts as pressed for
`hold_s` seconds after its last character; a held key keeps re-arming it, and releasing it
lets the axis fall back to 0 shortly after.

Default key map (one +/- key pair per action dimension, in action order):

    dim 0: w / s     dim 1: a / d     dim 2: r / f     dim 3: e / q
    dim 4: i / k     dim 5: j / l     dim 6: u / o
    space     toggle takeover (engaged stays on until pressed again; also on while a motion key is held)
    = / -     faster / slower (speed in 0.1 steps, 0.1..1.0)
    0         stop: forget all held keys
    Enter     mark episode success           x          mark episode failure
    g         mark "success now" on this step (per-frame label for reward classifiers)
    Backspace discard episode                Esc        quit

For the arm envs' end-effector actions this is w/s = +x/-x (forward/back), a/d = +y/-y
(left/right), r/f = up/down, e/q = gripper open/close (see the env's action doc). The gripper
is an absolute command, so `make_device` marks it an `absolute_dims` entry: e/q set it fully
open/closed and it stays there.
"""
from __future__ import annotations

import os
import select
import sys
import termios
import time
import tty
from dataclasses import dataclass

import numpy as np

from robolearn.errors import ConfigError
from robolearn.teleop.base import DeviceCommand, DeviceNotFoundError

ENTER = {"\r", "\n"}
BACKSPACE = {"\x7f", "\x08"}
ESC = "\x1b"


@dataclass
class KeyboardConfig:
    axes: tuple[str, ...] = ("ws", "ad", "rf", "eq", "ik", "jl", "uo")  # "+key -key" per dim
    speed: float = 0.5          # |action| of a held axis
    speed_step: float = 0.1
    hold_s: float = 0.6         # an axis stays pressed this long after its last character
    absolute_dims: tuple[int, ...] = ()  # dims whose keys *set* +1/-1 and keep it (e.g. a gripper)
    absolute_init: float = 1.0  # start value of absolute dims (+1: gripper open, the arm's home)
    fd: int | None = None       # terminal file descriptor; default: stdin


class KeyboardDevice:
    name = "keyboard"

    def __init__(self, action_dim: int, config: KeyboardConfig | None = None, clock=time.monotonic):
        self.config = cfg = config or KeyboardConfig()
        if action_dim > len(cfg.axes):
            raise ConfigError(f"keyboard maps {len(cfg.axes)} action dims, the env has {action_dim}; "
                              "add key pairs to KeyboardConfig.axes or use a gamepad")
        self.dim = action_dim
        self.speed = float(cfg.speed)
        self._clock = clock
        self._keymap: dict[str, tuple[int, float]] = {}
        for i, pair in enumerate(cfg.axes[:action_dim]):
            if len(pair) != 2:
                raise ConfigError(f"KeyboardConfig.axes[{i}]={pair!r}: give two keys, '+' then '-'")
            self._keymap[pair[0]] = (i, 1.0)
            self._keymap[pair[1]] = (i, -1.0)
        self._held: dict[int, tuple[float, float]] = {}  # dim -> (sign, time of last press)
        self._absolute = {d % action_dim: float(cfg.absolute_init) for d in cfg.absolute_dims}
        self._latched = False
        self.fd = sys.stdin.fileno() if cfg.fd is None else cfg.fd
        if not os.isatty(self.fd):
            raise DeviceNotFoundError(
                "keyboard device needs an interactive terminal, but its input is not a TTY; run "
                "`robolearn record/teleop` in a terminal (not piped), or use --device scripted")
        self._saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)  # keys arrive one by one, no echo; Ctrl-C still interrupts
        self._closed = False

    # ------------------------------------------------------------------------------ reading
    def _pending(self) -> str:
        chunks = []
        while select.select([self.fd], [], [], 0)[0]:
            data = os.read(self.fd, 1024)
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks).decode("utf-8", errors="ignore")

    def feed(self, text: str) -> set[str]:
        """Apply typed characters; return the events they produced (public for replays/tests)."""
        events: set[str] = set()
        now = self._clock()
        i = 0
        while i < len(text):
            c = text[i]
            i += 1
            if c == ESC:
                if i < len(text) and text[i] in "[O":  # an escape sequence (arrows...): skip it
                    i += 1
                    while i < len(text) and not (text[i].isalpha() or text[i] == "~"):
                        i += 1
                    i += 1
                else:
                    events.add("quit")
            elif c in ENTER:
                events.add("success")
            elif c in BACKSPACE:
                events.add("discard")
            elif c == "x":
                events.add("failure")
            elif c == "g":
                events.add("mark")
            elif c == " ":
                self._latched = not self._latched
            elif c == "0":
                self._held.clear()
            elif c in "=+":
                self.speed = min(1.0, round(self.speed + self.config.speed_step, 3))
            elif c == "-":
                self.speed = max(0.1, round(self.speed - self.config.speed_step, 3))
            elif c in self._keymap:
                dim, sign = self._keymap[c]
                if dim in self._absolute:
                    self._absolute[dim] = sign
                else:
                    self._held[dim] = (sign, now)
        return events

    def read(self, obs=None) -> DeviceCommand:
        events = self.feed(self._pending()) if not self._closed else {"quit"}
        now = self._clock()
        action = np.zeros(self.dim, np.float32)
        for dim, (sign, t) in list(self._held.items()):
            if now - t <= self.config.hold_s:
                action[dim] = sign * self.speed
            else:
                del self._held[dim]
        for dim, v in self._absolute.items():
            action[dim] = v
        engaged = self._latched or bool(self._held)
        return DeviceCommand(action, engaged, events)

    def reset(self) -> None:
        self._held.clear()
        for dim in self._absolute:
            self._absolute[dim] = float(self.config.absolute_init)

    def help(self) -> str:
        pairs = "  ".join(f"dim{i}: {p[0]}/{p[1]}" for i, p in enumerate(self.config.axes[:self.dim]))
        return (f"keyboard: {pairs} (+/-, held); space: takeover on/off; =/-: speed ({self.speed:.1f}); "
                "0: stop; Enter: success; x: failure; g: success-now mark; Backspace: discard; Esc: quit")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            except termios.error:
                pass  # the terminal went away; nothing to restore

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
