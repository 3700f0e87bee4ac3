"""Feetech packet bytes: known-answer packets, encodings, and the resynchronising parser."""
import pytest

from robolearn.drivers import feetech as ft


def test_ping_packet_bytes_match_the_datasheet_example():
    # PING servo 1: FF FF 01 02 01 FB (checksum = ~(1 + 2 + 1) & 0xFF = 0xFB)
    assert ft.ping(1) == bytes.fromhex("ffff01020 1fb".replace(" ", ""))


def test_read_present_position_packet():
    # READ servo 1, address 56 (0x38), 2 bytes: ~(1+4+2+0x38+2) = ~0x41 = 0xBE
    assert ft.read(1, ft.PRESENT_POSITION.address, 2) == bytes.fromhex("ffff0104023802be")


def test_sync_write_layout_and_checksum():
    pkt = ft.sync_write(ft.GOAL_POSITION.address, {1: b"\x00\x08", 2: b"\xff\x0f"})
    assert pkt[:5] == bytes([0xFF, 0xFF, 0xFE, 2 + 2 + 2 * 3, ft.SYNC_WRITE])
    assert pkt[5:7] == bytes([42, 2])
    assert pkt[7:13] == bytes([1, 0x00, 0x08, 2, 0xFF, 0x0F])
    assert pkt[-1] == ft.checksum(pkt[2:-1])
    with pytest.raises(ValueError):
        ft.sync_write(42, {1: b"\x00", 2: b"\x00\x00"})


def test_sync_read_packet():
    pkt = ft.sync_read([1, 2, 3], 56, 4)
    assert pkt == ft.build_packet(0xFE, 0x82, bytes([56, 4, 1, 2, 3]))
    assert pkt[3] == 7  # LEN = 5 params + 2


@pytest.mark.parametrize("value,sign_bit,raw", [
    (2048, None, b"\x00\x08"), (-100, 15, (100 | 0x8000).to_bytes(2, "little")),
    (300, 15, b"\x2c\x01"), (-5, 11, (5 | 0x800).to_bytes(2, "little")), (-7, 10, (7 | 0x400).to_bytes(2, "little"))])
def test_sign_magnitude_encoding_round_trip(value, sign_bit, raw):
    assert ft.encode_value(value, 2, sign_bit) == raw
    assert ft.decode_value(raw, sign_bit) == value


def test_encode_rejects_out_of_range():
    with pytest.raises(ValueError):
        ft.encode_value(70000, 2)
    with pytest.raises(ValueError):
        ft.encode_value(-1, 2)          # unsigned register


def test_parser_splits_concatenated_and_fragmented_packets():
    a, b = ft.status(1, 0, b"\x00\x08"), ft.status(2, ft.ERR_OVERLOAD, b"\x10\x04")
    p = ft.PacketParser()
    stream = a + b
    got = []
    for i in range(len(stream)):           # byte by byte
        got += p.feed(stream[i:i + 1])
    assert [(g.id, g.code, g.params) for g in got] == [(1, 0, b"\x00\x08"), (2, 0x20, b"\x10\x04")]
    assert p.pending == 0


def test_parser_resynchronises_after_garbage_and_bad_checksum():
    good = ft.status(3, 0, b"\x01\x02")
    bad = bytearray(ft.status(4, 0, b"\x01\x02"))
    bad[-1] ^= 0xFF
    p = ft.PacketParser()
    got = p.feed(b"\x00\x13\xff\x42" + bytes(bad) + b"\xff\xff\xff" + good)
    assert [g.id for g in got] == [3]
    assert p.bad_checksums == 1
    assert p.dropped_bytes > 0


def test_parser_keeps_split_header():
    pkt = ft.ping(7)
    p = ft.PacketParser()
    assert p.feed(b"\x99" + pkt[:1]) == []
    assert [g.id for g in p.feed(pkt[1:])] == [7]


def test_describe_error_names_bits():
    assert "overload" in ft.describe_error(ft.ERR_OVERLOAD)
    assert "overheat" in ft.describe_error(ft.ERR_OVERHEAT | ft.ERR_VOLTAGE)
    assert ft.describe_error(0) == "none"
