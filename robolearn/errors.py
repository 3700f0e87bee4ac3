"""Exception types a user can act on.

Every error names the thing to fix (which port, which limit, which file). Subsystems subclass
these so callers can catch a whole family (e.g. every hardware fault is a `DeviceError`).
"""


class RobolearnError(Exception):
    """Base of every error robolearn raises on purpose."""


class ConfigError(RobolearnError, ValueError):
    """A bad option, kwarg, launch file or config value."""


class InvalidActionError(RobolearnError, ValueError):
    """An action with NaN/inf, the wrong shape, or values outside the action space."""


class EnvClosedError(RobolearnError, RuntimeError):
    """`step`/`reset` called on an environment after `close()`."""


class DeviceError(RobolearnError, IOError):
    """A hardware (or emulated hardware) fault: port, cable, protocol, timeout."""


class DeviceDisconnectedError(DeviceError):
    """The device went away mid-run (cable unplugged, port vanished)."""


class CameraError(DeviceError):
    """A camera that cannot be opened, sends no frames, or stopped sending them."""


class SafetyError(RobolearnError, RuntimeError):
    """The safety supervisor refused a command or tripped the e-stop."""


class DatasetError(RobolearnError, IOError):
    """A dataset / checkpoint / demo file that is missing, truncated or of the wrong shape."""


class TrainingError(RobolearnError, RuntimeError):
    """Training hit a non-recoverable condition (e.g. NaN loss) at a known step."""


class ResetError(RobolearnError, RuntimeError):
    """A reset could not bring the world back to the start distribution (the message says why
    and what to do)."""


class ResetAbortedError(ResetError):
    """The operator chose to quit at the reset prompt."""
