"""The official ROBOTIS `dynamixel-sdk` (Protocol 2.0) as a client of our Dynamixel emulator.

Why: our driver and emulator share `drivers/dynamixel.py`, so a shared mistake (CRC, stuffing,
length, status layout) would pass our own tests. The ROBOTIS SDK is the reference
implementation: if it can ping, read, write, sync read and sync write our emulator, and it sends
the very bytes our builders produce, the emulator speaks what real X-series servos speak.
"""
import time

import pytest

sdk = pytest.importorskip(
    "dynamixel_sdk", reason="dynamixel-sdk not installed: pip install -e '.[test]' (make test does)")

from robolearn.drivers import dynamixel as dxl  # noqa: E402
from robolearn.drivers.dynamixel_emulator import DynamixelArmEmulator  # noqa: E402
from robolearn.drivers.emulator_arm import make_plant  # noqa: E402
from robolearn.drivers.servo_bus import ServoBus  # noqa: E402

IDS = [1, 2, 3, 4, 5, 6]


@pytest.fixture
def emu():
    e = DynamixelArmEmulator(plant=make_plant("first_order"), mounting="scrambled", seed=6).start()
    yield e
    e.close()


@pytest.fixture
def client(emu, monkeypatch):
    # the SDK waits 2 * LATENCY_TIMER + 2 ms for a reply (34 ms): slack for a loaded 2-core CI
    monkeypatch.setattr(sdk.port_handler, "LATENCY_TIMER", 100)
    port = sdk.PortHandler(emu.path)
    assert port.openPort(), "SDK could not open the emulator's pty"
    assert port.setBaudRate(1_000_000)
    ph = sdk.PacketHandler(2.0)
    yield port, ph
    port.closePort()


def _ok(ph, result, error):
    assert result == sdk.COMM_SUCCESS, ph.getTxRxResult(result)
    assert error == 0, ph.getRxPacketError(error)


def _tick_truth(emu, sid):
    i = IDS.index(sid)
    return int(emu.calibration[emu.calibration.names[i]].to_ticks(emu.positions_rad()[i]))


def test_sdk_ping_and_broadcast_ping(client):
    port, ph = client
    for sid in IDS:
        model, result, error = ph.ping(port, sid)
        _ok(ph, result, error)
        assert model == dxl.XL330_M288_MODEL
    _, result, _ = ph.ping(port, 9)
    assert result == sdk.COMM_RX_TIMEOUT
    found, result = ph.broadcastPing(port)
    assert result == sdk.COMM_SUCCESS
    assert sorted(found) == IDS and all(v[0] == dxl.XL330_M288_MODEL for v in found.values())


def test_sdk_read4byte_present_position_matches_truth(emu, client):
    port, ph = client
    for sid in IDS:
        raw, result, error = ph.read4ByteTxRx(port, sid, dxl.PRESENT_POSITION.address)
        _ok(ph, result, error)
        assert abs(raw - _tick_truth(emu, sid)) <= 1
        volts, result, error = ph.read2ByteTxRx(port, sid, dxl.PRESENT_INPUT_VOLTAGE.address)
        _ok(ph, result, error)
        assert volts == 50


