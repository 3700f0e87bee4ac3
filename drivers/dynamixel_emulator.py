"""A bus of emulated Dynamixel X-series servos (Protocol 2.0) on a pseudo-terminal.

Why: a Koch-class arm must be drivable, and its driver testable, with the real bytes and no
hardware, exactly as the Feetech arm is. This is `ArmEmulator` (same threads, plant, pty,
fault injection and hidden horn mounting) with the wire side swapped: Protocol 2.0 packets
(CRC-16, byte stuffing), the X-series control table (4-byte little-endian, two's complement),
EEPROM that refuses writes while torque is on (access error), goal positions outside the
position limits refused (data limit error), unknown instructions answered with an
instruction error, and the homing offset added to the present position as the X-series
firmware does. Instructions answered: PING (also broadcast), READ, WRITE, REG_WRITE + ACTION,
SYNC_READ / SYNC_WRITE, BULK_READ / BULK_WRITE, and FAST_SYNC_READ / FAST_BULK_READ (firmware
v45+, as the emulated v52 XL330: one combined status packet, see `dynamixel.fast_status`).
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
        self.registered: dict[int, tuple[int, bytes]] = {}   # REG_WRITE waiting for ACTION
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
        if pkt.id == dxl.BROADCAST_ID and pkt.code in (dxl.SYNC_READ, dxl.FAST_SYNC_READ) and len(p) >= 4:
            addr, length = int.from_bytes(p[0:2], "little"), int.from_bytes(p[2:4], "little")
            return self._group_read([(sid, addr, length) for sid in p[4:]], pkt.code == dxl.FAST_SYNC_READ)
        if pkt.id == dxl.BROADCAST_ID and pkt.code in (dxl.BULK_READ, dxl.FAST_BULK_READ):
            if not p or len(p) % 5:                     # malformed: no servo finds its entry
                return []
            requests = [(p[k], int.from_bytes(p[k + 1:k + 3], "little"), int.from_bytes(p[k + 3:k + 5], "little"))
                        for k in range(0, len(p), 5)]
            return self._group_read(requests, pkt.code == dxl.FAST_BULK_READ)
        if pkt.id == dxl.BROADCAST_ID and pkt.code == dxl.SYNC_WRITE and len(p) >= 4:
            addr, length = int.from_bytes(p[0:2], "little"), int.from_bytes(p[2:4], "little")
            body = p[4:]
            for k in range(0, len(body) - length, length + 1):
                sid = body[k]
                if self._alive(sid):
                    self._write_table(sid, addr, body[k + 1:k + 1 + length])
            return []
        if pkt.id == dxl.BROADCAST_ID and pkt.code == dxl.BULK_WRITE:
            for sid, addr, data in self._bulk_write_entries(p):
                if self._alive(sid):
                    self._write_table(sid, addr, data)  # errors go unreported: no status packets
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
                replies.append(self._read_status(sid, err, addr, length))
            elif pkt.code == dxl.WRITE:
                if len(p) < 3:
                    replies.append(dxl.status(sid, err | dxl.ERR_DATA_LENGTH))
                    continue
                code = self._write_table(sid, int.from_bytes(p[0:2], "little"), p[2:])
                replies.append(dxl.status(sid, err | code))
            elif pkt.code == dxl.REG_WRITE:
                if len(p) < 3:
                    replies.append(dxl.status(sid, err | dxl.ERR_DATA_LENGTH))
                    continue
                addr = int.from_bytes(p[0:2], "little")
                if addr + len(p) - 2 > dxl.CONTROL_TABLE_SIZE:
                    replies.append(dxl.status(sid, err | dxl.ERR_ACCESS))
                    continue
                self.registered[sid] = (addr, bytes(p[2:]))     # held until ACTION
                self.tables[sid][dxl.REGISTERED_INSTRUCTION.address] = 1
                replies.append(dxl.status(sid, err))
            elif pkt.code == dxl.ACTION:
                pending = self.registered.pop(sid, None)
                self.tables[sid][dxl.REGISTERED_INSTRUCTION.address] = 0
                code = self._write_table(sid, *pending) if pending else 0
                replies.append(dxl.status(sid, err | code))
            else:
                replies.append(dxl.status(sid, err | dxl.ERR_INSTRUCTION))
        if broadcast and pkt.code != dxl.PING:
            return []                                   # broadcasts are never acknowledged
        return replies

    def _group_read(self, requests: list[tuple[int, int, int]], fast: bool) -> list[bytes]:
        """(Fast) sync / bulk read. Plain: each listed servo sends its own status packet, in the
        order listed (each waits for the one before it). Fast (FAST_SYNC_READ / FAST_BULK_READ,
        firmware v45+): one combined packet, each servo appending its slot; a silent servo
        breaks the chain, so the packet stops there and the host sees it incomplete."""
        wanted, seen = [], set()
        for sid, addr, length in requests:
            if sid not in seen:                         # a servo answers its first entry only
                seen.add(sid)
                wanted.append((sid, addr, length))
        answering = []
        for sid, addr, length in wanted:
            fast_ok = self._alive(sid) and (
                not fast or self._peek(sid, dxl.FIRMWARE_VERSION) >= dxl.FAST_READ_MIN_FIRMWARE)
            if not fast_ok:                             # silent, no such ID, or no fast read
                if fast:
                    break                               # the chain stops at this servo
                continue
            answering.append((sid, addr, length))
        if not fast:
            return [self._read_status(sid, self._error(sid), addr, length) for sid, addr, length in answering]
        full = 1 + sum(4 + length for _, _, length in wanted)
        if not answering or full > dxl.MAX_LENGTH:
            return []
        slots = [(sid, self._error(sid), self._read_table(sid, addr, length)) for sid, addr, length in answering]
        return [dxl.fast_status(slots, length=full)]   # shorter than LEN when the chain broke

    def _read_status(self, sid: int, err: int, addr: int, length: int) -> bytes:
        """The status packet answering a read, or a data length error when the data asked for
        cannot fit one status packet."""
        if length + 4 > dxl.MAX_LENGTH:
            return dxl.status(sid, err | dxl.ERR_DATA_LENGTH)
        try:
            return dxl.status(sid, err, self._read_table(sid, addr, length))
        except ValueError:                              # stuffing pushed it past MAX_LENGTH
            return dxl.status(sid, err | dxl.ERR_DATA_LENGTH)

    @staticmethod
    def _bulk_write_entries(p: bytes) -> list[tuple[int, int, bytes]]:
        """(ID, address, data) of a BULK_WRITE, or none at all when the parameters do not parse
        (a servo cannot trust its entry in a packet whose layout is broken)."""
        entries, k = [], 0
        while k < len(p):
            if k + 5 > len(p):
                return []
            sid, addr, length = p[k], int.from_bytes(p[k + 1:k + 3], "little"), int.from_bytes(p[k + 3:k + 5], "little")
            if length == 0 or k + 5 + length > len(p):
                return []
            entries.append((sid, addr, bytes(p[k + 5:k + 5 + length])))
            k += 5 + length
        return entries

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
            self._count_goal(i, self.goal[i])
        return 0
