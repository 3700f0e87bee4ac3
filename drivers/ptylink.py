"""The device side of an emulated serial cable: a pseudo-terminal plus fault injection.

Why: drivers are tested against emulators that speak the real bytes through a real tty, so
the driver under test opens the emulator's `path` with pyserial exactly as it would open
`/dev/ttyUSB0`, and the emulator holds the other end, also through pyserial (the pty master
opened from /dev/ptmx). `unplug()` closes the master, which is what the driver sees when a
USB adapter is pulled: its reads and writes fail with EIO.
"""
from __future__ import annotations

import fcntl
import os
import select
import struct
import termios
import threading
import time
import tty
from dataclasses import dataclass, field

import numpy as np
import serial


@dataclass
class Faults:
    """Fault injection on the device's transmit path (what the host receives).

    drop_rate: probability each transmitted byte is lost on the wire.
    corrupt_rate: probability a whole reply is sent with a wrong checksum byte.
    delay_s: extra latency before each reply (a slow or overloaded device).
    silent_ids: servo IDs that stop answering (arm only).
    status_errors: servo ID -> error byte its status packets carry (arm only, e.g. 0x20
    overload).
    """

    drop_rate: float = 0.0
    corrupt_rate: float = 0.0
    delay_s: float = 0.0
    silent_ids: set[int] = field(default_factory=set)
    status_errors: dict[int, int] = field(default_factory=dict)
    seed: int = 0

    def __post_init__(self):
        self.silent_ids = set(self.silent_ids)
        self.rng = np.random.default_rng(self.seed)
        # what was done to the wire, so a soak can match what the host saw against it
        self.replies_corrupted = 0
        self.bytes_dropped = 0
        self.replies_with_drops = 0

    def mangle(self, data: bytes) -> bytes:
        """Apply corruption and drops to one reply (checksum is the last byte of a packet)."""
        if self.corrupt_rate and self.rng.random() < self.corrupt_rate and data:
            data = data[:-1] + bytes([data[-1] ^ 0x5A])
            self.replies_corrupted += 1
        if self.drop_rate:
            keep = self.rng.random(len(data)) >= self.drop_rate
            lost = int(len(data) - keep.sum())
            if lost:
                self.bytes_dropped += lost
                self.replies_with_drops += 1
                data = bytes(b for b, k in zip(data, keep) if k)
        return data

    def counts(self) -> dict:
        return {"replies_corrupted": self.replies_corrupted, "bytes_dropped": self.bytes_dropped,
                "replies_with_drops": self.replies_with_drops}


# Linux ioctls to unlock a pty master opened from /dev/ptmx and ask its slave number
# (what openpty() does internally; Python's termios does not export them).
_TIOCSPTLCK = 0x40045431
_TIOCGPTN = 0x80045430


def _open_master():
    """Open a pty master *with pyserial* (so both ends of the cable are pyserial ports).
    Returns (serial port on the master, slave path)."""
    ser = serial.Serial("/dev/ptmx", timeout=0, write_timeout=1.0)
    try:
        fcntl.ioctl(ser.fileno(), _TIOCSPTLCK, struct.pack("i", 0))
        n = struct.unpack("i", fcntl.ioctl(ser.fileno(), _TIOCGPTN, b"\0" * 4))[0]
    except OSError:
        ser.close()
        raise
    return ser, f"/dev/pts/{n}"


