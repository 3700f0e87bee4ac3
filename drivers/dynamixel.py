"""Dynamixel Protocol 2.0 (X-series, e.g. the XL330/XL430 of Koch-class arms): packet bytes,
control table, incremental parser.

Why a module of its own: like `feetech`, the driver (`servo_bus.ServoBus(protocol=dynamixel)`)
and the emulator (`dynamixel_emulator`) must build and parse the same bytes, here and nowhere
else. The module exposes the same names as `feetech` (packet builders, `PacketParser`,
`encode_value`/`decode_value`, `describe_error`, `fatal_error`, `limit_writes`, the registers
the arm needs), so the bus and arm code is shared, not copied.

Packet format (ROBOTIS e-Manual, "DYNAMIXEL Protocol 2.0"):

    instruction:  FF FF FD 00 ID LEN_L LEN_H INSTR PARAM... CRC_L CRC_H
    status:       FF FF FD 00 ID LEN_L LEN_H 0x55 ERROR PARAM... CRC_L CRC_H

LEN = bytes after the length field (instruction, parameters, 2 CRC bytes), after stuffing.
Byte stuffing: inside INSTR..PARAM any FF FF FD gets an extra FD (FF FF FD FD), so the header
never appears in a payload. CRC-16 (polynomial 0x8005, MSB first, init 0) over everything from
the header up to the last parameter, stuffed bytes included. Multi-byte values little-endian,
signed registers two's complement.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator

from robolearn.drivers.feetech import Register, ResyncParser

NAME = "Dynamixel Protocol 2.0"
SERIES = "Dynamixel X-series"
HEADER = b"\xff\xff\xfd\x00"
BROADCAST_ID = 0xFE
MAX_ID = 0xFC            # 0..252 are unicast IDs
MAX_LENGTH = 1024        # longest LEN this parser accepts (a sync read of many servos fits)

# ------------------------------------------------------------------------- instructions
PING = 0x01
READ = 0x02
WRITE = 0x03
REG_WRITE = 0x04
ACTION = 0x05
FACTORY_RESET = 0x06
REBOOT = 0x08
STATUS = 0x55
SYNC_READ = 0x82
SYNC_WRITE = 0x83
FAST_SYNC_READ = 0x8A    # X-series firmware v45+: one combined status packet (see fast_status)
BULK_READ = 0x92
BULK_WRITE = 0x93
FAST_BULK_READ = 0x9A    # X-series firmware v45+
INSTRUCTIONS = {PING: "PING", READ: "READ", WRITE: "WRITE", REG_WRITE: "REG_WRITE", ACTION: "ACTION",
                FACTORY_RESET: "FACTORY_RESET", REBOOT: "REBOOT", STATUS: "STATUS",
                SYNC_READ: "SYNC_READ", SYNC_WRITE: "SYNC_WRITE", FAST_SYNC_READ: "FAST_SYNC_READ",
                BULK_READ: "BULK_READ", BULK_WRITE: "BULK_WRITE", FAST_BULK_READ: "FAST_BULK_READ"}
FAST_READ_MIN_FIRMWARE = 45

# ----------------------------------------------------------------- status error byte
ERR_ALERT = 0x80         # hardware error: read HARDWARE_ERROR_STATUS (overload, overheat, ...)
ERR_RESULT_FAIL = 1
ERR_INSTRUCTION = 2
ERR_CRC = 3
ERR_DATA_RANGE = 4
ERR_DATA_LENGTH = 5
ERR_DATA_LIMIT = 6
ERR_ACCESS = 7
ERROR_NUMBERS = {ERR_RESULT_FAIL: "result fail", ERR_INSTRUCTION: "instruction error",
                 ERR_CRC: "CRC error", ERR_DATA_RANGE: "data range error",
                 ERR_DATA_LENGTH: "data length error", ERR_DATA_LIMIT: "data limit error",
                 ERR_ACCESS: "access error (EEPROM while torque is on, or a read-only address)"}


def describe_error(err: int) -> str:
    names = []
    number = err & 0x7F
    if number:
        names.append(ERROR_NUMBERS.get(number, f"unknown error number {number}"))
    if err & ERR_ALERT:
        names.append("hardware alert (see hardware_error_status, address 70)")
    return ", ".join(names) or "none"


def fatal_error(err: int) -> bool:
    """Every error a Protocol 2.0 status can carry means the instruction was not (fully) done."""
    return bool(err)


# ---------------------------------------------------------- X-series control table
MODEL = Register("model", 0, 2)
FIRMWARE_VERSION = Register("firmware_version", 6, 1)
ID = Register("id", 7, 1)
BAUD_RATE = Register("baud_rate", 8, 1)
RETURN_DELAY = Register("return_delay", 9, 1)
DRIVE_MODE = Register("drive_mode", 10, 1)
OPERATING_MODE = Register("operating_mode", 11, 1)
HOMING_OFFSET = Register("homing_offset", 20, 4, sign_bit=31)
MAX_POSITION_LIMIT = Register("max_position_limit", 48, 4)
MIN_POSITION_LIMIT = Register("min_position_limit", 52, 4)
TORQUE_ENABLE = Register("torque_enable", 64, 1)
LED = Register("led", 65, 1)
STATUS_RETURN_LEVEL = Register("status_return_level", 68, 1)
REGISTERED_INSTRUCTION = Register("registered_instruction", 69, 1)   # 1 while a REG_WRITE waits
HARDWARE_ERROR_STATUS = Register("hardware_error_status", 70, 1)
PROFILE_VELOCITY = Register("profile_velocity", 112, 4)
GOAL_POSITION = Register("goal_position", 116, 4, sign_bit=31)
MOVING = Register("moving", 122, 1)
PRESENT_CURRENT = Register("present_current", 126, 2, sign_bit=15)
PRESENT_VELOCITY = Register("present_velocity", 128, 4, sign_bit=31)
PRESENT_POSITION = Register("present_position", 132, 4, sign_bit=31)
PRESENT_INPUT_VOLTAGE = Register("present_input_voltage", 144, 2)
PRESENT_TEMPERATURE = Register("present_temperature", 146, 1)

REGISTERS = {r.name: r for r in (
    MODEL, FIRMWARE_VERSION, ID, BAUD_RATE, RETURN_DELAY, DRIVE_MODE, OPERATING_MODE, HOMING_OFFSET,
    MAX_POSITION_LIMIT, MIN_POSITION_LIMIT, TORQUE_ENABLE, LED, STATUS_RETURN_LEVEL,
    REGISTERED_INSTRUCTION, HARDWARE_ERROR_STATUS, PROFILE_VELOCITY, GOAL_POSITION, MOVING, PRESENT_CURRENT,
    PRESENT_VELOCITY, PRESENT_POSITION, PRESENT_INPUT_VOLTAGE, PRESENT_TEMPERATURE)}
EEPROM_END = TORQUE_ENABLE.address   # 0..63: writable only while torque is off
READ_ONLY = (MODEL, FIRMWARE_VERSION, REGISTERED_INSTRUCTION, HARDWARE_ERROR_STATUS, MOVING, PRESENT_CURRENT, PRESENT_VELOCITY,
             PRESENT_POSITION, PRESENT_INPUT_VOLTAGE, PRESENT_TEMPERATURE)
CONTROL_TABLE_SIZE = 147
XL330_M288_MODEL = 1200
TICKS_PER_REV = 4096
TICK_CENTER = 2048
MAX_TICK = TICKS_PER_REV - 1
OPERATING_MODE_POSITION = 3
VELOCITY_UNIT_RPM = 0.229

# the names the shared arm code uses (feetech.py defines the same ones)
MIN_LIMIT, MAX_LIMIT = MIN_POSITION_LIMIT, MAX_POSITION_LIMIT
RAD_S_PER_VELOCITY_UNIT = VELOCITY_UNIT_RPM * 2 * math.pi / 60


def limit_writes(min_ticks: int, max_ticks: int) -> list[tuple[Register, int]]:
    """Register writes that set the position limits: EEPROM, so torque must be off first."""
    return [(TORQUE_ENABLE, 0), (MIN_POSITION_LIMIT, min_ticks), (MAX_POSITION_LIMIT, max_ticks)]


def homing_writes(value: int) -> list[tuple[Register, int]]:
    """Register writes that set the homing offset (present = raw + value): EEPROM, torque off first."""
    return [(TORQUE_ENABLE, 0), (HOMING_OFFSET, value)]


# ------------------------------------------------------------------------------ CRC-16
def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return table


CRC_TABLE = _crc_table()


def crc16(data: bytes | bytearray, crc: int = 0) -> int:
    """CRC-16/BUYPASS (poly 0x8005, init 0, no reflection), as the e-Manual's update_crc."""
    for b in data:
        crc = ((crc << 8) ^ CRC_TABLE[((crc >> 8) ^ b) & 0xFF]) & 0xFFFF
    return crc


