"""Feetech STS/SCS bus-servo protocol: packet bytes, control table, incremental parser.

Why a module of its own: the driver (`servo_bus`) and the emulator (`emulator_arm`) must speak
exactly the same bytes, so both build and parse packets here and nowhere else.

Packet format (half-duplex TTL, 8N1, default 1 Mbaud on STS3215):

    instruction:  0xFF 0xFF ID LEN INSTR PARAM... CHECKSUM
    status:       0xFF 0xFF ID LEN ERROR PARAM... CHECKSUM

LEN = number of PARAM bytes + 2; CHECKSUM = ~(ID + LEN + INSTR/ERROR + sum(PARAM)) & 0xFF.
ID 0xFE is broadcast (no status reply, except SYNC_READ where each listed servo answers in
order). STS multi-byte registers are little-endian; signed values use a sign bit
(sign-magnitude), not two's complement.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

HEADER = b"\xff\xff"
BROADCAST_ID = 0xFE
MAX_ID = 0xFD            # 0..253 are unicast IDs

# ------------------------------------------------------------------------- instructions
PING = 0x01
READ = 0x02
WRITE = 0x03
REG_WRITE = 0x04
ACTION = 0x05
SYNC_READ = 0x82
SYNC_WRITE = 0x83
INSTRUCTIONS = {PING: "PING", READ: "READ", WRITE: "WRITE", REG_WRITE: "REG_WRITE",
                ACTION: "ACTION", SYNC_READ: "SYNC_READ", SYNC_WRITE: "SYNC_WRITE"}

# ----------------------------------------------------------------- status error byte bits
ERR_VOLTAGE = 0x01
ERR_ANGLE = 0x02
ERR_OVERHEAT = 0x04
ERR_OVERELE = 0x08       # over-current
ERR_OVERLOAD = 0x20
ERROR_BITS = {ERR_VOLTAGE: "input voltage", ERR_ANGLE: "angle limit", ERR_OVERHEAT: "overheat",
              ERR_OVERELE: "over-current", ERR_OVERLOAD: "overload"}


def describe_error(err: int) -> str:
    names = [name for bit, name in ERROR_BITS.items() if err & bit]
    unknown = err & ~sum(ERROR_BITS)
    if unknown:
        names.append(f"unknown bits 0x{unknown:02x}")
    return ", ".join(names) or "none"


# ------------------------------------------------------------------- STS3215 control table
@dataclass(frozen=True)
class Register:
    name: str
    address: int
    size: int                # bytes
    sign_bit: int | None = None  # sign-magnitude bit for signed registers


# EEPROM (persistent; LOCK must be 0 to write)
MODEL = Register("model", 3, 2)
ID = Register("id", 5, 1)
BAUD_RATE = Register("baud_rate", 6, 1)
RETURN_DELAY = Register("return_delay", 7, 1)
MIN_ANGLE_LIMIT = Register("min_angle_limit", 9, 2)
MAX_ANGLE_LIMIT = Register("max_angle_limit", 11, 2)
HOMING_OFFSET = Register("homing_offset", 31, 2, sign_bit=11)
OPERATING_MODE = Register("operating_mode", 33, 1)
# SRAM (volatile)
TORQUE_ENABLE = Register("torque_enable", 40, 1)
ACCELERATION = Register("acceleration", 41, 1)
GOAL_POSITION = Register("goal_position", 42, 2, sign_bit=15)
GOAL_TIME = Register("goal_time", 44, 2)
GOAL_SPEED = Register("goal_speed", 46, 2)
TORQUE_LIMIT = Register("torque_limit", 48, 2)
LOCK = Register("lock", 55, 1)
PRESENT_POSITION = Register("present_position", 56, 2, sign_bit=15)
PRESENT_SPEED = Register("present_speed", 58, 2, sign_bit=15)
PRESENT_LOAD = Register("present_load", 60, 2, sign_bit=10)
PRESENT_VOLTAGE = Register("present_voltage", 62, 1)
PRESENT_TEMPERATURE = Register("present_temperature", 63, 1)
MOVING = Register("moving", 66, 1)
PRESENT_CURRENT = Register("present_current", 69, 2)

REGISTERS = {r.name: r for r in (
    MODEL, ID, BAUD_RATE, RETURN_DELAY, MIN_ANGLE_LIMIT, MAX_ANGLE_LIMIT, HOMING_OFFSET,
    OPERATING_MODE, TORQUE_ENABLE, ACCELERATION, GOAL_POSITION, GOAL_TIME, GOAL_SPEED,
    TORQUE_LIMIT, LOCK, PRESENT_POSITION, PRESENT_SPEED, PRESENT_LOAD, PRESENT_VOLTAGE,
    PRESENT_TEMPERATURE, MOVING, PRESENT_CURRENT)}
CONTROL_TABLE_SIZE = 71      # addresses 0..70
STS3215_MODEL = 777
TICKS_PER_REV = 4096
TICK_CENTER = 2048
MAX_TICK = TICKS_PER_REV - 1
NAME = "Feetech STS/SCS"
SERIES = "Feetech STS-series"

# the names the shared bus/arm code uses (dynamixel.py defines the same ones)
MIN_LIMIT, MAX_LIMIT = MIN_ANGLE_LIMIT, MAX_ANGLE_LIMIT
PRESENT_VELOCITY = PRESENT_SPEED
RAD_S_PER_VELOCITY_UNIT = 2 * 3.141592653589793 / TICKS_PER_REV   # speed is in ticks/s


def limit_writes(min_ticks: int, max_ticks: int) -> list[tuple["Register", int]]:
    """Register writes that set the angle limits: EEPROM, unlocked for the two writes."""
    return [(LOCK, 0), (MIN_ANGLE_LIMIT, min_ticks), (MAX_ANGLE_LIMIT, max_ticks), (LOCK, 1)]


def homing_writes(value: int) -> list[tuple["Register", int]]:
    """Register writes that set the homing offset (present = raw - value): torque off first (a new
    offset moves where the held goal is), EEPROM unlocked for the write."""
    return [(TORQUE_ENABLE, 0), (LOCK, 0), (HOMING_OFFSET, value), (LOCK, 1)]


def fatal_error(err: int) -> bool:
    """The angle-limit bit is informative (a goal was clamped); every other bit is fatal."""
    return bool(err & ~ERR_ANGLE)


# ------------------------------------------------------------------------ value encoding
def checksum(body: bytes | bytearray) -> int:
    """Checksum over ID..last param (everything after the 0xFF 0xFF header)."""
    return (~sum(body)) & 0xFF


def encode_value(value: int, size: int, sign_bit: int | None = None) -> bytes:
    """Little-endian, sign-magnitude when `sign_bit` is set (as the STS firmware stores it)."""
    value = int(value)
    if sign_bit is not None and value < 0:
        value = (-value) | (1 << sign_bit)
    if value < 0 or value >= 1 << (8 * size):
        raise ValueError(f"value {value} does not fit in {size} byte(s)")
    return value.to_bytes(size, "little")


def decode_value(data: bytes | bytearray, sign_bit: int | None = None) -> int:
    value = int.from_bytes(bytes(data), "little")
    if sign_bit is not None and value & (1 << sign_bit):
        value = -(value & ((1 << sign_bit) - 1))
    return value


# ------------------------------------------------------------------------------ packets
@dataclass(frozen=True)
class Packet:
    """One decoded packet. For a status packet `code` is the error byte, else the instruction."""

    id: int
    code: int
    params: bytes

    def to_bytes(self) -> bytes:
        return build_packet(self.id, self.code, self.params)


def build_packet(servo_id: int, code: int, params: bytes | bytearray = b"") -> bytes:
    if not 0 <= servo_id <= BROADCAST_ID:
        raise ValueError(f"servo id {servo_id} outside 0..{BROADCAST_ID}")
    if len(params) > 253:
        raise ValueError(f"{len(params)} parameter bytes do not fit one packet (max 253)")
    body = bytes([servo_id, len(params) + 2, code]) + bytes(params)
    return HEADER + body + bytes([checksum(body)])


def ping(servo_id: int) -> bytes:
    return build_packet(servo_id, PING)


def read(servo_id: int, address: int, length: int) -> bytes:
    return build_packet(servo_id, READ, bytes([address, length]))


def write(servo_id: int, address: int, data: bytes) -> bytes:
    return build_packet(servo_id, WRITE, bytes([address]) + bytes(data))


def reg_write(servo_id: int, address: int, data: bytes) -> bytes:
    """REG WRITE: the servo stores the write and applies it on ACTION."""
    return build_packet(servo_id, REG_WRITE, bytes([address]) + bytes(data))


def action(servo_id: int = BROADCAST_ID) -> bytes:
    """ACTION: apply the registered write (broadcast: every servo at once, no replies)."""
    return build_packet(servo_id, ACTION)


def sync_read(ids: list[int], address: int, length: int) -> bytes:
    return build_packet(BROADCAST_ID, SYNC_READ, bytes([address, length, *ids]))


def sync_write(address: int, data_by_id: dict[int, bytes]) -> bytes:
    sizes = {len(d) for d in data_by_id.values()}
    if len(sizes) != 1:
        raise ValueError(f"sync write needs equal-size data per servo, got sizes {sorted(sizes)}")
    (size,) = sizes
    params = bytearray([address, size])
    for sid, data in data_by_id.items():
        params.append(sid)
        params += data
    return build_packet(BROADCAST_ID, SYNC_WRITE, params)


def status(servo_id: int, error: int = 0, params: bytes = b"") -> bytes:
    return build_packet(servo_id, error, params)


# ------------------------------------------------------------------------------- parser
class ResyncParser:
    """Byte buffer and counters of an incremental packet parser; subclasses scan it in
    `_drain` for their protocol's packets (Feetech here, Dynamixel Protocol 2.0 in dynamixel.py)."""

    def __init__(self):
        self._buf = bytearray()
        self.bad_checksums = 0
        self.dropped_bytes = 0
        self.bad_ids: list[int] = []     # claimed ID byte of each packet that failed its checksum

    def feed(self, data: bytes | bytearray) -> list:
        self._buf += data
        return list(self._drain())

    def clear(self) -> None:
        self._buf.clear()

    @property
    def pending(self) -> int:
        return len(self._buf)

    def _drop(self, n: int) -> None:
        del self._buf[:n]
        self.dropped_bytes += n

    def _drain(self) -> Iterator:
        raise NotImplementedError