class PtyDevice:
    """A pseudo-terminal whose slave `path` a driver opens; the device side is a pyserial
    port on the master. We keep our own handle on the slave (raw mode) so the port exists
    and reads do not fail with EIO before the first host connects."""

    def __init__(self, baudrate: int | None = None):
        self.ser, self.path = _open_master()
        self._slave = os.open(self.path, os.O_RDWR | os.O_NOCTTY)
        tty.setraw(self._slave)          # no echo, no line discipline: a byte is a byte
        self._fd = self.ser.fileno()
        self.baudrate = baudrate
        self._lock = threading.Lock()
        self.unplugged = False
        self.bytes_in = 0
        self.bytes_out = 0
        self.input_stalls = 0            # fault: times the device stopped taking the host's bytes
        self._resume: threading.Timer | None = None
        self._stall_gen = 0

    def wire_time(self, n_bytes: int) -> float:
        """Seconds n bytes take on a real UART at `baudrate` (8N1 = 10 bits per byte)."""
        return 10.0 * n_bytes / self.baudrate if self.baudrate else 0.0

    def read(self, timeout: float) -> bytes:
        if self.unplugged:
            time.sleep(timeout)
            return b""
        try:
            ready, _, _ = select.select([self._fd], [], [], timeout)
            if not ready:
                return b""
            data = self.ser.read(max(1, self.ser.in_waiting))
        except (serial.SerialException, OSError, ValueError, TypeError):
            return b""                   # closed under us (unplug): the caller loops or stops
        self.bytes_in += len(data)
        return data

    def write(self, data: bytes) -> None:
        with self._lock:
            if self.unplugged or not data:
                return
            try:
                self.ser.write(data)
                self.bytes_out += len(data)
            except (serial.SerialException, OSError, ValueError, TypeError):
                pass

    def stall_input(self, seconds: float) -> None:
        """Fault: the device takes none of the host's bytes for `seconds` (0: take them again
        now). The slave's output is suspended (tcflow TCOOFF), as a busy controller's full USB
        buffer or flow control holds a real host off: the host's writes block, and with a
        pyserial `write_timeout` they time out; nothing is lost, it arrives afterwards."""
        seconds = float(seconds)
        with self._lock:
            if self.unplugged:
                return
            if self._resume is not None:
                self._resume.cancel()
                self._resume = None
            self._stall_gen += 1
            if seconds <= 0:
                termios.tcflow(self._slave, termios.TCOON)
                return
            termios.tcflow(self._slave, termios.TCOOFF)
            self.input_stalls += 1
            self._resume = threading.Timer(seconds, self._end_stall, args=(self._stall_gen,))
            self._resume.daemon = True
            self._resume.start()

    def _end_stall(self, gen: int) -> None:
        with self._lock:
            if gen == self._stall_gen and not self.unplugged:   # not overtaken by a newer stall
                termios.tcflow(self._slave, termios.TCOON)
                self._resume = None

    def unplug(self) -> None:
        """Pull the cable: the host's next read or write on `path` fails."""
        with self._lock:
            if self.unplugged:
                return
            self.unplugged = True
            if self._resume is not None:
                self._resume.cancel()
            try:
                self.ser.close()
            except (serial.SerialException, OSError):
                pass
            try:
                os.close(self._slave)
            except OSError:
                pass

    close = unplug


def sleep_until(deadline: float) -> None:
    """Sleep to a monotonic deadline (no spinning: the CPU is shared)."""
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)


class EmulatorThreads:
    """Lifecycle shared by the device emulators: a pty device, worker threads, a plant.

    Subclasses set `self.dev`, `self.plant` and `self.name`, and list their loops in
    `start()`. A loop that dies stores its exception in `self.error`; `close()` re-raises it so
    a test never passes on an emulator that silently stopped simulating. The physics loop
    holds `physics_lock` while it steps the plant, so a camera renderer can copy a consistent
    state.
    """

    name = "emulator"

    def _init_threads(self) -> None:
        self.error: Exception | None = None
        self.physics_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def path(self) -> str:
        return self.dev.path

    def _start_loops(self, *loops) -> None:
        for target in loops:
            t = threading.Thread(target=target, name=f"{self.name}-{target.__name__.strip('_')}",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def close(self) -> None:
        self._stop.set()
        self.dev.close()
        for t in self._threads:
            t.join(timeout=2.0)
        self._threads.clear()
        self.plant.close()
        if self.error is not None:
            raise RuntimeError(f"{self.name} crashed: {self.error!r}") from self.error

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

