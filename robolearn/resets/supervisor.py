"""Run a reset controller under a time limit, hold the robot safe when it fails, and decide
what happens next (ask the operator, stop with an error, or carry on and count it).

Why a supervisor: a reset controller is robot code like any other; it can raise, loop forever,
or find the world in a state it cannot fix (cube out of reach). Whatever happens, the robot
must end up held still and the failure must be visible in the statistics, never silently
turned into a bad start state or a crash that loses the run's data.

Reset controllers are generators: `run(task, rng)` moves the robot through its protocol and
yields the robot seconds each `advance` took. Yielding every control period is what lets the
supervisor enforce `timeout_s` (robot time) and `wall_timeout_s` (wall clock) between steps.
"""
from __future__ import annotations

import time
from typing import Callable, Iterator, Protocol

import numpy as np

from robolearn.errors import DeviceDisconnectedError, ResetAbortedError, ResetError
from robolearn.resets.modes import check_on_failure
from robolearn.resets.prompt import CONTINUE, QUIT, RETRY
from robolearn.reset_report import ResetReport


class ResetController(Protocol):
    #: the `ResetReport.kind` this controller produces ("scripted", "learned", ...)
    kind: str

    def run(self, task, rng: np.random.Generator) -> Iterator[float]:
        """Drive the robot to the start distribution, yielding the robot seconds of every
        `advance`. Raise `ResetError` when the world cannot be reset (e.g. out of reach)."""


class ResetSupervisor:
    """Runs reset controllers for one env. `teleports` counts simulator state writes (a callable
    returning the backend's counter; None on hardware)."""

    def __init__(self, robot, on_failure: str = "raise", timeout_s: float = 60.0,
                 wall_timeout_s: float = 120.0, prompt=None,
                 teleports: Callable[[], int] | None = None, attempts: int = 2):
        self.robot = robot
        self.on_failure = check_on_failure(on_failure)
        if not (timeout_s > 0 and wall_timeout_s > 0):
            from robolearn.errors import ConfigError

            raise ConfigError(f"reset timeouts must be > 0 (got {timeout_s}, {wall_timeout_s})")
        self.timeout_s = float(timeout_s)
        self.wall_timeout_s = float(wall_timeout_s)
        self.prompt = prompt
        self.teleports = teleports or (lambda: 0)
        #: controller runs before a failure is reported (a second try fixes most slips)
        self.attempts = max(1, int(attempts))

    def run(self, controller: ResetController, task, rng: np.random.Generator) -> ResetReport:
        report = ResetReport(kind=controller.kind)
        self._robot_s = 0.0
        tries = 0
        wall0 = time.perf_counter()
        tele0 = self.teleports()
        try:
            while True:
                try:
                    self._attempt(controller, task, rng)
                    break
                except (KeyboardInterrupt, ResetAbortedError):
                    raise
                except DeviceDisconnectedError:  # a device gone (cable, tracker) is no failed
                    self._hold()                 # reset a person could fix by hand: the run ends
                    raise
                except Exception as exc:  # noqa: BLE001 - any controller fault is a failed reset
                    report.failures += 1
                    report.message = _describe(controller, exc)
                    self._hold()
                    tries += 1
                    if tries < self.attempts and isinstance(exc, ResetError):
                        self._release()
                        continue          # the controller tries again from where things are
                    report.ok = False
                    if self.on_failure == "raise":
                        raise ResetError(report.message + " (the robot is held still; pass "
                                         "reset_on_failure='prompt' to be asked instead)") from exc
                    if self.on_failure == "continue":
                        self._release()
                        break
                    if self.prompt is None:
                        raise ResetError(report.message + " (no operator prompt configured)") from exc
                    report.human_prompts += 1
                    answer = self.prompt.ask(report.message)
                    if answer == QUIT:
                        raise ResetAbortedError(f"operator quit at the reset prompt after: {report.message}") from exc
                    self._release()  # the operator says the robot is clear
                    if answer == CONTINUE:
                        report.kind = "human"
                        break
                    assert answer == RETRY  # loop: the controller runs again
                    tries = 0
        finally:
            if report.ok:
                report.message = ""
            report.seconds = self._robot_s
            report.teleports = self.teleports() - tele0
            report.wall_s = time.perf_counter() - wall0
        return report

    def _attempt(self, controller: ResetController, task, rng) -> None:
        elapsed = 0.0
        wall0 = time.perf_counter()
        gen = controller.run(task, rng)
        try:
            for dt in gen:
                elapsed += float(dt)
                self._robot_s += float(dt)
                if elapsed > self.timeout_s:
                    raise ResetError(f"did not finish within {self.timeout_s:.0f} s of robot time "
                                     "(stuck or looping?)")
                if time.perf_counter() - wall0 > self.wall_timeout_s:
                    raise ResetError(f"did not finish within {self.wall_timeout_s:.0f} s of wall time "
                                     "(hung?)")
        finally:
            gen.close()

    def _release(self) -> None:
        """Torque back on after a hold, before the robot moves again (a servo arm's safe_stop is
        torque off; without this every later try fails with "torque is off")."""
        enable = getattr(self.robot, "enable_torque", None)
        if enable is not None and getattr(self.robot, "torque_on", True) is False:
            enable()

    def _hold(self) -> None:
        try:
            self.robot.safe_stop()
        except Exception:  # noqa: BLE001 - holding must never raise over the original error
            pass


def _describe(controller, exc: Exception) -> str:
    name = type(controller).__name__
    if isinstance(exc, ResetError):
        return f"reset controller {name} failed: {exc}"
    return f"reset controller {name} raised {type(exc).__name__}: {exc}"
