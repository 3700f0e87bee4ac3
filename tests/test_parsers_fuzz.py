"""Fuzzing the byte parsers (hypothesis): random, truncated and spliced streams never crash or
hang a reader; it yields errors or resynchronises and still finds the valid packets."""
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robolearn.drivers import car_protocol as cp
from robolearn.drivers import feetech as ft

# own wall-clock bounds below; hypothesis' per-example deadline would flake on a loaded CI box
FAST = settings(max_examples=200, deadline=None)


def chunked(data: bytes, cuts: list[int]):
    """Split `data` at the given cut points (arbitrary fragmentation, as a UART delivers)."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    prev = 0
    for p in points + [len(data)]:
        yield data[prev:p]
        prev = p


# --------------------------------------------------------------------------- feetech
status_packets = st.builds(
    lambda sid, err, params: ft.status(sid, err, params),
    st.integers(0, 0xFD), st.integers(0, 0xFF), st.binary(max_size=16))


@FAST
@given(st.binary(max_size=2000), st.lists(st.integers(0, 4000), max_size=20))
def test_feetech_random_bytes_never_crash_or_hang(data, cuts):
    p = ft.PacketParser()
    t0 = time.monotonic()
    for chunk in chunked(data, cuts):
        for pkt in p.feed(chunk):                        # anything accepted is a valid packet
            assert ft.PacketParser().feed(pkt.to_bytes()) == [pkt]
    assert time.monotonic() - t0 < 0.5
    assert p.pending < 4 + 255                            # bounded memory: one max packet


@FAST
@given(st.binary(max_size=64), status_packets, st.lists(status_packets, min_size=1, max_size=4),
       st.lists(st.integers(0, 400), max_size=8))
def test_feetech_resyncs_after_garbage_and_truncation(garbage, victim, packets, cuts):
    p = ft.PacketParser()
    truncated = victim[: max(0, len(victim) - 1)]          # a packet cut short (lost bytes)
    # the garbage is a prefix; once the truncated packet and 4 idle 0x00 bytes pass, the parser
    # has either consumed or discarded them and must find every following valid packet
    stream = garbage + truncated + bytes(260) + b"".join(packets)
    got = []
    for chunk in chunked(stream, cuts):
        got += p.feed(chunk)
    tail = [(g.id, g.code, g.params) for g in got[-len(packets):]]
    want = [(q[2], q[4], q[5:-1]) for q in packets]
    assert tail == want


@FAST
@given(st.lists(status_packets, min_size=1, max_size=5), st.integers(0, 10_000))
def test_feetech_single_bit_flip_loses_at_most_that_packet(packets, where):
    stream = bytearray(b"".join(packets))
    i = where % len(stream)
    stream[i] ^= 1 << (where % 8)
    p = ft.PacketParser()
    got = p.feed(bytes(stream) + bytes(260) + packets[-1])
    assert got and got[-1] == ft.PacketParser().feed(packets[-1])[0]


# ------------------------------------------------------------------------------- car
telemetry = st.builds(
    cp.Telemetry, st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), st.integers(0, 2**32 - 1),
    st.integers(-2**31, 2**31 - 1), st.integers(-32768, 32767),
    st.tuples(*[st.integers(-32768, 32767)] * 3), st.tuples(*[st.integers(-32768, 32767)] * 3),
    st.integers(0, 65535), st.integers(-32768, 32767), st.integers(-32768, 32767), st.integers(0, 255))
messages = st.one_of(
    telemetry,
    st.builds(cp.Command, st.integers(0, 0xFFFF), st.integers(-32768, 32767), st.integers(-32768, 32767)),
    st.builds(cp.Config, st.integers(0, 0xFFFF), st.integers(0, 0xFFFF)))


@FAST
@given(st.binary(max_size=2000), st.lists(st.integers(0, 4000), max_size=20))
def test_car_random_bytes_never_crash_or_hang(data, cuts):
    p = cp.FrameParser()
    t0 = time.monotonic()
    for chunk in chunked(data, cuts):
        for m in p.feed(chunk):
            assert isinstance(m, (cp.Command, cp.Telemetry, cp.Config))
    assert time.monotonic() - t0 < 0.5
    assert len(p._buf) <= cp.MAX_FRAME


@FAST
@given(messages)
def test_car_round_trip(msg):
    assert cp.FrameParser().feed(cp.encode_frame(msg)) == [msg]


@FAST
@given(st.binary(max_size=100), messages, st.lists(messages, min_size=1, max_size=4),
       st.lists(st.integers(0, 400), max_size=8))
def test_car_resyncs_after_garbage_and_truncation(garbage, victim, msgs, cuts):
    truncated = cp.encode_frame(victim)[:-3]                 # frame cut short, no delimiter
    stream = garbage + truncated + b"\x00" + b"".join(cp.encode_frame(m) for m in msgs)
    p = cp.FrameParser()
    got = []
    for chunk in chunked(stream, cuts):
        got += p.feed(chunk)
    assert got[-len(msgs):] == msgs
    assert p.errors >= 1 or not (garbage + truncated)


@FAST
@given(st.lists(messages, min_size=1, max_size=5), st.integers(0, 10_000))
def test_car_bit_flip_never_yields_a_wrong_message(msgs, where):
    stream = bytearray(b"".join(cp.encode_frame(m) for m in msgs))
    i = where % len(stream)
    stream[i] ^= 1 << (where % 8)
    got = cp.FrameParser().feed(bytes(stream))
    # CRC-16 detects every single-bit error: whatever comes out is one of the sent messages
    assert all(m in msgs for m in got)
    assert len(got) >= len(msgs) - 2


# ------------------------------------------------- the drivers' readers over a real pty
class GarbageDevice:
    """A pty device answering every chunk it receives with the given bytes (no protocol)."""

    def __init__(self, reply: bytes):
        import threading

        from robolearn.drivers.ptylink import PtyDevice

        self.dev = PtyDevice()
        self.reply = reply
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    @property
    def path(self):
        return self.dev.path

    def _run(self):
        while not self._stop.is_set():
            if self.dev.read(0.02):
                self.dev.write(self.reply)

    def close(self):
        self._stop.set()
        self._t.join(1.0)
        self.dev.close()


@settings(max_examples=15, deadline=None)
@given(st.binary(min_size=1, max_size=300))
def test_servo_bus_reader_never_hangs_on_garbage(reply):
    from robolearn.drivers.servo_bus import ServoBus
    from robolearn.errors import DeviceError

    dev = GarbageDevice(reply)
    try:
        with ServoBus(dev.path, timeout=0.02, retries=1) as bus:
            t0 = time.monotonic()
            try:
                got = bus.read_positions([1, 2, 3])
                assert set(got) == {1, 2, 3}             # only if the bytes were valid replies
            except DeviceError:
                pass
            assert time.monotonic() - t0 < 2 * 0.02 + 0.2
    finally:
        dev.close()


@settings(max_examples=10, deadline=None)
@given(st.binary(min_size=1, max_size=300))
def test_serial_car_connect_never_hangs_on_garbage(reply):
    from robolearn.drivers.car import SerialCar
    from robolearn.drivers.emulator_car import DEFAULT_SPEC
    from robolearn.errors import DeviceError

    dev = GarbageDevice(reply)
    try:
        t0 = time.monotonic()
        with pytest.raises(DeviceError, match="did not acknowledge CONFIG"):
            SerialCar(dev.path, DEFAULT_SPEC, connect_timeout=0.2)
        assert time.monotonic() - t0 < 1.5
    finally:
        dev.close()
