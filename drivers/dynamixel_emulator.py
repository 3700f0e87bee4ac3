"""A bus of emulated Dynamixel X-series servos (Protocol 2.0) on a pseudo-terminal.

Why: a Koch-class arm must be drivable, and its driver testable, with the real bytes and no
hardware, exactly as the Feetech arm is. This is `ArmEmulator` (same threads, plant, pty,
fault injection and hidden horn mounting) with the wire side swapped: Protocol 2.0 packets
(CRC-16, byte stuffing), the X-series control table (4-byte little-endian, two's complement),
EEPROM that refuses writes while torque is on (access error), goal positions outside the
position limits refused (data limit error), unknown instructions answered with an
instruction error, and the homing offset added to the present position as the X-series
firmware does.
"""
from __future__ import annotations

import math

import numpy as np

from robolearn.drivers import dynamixel as dxl
from robolearn.drivers.emulator_arm import ArmEmulator


class DynamixelArmEmulator(ArmEmulator):
    """Emulated Protocol 2.0 servo bus moving the same plants as `ArmEmulator`."""

    name = "dynamixel-arm-emulator"
    proto = dxl

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.parser = dxl.PacketParser()
        self.tables = {sid: bytearray(dxl.CONTROL_TABLE_SIZE) for sid in self.ids}
        for sid in self.ids:                  # factory-fresh XL330-M288, position control mode
            self._poke(sid, dxl.MODEL, dxl.XL330_M288_MODEL)
            self._poke(sid, dxl.FIRMWARE_VERSION, 52)
            self._poke(sid, dxl.ID, sid)
            self._poke(sid, dxl.BAUD_RATE, 3)                     # 1 Mbps
            self._poke(sid, dxl.OPERATING_MODE, dxl.OPERATING_MODE_POSITION)
            self._poke(sid, dxl.MAX_POSITION_LIMIT, dxl.MAX_TICK)
            self._poke(sid, dxl.MIN_POSITION_LIMIT, 0)
            self._poke(sid, dxl.STATUS_RETURN_LEVEL, 2)
            self._poke(sid, dxl.PRESENT_INPUT_VOLTAGE, 50)        # 5.0 V
            self._poke(sid, dxl.PRESENT_TEMPERATURE, 30)

    def unplug(self, servo_power: bool = False) -> None:
        if servo_power:
            self.torque[:] = False
            for sid in self.ids:
                self.tables[sid][dxl.TORQUE_ENABLE.address] = 0
        self.dev.unplug()

    # --------------------------------------------------------------------- wire
    def _handle(self, pkt: dxl.Packet) -> list[bytes]:
        """The status packets the addressed servo(s) send back (none for sync/broadcast writes)."""
        if pkt.status:                                  # another device's reply: not for us
            return []
        p = pkt.params
        if pkt.id == dxl.BROADCAST_ID and pkt.code == dxl.SYNC_READ and len(p) >= 4:
            addr, length = int.from_bytes(p[0:2], "little"), int.from_bytes(p[2:4], "little")
            return [dxl.status(sid, self._error(sid), self._read_table(sid, addr, length))
                    for sid in p[4:] if self._alive(sid)]      # each listed servo, in order
        if pkt.id == dxl.BROADCAST_ID and pkt.code == dxl.SYNC_WRITE and len(p) >= 4:
            addr, length = int.from_bytes(p[0:2], "little"), int.from_bytes(p[2:4], "little")
            body = p[4:]
            for k in range(0, len(body) - length, length + 1):
                sid = body[k]
                if self._alive(sid):
                    self._write_table(sid, addr, body[k + 1:k + 1 + length])
            return []
        broadcast = pkt.id == dxl.BROADCAST_ID
        targets = list(self.tables) if broadcast else [pkt.id]
        replies = []
        for sid in targets:
            if not self._alive(sid):
                continue
            err = self._error(sid)
            if pkt.code == dxl.PING:                    # broadcast ping: every servo answers
                model = self._peek(sid, dxl.MODEL).to_bytes(2, "little")
                replies.append(dxl.status(sid, err, model + bytes([self._peek(sid, dxl.FIRMWARE_VERSION)])))
            elif pkt.code == dxl.READ:
                if len(p) != 4:
                    replies.append(dxl.status(sid, err | dxl.ERR_DATA_LENGTH))
                    continue
                addr, length = int.from_bytes(p[0:2], "little"), int.from_bytes(p[2:4], "little")
                replies.append(dxl.status(sid, err, self._read_table(sid, addr, length)))
            elif pkt.code == dxl.WRITE:
                if len(p) < 3:
                    replies.append(dxl.status(sid, err | dxl.ERR_DATA_LENGTH))
                    continue
                code = self._write_table(sid, int.from_bytes(p[0:2], "little"), p[2:])
                replies.append(dxl.status(sid, err | code))
            else:
                replies.append(dxl.status(sid, err | dxl.ERR_INSTRUCTION))
        if broadcast and pkt.code != dxl.PING:
            return []                                   # broadcasts are never acknowledged
        return replies

    # ---------------------------------------------------------------- control table
    def _poke(self, sid: int, reg, value: int) -> None:
        self.tables[sid][reg.address:reg.address + reg.size] = dxl.encode_value(value, reg.size, reg.sign_bit)

    def _peek(self, sid: int, reg) -> int:
        return dxl.decode_value(self.tables[sid][reg.address:reg.address + reg.size], reg.sign_bit)

    def _read_table(self, sid: int, addr: int, length: int) -> bytes:
        i = self.index[sid]
        cal = self.calibration[self.calibration.names[i]]
        q, dq, load = self._snap
        actual = int(np.clip(cal.to_ticks(q[i]), 0, dxl.MAX_TICK))
        self._poke(sid, dxl.PRESENT_POSITION, actual + self._peek(sid, dxl.HOMING_OFFSET))
        rpm = cal.direction * dq[i] * 60 / (2 * math.pi)
        self._poke(sid, dxl.PRESENT_VELOCITY, int(round(rpm / dxl.VELOCITY_UNIT_RPM)))
        self._poke(sid, dxl.PRESENT_CURRENT, int(cal.direction * load[i]))
        self._poke(sid, dxl.MOVING, int(abs(dq[i]) > 0.05))
        end = min(addr + length, dxl.CONTROL_TABLE_SIZE)
        return bytes(self.tables[sid][addr:end]).ljust(length, b"\0")

    def _write_table(self, sid: int, addr: int, data: bytes) -> int:
        """Apply a write like the X-series firmware; return the status error number (0 = done)."""
        table = self.tables[sid]
        end = addr + len(data)
        if end > dxl.CONTROL_TABLE_SIZE:
            return dxl.ERR_ACCESS
        touched = range(addr, end)
        if any(r.address in touched for r in dxl.READ_ONLY):
            return dxl.ERR_ACCESS
        i = self.index[sid]
        if addr < dxl.EEPROM_END and self.torque[i]:
            return dxl.ERR_ACCESS                       # EEPROM is locked while torque is on
        g = dxl.GOAL_POSITION
        if g.address in touched and end >= g.address + g.size:
            goal = dxl.decode_value(data[g.address - addr:g.address - addr + g.size], g.sign_bit)
            lo, hi = self._peek(sid, dxl.MIN_POSITION_LIMIT), self._peek(sid, dxl.MAX_POSITION_LIMIT)
            if not lo <= goal <= hi:
                return dxl.ERR_DATA_LIMIT               # out-of-limit goals are refused, not clamped
        table[addr:end] = data
        if dxl.TORQUE_ENABLE.address in touched:
            self.torque[i] = bool(table[dxl.TORQUE_ENABLE.address])
            if self.torque[i]:                          # enabling torque holds the present position
                self.goal[i] = self._snap[0][i]
        if g.address in touched:
            cal = self.calibration[self.calibration.names[i]]
            actual = self._peek(sid, g) - self._peek(sid, dxl.HOMING_OFFSET)
            self.goal[i] = float(cal.to_rad(actual))
        return 0
