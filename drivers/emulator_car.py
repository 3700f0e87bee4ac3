"""The car's microcontroller, emulated on a pseudo-terminal, driving a simulated car.

Why: `SerialCar` and the car task must be exercised with the real frames, the real
telemetry rate and the real failsafe without hardware. It does what
`firmware/car_controller/car_controller.ino` does: accept COMMAND/CONFIG frames, stream
TELEMETRY every `telemetry_period_ms`, and force neutral throttle (and straight wheels) when
no command arrived for `timeout_ms`. The plant is the MuJoCo `CarSim` when available, else a
kinematic bicycle with a first-order speed response.
"""
from __future__ import annotations

import math
import queue
import threading
import time

import numpy as np

from robolearn.drivers import car_protocol as cp
from robolearn.drivers.ptylink import EmulatorThreads, Faults, PtyDevice, sleep_until
from robolearn.errors import ConfigError
from robolearn.robot import CarSpec, CarState

DEFAULT_SPEC = CarSpec(wheelbase=0.26, max_steer=0.45, max_speed=3.0, mass=4.0)


class BicyclePlant:
    """Stand-in car: speed -> throttle * max_speed with time constant `tau`, kinematic yaw."""

    def __init__(self, spec: CarSpec = DEFAULT_SPEC, tau: float = 0.4):
        self.spec, self.tau = spec, tau
        self.speed = self.odometer = self.yaw_rate = 0.0
        self.steer = 0.0
        self.x = self.y = self.heading = 0.0
        self._steer_cmd = self._throttle = 0.0
        self._last_accel = 0.0

    def command(self, steer: float, throttle: float) -> None:
        self._steer_cmd, self._throttle = steer, throttle

    def advance(self, dt: float) -> float:
        self.steer = self._steer_cmd
        v_goal = self._throttle * self.spec.max_speed
        dv = (v_goal - self.speed) * min(1.0, dt / self.tau)
        self.speed += dv
        self._last_accel = dv / dt if dt > 0 else 0.0
        self.yaw_rate = self.speed * math.tan(self.steer) / self.spec.wheelbase
        self.heading += self.yaw_rate * dt
        self.x += self.speed * math.cos(self.heading) * dt
        self.y += self.speed * math.sin(self.heading) * dt
        self.odometer += self.speed * dt
        return 0.0

    def pose(self) -> tuple[float, float, float]:
        """True (x, y, heading): what the external pose tracker watches."""
        return self.x, self.y, self.heading

    def read(self) -> CarState:
        return CarState(speed=self.speed, odometer=self.odometer,
                        accel=np.array([self._last_accel, self.speed * self.yaw_rate, 9.81]),
                        gyro=np.array([0.0, 0.0, self.yaw_rate]), steer=self.steer,
                        battery_v=7.6, stamp=time.monotonic())

    def safe_stop(self) -> None:
        self.command(0.0, 0.0)

    def close(self) -> None:
        pass


def make_plant(kind: str = "auto", period_ms: int = cp.DEFAULT_TELEMETRY_PERIOD_MS):
    """'sim' = MuJoCo CarSim, 'bicycle' = the stand-in, 'auto' = sim if importable.
    The plant is advanced once per telemetry period."""
    if kind not in ("auto", "sim", "bicycle"):
        raise ConfigError(f"car emulator plant {kind!r}: choose auto, sim or bicycle")
    if kind in ("sim", "auto"):
        try:
            from robolearn.sim.car import CarSim
            return CarSim(control_hz=1000.0 / period_ms)
        except ImportError:
            if kind == "sim":
                raise
    return BicyclePlant()


