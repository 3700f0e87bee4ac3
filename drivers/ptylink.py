"""The device side of an emulated serial cable: a pseudo-terminal plus fault injection.

Why: drivers are tested against emulators that speak the real bytes through a real tty, so
the driver under test opens the emulator's `path` with pyserial exactly as it would open
`/dev/ttyUSB0`. The emulator keeps the pty master (and its own handle on the slave, so the
port exists before and between client connections); `unplug()` closes both, which is what
the driver sees when a USB adapter is pulled: reads and writes fail with EIO.
"""
from __future__ import annotations

import errno
import os
import select
import threading
import time
import tty
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Faults:
    """Fault injection on the device's transmit path (what the host receives).

    drop_rate: probability each transmitted byte is lost on the wire.
    corrupt_rate: probability a whole reply is sent with a wrong checksum byte.
    delay_s: extra latency before each reply (a slow or overloaded device).
    silent_ids: servo IDs that stop answering (arm only).
    """

    drop_rate: float = 0.0
    corrupt_rate: float = 0.0
    delay_s: float = 0.0
    silent_ids: set[int] = field(default_factory=set)
    seed: int = 0

    def __post_init__(self):
        self.silent_ids = set(self.silent_ids)
        self.rng = np.random.default_rng(self.seed)

    def mangle(self, data: bytes) -> bytes:
        """Apply corruption and drops to one reply (checksum is the last byte of a packet)."""
        if self.corrupt_rate and self.rng.random() < self.corrupt_rate and data:
            data = data[:-1] + bytes([data[-1] ^ 0x5A])
        if self.drop_rate:
            keep = self.rng.random(len(data)) >= self.drop_rate
            data = bytes(b for b, k in zip(data, keep) if k)
        return data


class PtyDevice:
    """A pseudo-terminal whose slave `path` a driver opens; we read/write the master."""

    def __init__(self, baudrate: int | None = None):
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)          # no echo, no line discipline: a byte is a byte
        self.path = os.ttyname(self._slave)
        self.baudrate = baudrate
        self._lock = threading.Lock()
        self.unplugged = False
        self.bytes_in = 0
        self.bytes_out = 0

    def wire_time(self, n_bytes: int) -> float:
        """Seconds n bytes take on a real UART at `baudrate` (8N1 = 10 bits per byte)."""
        return 10.0 * n_bytes / self.baudrate if self.baudrate else 0.0

    def read(self, timeout: float) -> bytes:
        if self.unplugged:
            time.sleep(timeout)
            return b""
        try:
            ready, _, _ = select.select([self._master], [], [], timeout)
            if not ready:
                return b""
            data = os.read(self._master, 4096)
        except (OSError, ValueError) as exc:
            if isinstance(exc, OSError) and exc.errno not in (errno.EIO, errno.EBADF):
                raise
            return b""
        self.bytes_in += len(data)
        return data

    def write(self, data: bytes) -> None:
        with self._lock:
            if self.unplugged or not data:
                return
            try:
                os.write(self._master, data)
                self.bytes_out += len(data)
            except OSError:
                pass

    def unplug(self) -> None:
        """Pull the cable: the host's next read or write on `path` fails."""
        with self._lock:
            if self.unplugged:
                return
            self.unplugged = True
            for fd in (self._master, self._slave):
                try:
                    os.close(fd)
                except OSError:
                    pass

    close = unplug


def sleep_until(deadline: float) -> None:
    """Sleep to a monotonic deadline (no spinning: the CPU is shared)."""
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)
