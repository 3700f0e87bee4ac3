"""Serial-bus servo driver over pyserial: one object per USB-TTL adapter.

Why its own module: every failure of the wire (silence, noise, unplug) must turn into a
specific, bounded-time exception here, so nothing above (arm, env, runtime) ever hangs on a
servo. Each transaction has a deadline; a reply that is missing or fails its checksum is
retried `retries` times, then reported naming the servo ID.

The packet protocol is a module passed as `protocol`: `feetech` (STS/SCS, the default) or
`dynamixel` (Protocol 2.0). Both expose the same builders, parser and register names, so the
transaction, retry and error logic here is written once.
"""
from __future__ import annotations

import select
import termios
import time

import serial

from robolearn.drivers import feetech as ft
from robolearn.errors import DeviceDisconnectedError, DeviceError

# what pyserial lets through when a port vanishes (tcflush raises termios.error, not OSError)
IO_ERRORS = (serial.SerialException, OSError, termios.error, ValueError)


class ServoTimeoutError(DeviceError):
    """A servo did not answer within the deadline (after retries)."""

    def __init__(self, message: str, ids: list[int]):
        super().__init__(message)
        self.ids = ids


class ServoChecksumError(DeviceError):
    """A servo answered, but every attempt arrived corrupted (noise, wrong baud, bad cable)."""

    def __init__(self, message: str, ids: list[int]):
        super().__init__(message)
        self.ids = ids


class ServoStatusError(DeviceError):
    """A servo reported an error bit (overload, overheat, voltage, angle limit)."""


