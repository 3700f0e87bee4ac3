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


# ------------------------------------------------ bulk, fast and registered instructions
def _capture(port):
    """Record every packet the SDK writes (the port keeps working)."""
    sent = []
    real_write = port.writePort
    port.writePort = lambda pkt: (sent.append(bytes(pkt)), real_write(pkt))[1]
    return sent


# a different register per servo: what bulk read is for
BULK = {1: dxl.PRESENT_POSITION, 2: dxl.PRESENT_INPUT_VOLTAGE, 3: dxl.PRESENT_TEMPERATURE,
        4: dxl.MODEL, 5: dxl.ID, 6: dxl.PRESENT_POSITION}


def _bulk_truth(emu, sid):
    reg = BULK[sid]
    return _tick_truth(emu, sid) if reg is dxl.PRESENT_POSITION else emu.register(sid, reg)


def test_sdk_group_bulk_read_gets_one_status_per_servo(emu, client):
    """Was 'There is no status packet!': BULK_READ 0x92 is answered by each listed servo with its
    own status packet, in the order listed; the SDK's GroupBulkRead reads them all, and our
    driver's bulk_read sends the very same bytes and reads the same values."""
    port, ph = client
    sent = _capture(port)
    group = sdk.GroupBulkRead(port, ph)
    for sid, reg in BULK.items():
        assert group.addParam(sid, reg.address, reg.size)
    result = group.txRxPacket()
    assert result == sdk.COMM_SUCCESS, ph.getTxRxResult(result)
    for sid, reg in BULK.items():
        assert group.isAvailable(sid, reg.address, reg.size)
        assert abs(group.getData(sid, reg.address, reg.size) - _bulk_truth(emu, sid)) <= 1
    assert sent == [dxl.bulk_read([(sid, r.address, r.size) for sid, r in BULK.items()])]
    assert sent[0][7] == dxl.BULK_READ == 0x92
    bus = ServoBus(emu.path, timeout=0.05, protocol=dxl)
    try:
        ours = bus.bulk_read(BULK)
    finally:
        bus.close()
    assert all(abs(ours[sid] - _bulk_truth(emu, sid)) <= 1 for sid in BULK), ours


def test_sdk_group_bulk_read_of_a_missing_servo_times_out(emu, client):
    port, ph = client
    group = sdk.GroupBulkRead(port, ph)
    assert group.addParam(1, dxl.PRESENT_POSITION.address, 4)
    assert group.addParam(9, dxl.PRESENT_POSITION.address, 4)        # nobody has ID 9
    assert group.txRxPacket() == sdk.COMM_RX_TIMEOUT
    assert not group.isAvailable(9, dxl.PRESENT_POSITION.address, 4)


def test_sdk_group_bulk_write_lands_per_servo_and_sends_our_bytes(emu, client):
    port, ph = client
    sent = _capture(port)
    writes = {1: (dxl.LED, 1), 2: (dxl.PROFILE_VELOCITY, 0x00FDFFFF),   # the SDK leaves FF FF FD unstuffed
              3: (dxl.RETURN_DELAY, 7), 4: (dxl.HOMING_OFFSET, -300)}
    group = sdk.GroupBulkWrite(port, ph)
    for sid, (reg, v) in writes.items():
        assert group.addParam(sid, reg.address, reg.size, list(dxl.encode_value(v, reg.size, reg.sign_bit)))
    assert group.txPacket() == sdk.COMM_SUCCESS
    ours = dxl.bulk_write([(sid, r.address, dxl.encode_value(v, r.size, r.sign_bit)) for sid, (r, v) in writes.items()])
    (a,), (b,) = dxl.PacketParser().feed(sent[0]), dxl.PacketParser().feed(ours)
    assert a == b and a.code == dxl.BULK_WRITE == 0x93
    deadline = time.monotonic() + 1.0                      # unacknowledged: wait for it to land
    while time.monotonic() < deadline and emu.register(4, dxl.HOMING_OFFSET) != -300:
        time.sleep(0.01)
    bus = ServoBus(emu.path, timeout=0.05, protocol=dxl)
    try:
        assert {sid: bus.read_register(sid, reg) for sid, (reg, _) in writes.items()} == \
            {sid: v for sid, (_, v) in writes.items()}
        # and the SDK reads back what our driver's bulk write puts there
        bus.bulk_write({5: (dxl.LED, 1), 6: (dxl.PROFILE_VELOCITY, 250)})
        time.sleep(0.05)
    finally:
        bus.close()
    check = sdk.GroupBulkRead(port, ph)
    check.addParam(5, dxl.LED.address, 1)
    check.addParam(6, dxl.PROFILE_VELOCITY.address, 4)
    assert check.txRxPacket() == sdk.COMM_SUCCESS
    assert (check.getData(5, dxl.LED.address, 1), check.getData(6, dxl.PROFILE_VELOCITY.address, 4)) == (1, 250)


