"""Keyboard teleop through real pseudo-terminals: the device alone, `teleop` and `record`."""
import os
import pty
import select
import sys
import termios
import time

import numpy as np
import pytest

from robolearn.errors import ConfigError
from robolearn.teleop.base import DeviceNotFoundError
from robolearn.teleop.keyboard import KeyboardConfig, KeyboardDevice


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_keys_map_to_actions_events_and_takeover(term):
    master, slave = term
    clock = FakeClock()
    before = termios.tcgetattr(slave)
    kb = KeyboardDevice(4, KeyboardConfig(fd=slave, absolute_dims=(3,)), clock=clock)
    assert not termios.tcgetattr(slave)[3] & termios.ICANON  # cbreak: keys arrive unbuffered
    cmd = kb.read()
    np.testing.assert_array_equal(cmd.action, [0, 0, 0, 1])     # gripper starts open
    assert not cmd.engaged and cmd.events == set()

    os.write(master, b"wd")                                    # +x, -y
    time.sleep(0.05)
    cmd = kb.read()
    np.testing.assert_allclose(cmd.action, [0.5, -0.5, 0, 1])
    assert cmd.engaged
    clock.t += 0.3                                             # still held (auto-repeat gap)
    np.testing.assert_allclose(kb.read().action, [0.5, -0.5, 0, 1])
    clock.t += 0.5                                             # released
    cmd = kb.read()
    np.testing.assert_allclose(cmd.action, [0, 0, 0, 1])
    assert not cmd.engaged

    os.write(master, b"q==f")                                  # close gripper, speed 0.7, down
    time.sleep(0.05)
    np.testing.assert_allclose(kb.read().action, [0, 0, -0.7, -1])
    os.write(master, b" ")                                     # takeover latch
    time.sleep(0.05)
    clock.t += 5
    cmd = kb.read()
    assert cmd.engaged and np.allclose(cmd.action, [0, 0, 0, -1])

    for keys, event in ((b"\r", "success"), (b"x", "failure"), (b"\x7f", "discard"), (b"\x1b", "quit")):
        os.write(master, keys)
        time.sleep(0.05)
        assert kb.read().events == {event}
    os.write(master, b"\x1b[A")                                # an arrow key is not Esc
    time.sleep(0.05)
    assert kb.read().events == set()
    kb.reset()
    np.testing.assert_array_equal(kb.read().action, [0, 0, 0, 1])
    kb.close()
    assert termios.tcgetattr(slave) == before                  # terminal restored


def test_keyboard_errors(term, tmp_path):
    _, slave = term
    with pytest.raises(ConfigError, match="maps 7 action dims"):
        KeyboardDevice(9, KeyboardConfig(fd=slave))
    with open(tmp_path / "f", "w") as f:
        with pytest.raises(DeviceNotFoundError, match="not a TTY"):
            KeyboardDevice(4, KeyboardConfig(fd=f.fileno()))


# ------------------------------------------------------------------- whole commands
def _spawn(argv):
    pid, fd = pty.fork()
    if pid == 0:  # child: the command, with the pty as its terminal
        os.environ.setdefault("MUJOCO_GL", "egl")
        os.execv(sys.executable, [sys.executable, "-m", "robolearn.cli", *argv])
    return pid, fd


def _read_until(fd, needle: bytes, buf: bytearray, timeout: float = 60.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if needle in buf:
            return True
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                data = os.read(fd, 4096)
            except OSError:
                return needle in buf
            if not data:
                return needle in buf
            buf.extend(data)
    return needle in buf


def _finish(pid, fd, buf):
    end = time.monotonic() + 30
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            _read_until(fd, b"\x00never", buf, timeout=0.2)
            os.close(fd)
            return os.waitstatus_to_exitcode(status)
        _read_until(fd, b"\x00never", buf, timeout=0.1)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    os.close(fd)
    raise AssertionError(f"command did not exit: {bytes(buf)[-1500:]!r}")


def test_teleop_command_in_a_pty():
    pid, fd = _spawn(["teleop", "robolearn/ArmReach-v0", "--device", "keyboard", "--rate", "20"])
    buf = bytearray()
    assert _read_until(fd, b"keyboard:", buf), bytes(buf)[-1500:]
    assert _read_until(fd, b"Hz", buf), bytes(buf)[-1500:]
    for _ in range(6):                                          # hold "r" (up): auto-repeat
        os.write(fd, b"r")
        time.sleep(0.05)
    assert _read_until(fd, b"action [+0.00 +0.00 +0.50 +1.00] ", buf), bytes(buf)[-1500:]
    assert b"TAKEOVER" in buf
    os.write(fd, b"\r")                                         # mark success -> reset
    assert _read_until(fd, b"marked success", buf), bytes(buf)[-1500:]
    os.write(fd, b"\x1b")                                       # Esc: quit
    assert _read_until(fd, b"teleop stopped", buf), bytes(buf)[-1500:]
    assert _finish(pid, fd, buf) == 0
    assert b"/20 Hz" in buf                                     # loop rate readout


def test_record_with_keyboard_in_a_pty(tmp_path):
    from robolearn.data.dataset import Dataset

    out = tmp_path / "kb"
    pid, fd = _spawn(["record", "robolearn/ArmReach-v0", "--device", "keyboard", "--episodes", "2",
                      "--out", str(out), "--obs", "state", "--rate", "20"])
    buf = bytearray()
    assert _read_until(fd, b"keyboard:", buf), bytes(buf)[-1500:]
    assert _read_until(fd, b"ready", buf), bytes(buf)[-1500:]   # waits for the operator
    for _ in range(5):
        os.write(fd, b"w")                                      # forward (+x)
        time.sleep(0.05)
    time.sleep(0.2)
    os.write(fd, b"\r")                                         # human: success
    assert _read_until(fd, b"saved episode 0", buf), bytes(buf)[-1500:]
    os.write(fd, b"d")
    time.sleep(0.2)
    os.write(fd, b"\x7f")                                       # discard this attempt
    assert _read_until(fd, b"discarded attempt", buf), bytes(buf)[-1500:]
    os.write(fd, b"\x1b")                                       # quit
    assert _read_until(fd, b"done: 1 episode(s) saved", buf), bytes(buf)[-1500:]
    assert _finish(pid, fd, buf) == 0
    ds = Dataset(out)
    assert ds.indices == [0]
    ep = ds.episode(0)
    assert ep.meta["success"] is True and ep.meta["label_source"] == "keyboard"
    assert (ep.data["device"] == "keyboard").all()
    a = ep.data["action"]
    assert np.isclose(a[:, 0], 0.5).sum() >= 3 and np.all(a[:, 1:3] == 0) and np.all(a[:, 3] == 1)
    x = ep.data["obs.state"][:, 11]                             # ee x moved forward
    assert x[-1] > x[0] + 0.02


def test_car_layout(term):
    from robolearn.teleop import make_device
    from robolearn.teleop.session import open_env

    master, slave = term
    env = open_env("robolearn/CarLap-v0", "state")
    kb = make_device("keyboard", env, fd=slave)
    os.write(master, b"aw")                                   # steer left, throttle forward
    time.sleep(0.05)
    np.testing.assert_allclose(kb.read().action, [0.5, 0.5])
    kb.close()
    env.close()