# ------------------------------------------------------------------------ value encoding
def encode_value(value: int, size: int, sign_bit: int | None = None) -> bytes:
    """Little-endian; two's complement when the register is signed (`sign_bit` set)."""
    value = int(value)
    if sign_bit is not None:
        lo, hi = -(1 << (8 * size - 1)), (1 << (8 * size - 1))
        if not lo <= value < hi:
            raise ValueError(f"value {value} does not fit in a signed {size}-byte register")
        value &= (1 << (8 * size)) - 1
    if value < 0 or value >= 1 << (8 * size):
        raise ValueError(f"value {value} does not fit in {size} byte(s)")
    return value.to_bytes(size, "little")


def decode_value(data: bytes | bytearray, sign_bit: int | None = None) -> int:
    return int.from_bytes(bytes(data), "little", signed=sign_bit is not None)


# ------------------------------------------------------------------------------ stuffing
def stuff(body: bytes | bytearray, before: bytes = b"") -> bytes:
    """Insert FD after every FF FF FD in `body` (instruction..params). `before` is the two
    length bytes that precede it, which the official SDK also looks at."""
    src = bytes(before) + bytes(body)
    out = bytearray()
    for i in range(len(before), len(src)):
        out.append(src[i])
        if i >= 2 and src[i] == 0xFD and src[i - 1] == 0xFF and src[i - 2] == 0xFF:
            out.append(0xFD)
    return bytes(out)


