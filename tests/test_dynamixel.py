"""Dynamixel Protocol 2.0: known-answer packets (ROBOTIS e-Manual), stuffing, the parser, and
the project's own bus/arm driver against the Protocol 2.0 emulator over a real pty."""
import time

import gymnasium as gym
import numpy as np
import pytest

from robolearn.drivers import dynamixel as dxl
from robolearn.drivers.arm import ServoArm
from robolearn.drivers.calibration import Calibration
from robolearn.drivers.dynamixel_emulator import DynamixelArmEmulator
from robolearn.drivers.emulator_arm import DEFAULT_LOWER, DEFAULT_NAMES, DEFAULT_UPPER, DEFAULT_VMAX, make_plant
from robolearn.drivers.ptylink import Faults
from robolearn.drivers.real import bus_protocol
from robolearn.drivers.servo_bus import ServoBus, ServoChecksumError, ServoStatusError, ServoTimeoutError
from robolearn.errors import ConfigError, DeviceError
from robolearn.robot import ArmSpec

IDS = [1, 2, 3, 4, 5, 6]


# ------------------------------------------------------------------------------ bytes
def test_packets_match_the_e_manual_examples():
    # e-Manual "Protocol 2.0": ping ID 1, its status (XL model 1030 fw 38), read 4 bytes at 132
    assert dxl.ping(1) == bytes.fromhex("fffffd0001030001194e")
    assert dxl.status(1, 0, bytes([0x06, 0x04, 0x26])) == bytes.fromhex("fffffd0001070055000604 26655d".replace(" ", ""))
    assert dxl.read(1, 132, 4) == bytes.fromhex("fffffd0001070002840004001d15")
    # write 512 to goal position (116) of ID 1
    assert dxl.write(1, 116, dxl.encode_value(512, 4)) == bytes.fromhex("fffffd0001090003740000020000ca89")


def test_crc_table_is_the_poly_0x8005_table():
    assert dxl.CRC_TABLE[:4] == [0x0000, 0x8005, 0x800F, 0x000A] and dxl.CRC_TABLE[-1] == 0x0202
    assert dxl.crc16(b"123456789") == 0xFEE8                    # CRC-16/BUYPASS check value


def test_byte_stuffing_round_trip_and_length():
    pkt = dxl.write(1, 116, b"\xff\xff\xfd\x00")
    assert b"\xff\xff\xfd\xfd\x00" in pkt[7:]                   # FF FF FD -> FF FF FD FD
    assert int.from_bytes(pkt[5:7], "little") == 3 + 2 + 4 + 1  # LEN counts the stuffing byte
    (got,) = dxl.PacketParser().feed(pkt)
    assert (got.id, got.code, got.params) == (1, dxl.WRITE, b"\x74\x00\xff\xff\xfd\x00")


def test_two_complement_values():
    assert dxl.encode_value(-1, 4, 31) == b"\xff\xff\xff\xff"
    assert dxl.decode_value(b"\x00\xf0\xff\xff", 31) == -4096
    with pytest.raises(ValueError):
        dxl.encode_value(1 << 31, 4, 31)


def test_parser_resyncs_after_corruption_and_counts_it():
    good = dxl.status(3, 0, b"\x01\x02")
    bad = bytearray(dxl.status(2, 0, b"\x09"))
    bad[-1] ^= 0x5A
    p = dxl.PacketParser()
    got = p.feed(b"\xff\x00" + bytes(bad) + good[:5]) + p.feed(good[5:])
    assert [(g.id, g.code, g.params, g.status) for g in got] == [(3, 0, b"\x01\x02", True)]
    assert p.bad_checksums == 1 and p.bad_ids == [2]


def test_error_descriptions():
    assert dxl.describe_error(dxl.ERR_ACCESS) .startswith("access error")
    assert "hardware alert" in dxl.describe_error(0x80 | dxl.ERR_DATA_LIMIT)
    assert dxl.fatal_error(dxl.ERR_DATA_LIMIT) and not dxl.fatal_error(0)


# ------------------------------------------------------------ driver against emulator
@pytest.fixture
def emu():
    e = DynamixelArmEmulator(plant=make_plant("first_order"), mounting="scrambled", seed=4).start()
    yield e
    e.close()


@pytest.fixture
def bus(emu):
    b = ServoBus(emu.path, timeout=0.05, retries=2, protocol=dxl)
    yield b
    b.close()


