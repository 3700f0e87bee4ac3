"""Host <-> car microcontroller protocol: COBS frames with CRC-16, three message types.

Why a framed binary protocol: the car streams telemetry at 100 Hz while commands flow the
other way; a 0x00 delimiter (COBS guarantees no zero inside a frame) lets either side find the
next frame after noise or a reset, and the CRC rejects corrupted frames instead of driving
on them. The firmware (`firmware/car_controller/car_controller.ino`) uses the same constants
and layouts; `tests/test_car_driver.py` parses the .ino to check they agree.

Wire frame:   COBS( payload || crc16_le(payload) ) 0x00
CRC:          CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, no reflection, no xor-out)
Payload:      type (u8) followed by the little-endian fields below.

| type | name      | direction  | fields (struct, little-endian)                                 |
|------|-----------|------------|----------------------------------------------------------------|
| 0x01 | COMMAND   | host -> car| seq u16, steer_mrad i16, throttle_permille i16                  |
| 0x02 | TELEMETRY | car -> host| seq u16, cmd_seq u16, t_ms u32, enc_ticks i32, speed_mm_s i16, |
|      |           |            | accel_cm_s2 i16 x3, gyro_mrad_s i16 x3, battery_mv u16,         |
|      |           |            | steer_mrad i16, throttle_permille i16, flags u8                 |
| 0x03 | CONFIG    | both       | timeout_ms u16, telemetry_period_ms u16 (car echoes it as ack)  |

Flags: bit0 FAILSAFE (no command for timeout_ms: throttle forced neutral), bit1 CONFIGURED.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

MSG_COMMAND = 0x01
MSG_TELEMETRY = 0x02
MSG_CONFIG = 0x03

FLAG_FAILSAFE = 0x01
FLAG_CONFIGURED = 0x02

COMMAND_FMT = "<BHhh"
TELEMETRY_FMT = "<BHHIihhhhhhhHhhB"
CONFIG_FMT = "<BHH"
COMMAND_SIZE = struct.calcsize(COMMAND_FMT)        # 7
TELEMETRY_SIZE = struct.calcsize(TELEMETRY_FMT)    # 34
CONFIG_SIZE = struct.calcsize(CONFIG_FMT)          # 5

DEFAULT_TIMEOUT_MS = 250
DEFAULT_TELEMETRY_PERIOD_MS = 10
TICKS_PER_METRE = 1000           # wheel encoder (motor encoder / gear ratio / wheel circumference)
THROTTLE_SCALE = 1000            # throttle fraction [-1, 1] <-> per-mille
MAX_FRAME = 64                   # longer runs between delimiters are garbage


class ProtocolError(ValueError):
    """A frame that is not a valid message (bad COBS, CRC, type or length)."""


# ------------------------------------------------------------------------------- CRC
def crc16_ccitt(data: bytes | bytearray, crc: int = 0xFFFF) -> int:
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


# ------------------------------------------------------------------------------ COBS
def cobs_encode(data: bytes | bytearray) -> bytes:
    out = bytearray([0])
    code_at, code = 0, 1
    for byte in data:
        if byte == 0:
            out[code_at] = code
            code_at, code = len(out), 1
            out.append(0)
        else:
            out.append(byte)
            code += 1
            if code == 0xFF:
                out[code_at] = code
                code_at, code = len(out), 1
                out.append(0)
    out[code_at] = code
    return bytes(out)


def cobs_decode(data: bytes | bytearray) -> bytes:
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        code = data[i]
        if code == 0:
            raise ProtocolError("zero byte inside a COBS frame")
        if i + code > n:
            raise ProtocolError("COBS block runs past the end of the frame")
        block = data[i + 1:i + code]
        if 0 in block:
            raise ProtocolError("zero byte inside a COBS block")
        out += block
        i += code
        if code != 0xFF and i < n:
            out.append(0)
    return bytes(out)


# --------------------------------------------------------------------------- messages
@dataclass(frozen=True)
class Command:
    seq: int
    steer_mrad: int
    throttle_permille: int


@dataclass(frozen=True)
class Telemetry:
    seq: int
    cmd_seq: int
    t_ms: int
    enc_ticks: int
    speed_mm_s: int
    accel_cm_s2: tuple[int, int, int]
    gyro_mrad_s: tuple[int, int, int]
    battery_mv: int
    steer_mrad: int
    throttle_permille: int
    flags: int

    @property
    def failsafe(self) -> bool:
        return bool(self.flags & FLAG_FAILSAFE)


@dataclass(frozen=True)
class Config:
    timeout_ms: int
    telemetry_period_ms: int


Message = Command | Telemetry | Config


def _i16(x: float) -> int:
    return int(max(-32768, min(32767, round(x))))


def encode_payload(msg: Message) -> bytes:
    if isinstance(msg, Command):
        return struct.pack(COMMAND_FMT, MSG_COMMAND, msg.seq & 0xFFFF, _i16(msg.steer_mrad),
                           _i16(msg.throttle_permille))
    if isinstance(msg, Telemetry):
        return struct.pack(TELEMETRY_FMT, MSG_TELEMETRY, msg.seq & 0xFFFF, msg.cmd_seq & 0xFFFF,
                           msg.t_ms & 0xFFFFFFFF, int(msg.enc_ticks), _i16(msg.speed_mm_s),
                           *map(_i16, msg.accel_cm_s2), *map(_i16, msg.gyro_mrad_s),
                           int(max(0, min(65535, msg.battery_mv))), _i16(msg.steer_mrad),
                           _i16(msg.throttle_permille), msg.flags & 0xFF)
    if isinstance(msg, Config):
        return struct.pack(CONFIG_FMT, MSG_CONFIG, msg.timeout_ms, msg.telemetry_period_ms)
    raise TypeError(f"not a car protocol message: {msg!r}")


def decode_payload(payload: bytes) -> Message:
    if not payload:
        raise ProtocolError("empty payload")
    kind = payload[0]
    try:
        if kind == MSG_COMMAND and len(payload) == COMMAND_SIZE:
            _, seq, steer, thr = struct.unpack(COMMAND_FMT, payload)
            return Command(seq, steer, thr)
        if kind == MSG_TELEMETRY and len(payload) == TELEMETRY_SIZE:
            f = struct.unpack(TELEMETRY_FMT, payload)
            return Telemetry(f[1], f[2], f[3], f[4], f[5], tuple(f[6:9]), tuple(f[9:12]),
                             f[12], f[13], f[14], f[15])
        if kind == MSG_CONFIG and len(payload) == CONFIG_SIZE:
            _, timeout_ms, period = struct.unpack(CONFIG_FMT, payload)
            return Config(timeout_ms, period)
    except struct.error as exc:  # pragma: no cover - lengths are checked above
        raise ProtocolError(str(exc)) from None
    raise ProtocolError(f"unknown message type 0x{kind:02x} or wrong length {len(payload)}")


def encode_frame(msg: Message) -> bytes:
    payload = encode_payload(msg)
    return cobs_encode(payload + struct.pack("<H", crc16_ccitt(payload))) + b"\x00"


def decode_frame(frame: bytes) -> Message:
    """Decode one frame without its 0x00 delimiter."""
    raw = cobs_decode(frame)
    if len(raw) < 3:
        raise ProtocolError(f"frame too short ({len(raw)} bytes)")
    payload, (crc,) = raw[:-2], struct.unpack("<H", raw[-2:])
    if crc16_ccitt(payload) != crc:
        raise ProtocolError("CRC mismatch")
    return decode_payload(payload)


class FrameParser:
    """Incremental: feed bytes, get complete messages. Bad frames are counted and skipped;
    the next 0x00 resynchronises, so a corrupted frame costs exactly that frame."""

    def __init__(self):
        self._buf = bytearray()
        self.errors = 0
        self.last_error: str | None = None

    def feed(self, data: bytes | bytearray) -> list[Message]:
        out: list[Message] = []
        start = 0
        data = bytes(data)
        while True:
            end = data.find(b"\x00", start)
            if end < 0:
                self._buf += data[start:]
                if len(self._buf) > MAX_FRAME:          # no delimiter for too long: garbage
                    self.errors += 1
                    self.last_error = "frame longer than MAX_FRAME"
                    self._buf.clear()
                return out
            frame = bytes(self._buf) + data[start:end]
            self._buf.clear()
            start = end + 1
            if not frame:
                continue
            try:
                out.append(decode_frame(frame))
            except ProtocolError as exc:
                self.errors += 1
                self.last_error = str(exc)