def unstuff(body: bytes | bytearray, before: bytes = b"") -> bytes:
    """Drop the FD that stuffing added after each FF FF FD."""
    src = bytes(before) + bytes(body)
    out = bytearray()
    i = len(before)
    while i < len(src):
        out.append(src[i])
        if (i >= 2 and src[i] == 0xFD and src[i - 1] == 0xFF and src[i - 2] == 0xFF
                and i + 1 < len(src) and src[i + 1] == 0xFD):
            i += 1                      # skip the stuffing byte
        i += 1
    return bytes(out)


# ------------------------------------------------------------------------------ packets
@dataclass(frozen=True)
class Packet:
    """One decoded packet. `code` is the error byte of a status packet, else the instruction
    (the convention of `feetech.Packet`, so the bus code is shared)."""

    id: int
    code: int
    params: bytes
    status: bool = False
    #: the parameter bytes as they came off the wire, before unstuffing: a fast read's combined
    #: status packet is positional and goes out unstuffed (see `fast_status`), so it is split
    #: from these bytes, never from `params`
    wire: bytes = field(default=b"", compare=False, repr=False)

    def to_bytes(self) -> bytes:
        if self.status:
            return build_packet(self.id, STATUS, bytes([self.code]) + self.params)
        return build_packet(self.id, self.code, self.params)


def build_packet(servo_id: int, instruction: int, params: bytes | bytearray = b"") -> bytes:
    if not 0 <= servo_id <= BROADCAST_ID:
        raise ValueError(f"servo id {servo_id} outside 0..{BROADCAST_ID}")
    raw_len = len(params) + 3
    body = stuff(bytes([instruction]) + bytes(params), before=raw_len.to_bytes(2, "little"))
    length = len(body) + 2
    if length > MAX_LENGTH:
        raise ValueError(f"{len(params)} parameter bytes do not fit one packet (LEN {length} > {MAX_LENGTH})")
    head = HEADER + bytes([servo_id]) + length.to_bytes(2, "little") + body
    return head + crc16(head).to_bytes(2, "little")


