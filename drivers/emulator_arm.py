"""A bus of emulated Feetech STS3215 servos on a pseudo-terminal, moving a simulated arm.

Why: the driver stack (bus, calibration, arm, env) must be exercised with the real bytes and
real timing without hardware. Two threads: the *wire* thread parses instruction packets from
the pty and answers like the servos would (per-servo control table, sync read answered by
each listed servo in order, sync write unacknowledged, REG WRITE held until ACTION); the
*physics* thread advances a plant in real time toward the goal positions. The plant is the MuJoCo `ArmSim` when available (so a
policy moving the "real" arm sees physically sensible motion) or a first-order servo model.

Each servo's horn "mounting" (zero offset, direction) is the emulator's hidden truth:
`emulator.calibration` is what a correct calibration procedure would measure.
"""
from __future__ import annotations

import time

import numpy as np

from robolearn.drivers import feetech as ft
from robolearn.drivers.calibration import Calibration, JointCalibration
from robolearn.drivers.ptylink import EmulatorThreads, Faults, PtyDevice, sleep_until
from robolearn.errors import ConfigError

# Stand-in arm when the MuJoCo arm is not used: SO-100 class, 5 joints + gripper.
DEFAULT_NAMES = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
DEFAULT_LOWER = np.array([-2.0, -1.6, -1.6, -1.7, -2.8, 0.0])
DEFAULT_UPPER = np.array([2.0, 1.6, 1.6, 1.7, 2.8, 1.0])
DEFAULT_VMAX = np.full(6, 5.5)


class FirstOrderServos:
    """Position servos as a first-order lag with a speed limit: dq = clip((goal-q)/tau, +-vmax)."""

    def __init__(self, names=DEFAULT_NAMES, lower=DEFAULT_LOWER, upper=DEFAULT_UPPER,
                 vmax=DEFAULT_VMAX, tau: float = 0.05, q0=None):
        self.names = tuple(names)
        self.lower, self.upper = np.asarray(lower, float), np.asarray(upper, float)
        self.vmax = np.asarray(vmax, float)
        self.tau = tau
        self.q = np.clip(np.zeros(len(self.names)) if q0 is None else np.asarray(q0, float),
                         self.lower, self.upper)
        self.dq = np.zeros_like(self.q)

    def step(self, goal: np.ndarray, torque: np.ndarray, dt: float):
        v = np.clip((goal - self.q) / self.tau, -self.vmax, self.vmax)
        v = np.where(torque, v, 0.0)
        self.q = np.clip(self.q + v * dt, self.lower, self.upper)
        self.dq = v
        load = np.where(torque, np.clip((goal - self.q) * 2000, -1000, 1000), 0)
        return self.q.copy(), self.dq.copy(), load

    def close(self):
        pass


#: how far (rad) a servo horn turns past its joint's range: goals up to this far out press
#: the link against the joint's mechanical stop (the MJCF range) instead of being clipped
SERVO_TRAVEL_RAD = 0.5
#: how far (rad) past a joint's range a goal may lie before the emulator counts it unsafe: the
#: measured calibration leaves ~0.01 rad of offset error, so a command at the software limit
#: can land that far past the true range; stop calibration presses 0.2 rad and more past it
GOAL_TOLERANCE_RAD = 0.05


class ArmSimPlant:
    """The MuJoCo arm as the plant: joint goals go to `ArmSim.command`, time to `advance`.

    Each joint's MJCF range is a mechanical stop: a goal past it (a servo's own range is
    wider, `servo_travel`) presses the link against the stop, which holds it there, as on a
    built arm (what stop-based calibration, drivers/stop_calibration.py, relies on).
    Torque off is modelled as holding the present position (a back-driven STS servo under
    gearbox friction barely moves at these loads).
    """

    def __init__(self, sim=None, servo_travel: float = SERVO_TRAVEL_RAD, **sim_kwargs):
        if sim is None:
            from robolearn.sim.arm import ArmSim
            sim = ArmSim(**sim_kwargs)
        self.sim = sim
        spec = sim.spec
        self.names = tuple(spec.joint_names) + ("gripper",)
        g_lo, g_hi = sorted((spec.gripper_closed, spec.gripper_open))
        self.lower = np.append(np.asarray(spec.lower, float), g_lo)
        self.upper = np.append(np.asarray(spec.upper, float), g_hi)
        self.vmax = np.append(np.asarray(spec.max_velocity, float), float(np.max(spec.max_velocity)))
        sim.allow_past_stops(servo_travel)
        self._goal_lo, self._goal_hi = self.lower - servo_travel, self.upper + servo_travel
        st = sim.read()
        self.q = np.append(st.q, st.gripper)

    def step(self, goal: np.ndarray, torque: np.ndarray, dt: float):
        # the servo's own travel ends somewhere past the stop: goals beyond it are its end
        target = np.clip(np.where(torque, goal, self.q), self._goal_lo, self._goal_hi)
        self.sim.command(target[:-1].copy(), float(target[-1]))
        self.sim.advance(dt)
        st = self.sim.read()
        q = np.append(st.q, st.gripper)
        dq = np.append(st.dq, (q[-1] - self.q[-1]) / dt if dt > 0 else 0.0)
        self.q = q
        load = np.where(torque, np.clip((goal - q) * 2000, -1000, 1000), 0)
        return q, dq, load

    def close(self):
        self.sim.close()


