"""The official Feetech SDK (`feetech-servo-sdk`, imports as `scservo_sdk`) as a client of our
STS3215 bus emulator over a real pty.

Why: our driver and emulator share one packet module, so a mistake in it would pass every test
of ours and still fail against real servos. Feetech's own SDK is an independent implementation
of the same wire protocol: if it can ping, read, write, sync read and sync write our emulator,
and our driver then agrees with what the SDK wrote, both sides speak the real bytes.
"""
import time

import numpy as np
import pytest

scs = pytest.importorskip(
    "scservo_sdk", reason="feetech-servo-sdk not installed: pip install -e '.[test]' (make test does)")

from robolearn.drivers import feetech as ft  # noqa: E402
from robolearn.drivers.emulator_arm import ArmEmulator, make_plant  # noqa: E402
from robolearn.drivers.servo_bus import ServoBus  # noqa: E402

IDS = [1, 2, 3, 4, 5, 6]


@pytest.fixture
def emu():
    e = ArmEmulator(plant=make_plant("first_order"), mounting="scrambled", seed=5).start()
    yield e
    e.close()


@pytest.fixture
def sdk(emu, monkeypatch):
    # the SDK waits 2 * LATENCY_TIMER + 2 ms for a reply (34 ms): slack for a loaded 2-core CI
    monkeypatch.setattr(scs.port_handler, "LATENCY_TIMER", 100)
    port = scs.PortHandler(emu.path)
    assert port.openPort(), "SDK could not open the emulator's pty"
    assert port.setBaudRate(1_000_000)
    ph = scs.PacketHandler(0)          # 0 = little-endian: the STS series
    yield port, ph
    port.closePort()


def _ok(ph, result, error):
    assert result == scs.COMM_SUCCESS, ph.getTxRxResult(result)
    assert error == 0, ph.getRxPacketError(error)


def test_sdk_ping_reports_the_sts3215_model(sdk):
    port, ph = sdk
    for sid in IDS:
        model, result, error = ph.ping(port, sid)
        _ok(ph, result, error)
        assert model == ft.STS3215_MODEL
    _, result, _ = ph.ping(port, 9)                    # no servo 9 on the bus
    assert result == scs.COMM_RX_TIMEOUT


def test_sdk_read_matches_emulator_registers_and_truth(emu, sdk):
    port, ph = sdk
    for sid in IDS:
        sid_read, result, error = ph.read1ByteTxRx(port, sid, ft.ID.address)
        _ok(ph, result, error)
        assert sid_read == sid
        raw, result, error = ph.read2ByteTxRx(port, sid, ft.PRESENT_POSITION.address)
        _ok(ph, result, error)
        i = IDS.index(sid)
        cal = emu.calibration[emu.calibration.names[i]]
        assert abs(raw - int(cal.to_ticks(emu.positions_rad()[i]))) <= 1
        volts, result, error = ph.read1ByteTxRx(port, sid, ft.PRESENT_VOLTAGE.address)
        _ok(ph, result, error)
        assert volts == emu.register(sid, ft.PRESENT_VOLTAGE)


def test_sdk_torque_write_and_our_driver_agree(emu, sdk):
    port, ph = sdk
    result, error = ph.write1ByteTxRx(port, 3, ft.TORQUE_ENABLE.address, 1)
    _ok(ph, result, error)
    assert emu.torque_enabled()[3] and not emu.torque_enabled()[2]
    # a 2-byte write (acknowledged) lands in the control table as our decoder reads it
    result, error = ph.write2ByteTxRx(port, 3, ft.GOAL_SPEED.address, 321)
    _ok(ph, result, error)
    bus = ServoBus(emu.path, timeout=0.05)
    try:
        assert bus.read_register(3, ft.GOAL_SPEED) == 321
        assert bus.read_register(3, ft.TORQUE_ENABLE) == 1
    finally:
        bus.close()
    result, error = ph.write1ByteTxRx(port, 3, ft.TORQUE_ENABLE.address, 0)
    _ok(ph, result, error)
    assert not emu.torque_enabled()[3]