def test_sdk_torque_enable_and_write4byte_goal_moves_the_servo(emu, client):
    port, ph = client
    sid = 2
    start = _tick_truth(emu, sid)
    c = emu.calibration[emu.calibration.names[IDS.index(sid)]]
    goal = start + (80 if start < (c.min + c.max) // 2 else -80)
    result, error = ph.write1ByteTxRx(port, sid, dxl.TORQUE_ENABLE.address, 1)
    _ok(ph, result, error)
    assert emu.torque_enabled()[sid]
    result, error = ph.write4ByteTxRx(port, sid, dxl.GOAL_POSITION.address, goal)
    _ok(ph, result, error)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        raw, result, error = ph.read4ByteTxRx(port, sid, dxl.PRESENT_POSITION.address)
        if result == sdk.COMM_SUCCESS and abs(raw - goal) <= 2:
            break
        time.sleep(0.02)
    assert abs(raw - goal) <= 2
    # the firmware's refusals reach the SDK as status errors
    _, error = ph.write4ByteTxRx(port, sid, dxl.MIN_POSITION_LIMIT.address, 10)
    assert error == dxl.ERR_ACCESS                      # EEPROM while torque is on
    result, error = ph.write1ByteTxRx(port, sid, dxl.TORQUE_ENABLE.address, 0)
    _ok(ph, result, error)
    assert not emu.torque_enabled()[sid]


def test_sdk_group_sync_read_and_write(emu, client):
    port, ph = client
    read = sdk.GroupSyncRead(port, ph, dxl.PRESENT_POSITION.address, 4)
    for sid in IDS:
        assert read.addParam(sid)
    assert read.txRxPacket() == sdk.COMM_SUCCESS
    start = {}
    for sid in IDS:
        assert read.isAvailable(sid, dxl.PRESENT_POSITION.address, 4)
        start[sid] = read.getData(sid, dxl.PRESENT_POSITION.address, 4)
        assert abs(start[sid] - _tick_truth(emu, sid)) <= 1
    torque = sdk.GroupSyncWrite(port, ph, dxl.TORQUE_ENABLE.address, 1)
    for sid in IDS:
        assert torque.addParam(sid, [1])
    assert torque.txPacket() == sdk.COMM_SUCCESS
    mids = {c.id: (c.min + c.max) // 2 for c in emu.calibration.servos.values()}
    goals = {sid: t + (50 if t < mids[sid] else -50) for sid, t in start.items()}
    write = sdk.GroupSyncWrite(port, ph, dxl.GOAL_POSITION.address, 4)
    for sid, g in goals.items():
        assert write.addParam(sid, list(dxl.encode_value(g, 4, 31)))
    time.sleep(0.05)                                     # unacknowledged: let the torque packet land
    assert all(emu.torque_enabled().values())
    assert write.txPacket() == sdk.COMM_SUCCESS
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        assert read.txRxPacket() == sdk.COMM_SUCCESS
        now = {sid: read.getData(sid, dxl.PRESENT_POSITION.address, 4) for sid in IDS}
        if all(abs(now[s] - goals[s]) <= 2 for s in IDS):
            break
        time.sleep(0.02)
    assert all(abs(now[s] - goals[s]) <= 2 for s in IDS), (now, goals)
    # and our own driver reads back what the SDK wrote
    bus = ServoBus(emu.path, timeout=0.05, protocol=dxl)
    try:
        assert {s: bus.read_register(s, dxl.GOAL_POSITION) for s in IDS} == goals
    finally:
        bus.close()


def test_sdk_reads_a_stuffed_status_packet(emu, client):
    """A reply whose data holds FF FF FD goes out stuffed (FF FF FD FD; LEN and CRC over the
    stuffed bytes), as X-series firmware sends it; the SDK unstuffs it and checks the CRC. The
    SDK would also take an unstuffed reply, so the raw bytes are checked too."""
    port, ph = client
    sid = 1
    data = [0xFF, 0xFF, 0xFF, 0xFF, 0xFD, 0x00, 0x00, 0x00]  # homing offset -1, then FD at 24
    result, error = ph.writeTxRx(port, sid, dxl.HOMING_OFFSET.address, len(data), data)
    _ok(ph, result, error)
    raw = []
    real_read = port.readPort
    port.readPort = lambda n: (lambda b: (raw.append(bytes(b)), b)[1])(real_read(n))
    values, result, error = ph.readTxRx(port, sid, dxl.HOMING_OFFSET.address, len(data))
    _ok(ph, result, error)
    assert list(values) == data
    reply = b"".join(raw)
    assert reply[:4] == b"\xff\xff\xfd\x00" and b"\xff\xff\xfd\xfd" in reply[7:], reply.hex(" ")
    port.readPort = real_read
    bus = ServoBus(emu.path, timeout=0.05, protocol=dxl)     # our driver reads the same value
    try:
        assert bus.read_register(sid, dxl.HOMING_OFFSET) == -1
    finally:
        bus.close()


def test_sdk_sends_the_bytes_our_builders_produce(client):
    port, ph = client
    sent = []
    real_write = port.writePort
    port.writePort = lambda pkt: (sent.append(bytes(pkt)), real_write(pkt))[1]
    ph.ping(port, 1)
    ph.read4ByteTxRx(port, 1, dxl.PRESENT_POSITION.address)
    ph.write4ByteTxOnly(port, 1, dxl.GOAL_POSITION.address, 0x00FDFFFF)   # needs byte stuffing
    group = sdk.GroupSyncWrite(port, ph, dxl.GOAL_POSITION.address, 4)
    group.addParam(1, [0x00, 0x08, 0, 0])
    group.addParam(2, [0xFF, 0x0F, 0, 0])
    group.txPacket()
    sync = sdk.GroupSyncRead(port, ph, dxl.PRESENT_POSITION.address, 4)
    sync.addParam(1)
    sync.addParam(3)
    sync.txPacket()
    assert sent[:2] == [dxl.ping(1), dxl.read(1, dxl.PRESENT_POSITION.address, 4)]
    assert sent[3:] == [dxl.sync_write(dxl.GOAL_POSITION.address, {1: b"\x00\x08\x00\x00",
                                                                   2: b"\xff\x0f\x00\x00"}),
                        dxl.sync_read([1, 3], dxl.PRESENT_POSITION.address, 4)]
    # FF FF FD in a payload: the spec (and our builder) stuffs it to FF FF FD FD. dynamixel-sdk
    # 4.1.0 does not: its addStuffing returns the stuffed copy, which txPacket discards, so
    # the packet goes out unstuffed with a CRC over the unstuffed bytes. Our parser must (and
    # does) read both forms as the same WRITE, so the emulator serves that SDK too.
    ours = dxl.write(1, dxl.GOAL_POSITION.address, b"\xff\xff\xfd\x00")
    (a,), (b,) = dxl.PacketParser().feed(sent[2]), dxl.PacketParser().feed(ours)
    assert a == b == dxl.Packet(1, dxl.WRITE, b"\x74\x00\xff\xff\xfd\x00")
    assert sent[2] in (ours, bytes.fromhex("fffffd0001090003740 0fffffd00c907".replace(" ", "")))