def ping(servo_id: int) -> bytes:
    return build_packet(servo_id, PING)


def read(servo_id: int, address: int, length: int) -> bytes:
    return build_packet(servo_id, READ, address.to_bytes(2, "little") + length.to_bytes(2, "little"))


def write(servo_id: int, address: int, data: bytes) -> bytes:
    return build_packet(servo_id, WRITE, address.to_bytes(2, "little") + bytes(data))


def sync_read(ids: list[int], address: int, length: int) -> bytes:
    return build_packet(BROADCAST_ID, SYNC_READ,
                        address.to_bytes(2, "little") + length.to_bytes(2, "little") + bytes(ids))


def sync_write(address: int, data_by_id: dict[int, bytes]) -> bytes:
    sizes = {len(d) for d in data_by_id.values()}
    if len(sizes) != 1:
        raise ValueError(f"sync write needs equal-size data per servo, got sizes {sorted(sizes)}")
    (size,) = sizes
    params = bytearray(address.to_bytes(2, "little") + size.to_bytes(2, "little"))
    for sid, data in data_by_id.items():
        params.append(sid)
        params += data
    return build_packet(BROADCAST_ID, SYNC_WRITE, params)


def reg_write(servo_id: int, address: int, data: bytes) -> bytes:
    """REG_WRITE: the servo stores the write and applies it on ACTION (REGISTERED_INSTRUCTION = 1)."""
    return build_packet(servo_id, REG_WRITE, address.to_bytes(2, "little") + bytes(data))


def action(servo_id: int = BROADCAST_ID) -> bytes:
    """ACTION: apply the registered write (broadcast: every servo at once, no replies)."""
    return build_packet(servo_id, ACTION)


def _each_servo_once(ids: list[int], what: str) -> None:
    if len(set(ids)) != len(ids):
        raise ValueError(f"{what} lists each servo once (the protocol's rule), got IDs {ids}")


def _bulk_read_params(requests: list[tuple[int, int, int]]) -> bytes:
    _each_servo_once([sid for sid, _, _ in requests], "bulk read")
    params = bytearray()
    for sid, address, length in requests:
        params.append(sid)
        params += address.to_bytes(2, "little") + length.to_bytes(2, "little")
    return bytes(params)


def bulk_read(requests: list[tuple[int, int, int]]) -> bytes:
    """BULK_READ: per servo (ID, address, length) [ID, ADDR_L, ADDR_H, LEN_L, LEN_H]; each listed
    servo answers with its own status packet, in the order listed."""
    return build_packet(BROADCAST_ID, BULK_READ, _bulk_read_params(requests))


def bulk_write(writes: list[tuple[int, int, bytes]]) -> bytes:
    """BULK_WRITE: per servo (ID, address, data) [ID, ADDR_L, ADDR_H, LEN_L, LEN_H, DATA...];
    no status packets."""
    _each_servo_once([sid for sid, _, _ in writes], "bulk write")
    params = bytearray()
    for sid, address, data in writes:
        params.append(sid)
        params += address.to_bytes(2, "little") + len(data).to_bytes(2, "little") + bytes(data)
    return build_packet(BROADCAST_ID, BULK_WRITE, params)


def fast_sync_read(ids: list[int], address: int, length: int) -> bytes:
    return build_packet(BROADCAST_ID, FAST_SYNC_READ,
                        address.to_bytes(2, "little") + length.to_bytes(2, "little") + bytes(ids))


def fast_bulk_read(requests: list[tuple[int, int, int]]) -> bytes:
    return build_packet(BROADCAST_ID, FAST_BULK_READ, _bulk_read_params(requests))


def status(servo_id: int, error: int = 0, params: bytes = b"") -> bytes:
    return build_packet(servo_id, STATUS, bytes([error]) + bytes(params))


