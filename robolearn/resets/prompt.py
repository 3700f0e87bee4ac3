"""Ask the operator for help when a reset fails, in the terminal and on the teleop device.

Why a prompt and not an exception: on a real robot a failed reset (cube knocked off the table,
arm blocked, controller error) is routine; the cheapest fix is a person putting things back.
The session holds the robot still, says what went wrong, and waits for one key:

    Enter / c   the world is ready: start the episode
    r           retry the reset controller
    q           quit (the run stops cleanly; recorded data is kept)

A teleop device answers too: its `success` event (Enter on the keyboard, a button on the
gamepad) continues, `discard` retries, `quit` quits.
"""
from __future__ import annotations

import os
import select
import sys
import termios
import time
import tty

from robolearn.errors import ConfigError

CONTINUE, RETRY, QUIT = "continue", "retry", "quit"
_KEYS = {"\n": CONTINUE, "\r": CONTINUE, "c": CONTINUE, "C": CONTINUE, "r": RETRY, "R": RETRY,
         "q": QUIT, "Q": QUIT, "\x1b": QUIT}
_EVENTS = (("quit", QUIT), ("success", CONTINUE), ("discard", RETRY))


class HumanPrompt:
    """`ask(message)` blocks until the operator answers; returns CONTINUE, RETRY or QUIT.

    fd_in / fd_out: terminal file descriptors (default: stdin / stderr). device: an optional
    teleop `Device` polled for events while waiting. timeout: seconds before giving up
    (None: wait for the operator; on timeout the answer is QUIT so nothing moves unattended).
    """

    def __init__(self, fd_in: int | None = None, fd_out: int | None = None, device=None,
                 timeout: float | None = None, poll_s: float = 0.05):
        self.fd_in = sys.stdin.fileno() if fd_in is None else fd_in
        self.fd_out = sys.stderr.fileno() if fd_out is None else fd_out
        self.device = device
        self.timeout = timeout
        self.poll_s = float(poll_s)
        if device is None and not os.isatty(self.fd_in):
            raise ConfigError("the reset prompt needs an interactive terminal (or a teleop device) "
                              "to ask the operator; run in a terminal, or pass "
                              "reset_on_failure='raise' / 'continue' for unattended runs")

    def ask(self, message: str) -> str:
        text = (f"\n[reset] {message}\n[reset] The robot is held still. Fix the scene, then press "
                "Enter (or c) to start the episode, r to retry the reset, q to quit"
                + (f" (teleop: {self.device.name} success = continue, discard = retry)" if self.device else "")
                + ".\n")
        os.write(self.fd_out, text.encode())
        saved = None
        if os.isatty(self.fd_in):   # one key answers (no Enter needed); restored afterwards
            saved = termios.tcgetattr(self.fd_in)
            tty.setcbreak(self.fd_in)
        try:
            return self._wait()
        finally:
            if saved is not None:
                termios.tcsetattr(self.fd_in, termios.TCSADRAIN, saved)

    def _wait(self) -> str:
        t0 = time.monotonic()
        while True:
            if self.device is not None:
                events = self.device.read(None).events
                for event, answer in _EVENTS:
                    if event in events:
                        return self._said(answer)
            ready, _, _ = select.select([self.fd_in], [], [], self.poll_s)
            if ready:
                data = os.read(self.fd_in, 64).decode(errors="replace")
                for ch in data:
                    if ch in _KEYS:
                        return self._said(_KEYS[ch])
            if self.timeout is not None and time.monotonic() - t0 > self.timeout:
                os.write(self.fd_out, b"[reset] no answer: quitting (nothing moves unattended)\n")
                return QUIT

    def _said(self, answer: str) -> str:
        os.write(self.fd_out, f"[reset] operator: {answer}\n".encode())
        return answer