def make_plant(kind: str = "auto", physics_hz: float = 200.0):
    """'sim' = MuJoCo ArmSim, 'first_order' = the stand-in, 'auto' = sim if importable.
    The sim's physics step is chosen so `1/physics_hz` is a whole number of steps."""
    if kind not in ("auto", "sim", "first_order"):
        raise ConfigError(f"arm emulator plant {kind!r}: choose auto, sim or first_order")
    if kind in ("sim", "auto"):
        try:
            return ArmSimPlant(control_hz=physics_hz)
        except ImportError:
            if kind == "sim":
                raise
    return FirstOrderServos()


def scrambled_mounting(names, lower, upper, seed: int = 0, first_id: int = 1) -> Calibration:
    """Horns mounted at random offsets and directions, as on a freshly assembled arm."""
    rng = np.random.default_rng(seed)
    servos = {}
    for i, (n, lo, hi) in enumerate(zip(names, lower, upper)):
        direction = int(rng.choice([-1, 1]))
        span = (hi - lo) / (2 * np.pi) * ft.TICKS_PER_REV
        margin = int(span / 2) + 40
        offset = int(rng.integers(margin, ft.MAX_TICK - margin))
        a = offset + direction * lo / (2 * np.pi) * ft.TICKS_PER_REV
        b = offset + direction * hi / (2 * np.pi) * ft.TICKS_PER_REV
        servos[n] = JointCalibration(id=first_id + i, offset=offset, direction=direction,
                                     min=max(0, int(np.floor(min(a, b)))),
                                     max=min(ft.MAX_TICK, int(np.ceil(max(a, b)))))
    return Calibration(servos)


