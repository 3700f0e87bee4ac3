"""What `record` and `teleop` share: opening the env, pacing, the terminal readout.

Pacing reuses the runtime's deadline scheduler (`robolearn.pacing.Rate`): a human
driving a simulator must see it run at the robot's control rate, not as fast as the CPU
allows. On a real backend `advance()` already waits, so the extra wait finds no slack.
"""
from __future__ import annotations

import os
import sys
import time

import gymnasium as gym
import numpy as np

from robolearn.errors import ConfigError


def open_env(env_id: str, obs: str = "state", **kwargs) -> gym.Env:
    """`gymnasium.make` with robolearn's envs registered and a helpful unknown-ID error."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    from robolearn.registry import registered_ids, resolve_env_id

    ids = registered_ids()
    env_id = resolve_env_id(env_id)
    if env_id not in gym.registry:
        near = [i for i in ids if env_id.split("/")[-1].split("-")[0].lower() in i.lower()][:8]
        raise ConfigError(f"unknown env {env_id!r}; run `robolearn envs` for the list"
                          + (f" (did you mean: {', '.join(near)})" if near else ""))
    if kwargs.get("perception"):  # a frozen localiser's estimate appended to state (perception.py)
        from robolearn.policies.env_building import make_env

        return make_env(env_id, obs, kwargs.pop("render_mode", None), None, kwargs)
    return gym.make(env_id, obs=obs, **kwargs)


class Pacer:
    """Wait for the next control period (`hz` > 0) or not at all (`hz` == 0: as fast as possible)."""

    def __init__(self, hz: float):
        if not np.isfinite(hz) or hz < 0:
            raise ConfigError(f"--rate {hz!r}: give a rate in Hz > 0, or 0 for as fast as possible")
        self.hz = float(hz)
        self._rate = None
        if hz > 0:
            from robolearn.pacing import Rate

            self._rate = Rate(hz)
        self._times: list[float] = []

    def restart(self) -> None:
        if self._rate is not None:
            self._rate.restart()
        self._times.clear()

    def wait(self) -> None:
        if self._rate is not None:
            self._rate.wait()
        self._times.append(time.monotonic())
        if len(self._times) > 50:
            del self._times[:-50]

    @property
    def measured_hz(self) -> float:
        t = self._times
        if len(t) < 2 or t[-1] <= t[0]:
            return float("nan")
        return (len(t) - 1) / (t[-1] - t[0])


class Readout:
    """One status line, rewritten in place on a terminal; periodic plain lines otherwise."""

    def __init__(self, stream=None, every: int = 25):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = every
        self._n = 0
        self._len = 0

    def update(self, text: str) -> None:
        self._n += 1
        if self.tty:
            pad = max(0, self._len - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._len = len(text)
            self.stream.flush()
        elif self._n % self.every == 0:
            self.stream.write(text + "\n")
            self.stream.flush()

    def line(self, text: str) -> None:
        """A permanent line (episode saved, ...)."""
        if self.tty and self._len:
            self.stream.write("\r" + " " * self._len + "\r")
            self._len = 0
        # in cbreak mode the terminal still maps \n to \r\n, so plain newlines are fine
        self.stream.write(text + "\n")
        self.stream.flush()


def fmt_vec(v, n: int = 6) -> str:
    v = np.asarray(v, dtype=np.float64).reshape(-1)
    s = " ".join(f"{x:+.2f}" for x in v[:n])
    return f"[{s}{' ...' if v.size > n else ''}]"


def env_context(env) -> dict:
    """Task/backend/calibration facts stored with every recorded episode."""
    base = env.unwrapped
    task = getattr(base, "task", None)
    backend = getattr(base, "backend", None)
    robot = getattr(backend, "robot", None)
    calib = getattr(robot, "calibration", None)
    if calib is not None and hasattr(calib, "to_dict"):
        calib = calib.to_dict()
    return {"task": type(task).__name__ if task is not None else type(base).__name__,
            "backend": getattr(backend, "kind", "sim"), "calibration": calib}


def add_device_arguments(parser, default: str = "keyboard") -> None:
    """--device and the options only some devices take (shared by record and teleop)."""
    from robolearn.teleop import DEVICES

    parser.add_argument("--device", choices=DEVICES, default=default, help=f"input device (default: {default})")
    parser.add_argument("--leader-port", default=None, metavar="PORT",
                        help="--device leader: serial port of the leader arm's servo bus")
    parser.add_argument("--leader-calibration", default=None, metavar="JSON",
                        help="--device leader: the leader arm's calibration file (default: centre mounting)")
    parser.add_argument("--gamepad", default=None, metavar="/dev/input/eventN",
                        help="--device gamepad: which input device (default: the first with sticks)")
    parser.add_argument("--speed", type=float, default=None,
                        help="--device keyboard: |action| of a held key in (0, 1] (default 0.5)")
    parser.add_argument("--truth-url", default=None, metavar="URL",
                        help="--device operator (the emulated person at an emulated robot): the "
                             "emulator's /truth.json, printed by `robolearn emulate`")
    parser.add_argument("--operator-mode", choices=("demo", "fail", "alternate"), default=None,
                        help="--device operator: lift the cube (demo), near misses (fail), or both in "
                             "turn (alternate); default demo")


def device_config(args) -> dict:
    """Config overrides for `make_device` from the parsed --device options."""
    d = args.device
    if d == "leader":
        return {"port": args.leader_port, "calibration": args.leader_calibration}
    if d == "operator":
        cfg = {"truth_url": getattr(args, "truth_url", None) or ""}
        if getattr(args, "operator_mode", None):
            cfg["mode"] = args.operator_mode
        return cfg
    if d == "gamepad" and args.gamepad:
        return {"path": args.gamepad}
    if d == "keyboard" and args.speed is not None:
        if not 0 < args.speed <= 1:
            raise ConfigError(f"--speed {args.speed}: choose a value in (0, 1]")
        return {"speed": args.speed}
    return {}
