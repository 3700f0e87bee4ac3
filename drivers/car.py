"""`SerialCar`: the `Car` protocol over the framed serial link to the car's microcontroller.

Why a reader thread: the controller streams telemetry at ~100 Hz whether or not we ask, so a
background thread parses it continuously and keeps only the latest sample; `read()` then
costs nothing and never blocks on the wire. A disconnect seen by the thread is re-raised as
`DeviceDisconnectedError` by the next call from the control loop.

Late vs lost: a write that times out (`write_timeout`) means the controller took no bytes for
that long, which a busy MCU, a full USB buffer or a starved host also cause; the frame is
written again (`write_retries` times, counted in `link_stats()`), led by a 0x00 delimiter so
any part of it that did go out ends as one bad frame the firmware skips. Only consecutive
timeouts past that bound, or a port that fails outright (EIO: the cable is out), are a
disconnected controller, whose firmware failsafe then sets neutral throttle.
"""
from __future__ import annotations

import logging
import select
import termios
import threading
import time

import numpy as np
import serial

from robolearn.drivers import car_protocol as cp
from robolearn.drivers.pacing import Pacer
from robolearn.drivers.safety import CarSafety
from robolearn.errors import ConfigError, DeviceDisconnectedError, DeviceError
from robolearn.robot import CarSpec, CarState

log = logging.getLogger("robolearn.drivers.car")

# what pyserial lets through when a port vanishes (tcflush raises termios.error, not OSError)
IO_ERRORS = (serial.SerialException, OSError, termios.error, ValueError)