class ArmEmulator(EmulatorThreads):
    """Emulated servo bus. Use as a context manager or call `start()` / `close()`."""

    name = "arm-emulator"

    def __init__(self, plant=None, mounting: Calibration | str | None = None,
                 faults: Faults | None = None, baudrate: int = 1_000_000,
                 physics_hz: float = 200.0, emulate_wire: bool = True, seed: int = 0):
        self.plant = plant if plant is not None else make_plant("auto", physics_hz)
        names = self.plant.names
        if mounting is None:
            mounting = Calibration.default(names, self.plant.lower, self.plant.upper)
        elif mounting == "scrambled":
            mounting = scrambled_mounting(names, self.plant.lower, self.plant.upper, seed=seed)
        self.calibration: Calibration = mounting
        self.faults = faults or Faults(seed=seed)
        self.dev = PtyDevice(baudrate)
        self.emulate_wire = emulate_wire
        self.physics_dt = 1.0 / physics_hz
        self.ids = mounting.ids
        self.index = {sid: i for i, sid in enumerate(self.ids)}
        n = len(self.ids)
        # per-servo control table (bytes), initialised like a factory-fresh STS3215
        self.tables = {sid: bytearray(ft.CONTROL_TABLE_SIZE) for sid in self.ids}
        for sid, cal in zip(self.ids, mounting.servos.values()):
            self._poke(sid, ft.MODEL, ft.STS3215_MODEL)
            self._poke(sid, ft.ID, sid)
            self._poke(sid, ft.MIN_ANGLE_LIMIT, 0)
            self._poke(sid, ft.MAX_ANGLE_LIMIT, ft.MAX_TICK)
            self._poke(sid, ft.TORQUE_LIMIT, 1000)
            self._poke(sid, ft.LOCK, 1)
            self._poke(sid, ft.PRESENT_VOLTAGE, 120)        # 12.0 V
            self._poke(sid, ft.PRESENT_TEMPERATURE, 30)
        self.goal = self.plant.q.copy() if hasattr(self.plant, "q") else np.zeros(n)
        self.torque = np.zeros(n, dtype=bool)
        self._snap = (self.goal.copy(), np.zeros(n), np.zeros(n))
        self.parser = ft.PacketParser()
        self.registered: dict[int, tuple[int, bytes]] = {}   # REG_WRITE waiting for ACTION
        self.packets_handled = 0
        # every goal-position write the servos received, and those outside the joints' range
        # (true frame, `GOAL_TOLERANCE_RAD` allowed): what "no unsafe command reached the servos"
        # is checked against, on the servo side of the wire, not the policy side
        self.goal_writes = 0
        self.unsafe_goal_writes = 0
        self.unsafe_examples: list[dict] = []
        self._init_threads()
        self.physics_overruns = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "ArmEmulator":
        self._start_loops(self._wire_loop, self._physics_loop)
        return self

    def unplug(self, servo_power: bool = False) -> None:
        """Pull the cable: the host's next I/O on `path` fails.

        servo_power=False (default): only the USB link goes (the servos keep their supply and
        hold the last goal: still, but stiff). servo_power=True: the adapter board with the
        bus supply goes, so every servo drops torque and the arm goes limp.
        """
        if servo_power:
            self.torque[:] = False
            for sid in self.ids:
                self.tables[sid][ft.TORQUE_ENABLE.address] = 0
        self.dev.unplug()

    # ------------------------------------------------------------- observable state
    def torque_enabled(self) -> dict[int, bool]:
        return {sid: bool(self.torque[i]) for sid, i in self.index.items()}

    def positions_rad(self) -> np.ndarray:
        return self._snap[0].copy()

    def register(self, sid: int, reg: ft.Register) -> int:
        return self._peek(sid, reg)

    # ------------------------------------------------------------------ physics
    def _physics_loop(self):
        t_next = time.monotonic()
        while not self._stop.is_set():
            try:
                with self.physics_lock:
                    q, dq, load = self.plant.step(self.goal.copy(), self.torque.copy(), self.physics_dt)
            except Exception as exc:  # noqa: BLE001 - a crashed device goes silent, loudly
                self.error = exc
                self.faults.silent_ids |= set(self.ids)
                return
            self._snap = (q, dq, load)          # one reference swap: readers never see a mix
            t_next += self.physics_dt
            now = time.monotonic()
            if now > t_next + self.physics_dt:   # fell behind (CPU busy): drop, don't catch up
                self.physics_overruns += 1
                t_next = now
            sleep_until(t_next)

    # --------------------------------------------------------------------- wire
    def _wire_loop(self):
        while not self._stop.is_set():
            data = self.dev.read(0.05)
            if not data:
                continue
            for pkt in self.parser.feed(data):
                self.packets_handled += 1
                replies = self._handle(pkt)
                if replies:
                    self._send(replies, request_len=len(pkt.params) + 6)

    def _send(self, replies: list[bytes], request_len: int) -> None:
        if self.emulate_wire:
            time.sleep(self.dev.wire_time(request_len + sum(map(len, replies))))
        if self.faults.delay_s:
            time.sleep(self.faults.delay_s)
        self.dev.write(b"".join(self.faults.mangle(r) for r in replies))

    def _alive(self, sid: int) -> bool:
        return sid in self.tables and sid not in self.faults.silent_ids

    def _handle(self, pkt: ft.Packet) -> list[bytes]:
        """The status packets the addressed servo(s) send back (none for broadcasts)."""
        p = pkt.params
        if pkt.code == ft.SYNC_READ and pkt.id == ft.BROADCAST_ID and len(p) >= 2:
            addr, length = p[0], p[1]
            return [ft.status(sid, self._error(sid), self._read_table(sid, addr, length))
                    for sid in p[2:] if self._alive(sid)]   # each listed servo, in order
        if pkt.code == ft.SYNC_WRITE and pkt.id == ft.BROADCAST_ID and len(p) >= 2:
            addr, length = p[0], p[1]
            body = p[2:]
            for k in range(0, len(body) - length, length + 1):
                sid = body[k]
                if self._alive(sid):
                    self._write_table(sid, addr, body[k + 1:k + 1 + length])
            return []
        targets = list(self.tables) if pkt.id == ft.BROADCAST_ID else [pkt.id]
        reply = b""
        for sid in targets:
            if not self._alive(sid):
                continue
            if pkt.code == ft.PING:
                reply = ft.status(sid, self._error(sid))
            elif pkt.code == ft.READ and len(p) == 2:
                reply = ft.status(sid, self._error(sid), self._read_table(sid, p[0], p[1]))
            elif pkt.code == ft.WRITE and len(p) >= 2:
                self._write_table(sid, p[0], p[1:])
                reply = ft.status(sid, self._error(sid))
            elif pkt.code == ft.REG_WRITE and len(p) >= 2:
                self.registered[sid] = (p[0], bytes(p[1:]))    # held until ACTION
                reply = ft.status(sid, self._error(sid))
            elif pkt.code == ft.ACTION and not p:
                pending = self.registered.pop(sid, None)
                if pending:
                    self._write_table(sid, *pending)
                reply = ft.status(sid, self._error(sid))
            else:
                return []                          # unknown instruction: real servos ignore it
        return [] if pkt.id == ft.BROADCAST_ID or not reply else [reply]

    def _error(self, sid: int) -> int:
        return self.faults.status_errors.get(sid, 0)

    # ---------------------------------------------------------------- control table
    def _poke(self, sid: int, reg: ft.Register, value: int) -> None:
        self.tables[sid][reg.address:reg.address + reg.size] = ft.encode_value(value, reg.size, reg.sign_bit)

    def _peek(self, sid: int, reg: ft.Register) -> int:
        return ft.decode_value(self.tables[sid][reg.address:reg.address + reg.size], reg.sign_bit)

    def _read_table(self, sid: int, addr: int, length: int) -> bytes:
        i = self.index[sid]
        cal = self.calibration[self.calibration.names[i]]
        q, dq, load = self._snap
        offset = self._peek(sid, ft.HOMING_OFFSET)
        raw = int(np.clip(cal.to_ticks(q[i]), 0, ft.MAX_TICK))
        self._poke(sid, ft.PRESENT_POSITION, raw - offset)
        self._poke(sid, ft.PRESENT_SPEED, int(round(cal.direction * dq[i] / (2 * np.pi) * ft.TICKS_PER_REV)))
        self._poke(sid, ft.PRESENT_LOAD, int(cal.direction * load[i]))
        self._poke(sid, ft.MOVING, int(abs(dq[i]) > 0.05))
        end = min(addr + length, ft.CONTROL_TABLE_SIZE)
        return bytes(self.tables[sid][addr:end]).ljust(length, b"\0")

    def _write_table(self, sid: int, addr: int, data: bytes) -> None:
        table = self.tables[sid]
        end = min(addr + len(data), ft.CONTROL_TABLE_SIZE)
        if addr >= end:
            return
        eeprom = addr < ft.TORQUE_ENABLE.address
        if eeprom and self._peek(sid, ft.LOCK) and addr != ft.LOCK.address:
            return                                  # EEPROM is write-protected while locked
        table[addr:end] = data[:end - addr]
        i = self.index[sid]
        touched = range(addr, end)
        if ft.TORQUE_ENABLE.address in touched:
            self.torque[i] = bool(table[ft.TORQUE_ENABLE.address])
            if self.torque[i]:                      # enabling torque holds the present position
                self.goal[i] = self._snap[0][i]
        if ft.GOAL_POSITION.address in touched:
            cal = self.calibration[self.calibration.names[i]]
            lo, hi = self._peek(sid, ft.MIN_ANGLE_LIMIT), self._peek(sid, ft.MAX_ANGLE_LIMIT)
            # the firmware clamps the goal to its limits in the present-position frame (after the
            # homing offset: LeRobot writes limits recorded from Present_Position), then moves to
            # raw = goal + homing offset
            goal = int(np.clip(self._peek(sid, ft.GOAL_POSITION), lo, hi)) + self._peek(sid, ft.HOMING_OFFSET)
            self.goal[i] = float(cal.to_rad(goal))
            self._count_goal(i, self.goal[i])

    def _count_goal(self, i: int, goal_rad: float) -> None:
        self.goal_writes += 1
        lo, hi = self.plant.lower[i] - GOAL_TOLERANCE_RAD, self.plant.upper[i] + GOAL_TOLERANCE_RAD
        if not lo <= goal_rad <= hi:
            self.unsafe_goal_writes += 1
            if len(self.unsafe_examples) < 20:
                self.unsafe_examples.append({"joint": self.plant.names[i], "goal_rad": round(goal_rad, 4),
                                             "range": [round(float(self.plant.lower[i]), 4),
                                                       round(float(self.plant.upper[i]), 4)],
                                             "t": round(time.monotonic(), 3)})

    def goal_counts(self) -> dict:
        return {"goal_writes": self.goal_writes, "unsafe_goal_writes": self.unsafe_goal_writes,
                "unsafe_examples": list(self.unsafe_examples)}