class PacketParser(ResyncParser):
    """Incremental parser: feed bytes as they arrive, iterate complete packets.

    Resynchronises on garbage: a bad length or checksum drops the first header byte and
    rescans, so one corrupted packet never desynchronises the stream for later ones. Counts
    of dropped bytes and checksum failures are kept so the bus can tell "silent" from
    "corrupted" when it reports an error.
    """

    def _drain(self) -> Iterator[Packet]:
        buf = self._buf
        while True:
            start = buf.find(HEADER)
            if start < 0:
                # keep a trailing 0xFF: it may be the first half of the next header
                keep = 1 if buf[-1:] == b"\xff" else 0
                self._drop(len(buf) - keep)
                return
            if start:
                self._drop(start)
            if len(buf) < 4:
                return
            # 0xFF 0xFF 0xFF ...: an extra header byte (IDs stop at 0xFE) -> skip one
            if buf[2] == 0xFF:
                self._drop(1)
                continue
            length = buf[3]
            if length < 2:
                self._drop(2)
                continue
            total = 4 + length
            if len(buf) < total:          # wait for the rest (at most 259 bytes are ever held)
                return
            body = bytes(buf[2:total - 1])
            if checksum(body) != buf[total - 1]:
                self.bad_checksums += 1
                self.bad_ids.append(body[0])
                del self.bad_ids[:-64]
                self._drop(2)
                continue
            del buf[:total]
            yield Packet(id=body[0], code=body[2], params=body[3:])