class SerialCar:
    """Car over pyserial. Units at the boundary: rad, m, m/s, s; throttle in [-1, 1]."""

    paces_itself = True   # `advance` waits to the period deadline (robolearn/robot.py)

    def __init__(self, port: str, spec: CarSpec, baudrate: int = 115_200,
                 timeout_ms: int = cp.DEFAULT_TIMEOUT_MS,
                 telemetry_period_ms: int = cp.DEFAULT_TELEMETRY_PERIOD_MS,
                 connect_timeout: float = 1.0, safety: CarSafety | None = None,
                 ticks_per_metre: float = cp.TICKS_PER_METRE, write_timeout: float = 0.5,
                 write_retries: int = 2):
        self.spec = spec
        self.port = port
        self.ticks_per_metre = float(ticks_per_metre)
        self.safety = safety or CarSafety(max_steer=spec.max_steer)
        if not 0 < float(write_timeout) <= 5.0:
            raise ConfigError(f"write_timeout={write_timeout!r}: choose seconds in (0, 5]")
        if not (isinstance(write_retries, int) and 0 <= write_retries <= 10):
            raise ConfigError(f"write_retries={write_retries!r}: choose a whole number in 0..10")
        self.write_timeout, self.write_retries = float(write_timeout), write_retries
        #: writes that timed out, frames written again after one, frames given up on
        self.write_timeouts = self.writes_retried = self.writes_abandoned = 0
        self.safety.add_stop(self._send_neutral)
        try:
            self.ser = serial.Serial(port, baudrate=baudrate, timeout=0, write_timeout=self.write_timeout)
        except (serial.SerialException, OSError, ValueError) as exc:
            raise DeviceError(f"cannot open car controller port {port!r}: {exc}. Check the path "
                              "(ls /dev/ttyACM* /dev/ttyUSB*) and the 'dialout' group.") from None
        self.parser = cp.FrameParser()
        self._latest: cp.Telemetry | None = None
        self._peak_accel = 0.0     # largest horizontal IMU acceleration since `peak_impact()`
        self._latest_at = 0.0
        self._config: cp.Config | None = None
        self._error: Exception | None = None
        self._seq = 0
        self._odo_zero: int | None = None
        self.pacer = Pacer()
        self._closed = False
        self._stop = threading.Event()
        self._got = threading.Condition()
        self._thread = threading.Thread(target=self._reader, name="serial-car-reader", daemon=True)
        self._thread.start()
        self._configure(cp.Config(int(timeout_ms), int(telemetry_period_ms)), connect_timeout)

    # ------------------------------------------------------------------ link
    def _reader(self):
        fd = self.ser.fileno()
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([fd], [], [], 0.05)
                if not ready:
                    continue
                data = self.ser.read(max(1, self.ser.in_waiting))
            except IO_ERRORS + (TypeError,) as exc:
                if not self._stop.is_set():
                    self._error = exc
                with self._got:
                    self._got.notify_all()
                return
            msgs = self.parser.feed(data)
            if msgs:
                with self._got:
                    for m in msgs:
                        if isinstance(m, cp.Telemetry):
                            self._latest, self._latest_at = m, time.monotonic()
                            ax, ay = m.accel_cm_s2[0] / 100.0, m.accel_cm_s2[1] / 100.0
                            self._peak_accel = max(self._peak_accel, (ax * ax + ay * ay) ** 0.5)
                        elif isinstance(m, cp.Config):
                            self._config = m
                    self._got.notify_all()

    def _send(self, msg) -> None:
        """Write one frame; a timed-out write is retried (module docstring), a failed port is not."""
        self._raise_if_failed()
        frame = cp.encode_frame(msg)
        for attempt in range(self.write_retries + 1):
            try:
                # after a timeout part of the frame may have gone out: a leading delimiter ends it
                self.ser.write(frame if attempt == 0 else b"\x00" + frame)
                return
            except serial.SerialTimeoutException:
                self.write_timeouts += 1
                if attempt < self.write_retries:
                    self.writes_retried += 1
                    log.warning("car controller on %r took no bytes for %.2f s (write timeout): "
                                "writing the frame again (%d/%d)", self.port, self.write_timeout,
                                attempt + 1, self.write_retries)
            except IO_ERRORS as exc:      # EIO, port gone: the cable is out
                self._error = exc
                self._raise_if_failed()
        self.writes_abandoned += 1
        self._error = serial.SerialTimeoutException(
            f"{self.write_retries + 1} writes in a row timed out ({self.write_timeout:g} s each): "
            "the controller takes no bytes")
        self._raise_if_failed()

    def link_stats(self) -> dict:
        """What the link saw: write timeouts, retries, frames given up on, bad frames received."""
        return {"write_timeouts": self.write_timeouts, "write_retries": self.writes_retried,
                "writes_abandoned": self.writes_abandoned, "bad_frames": self.parser.errors}

    def _raise_if_failed(self):
        if self._closed:
            raise DeviceError(f"car on {self.port!r} is closed; create a new backend")
        if self._error is not None:
            raise DeviceDisconnectedError(
                f"car controller on {self.port!r} disconnected ({self._error}). Its firmware "
                "failsafe sets neutral throttle after timeout_ms; check the USB cable, then restart.")

    def _configure(self, config: cp.Config, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._send(config)
            with self._got:
                self._got.wait_for(lambda: self._config == config or self._error is not None,
                                   timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            self._raise_if_failed()
            if self._config == config:
                return
        self.close()
        raise DeviceError(f"car controller on {self.port!r} did not acknowledge CONFIG within "
                          f"{timeout:.1f} s: check the port, the baud rate and that the "
                          "car_controller firmware is flashed.")

    def wait_telemetry(self, timeout: float = 1.0) -> cp.Telemetry:
        with self._got:
            self._got.wait_for(lambda: self._latest is not None or self._error is not None, timeout=timeout)
        self._raise_if_failed()
        if self._latest is None:
            raise DeviceError(f"no telemetry from the car on {self.port!r} within {timeout:.1f} s")
        return self._latest

    # ------------------------------------------------------------------ Car protocol
    @property
    def telemetry(self) -> cp.Telemetry | None:
        return self._latest

    def zero_odometer(self) -> None:
        self._odo_zero = self.wait_telemetry().enc_ticks

    def peak_impact(self) -> float:
        """Largest horizontal IMU acceleration (m/s^2) in any telemetry frame since the last
        call. A wall hit is a spike of 10-30 ms: one telemetry sample per control period
        (the newest) misses most of them."""
        with self._got:
            peak, self._peak_accel = self._peak_accel, 0.0
        self._raise_if_failed()
        return peak

    def read(self) -> CarState:
        t = self.wait_telemetry()
        self.safety.check_state(self._latest_at)
        if self._odo_zero is None:
            self._odo_zero = t.enc_ticks
        return CarState(
            speed=t.speed_mm_s / 1000.0,
            odometer=(t.enc_ticks - self._odo_zero) / self.ticks_per_metre,
            accel=np.asarray(t.accel_cm_s2, dtype=np.float64) / 100.0,
            gyro=np.asarray(t.gyro_mrad_s, dtype=np.float64) / 1000.0,
            steer=t.steer_mrad / 1000.0, battery_v=t.battery_mv / 1000.0, stamp=self._latest_at)

    def command(self, steer: float, throttle: float) -> None:
        steer, throttle = float(steer), float(throttle)
        self.safety.check_command(steer, throttle)
        self._seq = (self._seq + 1) & 0xFFFF
        self._send(cp.Command(self._seq, round(steer * 1000), round(throttle * cp.THROTTLE_SCALE)))

    def advance(self, dt: float) -> float:
        """Wait until `dt` after the previous period; return how late we already were (s)."""
        self._raise_if_failed()
        overrun = self.pacer.advance(dt)
        self._raise_if_failed()
        return overrun

    def _send_neutral(self) -> None:
        if self._closed or self._error is not None:
            return
        self._seq = (self._seq + 1) & 0xFFFF
        try:
            self.ser.write(cp.encode_frame(cp.Command(self._seq, 0, 0)))
        except IO_ERRORS:
            pass

    def safe_stop(self) -> None:
        """Neutral throttle, straight wheels. Never raises (unplugged: firmware failsafe acts)."""
        self._send_neutral()

    def close(self) -> None:
        if self._closed:
            return
        self.safe_stop()
        self._closed = True
        self._stop.set()
        self._thread.join(timeout=1.0)
        try:
            self.ser.close()
        except IO_ERRORS:
            pass