def test_sdk_sync_read_of_position_and_speed_block(emu, sdk):
    port, ph = sdk
    start, length = ft.PRESENT_POSITION.address, 4          # position (2) + speed (2)
    group = scs.GroupSyncRead(port, ph, start, length)
    for sid in IDS:
        assert group.addParam(sid)
    result = group.txRxPacket()
    assert result == scs.COMM_SUCCESS, ph.getTxRxResult(result)
    truth = emu.positions_rad()
    for i, sid in enumerate(IDS):
        assert group.isAvailable(sid, start, length)
        raw = group.getData(sid, start, 2)
        cal = emu.calibration[emu.calibration.names[i]]
        assert abs(raw - int(cal.to_ticks(truth[i]))) <= 1
        assert scs.SCS_TOHOST(group.getData(sid, start + 2, 2), 15) == 0   # at rest


def test_sdk_sync_write_moves_the_arm_like_our_driver_would(emu, sdk):
    port, ph = sdk
    bus = ServoBus(emu.path, timeout=0.05)
    try:
        before = bus.read_positions(IDS)
        mids = {c.id: (c.min + c.max) // 2 for c in emu.calibration.servos.values()}
        goals = {sid: t + (50 if t < mids[sid] else -50) for sid, t in before.items()}
        torque = scs.GroupSyncWrite(port, ph, ft.TORQUE_ENABLE.address, 1)
        for sid in IDS:
            assert torque.addParam(sid, [1])
        assert torque.txPacket() == scs.COMM_SUCCESS
        deadline = time.monotonic() + 1.0
        while not all(emu.torque_enabled().values()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert all(emu.torque_enabled().values())
        group = scs.GroupSyncWrite(port, ph, ft.GOAL_POSITION.address, 2)
        for sid, g in goals.items():
            assert group.addParam(sid, [scs.SCS_LOBYTE(g), scs.SCS_HIBYTE(g)])
        assert group.txPacket() == scs.COMM_SUCCESS
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            now = bus.read_positions(IDS)
            if all(abs(now[s] - goals[s]) <= 2 for s in IDS):
                break
            time.sleep(0.02)
        assert all(abs(now[s] - goals[s]) <= 2 for s in IDS), (now, goals)
        assert np.allclose([bus.read_register(s, ft.GOAL_POSITION) for s in IDS],
                           [goals[s] for s in IDS])
    finally:
        bus.close()


def test_our_sync_write_bytes_are_what_the_sdk_sends(emu, sdk):
    """Same instruction, same bytes: capture the SDK's sync write and compare with ours."""
    port, ph = sdk
    sent = []
    real_write = port.writePort
    port.writePort = lambda pkt: (sent.append(bytes(pkt)), real_write(pkt))[1]
    group = scs.GroupSyncWrite(port, ph, ft.GOAL_POSITION.address, 2)
    group.addParam(1, [0x00, 0x08])
    group.addParam(2, [0xFF, 0x0F])
    group.txPacket()
    ph.ping(port, 1)
    ph.readTxRx(port, 1, ft.PRESENT_POSITION.address, 2)
    ph.write1ByteTxRx(port, 2, ft.TORQUE_ENABLE.address, 1)
    sync = scs.GroupSyncRead(port, ph, ft.PRESENT_POSITION.address, 4)
    sync.addParam(1)
    sync.addParam(3)
    sync.txPacket()
    assert sent[0] == ft.sync_write(ft.GOAL_POSITION.address, {1: b"\x00\x08", 2: b"\xff\x0f"})
    assert sent[1] == ft.ping(1)
    assert sent[2] == ft.read(1, ft.MODEL.address, 2)        # the SDK's ping then reads the model
    assert sent[3] == ft.read(1, ft.PRESENT_POSITION.address, 2)
    assert sent[4] == ft.write(2, ft.TORQUE_ENABLE.address, b"\x01")
    assert sent[5] == ft.sync_read([1, 3], ft.PRESENT_POSITION.address, 4)


def _goals_off_start(emu, bus, ids, step=60):
    start = bus.read_positions(ids)
    mids = {c.id: (c.min + c.max) // 2 for c in emu.calibration.servos.values()}
    return start, {sid: t + (step if t < mids[sid] else -step) for sid, t in start.items()}


def _wait_at(bus, goals, timeout=2.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = bus.read_positions(list(goals))
        if all(abs(now[s] - goals[s]) <= 2 for s in goals):
            break
        time.sleep(0.02)
    return now


def test_sdk_reg_write_waits_for_action(emu, sdk):
    """REG WRITE (0x04) is acknowledged and held; ACTION (0x05) applies it, broadcast to every
    servo at once (no replies) or to one servo (which answers, as the SDK's action() expects)."""
    port, ph = sdk
    sent = []
    real_write = port.writePort
    port.writePort = lambda pkt: (sent.append(bytes(pkt)), real_write(pkt))[1]
    bus = ServoBus(emu.path, timeout=0.05)
    try:
        ids = [2, 4, 6]
        bus.set_torque(ids, True)
        start, goals = _goals_off_start(emu, bus, ids)
        for sid in ids:
            _ok(ph, *ph.regWriteTxRx(port, sid, ft.GOAL_POSITION.address, 2,
                                      [scs.SCS_LOBYTE(goals[sid]), scs.SCS_HIBYTE(goals[sid])]))
        assert sent[0] == ft.reg_write(2, ft.GOAL_POSITION.address, ft.encode_value(goals[2], 2, 15))
        time.sleep(0.15)
        assert all(abs(v - start[s]) <= 2 for s, v in bus.read_positions(ids).items())   # held
        assert [bus.read_register(s, ft.GOAL_POSITION) for s in ids] != [goals[s] for s in ids]
        assert ph.action(port, 2) == scs.COMM_SUCCESS                 # unicast: acknowledged
        assert sent[-1] == ft.action(2)
        now = _wait_at(bus, {2: goals[2]})
        assert abs(now[2] - goals[2]) <= 2
        assert all(abs(bus.read_positions([s])[s] - start[s]) <= 2 for s in (4, 6))
        assert ph.action(port, scs.BROADCAST_ID) == scs.COMM_SUCCESS  # broadcast: the rest
        assert sent[-1] == ft.action()
        now = _wait_at(bus, goals)
        assert all(abs(now[s] - goals[s]) <= 2 for s in ids), (now, goals)
    finally:
        bus.close()


def test_our_reg_write_and_action_move_what_the_sdk_reads(emu, sdk):
    port, ph = sdk
    bus = ServoBus(emu.path, timeout=0.05)
    try:
        ids = [1, 3]
        bus.set_torque(ids, True)
        start, goals = _goals_off_start(emu, bus, ids)
        for sid, g in goals.items():
            bus.reg_write(sid, ft.GOAL_POSITION, g)
        time.sleep(0.1)
        assert all(abs(v - start[s]) <= 2 for s, v in bus.read_positions(ids).items())
        bus.action()
        _wait_at(bus, goals)
    finally:
        bus.close()
    group = scs.GroupSyncRead(port, ph, ft.PRESENT_POSITION.address, 2)
    for sid in ids:
        assert group.addParam(sid)
    assert group.txRxPacket() == scs.COMM_SUCCESS
    assert all(abs(group.getData(s, ft.PRESENT_POSITION.address, 2) - goals[s]) <= 2 for s in ids)


def test_sdk_sync_read_of_a_silent_servo_fails_and_the_rest_still_answer(emu, sdk):
    port, ph = sdk
    emu.faults.silent_ids.add(4)
    group = scs.GroupSyncRead(port, ph, ft.PRESENT_POSITION.address, 2)
    for sid in IDS:
        assert group.addParam(sid)
    assert group.txRxPacket() != scs.COMM_SUCCESS
    emu.faults.silent_ids.clear()
    assert group.txRxPacket() == scs.COMM_SUCCESS
    assert all(group.isAvailable(s, ft.PRESENT_POSITION.address, 2) for s in IDS)