def fast_status(slots: list[tuple[int, int, bytes]], length: int | None = None) -> bytes:
    """The one status packet that answers FAST_SYNC_READ / FAST_BULK_READ: slots (ID, error, data)
    in the order requested, as the servos put it on the bus one after another:

        FF FF FD 00 FE LEN_L LEN_H 55 | ERR1 ID1 DATA1 CRC | ERR2 ID2 DATA2 CRC | ... | ERRn IDn DATAn CRC

    Each slot's CRC is the running CRC of the packet up to it, so the last one is the packet's
    CRC. LEN = 1 + sum(4 + len(data)). The packet is positional and not byte-stuffed (the ROBOTIS
    SDK reads it without unstuffing). `length` overrides LEN (the emulator's broken chain: the
    first servo announces every requested slot, the packet stops at the first silent one)."""
    if not slots:
        raise ValueError("a fast read reply needs at least one servo")
    length = 1 + sum(4 + len(d) for _, _, d in slots) if length is None else length
    if length > MAX_LENGTH:
        raise ValueError(f"fast read reply LEN {length} > {MAX_LENGTH}")
    out = bytearray(HEADER + bytes([BROADCAST_ID]) + length.to_bytes(2, "little") + bytes([STATUS]))
    for sid, err, data in slots:
        out += bytes([err, sid]) + bytes(data)
        out += crc16(out).to_bytes(2, "little")
    return bytes(out)


def split_fast_status(pkt: Packet, lengths: dict[int, int]) -> dict[int, tuple[int, bytes]]:
    """Slots of a fast read's combined status packet: {ID: (error, data)}, data lengths from the
    request (`lengths`: ID -> length, in request order). Raises ValueError when the packet does
    not hold exactly those slots."""
    if not (pkt.status and pkt.id == BROADCAST_ID):
        raise ValueError(f"not a fast read reply (ID {pkt.id}, status={pkt.status})")
    raw = bytes([pkt.code]) + (pkt.wire or pkt.params)       # ERR1 ID1 DATA1 CRC ERR2 ... DATAn
    expected = sum(4 + n for n in lengths.values()) - 2
    if len(raw) != expected:
        raise ValueError(f"fast read reply holds {len(raw)} bytes, expected {expected} for "
                         f"servos {list(lengths)}")
    out, i = {}, 0
    for sid, n in lengths.items():
        if raw[i + 1] != sid:
            raise ValueError(f"fast read reply slot {len(out)} is from servo {raw[i + 1]}, expected {sid}")
        out[sid] = (raw[i], raw[i + 2:i + 2 + n])
        i += n + 4
    return out


# ------------------------------------------------------------------------------- parser
class PacketParser(ResyncParser):
    """Incremental parser: feed bytes as they arrive, get complete packets (instruction or
    status). Resynchronises on garbage like `feetech.PacketParser`: a bad length or CRC drops
    the first header byte and rescans; counters tell "silent" from "corrupted"."""

    def _drain(self) -> Iterator[Packet]:
        buf = self._buf
        while True:
            start = buf.find(HEADER)
            if start < 0:
                # keep a tail that may be the start of the next header (FF, FF FF, FF FF FD)
                keep = next((k for k in (3, 2, 1) if buf[-k:] == HEADER[:k]), 0)
                self._drop(len(buf) - keep)
                return
            if start:
                self._drop(start)
            if len(buf) < 8:
                return
            sid = buf[4]
            length = int.from_bytes(buf[5:7], "little")
            if sid > BROADCAST_ID or length < 3 or length > MAX_LENGTH:
                self._drop(1)
                continue
            total = 7 + length
            if len(buf) < total:
                return
            if crc16(buf[:total - 2]) != int.from_bytes(buf[total - 2:total], "little"):
                self.bad_checksums += 1
                self.bad_ids.append(sid)
                del self.bad_ids[:-64]
                self._drop(1)
                continue
            wire = bytes(buf[7:total - 2])
            body = unstuff(wire, before=bytes(buf[5:7]))
            del buf[:total]
            if body[0] == STATUS:
                if len(body) < 2 or len(wire) < 2:
                    continue
                yield Packet(id=sid, code=body[1], params=body[2:], status=True, wire=wire[2:])
            else:
                yield Packet(id=sid, code=body[0], params=body[1:], wire=wire[1:])