def test_sdk_fast_sync_read_and_fast_bulk_read_get_one_combined_packet(emu, client):
    """FAST_SYNC_READ 0x8A / FAST_BULK_READ 0x9A (X-series firmware v45+; the emulated XL330
    reports v52): one status packet from ID 0xFE with a slot per servo, which the SDK's
    fastSyncRead / fastBulkRead parse positionally."""
    port, ph = client
    if not hasattr(sdk.GroupSyncRead, "fastSyncRead"):
        pytest.skip("this dynamixel-sdk has no GroupSyncRead.fastSyncRead")
    sent = _capture(port)
    raw = []
    real_read = port.readPort
    port.readPort = lambda n: (lambda b: (raw.append(bytes(b)), b)[1])(real_read(n))
    read = sdk.GroupSyncRead(port, ph, dxl.PRESENT_POSITION.address, 4)
    for sid in IDS:
        assert read.addParam(sid)
    result = read.fastSyncRead()
    assert result == sdk.COMM_SUCCESS, ph.getTxRxResult(result)
    for sid in IDS:
        assert abs(read.getData(sid, dxl.PRESENT_POSITION.address, 4) - _tick_truth(emu, sid)) <= 1
    reply = b"".join(raw)
    assert reply[4] == dxl.BROADCAST_ID and reply[7] == dxl.STATUS
    assert int.from_bytes(reply[5:7], "little") == 1 + len(IDS) * (4 + 4)
    assert sent == [dxl.fast_sync_read(IDS, dxl.PRESENT_POSITION.address, 4)]
    raw.clear()
    port.readPort = real_read

    # dynamixel-sdk 4.1.0's fastBulkReadRx finds a slot's length with param.index(id): the first
    # parameter byte equal to the ID, which may be another servo's address or length byte
    # (BULK's ID 4 matches ID 1's length 4). So the SDK gets a request list free of such
    # collisions; our driver (below) takes the lengths from the request itself and reads BULK.
    fast = {1: dxl.MODEL, 3: dxl.PRESENT_POSITION, 5: dxl.PRESENT_TEMPERATURE, 6: dxl.PRESENT_INPUT_VOLTAGE}
    bulk = sdk.GroupBulkRead(port, ph)
    for sid, reg in fast.items():
        assert bulk.addParam(sid, reg.address, reg.size)
    result = bulk.fastBulkRead()
    assert result == sdk.COMM_SUCCESS, ph.getTxRxResult(result)
    truth = {1: dxl.XL330_M288_MODEL, 3: _tick_truth(emu, 3), 5: 30, 6: 50}
    for sid, reg in fast.items():
        assert abs(bulk.getData(sid, reg.address, reg.size) - truth[sid]) <= 1
    assert sent[1] == dxl.fast_bulk_read([(sid, r.address, r.size) for sid, r in fast.items()])

    bus = ServoBus(emu.path, timeout=0.05, protocol=dxl)     # our driver reads the same
    try:
        ours = bus.fast_sync_read(IDS, dxl.PRESENT_POSITION)
        assert all(abs(ours[s] - _tick_truth(emu, s)) <= 1 for s in IDS)
        ours = bus.fast_bulk_read(BULK)
        assert all(abs(ours[s] - _bulk_truth(emu, s)) <= 1 for s in BULK)
    finally:
        bus.close()


def test_sdk_reg_write_waits_for_action(emu, client):
    port, ph = client
    sids = [2, 5]
    start = {sid: _tick_truth(emu, sid) for sid in sids}
    mids = {c.id: (c.min + c.max) // 2 for c in emu.calibration.servos.values()}
    goals = {sid: t + (60 if t < mids[sid] else -60) for sid, t in start.items()}
    for sid in sids:
        _ok(ph, *ph.write1ByteTxRx(port, sid, dxl.TORQUE_ENABLE.address, 1))
        _ok(ph, *ph.regWriteTxRx(port, sid, dxl.GOAL_POSITION.address, 4,
                                  list(dxl.encode_value(goals[sid], 4, 31))))
        flag, result, error = ph.read1ByteTxRx(port, sid, dxl.REGISTERED_INSTRUCTION.address)
        _ok(ph, result, error)
        assert flag == 1
    time.sleep(0.15)
    for sid in sids:                                   # registered, not applied
        goal, result, error = ph.read4ByteTxRx(port, sid, dxl.GOAL_POSITION.address)
        _ok(ph, result, error)
        assert goal != goals[sid] and abs(_tick_truth(emu, sid) - start[sid]) <= 2
    assert ph.action(port, dxl.BROADCAST_ID) == sdk.COMM_SUCCESS
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and not all(abs(_tick_truth(emu, s) - goals[s]) <= 2 for s in sids):
        time.sleep(0.02)
    assert all(abs(_tick_truth(emu, s) - goals[s]) <= 2 for s in sids)
    for sid in sids:
        flag, result, error = ph.read1ByteTxRx(port, sid, dxl.REGISTERED_INSTRUCTION.address)
        _ok(ph, result, error)
        assert flag == 0
    # e-Manual examples: REG_WRITE 200 to goal velocity (104) of ID 1, ACTION to ID 1
    assert dxl.reg_write(1, 104, dxl.encode_value(200, 4)) == bytes.fromhex("fffffd00010900046800c8000000ae8e")
    assert dxl.action(1) == bytes.fromhex("fffffd000103000502ce")
