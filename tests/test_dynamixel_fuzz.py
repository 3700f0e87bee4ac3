"""Fuzzing the Protocol 2.0 parser (hypothesis), as test_parsers_fuzz.py does for Feetech and
the car: random, fragmented, truncated and spliced streams never crash or hang it, anything it
accepts is a valid packet, and it resynchronises to find every following valid packet."""
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from robolearn.drivers import dynamixel as dxl

FAST = settings(max_examples=200, deadline=None)


def chunked(data: bytes, cuts: list[int]):
    points = sorted({c % (len(data) + 1) for c in cuts})
    prev = 0
    for p in points + [len(data)]:
        yield data[prev:p]
        prev = p


# payloads biased toward the header bytes, so stuffing is exercised often
payload = st.lists(st.sampled_from([0xFF, 0xFD, 0x00, 0x55, 0x01]) | st.integers(0, 255),
                   max_size=24).map(bytes)
status_packets = st.builds(lambda sid, err, p: dxl.status(sid, err, p),
                           st.integers(0, dxl.MAX_ID), st.integers(0, 0xFF), payload)
instruction_packets = st.builds(lambda sid, inst, p: dxl.build_packet(sid, inst, p),
                                st.integers(0, dxl.BROADCAST_ID),
                                st.sampled_from(sorted(set(dxl.INSTRUCTIONS) - {dxl.STATUS})), payload)
packets = status_packets | instruction_packets


@FAST
@given(st.binary(max_size=2000), st.lists(st.integers(0, 4000), max_size=20))
def test_random_bytes_never_crash_or_hang(data, cuts):
    p = dxl.PacketParser()
    t0 = time.monotonic()
    for chunk in chunked(data, cuts):
        for pkt in p.feed(chunk):                      # anything accepted re-encodes to itself
            assert dxl.PacketParser().feed(pkt.to_bytes()) == [pkt]
    assert time.monotonic() - t0 < 2.0                 # generous: a loaded 2-core CI box
    assert p.pending < 7 + dxl.MAX_LENGTH              # bounded memory: one max packet


@FAST
@given(st.integers(0, dxl.BROADCAST_ID), st.integers(0, 255), payload, st.lists(st.integers(0, 200), max_size=6))
def test_round_trip_with_stuffing_in_any_fragmentation(sid, inst, params, cuts):
    if inst == dxl.STATUS:
        params = params or b"\x00"
    pkt = dxl.build_packet(sid, inst, params)
    assert dxl.HEADER not in pkt[4:]                   # stuffing keeps the header unique
    got = []
    p = dxl.PacketParser()
    for chunk in chunked(pkt, cuts):
        got += p.feed(chunk)
    (g,) = got
    if inst == dxl.STATUS:
        assert (g.id, g.status, g.code, g.params) == (sid, True, params[0], params[1:])
    else:
        assert (g.id, g.status, g.code, g.params) == (sid, False, inst, params)


@FAST
@given(st.binary(max_size=64), packets, st.lists(packets, min_size=1, max_size=4),
       st.lists(st.integers(0, 400), max_size=8))
def test_resyncs_after_garbage_and_truncation(garbage, victim, good, cuts):
    p = dxl.PacketParser()
    truncated = victim[:max(0, len(victim) - 1)]
    # a truncated packet can claim up to MAX_LENGTH bytes; the idle zeros let the parser drop it
    stream = garbage + truncated + bytes(7 + dxl.MAX_LENGTH) + b"".join(good)
    got = []
    for chunk in chunked(stream, cuts):
        got += p.feed(chunk)
    want = [q for pkt in good for q in dxl.PacketParser().feed(pkt)]
    assert got[-len(good):] == want


@FAST
@given(packets, st.integers(0, 200), st.integers(1, 255))
def test_a_flipped_byte_is_rejected_or_counted(pkt, pos, flip):
    bad = bytearray(pkt)
    bad[pos % len(bad)] ^= flip
    p = dxl.PacketParser()
    got = p.feed(bytes(bad) + bytes(7 + dxl.MAX_LENGTH))
    original = dxl.PacketParser().feed(pkt)[0]
    # CRC-16 catches every single-byte error: the corrupted packet never decodes (it is dropped,
    # or counted as a bad checksum), so a corrupted command can never reach a servo as valid
    assert original not in got


# every instruction the emulator answers, with parameters of any length and content, biased
# toward the group instructions whose per-servo entries are easiest to get wrong
_EMU = None


def _emulator():
    global _EMU
    if _EMU is None:
        from robolearn.drivers.dynamixel_emulator import DynamixelArmEmulator
        from robolearn.drivers.emulator_arm import make_plant
        _EMU = DynamixelArmEmulator(plant=make_plant("first_order"))   # not started: _handle only
    return _EMU


def teardown_module():
    if _EMU is not None:
        _EMU.close()


group_params = st.lists(st.sampled_from([1, 2, 6, 9, 0xFE, 0, 4, 0x84, 0xFF]) | st.integers(0, 255),
                        max_size=40).map(bytes)


@FAST
@given(st.sampled_from([0, 1, 6, 9, dxl.BROADCAST_ID]),
       st.sampled_from(sorted(set(dxl.INSTRUCTIONS) - {dxl.STATUS})) | st.integers(0, 255), group_params)
def test_emulator_answers_any_instruction_with_well_formed_replies(sid, inst, params):
    emu = _emulator()
    replies = emu._handle(dxl.Packet(sid, inst, params))
    for r in replies:
        (pkt,) = dxl.PacketParser().feed(r) if len(r) == 7 + int.from_bytes(r[5:7], "little") else (None,)
        if pkt is None:                                    # only a fast read's broken chain is short
            assert inst in (dxl.FAST_SYNC_READ, dxl.FAST_BULK_READ)
            continue
        assert pkt.status
        if pkt.id == dxl.BROADCAST_ID:                     # a fast read's combined reply
            assert inst in (dxl.FAST_SYNC_READ, dxl.FAST_BULK_READ) and sid == dxl.BROADCAST_ID
        else:
            assert pkt.id in emu.tables
    if sid == dxl.BROADCAST_ID and inst not in (dxl.PING, dxl.SYNC_READ, dxl.BULK_READ,
                                                dxl.FAST_SYNC_READ, dxl.FAST_BULK_READ):
        assert replies == []                               # other broadcasts are never answered


def test_emulator_refuses_reads_too_long_for_a_status_packet():
    emu = _emulator()
    for inst, params in [(dxl.READ, b"\x84\x00\xff\xff"), (dxl.SYNC_READ, b"\x84\x00\xff\xff\x01"),
                         (dxl.BULK_READ, b"\x01\x84\x00\xff\xff")]:
        sid = 1 if inst == dxl.READ else dxl.BROADCAST_ID
        (reply,) = emu._handle(dxl.Packet(sid, inst, params))
        (pkt,) = dxl.PacketParser().feed(reply)
        assert (pkt.id, pkt.code, pkt.params) == (1, dxl.ERR_DATA_LENGTH, b"")
    assert emu._handle(dxl.Packet(dxl.BROADCAST_ID, dxl.FAST_SYNC_READ, b"\x84\x00\xff\xff\x01")) == []