class CarEmulator(EmulatorThreads):
    """Emulated car controller. Context manager, or `start()` / `close()`."""

    name = "car-emulator"

    def __init__(self, plant=None, faults: Faults | None = None, baudrate: int = 115_200,
                 timeout_ms: int = cp.DEFAULT_TIMEOUT_MS,
                 telemetry_period_ms: int = cp.DEFAULT_TELEMETRY_PERIOD_MS, seed: int = 0):
        self.plant = plant if plant is not None else make_plant("auto", telemetry_period_ms)
        self.spec: CarSpec = getattr(self.plant, "spec", DEFAULT_SPEC)
        self.faults = faults or Faults(seed=seed)
        self.dev = PtyDevice(baudrate)
        self.timeout_ms = int(timeout_ms)
        self.telemetry_period_ms = int(telemetry_period_ms)
        self.configured = False
        self.muted = False                 # fault: stop sending telemetry
        self.parser = cp.FrameParser()
        self.last_command: cp.Command | None = None
        self.last_command_at: float | None = None   # monotonic time of the last valid COMMAND
        self.failsafe = True               # no command yet: neutral
        self.failsafe_since: float | None = time.monotonic()
        self.applied = (0.0, 0.0)          # (steer rad, throttle) actually sent to servo/ESC
        self.t0 = time.monotonic()
        self._enc_m = 0.0
        self._seq = 0
        self._lock = threading.Lock()
        self._outbox: queue.Queue = queue.Queue()
        self._init_threads()

    def start(self) -> "CarEmulator":
        self._start_loops(self._wire_loop, self._control_loop, self._sender_loop)
        return self

    def unplug(self) -> None:
        """USB cable pulled: the host loses the port; the MCU (own battery) keeps running its
        failsafe, so throttle goes neutral `timeout_ms` later."""
        self.dev.unplug()

    def stall_input(self, seconds: float) -> None:
        """Fault: the controller takes no bytes from the host for `seconds` (a starved MCU, a full
        USB buffer): the host's writes time out, its commands arrive late, and the firmware's
        failsafe sets neutral throttle `timeout_ms` after the last one it got."""
        self.dev.stall_input(seconds)

    # -------------------------------------------------------------------- wire side
    def _wire_loop(self):
        while not self._stop.is_set():
            data = self.dev.read(0.05)
            if not data:
                continue
            for msg in self.parser.feed(data):
                if isinstance(msg, cp.Command):
                    with self._lock:
                        self.last_command = msg
                        self.last_command_at = time.monotonic()
                elif isinstance(msg, cp.Config):
                    with self._lock:
                        self.timeout_ms = max(1, msg.timeout_ms)
                        self.telemetry_period_ms = max(1, msg.telemetry_period_ms)
                        self.configured = True
                    self._send(cp.encode_frame(cp.Config(self.timeout_ms, self.telemetry_period_ms)))

    def _send(self, frame: bytes) -> None:
        frame = self.faults.mangle(frame)
        if self.faults.delay_s:          # latency on the link, without stalling the controller
            self._outbox.put((time.monotonic() + self.faults.delay_s, frame))
        else:
            self.dev.write(frame)

    def _sender_loop(self):
        while not self._stop.is_set():
            try:
                due, frame = self._outbox.get(timeout=0.05)
            except queue.Empty:
                continue
            sleep_until(due)
            self.dev.write(frame)

    # ---------------------------------------------------------------- control side
    def _control_loop(self):
        t_next = time.monotonic()
        while not self._stop.is_set():
            dt = self.telemetry_period_ms / 1000.0
            now = time.monotonic()
            with self._lock:
                cmd, at, timeout = self.last_command, self.last_command_at, self.timeout_ms / 1000.0
            if cmd is None or at is None or now - at > timeout:
                if not self.failsafe:
                    self.failsafe_since = now
                self.failsafe = True
                steer, throttle = 0.0, 0.0           # neutral throttle, straight wheels
            else:
                self.failsafe = False
                steer = float(np.clip(cmd.steer_mrad / 1000.0, -self.spec.max_steer, self.spec.max_steer))
                throttle = float(np.clip(cmd.throttle_permille / cp.THROTTLE_SCALE, -1.0, 1.0))
            self.applied = (steer, throttle)
            try:
                with self.physics_lock:
                    self.plant.command(steer, throttle)
                    self.plant.advance(dt)
                    st = self.plant.read()
            except Exception as exc:  # noqa: BLE001 - a crashed controller goes silent, loudly
                self.error = exc
                return
            self._enc_m += st.speed * dt
            if not self.muted:
                self._send(cp.encode_frame(self._telemetry(st, cmd, steer, throttle)))
            t_next += dt
            if time.monotonic() > t_next + dt:
                t_next = time.monotonic()
            sleep_until(t_next)

    def _telemetry(self, st: CarState, cmd, steer: float, throttle: float) -> cp.Telemetry:
        self._seq = (self._seq + 1) & 0xFFFF
        flags = (cp.FLAG_FAILSAFE if self.failsafe else 0) | (cp.FLAG_CONFIGURED if self.configured else 0)
        battery = st.battery_v - 0.3 * abs(throttle)          # sag under load
        return cp.Telemetry(
            seq=self._seq, cmd_seq=cmd.seq if cmd else 0,
            t_ms=int((time.monotonic() - self.t0) * 1000),
            enc_ticks=int(round(self._enc_m * cp.TICKS_PER_METRE)),
            speed_mm_s=st.speed * 1000, accel_cm_s2=tuple(np.asarray(st.accel) * 100),
            gyro_mrad_s=tuple(np.asarray(st.gyro) * 1000), battery_mv=int(battery * 1000),
            steer_mrad=steer * 1000, throttle_permille=throttle * cp.THROTTLE_SCALE, flags=flags)