class ServoBus:
    """Half-duplex servo bus. Positions are raw ticks here; radians live in `calibration`.

    timeout: seconds to wait for one reply (a whole sync-read round) before retrying.
    retries: extra attempts after the first; worst case per call = (retries+1) * timeout.
    """

    def __init__(self, port: str, baudrate: int = 1_000_000, timeout: float = 0.02,
                 retries: int = 2, protocol=ft):
        self.proto = protocol
        self.port = port
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.parser = protocol.PacketParser()
        self.stats = {"retries": 0, "bad_checksums": 0, "transactions": 0}
        try:
            self.ser = serial.Serial(port, baudrate=baudrate, timeout=0, write_timeout=0.5)
        except (serial.SerialException, OSError, ValueError) as exc:
            raise DeviceError(
                f"cannot open servo bus port {port!r}: {exc}. Check the path (ls /dev/ttyUSB* "
                "/dev/ttyACM*), that no other program holds it, and that your user is in the "
                "'dialout' group.") from None
        self._closed = False

    # ------------------------------------------------------------------------ raw I/O
    def _write(self, data: bytes) -> None:
        self._check_open()
        try:
            self.ser.reset_input_buffer()
            self.parser.clear()
            self.ser.write(data)
        except IO_ERRORS as exc:
            raise self._disconnected(exc) from None

    def _read_some(self, until: float) -> bytes:
        # select ourselves: changing pyserial's timeout re-runs tcsetattr on every call
        try:
            ready, _, _ = select.select([self.ser.fileno()], [], [], max(0.0, until - time.monotonic()))
            if not ready:
                return b""
            return self.ser.read(max(1, self.ser.in_waiting))
        except IO_ERRORS as exc:
            raise self._disconnected(exc) from None

    def _disconnected(self, exc: Exception) -> DeviceDisconnectedError:
        return DeviceDisconnectedError(
            f"servo bus {self.port!r} disconnected ({exc}). Check the USB cable and servo "
            "power, then restart; the arm's torque state is unknown until reconnected.")

    def _check_open(self):
        if self._closed:
            raise DeviceError(f"servo bus {self.port!r} is closed; open a new ServoBus")

    def _transact(self, packet: bytes, expect_ids: list[int], what: str, check_status: bool = True) -> dict:
        """Send `packet`, collect one status packet per ID in `expect_ids`, retrying."""
        self.stats["transactions"] += 1
        got: dict = {}                       # servo ID -> status packet
        corrupted: set[int] = set()          # IDs whose reply arrived but failed the checksum
        for attempt in range(self.retries + 1):
            if attempt:
                self.stats["retries"] += 1
            got.clear()
            bad_before = self.parser.bad_checksums
            self._write(packet)
            deadline = time.monotonic() + self.timeout
            while len(got) < len(expect_ids) and time.monotonic() < deadline:
                for pkt in self.parser.feed(self._read_some(deadline)):
                    if pkt.id in expect_ids:
                        got[pkt.id] = pkt
            bad = self.parser.bad_checksums - bad_before
            self.stats["bad_checksums"] += bad
            if bad:
                corrupted.update(self.parser.bad_ids[-bad:])
            if len(got) == len(expect_ids):
                break
        missing = [i for i in expect_ids if i not in got]
        if missing:
            tries = self.retries + 1
            silent = [i for i in missing if i not in corrupted]
            if not silent:
                raise ServoChecksumError(
                    f"{what}: replies from servo ID(s) {missing} on {self.port} failed the "
                    f"checksum on {tries} attempts. Check the baud rate, the cable and the "
                    "servo power supply (noise on the data line).", missing)
            also = (f" (ID(s) {[i for i in missing if i in corrupted]} answered with bad checksums)"
                    if len(silent) < len(missing) else "")
            raise ServoTimeoutError(
                f"{what}: servo ID(s) {silent} on {self.port} did not answer within "
                f"{self.timeout * 1e3:.0f} ms ({tries} attempts){also}. Check that the servo is "
                "powered, its ID, and the daisy-chain cable to it.", silent)
        if check_status:
            for sid, pkt in got.items():
                self._check_status(sid, pkt.code, what)
        return got

    def _check_status(self, sid: int, err: int, what: str) -> None:
        if self.proto.fatal_error(err):
            raise ServoStatusError(
                f"{what}: servo {sid} on {self.port} reports error 0x{err:02x} "
                f"({self.proto.describe_error(err)}). Reduce load / let it cool / check supply, "
                "then re-enable torque.")

    def _needs(self, name: str, what: str):
        """The protocol module's packet builder `name`, or a DeviceError saying it has none."""
        builder = getattr(self.proto, name, None)
        if builder is None:
            raise DeviceError(f"{what}: {self.proto.NAME} has no such instruction; use sync_read / "
                              "sync_write, which every supported protocol has.")
        return builder

    def _send_only(self, packet: bytes) -> None:
        self._check_open()
        try:
            self.ser.write(packet)
        except IO_ERRORS as exc:
            raise self._disconnected(exc) from None

    def _decode(self, sid: int, params: bytes, reg: ft.Register, what: str) -> int:
        if len(params) != reg.size:
            raise DeviceError(f"{what}: servo {sid} returned {len(params)} bytes for {reg.name}, "
                              f"expected {reg.size}; is it a {self.proto.SERIES} servo?")
        return self.proto.decode_value(params, reg.sign_bit)

    # ------------------------------------------------------------------------ commands
    def ping(self, servo_id: int) -> bool:
        try:
            self._transact(self.proto.ping(servo_id), [servo_id], f"ping {servo_id}")
            return True
        except ServoTimeoutError:
            return False

    def scan(self, ids=range(0, 20)) -> list[int]:
        return [i for i in ids if self.ping(i)]

    def read_register(self, servo_id: int, reg: ft.Register) -> int:
        got = self._transact(self.proto.read(servo_id, reg.address, reg.size), [servo_id],
                             f"read {reg.name} of servo {servo_id}")
        params = got[servo_id].params
        if len(params) != reg.size:
            raise DeviceError(f"servo {servo_id} returned {len(params)} bytes for {reg.name}, "
                              f"expected {reg.size}; is it a {self.proto.SERIES} servo?")
        return self.proto.decode_value(params, reg.sign_bit)

    def write_register(self, servo_id: int, reg: ft.Register, value: int) -> None:
        """Acknowledged write (the servo answers with a status packet)."""
        self._transact(self.proto.write(servo_id, reg.address, self.proto.encode_value(value, reg.size, reg.sign_bit)),
                       [servo_id], f"write {reg.name}={value} to servo {servo_id}")

    def sync_read(self, ids: list[int], reg: ft.Register) -> dict[int, int]:
        got = self._transact(self.proto.sync_read(list(ids), reg.address, reg.size), list(ids),
                             f"sync read {reg.name}")
        out = {}
        for sid in ids:
            params = got[sid].params
            if len(params) != reg.size:
                raise DeviceError(f"servo {sid} returned {len(params)} bytes for {reg.name}, "
                                  f"expected {reg.size}")
            out[sid] = self.proto.decode_value(params, reg.sign_bit)
        return out

    def sync_read_block(self, ids: list[int], first: ft.Register, last: ft.Register) -> dict[int, dict[str, int]]:
        """One sync read covering registers first..last (e.g. position, speed, load)."""
        start, stop = first.address, last.address + last.size
        got = self._transact(self.proto.sync_read(list(ids), start, stop - start), list(ids),
                             f"sync read {first.name}..{last.name}")
        regs = [r for r in self.proto.REGISTERS.values() if start <= r.address and r.address + r.size <= stop]
        out = {}
        for sid in ids:
            params = got[sid].params
            if len(params) != stop - start:
                raise DeviceError(f"servo {sid} returned {len(params)} bytes, expected {stop - start}")
            out[sid] = {r.name: self.proto.decode_value(params[r.address - start:r.address - start + r.size],
                                                r.sign_bit) for r in regs}
        return out

    def sync_write(self, reg: ft.Register, values: dict[int, int]) -> None:
        """Unacknowledged broadcast write (no status replies by protocol): one packet per tick."""
        data = {sid: self.proto.encode_value(v, reg.size, reg.sign_bit) for sid, v in values.items()}
        self._check_open()
        try:
            self.ser.write(self.proto.sync_write(reg.address, data))
        except IO_ERRORS as exc:
            raise self._disconnected(exc) from None

    def bulk_read(self, reads: dict[int, ft.Register]) -> dict[int, int]:
        """One BULK_READ of a different register per servo (Dynamixel Protocol 2.0): each servo
        answers with its own status packet, in the order given. Same retries and errors as
        `sync_read` (timeouts and bad checksums name the servo IDs)."""
        what = "bulk read " + ", ".join(f"{r.name} of {sid}" for sid, r in reads.items())
        build = self._needs("bulk_read", "bulk read")
        ids = list(reads)
        got = self._transact(build([(sid, r.address, r.size) for sid, r in reads.items()]), ids, what)
        return {sid: self._decode(sid, got[sid].params, reads[sid], what) for sid in ids}

    def bulk_write(self, writes: dict[int, tuple[ft.Register, int]]) -> None:
        """One unacknowledged BULK_WRITE of a different register per servo (Protocol 2.0)."""
        build = self._needs("bulk_write", "bulk write")
        self._send_only(build([(sid, reg.address, self.proto.encode_value(v, reg.size, reg.sign_bit))
                               for sid, (reg, v) in writes.items()]))

    def fast_sync_read(self, ids: list[int], reg: ft.Register) -> dict[int, int]:
        """FAST_SYNC_READ (X-series firmware v45+): the servos answer with one combined status
        packet, so the host waits for one reply instead of one per servo. A servo that does not
        answer breaks the chain for every servo after it: the error names all requested IDs."""
        return self._fast_read("fast_sync_read", (list(ids), reg.address, reg.size),
                               {sid: reg for sid in ids}, f"fast sync read {reg.name}")

    def fast_bulk_read(self, reads: dict[int, ft.Register]) -> dict[int, int]:
        """FAST_BULK_READ (X-series firmware v45+): a different register per servo, one reply."""
        what = "fast bulk read " + ", ".join(f"{r.name} of {sid}" for sid, r in reads.items())
        return self._fast_read("fast_bulk_read", ([(sid, r.address, r.size) for sid, r in reads.items()],),
                               dict(reads), what)

    def _fast_read(self, name: str, args: tuple, regs: dict[int, ft.Register], what: str) -> dict[int, int]:
        build = self._needs(name, what)
        ids = list(regs)
        try:
            got = self._transact(build(*args), [self.proto.BROADCAST_ID], what, check_status=False)
        except ServoTimeoutError:
            raise ServoTimeoutError(
                f"{what}: no complete combined reply from servo ID(s) {ids} on {self.port} within "
                f"{self.timeout * 1e3:.0f} ms ({self.retries + 1} attempts). One silent servo (or "
                "one with firmware older than v45) cuts off every servo after it; check power, "
                "IDs and cables, or fall back to sync_read.", ids) from None
        except ServoChecksumError:
            raise ServoChecksumError(
                f"{what}: the combined reply from servo ID(s) {ids} on {self.port} failed its CRC on "
                f"{self.retries + 1} attempts. Check the baud rate, the cable and the servo power "
                "supply (noise on the data line).", ids) from None
        try:
            slots = self.proto.split_fast_status(got[self.proto.BROADCAST_ID],
                                                 {sid: r.size for sid, r in regs.items()})
        except ValueError as exc:
            raise DeviceError(f"{what} on {self.port}: malformed combined reply ({exc})") from None
        for sid, (err, _) in slots.items():
            self._check_status(sid, err, what)
        return {sid: self._decode(sid, slots[sid][1], regs[sid], what) for sid in ids}

    def reg_write(self, servo_id: int, reg: ft.Register, value: int) -> None:
        """REG_WRITE: the servo acknowledges and holds the write until `action()`."""
        self._transact(self.proto.reg_write(servo_id, reg.address,
                                            self.proto.encode_value(value, reg.size, reg.sign_bit)),
                       [servo_id], f"reg write {reg.name}={value} to servo {servo_id}")

    def action(self, servo_id: int | None = None) -> None:
        """ACTION: apply registered writes; by default broadcast (every servo at once, no reply),
        else to one servo, which acknowledges (its status carries the write's error)."""
        if servo_id is None:
            self._send_only(self.proto.action(self.proto.BROADCAST_ID))
            return
        self._transact(self.proto.action(servo_id), [servo_id], f"action on servo {servo_id}")

    def broadcast_write(self, reg: ft.Register, value: int) -> None:
        """WRITE to ID 0xFE: every servo applies it at once and none answers (the e-stop path:
        one packet, no per-servo timeouts to wait out)."""
        self._check_open()
        try:
            self.ser.write(self.proto.write(self.proto.BROADCAST_ID, reg.address,
                                            self.proto.encode_value(value, reg.size, reg.sign_bit)))
        except IO_ERRORS as exc:
            raise self._disconnected(exc) from None

    # ------------------------------------------------------------------- conveniences
    def read_positions(self, ids: list[int]) -> dict[int, int]:
        return self.sync_read(ids, self.proto.PRESENT_POSITION)

    def write_positions(self, ticks: dict[int, int]) -> None:
        self.sync_write(self.proto.GOAL_POSITION, ticks)

    def set_torque(self, ids: list[int], enabled: bool) -> None:
        for sid in ids:
            self.write_register(sid, self.proto.TORQUE_ENABLE, 1 if enabled else 0)

    def set_limits(self, servo_id: int, min_ticks: int, max_ticks: int) -> None:
        """Write the EEPROM position limits (the protocol's sequence: Feetech unlocks, writes
        both and locks again; Dynamixel turns torque off first)."""
        if not 0 <= min_ticks < max_ticks <= self.proto.MAX_TICK:
            raise ValueError(f"servo {servo_id}: limits {min_ticks}..{max_ticks} must satisfy "
                             f"0 <= min < max <= {self.proto.MAX_TICK}")
        for reg, value in self.proto.limit_writes(min_ticks, max_ticks):
            self.write_register(servo_id, reg, value)

    def set_homing_offset(self, servo_id: int, value: int) -> None:
        """Write the servo's Homing_Offset register (EEPROM; the protocol's sequence turns torque off
        first). Feetech: present = raw - value; Dynamixel: present = raw + value."""
        for reg, v in self.proto.homing_writes(int(value)):
            self.write_register(servo_id, reg, v)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self.ser.close()
            except IO_ERRORS:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