def test_scan_read_and_sync_read(emu, bus):
    assert bus.scan(range(0, 10)) == IDS
    assert bus.read_register(2, dxl.MODEL) == dxl.XL330_M288_MODEL
    assert bus.read_register(5, dxl.ID) == 5
    ticks = bus.read_positions(IDS)
    truth = emu.positions_rad()
    for i, sid in enumerate(IDS):
        cal = emu.calibration[emu.calibration.names[i]]
        assert abs(ticks[sid] - int(cal.to_ticks(truth[i]))) <= 1


def test_sync_write_moves_only_with_torque(emu, bus):
    start = bus.read_positions(IDS)
    mids = {c.id: (c.min + c.max) // 2 for c in emu.calibration.servos.values()}
    goals = {sid: t + (60 if t < mids[sid] else -60) for sid, t in start.items()}
    bus.write_positions(goals)
    time.sleep(0.15)
    assert bus.read_positions(IDS) == start
    bus.set_torque(IDS, True)
    bus.write_positions(goals)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        now = bus.read_positions(IDS)
        if all(abs(now[s] - goals[s]) <= 2 for s in IDS):
            break
        time.sleep(0.02)
    assert all(abs(now[s] - goals[s]) <= 2 for s in IDS), (now, goals)


def test_status_errors_become_specific_exceptions(emu, bus):
    bus.set_torque([1], True)
    with pytest.raises(ServoStatusError, match="access error"):      # EEPROM while torque on
        bus.write_register(1, dxl.MIN_POSITION_LIMIT, 100)
    with pytest.raises(ServoStatusError, match="access error"):      # read-only register
        bus.write_register(2, dxl.PRESENT_POSITION, 5)
    bus.set_limits(3, 1000, 3000)                                    # turns torque off first
    assert bus.read_register(3, dxl.MIN_POSITION_LIMIT) == 1000
    with pytest.raises(ServoStatusError, match="data limit"):
        bus.write_register(3, dxl.GOAL_POSITION, 3500)
    emu.faults.status_errors[4] = dxl.ERR_ALERT
    with pytest.raises(ServoStatusError, match="hardware alert"):
        bus.read_register(4, dxl.PRESENT_POSITION)


def test_silence_and_corruption(emu, bus):
    emu.faults.silent_ids.add(6)
    with pytest.raises(ServoTimeoutError) as e:
        bus.sync_read(IDS, dxl.PRESENT_POSITION)
    assert e.value.ids == [6]
    emu.faults.silent_ids.clear()
    emu.faults.corrupt_rate = 1.0
    with pytest.raises(ServoChecksumError):
        bus.read_register(1, dxl.PRESENT_POSITION)


SPEC = ArmSpec(joint_names=DEFAULT_NAMES[:-1], lower=DEFAULT_LOWER[:-1], upper=DEFAULT_UPPER[:-1],
               max_velocity=DEFAULT_VMAX[:-1], gripper_closed=0.0, gripper_open=1.0)


def test_servo_arm_on_dynamixel_reads_and_commands_radians(emu):
    cal = Calibration.from_dict(emu.calibration.to_dict(), required=list(DEFAULT_NAMES))
    bus = ServoBus(emu.path, timeout=0.05, protocol=dxl)
    arm = ServoArm(bus, SPEC, cal)
    try:
        assert all(emu.torque_enabled().values())
        for c in cal.servos.values():                     # limits written to EEPROM (torque was off)
            assert emu.register(c.id, dxl.MIN_POSITION_LIMIT) == c.min
        st = arm.read()
        np.testing.assert_allclose(st.q, emu.positions_rad()[:5], atol=2e-3)
        target = np.clip(st.q + 0.2, SPEC.lower + 0.05, SPEC.upper - 0.05)
        arm.command(target, 0.5)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            st = arm.read()
            if np.abs(st.q - target).max() <= 0.01 and abs(st.gripper - 0.5) < 0.01:
                break
            time.sleep(0.02)
        np.testing.assert_allclose(st.q, target, atol=0.01)
        assert abs(st.gripper - 0.5) < 0.01
    finally:
        arm.close()
    deadline = time.monotonic() + 1.0                      # close() = broadcast torque off
    while any(emu.torque_enabled().values()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(emu.torque_enabled().values())


def test_protocol_option_names_and_errors():
    assert bus_protocol("dynamixel") is dxl
    with pytest.raises(ConfigError, match="feetech"):
        bus_protocol("herkulex")


def test_gym_make_real_dynamixel_arm(tmp_path):
    """`gym.make(..., backend="real", protocol="dynamixel")` drives the emulated Koch-class bus."""
    emu = DynamixelArmEmulator(mounting="scrambled", seed=2).start()     # MuJoCo arm behind it
    try:
        cal = emu.calibration.save(tmp_path / "cal.json")
        env = gym.make("robolearn/ArmReach-v0", backend="real", port=emu.path, calibration=str(cal),
                       protocol="dynamixel", obs="state")
        try:
            obs, _ = env.reset(seed=0)
            for _ in range(3):
                obs, *_ = env.step(env.action_space.sample() * 0.2)
            assert np.all(np.isfinite(obs["state"]))
        finally:
            env.close()
    finally:
        emu.close()


def test_cli_emulate_arm_protocol_dynamixel(tmp_path):
    """`robolearn emulate arm --protocol dynamixel` speaks Protocol 2.0 (and not Feetech)."""
    import os
    import signal
    import subprocess
    import sys

    cal_path = tmp_path / "cal.json"
    p = subprocess.Popen([sys.executable, "-m", "robolearn.cli", "emulate", "arm", "--protocol", "dynamixel",
                          "--plant", "first_order", "--calibration-out", str(cal_path), "--duration", "20"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        path = p.stdout.readline().strip()
        assert path.startswith("/dev/"), p.stderr.read() if p.poll() is not None else path
        with ServoBus(path, timeout=0.1, protocol=dxl) as bus:
            assert bus.read_register(1, dxl.MODEL) == dxl.XL330_M288_MODEL
            assert len(bus.read_positions(IDS)) == 6
        with ServoBus(path, timeout=0.02, retries=0) as feetech_bus:      # wrong protocol: silence
            assert not feetech_bus.ping(1)
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 0
    r = subprocess.run([sys.executable, "-m", "robolearn.cli", "emulate", "car", "--protocol", "dynamixel"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--protocol" in r.stderr


# ------------------------------------------- bulk, fast and registered instructions
def test_bulk_packets_match_the_e_manual_examples():
    # e-Manual "Bulk Read": voltage (144, 2 bytes) of ID 1, temperature (146, 1 byte) of ID 2
    assert dxl.bulk_read([(1, 144, 2), (2, 146, 1)]) == bytes.fromhex("fffffd00fe0d009201900002000292000100 1a05".replace(" ", ""))
    assert dxl.status(1, 0, b"\x77\x00") == bytes.fromhex("fffffd000106005500 7700c369".replace(" ", ""))
    assert dxl.status(2, 0, b"\x24") == bytes.fromhex("fffffd00020500550024 8ba9".replace(" ", ""))
    # e-Manual "Bulk Write": 160 to max voltage limit (32, 2 bytes) of ID 1, 80 to temperature limit (31) of ID 2
    assert dxl.bulk_write([(1, 32, b"\xa0\x00"), (2, 31, b"\x50")]) == \
        bytes.fromhex("fffffd00fe1000930120000200a000021f00010050b768")
    with pytest.raises(ValueError, match="once"):
        dxl.bulk_read([(1, 132, 4), (1, 144, 2)])


def test_fast_status_is_positional_unstuffed_and_splits_back():
    slots = [(1, 0, b"\xff\xff\xfd\x00"), (2, dxl.ERR_ALERT, b"\x01\x02"), (3, 0, b"\xfd\xfd\x00\x00")]
    pkt_bytes = dxl.fast_status(slots)
    assert int.from_bytes(pkt_bytes[5:7], "little") == 1 + (4 + 4) + (4 + 2) + (4 + 4)
    assert b"\xff\xff\xfd\x00" in pkt_bytes[8:]                       # not stuffed
    i = 8 + 2 + 4                                                     # slot 1's running CRC
    assert pkt_bytes[i:i + 2] == dxl.crc16(pkt_bytes[:i]).to_bytes(2, "little")
    (pkt,) = dxl.PacketParser().feed(pkt_bytes)
    assert pkt.id == dxl.BROADCAST_ID and pkt.status
    assert dxl.split_fast_status(pkt, {1: 4, 2: 2, 3: 4}) == {1: (0, b"\xff\xff\xfd\x00"),
                                                              2: (dxl.ERR_ALERT, b"\x01\x02"),
                                                              3: (0, b"\xfd\xfd\x00\x00")}
    with pytest.raises(ValueError, match="expected"):
        dxl.split_fast_status(pkt, {1: 4, 2: 2})
    with pytest.raises(ValueError, match="servo 2, expected 3"):
        dxl.split_fast_status(pkt, {1: 4, 3: 2, 2: 4})


def test_driver_bulk_read_and_write(emu, bus):
    reads = {1: dxl.PRESENT_POSITION, 3: dxl.PRESENT_INPUT_VOLTAGE, 6: dxl.MODEL}
    got = bus.bulk_read(reads)
    assert got[3] == 50 and got[6] == dxl.XL330_M288_MODEL
    assert got[1] == bus.read_register(1, dxl.PRESENT_POSITION)
    bus.bulk_write({2: (dxl.LED, 1), 4: (dxl.PROFILE_VELOCITY, 123), 5: (dxl.HOMING_OFFSET, -7)})
    assert bus.bulk_read({2: dxl.LED, 4: dxl.PROFILE_VELOCITY, 5: dxl.HOMING_OFFSET}) == {2: 1, 4: 123, 5: -7}
    assert bus.fast_sync_read(IDS, dxl.PRESENT_POSITION) == bus.read_positions(IDS)
    assert bus.fast_bulk_read({2: dxl.LED, 4: dxl.PROFILE_VELOCITY, 5: dxl.HOMING_OFFSET}) == {2: 1, 4: 123, 5: -7}


def test_driver_bulk_and_fast_reads_report_silence_corruption_and_errors(emu, bus):
    emu.faults.silent_ids.add(4)
    with pytest.raises(ServoTimeoutError, match=r"\[4\]") as e:
        bus.bulk_read({1: dxl.PRESENT_POSITION, 4: dxl.LED, 5: dxl.MODEL})
    assert e.value.ids == [4]
    t0 = time.monotonic()
    with pytest.raises(ServoTimeoutError, match="cuts off every servo after it") as e:
        bus.fast_sync_read(IDS, dxl.PRESENT_POSITION)
    assert e.value.ids == IDS and time.monotonic() - t0 < 3 * 0.05 + 0.5
    assert bus.fast_sync_read([1, 2, 3], dxl.PRESENT_POSITION).keys() == {1, 2, 3}  # before the gap
    emu.faults.silent_ids.clear()
    emu.faults.status_errors[3] = dxl.ERR_ALERT
    with pytest.raises(ServoStatusError, match="servo 3 .*hardware alert"):
        bus.bulk_read({1: dxl.LED, 3: dxl.LED})
    with pytest.raises(ServoStatusError, match="servo 3 .*hardware alert"):
        bus.fast_sync_read(IDS, dxl.LED)
    emu.faults.status_errors.clear()
    emu.faults.corrupt_rate = 1.0
    with pytest.raises(ServoChecksumError) as e:
        bus.bulk_read({1: dxl.LED, 2: dxl.LED})
    assert e.value.ids == [1, 2]
    with pytest.raises(ServoChecksumError, match="failed its CRC") as e:
        bus.fast_bulk_read({1: dxl.LED, 2: dxl.MODEL})
    assert e.value.ids == [1, 2]


def test_driver_reg_write_then_action(emu, bus):
    bus.set_torque([2, 3], True)
    start = bus.read_positions([2, 3])
    mids = {c.id: (c.min + c.max) // 2 for c in emu.calibration.servos.values()}
    goals = {sid: t + (60 if t < mids[sid] else -60) for sid, t in start.items()}
    for sid, g in goals.items():
        bus.reg_write(sid, dxl.GOAL_POSITION, g)
        assert bus.read_register(sid, dxl.REGISTERED_INSTRUCTION) == 1
    time.sleep(0.1)
    assert all(abs(v - start[s]) <= 2 for s, v in bus.read_positions([2, 3]).items())
    bus.action(2)                                        # one servo, acknowledged
    bus.action()                                         # the rest, broadcast
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        now = bus.read_positions([2, 3])
        if all(abs(now[s] - goals[s]) <= 2 for s in goals):
            break
        time.sleep(0.02)
    assert all(abs(now[s] - goals[s]) <= 2 for s in goals), (now, goals)
    assert bus.read_register(3, dxl.REGISTERED_INSTRUCTION) == 0
    bus.set_limits(4, 1000, 3000)                        # a registered write the servo refuses
    bus.reg_write(4, dxl.GOAL_POSITION, 3500)
    with pytest.raises(ServoStatusError, match="data limit"):
        bus.action(4)


def test_feetech_bus_has_no_bulk_or_fast_read():
    from robolearn.drivers import feetech as ft
    from robolearn.drivers.emulator_arm import ArmEmulator
    with ArmEmulator(plant=make_plant("first_order")) as e:
        b = ServoBus(e.path, timeout=0.05)
        try:
            with pytest.raises(DeviceError, match="Feetech STS/SCS has no such instruction"):
                b.bulk_read({1: ft.PRESENT_POSITION})
            with pytest.raises(DeviceError, match="no such instruction"):
                b.fast_sync_read([1], ft.PRESENT_POSITION)
        finally:
            b.close()
