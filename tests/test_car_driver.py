"""Car protocol (COBS + CRC-16 frames), SerialCar against the emulated controller over a pty,
the emulator's failsafe, and agreement between the Python protocol and the firmware source."""
import re
import time
from pathlib import Path

import numpy as np
import pytest

from robolearn.drivers import car_protocol as cp
from robolearn.drivers.car import SerialCar
from robolearn.drivers.emulator_car import DEFAULT_SPEC, CarEmulator, make_plant
from robolearn.errors import DeviceDisconnectedError, DeviceError, SafetyError

INO = Path(cp.__file__).parent / "firmware" / "car_controller" / "car_controller.ino"


# ------------------------------------------------------------------------------ framing
def test_crc16_ccitt_false_check_value():
    assert cp.crc16_ccitt(b"123456789") == 0x29B1      # the catalogue check value


@pytest.mark.parametrize("raw,enc", [
    (b"", b"\x01"), (b"\x00", b"\x01\x01"), (b"\x00\x00", b"\x01\x01\x01"),
    (b"\x11\x22\x00\x33", b"\x03\x11\x22\x02\x33"), (b"\x11\x00\x00\x00", b"\x02\x11\x01\x01\x01"),
    (bytes(range(1, 255)), b"\xff" + bytes(range(1, 255)) + b"\x01")])
def test_cobs_known_vectors(raw, enc):
    assert cp.cobs_encode(raw) == enc
    assert cp.cobs_decode(enc) == raw


def test_frame_round_trip_and_resync():
    msgs = [cp.Command(7, -300, 512), cp.Config(250, 10),
            cp.Telemetry(1, 7, 123456, -42, 1500, (10, -20, 981), (1, 2, -3), 7400, -300, 512, 3)]
    stream = b"".join(cp.encode_frame(m) for m in msgs)
    assert stream.count(b"\x00") == 3                   # only the delimiters
    p = cp.FrameParser()
    assert p.feed(b"\x13\x37junk\x00" + stream) == msgs
    assert p.errors == 1
    corrupted = bytearray(cp.encode_frame(msgs[0]))
    corrupted[3] ^= 0x10
    assert p.feed(bytes(corrupted) + cp.encode_frame(msgs[1])) == [msgs[1]]
    assert "CRC" in p.last_error or "COBS" in p.last_error


def test_command_wire_layout():
    payload = cp.encode_payload(cp.Command(0x0102, -1, 1000))
    assert payload == bytes([0x01, 0x02, 0x01, 0xFF, 0xFF, 0xE8, 0x03])


# -------------------------------------------------------------------- firmware agreement
def _ino() -> str:
    return INO.read_text()


def test_firmware_constants_match_python():
    defines = dict(re.findall(r"^#define (\w+) (\S+)", _ino(), flags=re.M))
    for name in ("MSG_COMMAND", "MSG_TELEMETRY", "MSG_CONFIG", "FLAG_FAILSAFE", "FLAG_CONFIGURED",
                 "COMMAND_SIZE", "TELEMETRY_SIZE", "CONFIG_SIZE", "DEFAULT_TIMEOUT_MS",
                 "DEFAULT_TELEMETRY_PERIOD_MS", "TICKS_PER_METRE", "THROTTLE_SCALE", "MAX_FRAME"):
        assert int(defines[name], 0) == getattr(cp, name), name
    assert int(defines["CRC_POLY"], 0) == 0x1021 and int(defines["CRC_INIT"], 0) == 0xFFFF
    assert int(defines["MAX_STEER_MRAD"]) == round(DEFAULT_SPEC.max_steer * 1000)


def _function_body(src: str, name: str) -> str:
    start = src.index("{", re.search(rf"\b{name}\(", src).start())
    depth, i = 0, start
    while True:
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        if depth == 0:
            return src[start:i]
        i += 1


CODES = {"u8": "B", "u16": "H", "u32": "I", "i16": "h", "i32": "i"}


@pytest.mark.parametrize("function,kind,fmt", [
    ("send_telemetry", "put", cp.TELEMETRY_FMT), ("handle_command", "get", cp.COMMAND_FMT),
    ("handle_config", "get", cp.CONFIG_FMT)])
def test_firmware_field_layouts_match_python(function, kind, fmt):
    body = _function_body(_ino(), function)
    calls = re.findall(rf"\b{kind}_(u8|u16|u32|i16|i32)\(", body)
    assert "<" + "".join(CODES[c] for c in calls) == fmt


def test_firmware_has_explicit_failsafe():
    src = _ino()
    body = _function_body(src, "failsafe_active")
    assert "timeout_ms" in body and "last_cmd_ms" in body
    assert re.search(r"if \(failsafe\) apply_outputs\(0, 0\)", src)


# ---------------------------------------------------------------------- driver + emulator
@pytest.fixture
def emu():
    e = CarEmulator(plant=make_plant("bicycle"), timeout_ms=150).start()
    yield e
    e.close()


def test_config_commands_and_telemetry(emu):
    car = SerialCar(emu.path, DEFAULT_SPEC, timeout_ms=120, telemetry_period_ms=10)
    try:
        assert emu.configured and emu.timeout_ms == 120
        st = car.read()
        assert st.speed == 0.0 and st.odometer == 0.0 and abs(st.accel[2] - 9.81) < 0.02
        assert 7.0 < st.battery_v < 8.0
        for _ in range(25):
            car.command(0.3, 0.6)
            car.advance(0.02)
        st = car.read()
        assert emu.applied == pytest.approx((0.3, 0.6))
        assert car.telemetry.cmd_seq == emu.last_command.seq
        assert st.speed > 0.8 and st.odometer > 0.2 and st.steer == pytest.approx(0.3)
        assert st.gyro[2] > 0.5                             # turning left
        assert not car.telemetry.failsafe
    finally:
        car.close()


def test_failsafe_neutral_within_timeout(emu):
    car = SerialCar(emu.path, DEFAULT_SPEC, timeout_ms=100)
    try:
        for _ in range(10):
            car.command(0.0, 0.8)
            car.advance(0.02)
        assert emu.applied[1] == pytest.approx(0.8) and not emu.failsafe
        last = emu.last_command_at                            # host goes quiet here
        t_end = time.monotonic() + 0.5
        while not emu.failsafe and time.monotonic() < t_end:
            time.sleep(0.002)
        assert emu.failsafe and emu.applied == (0.0, 0.0)
        latency = emu.failsafe_since - last
        # within timeout_ms + one control tick of the emulator (+ scheduling slack on a busy box);
        # tests/test_car_firmware.py checks the firmware's exact timing on simulated time
        assert 0.1 <= latency <= 0.1 + emu.telemetry_period_ms / 1000 + 0.03, latency
        time.sleep(0.05)
        assert car.telemetry.failsafe and car.telemetry.throttle_permille == 0
        car.command(0.0, 0.2)                                 # a new command re-arms
        time.sleep(0.05)
        assert not emu.failsafe and emu.applied[1] == pytest.approx(0.2)
    finally:
        car.close()
    time.sleep(0.03)
    assert emu.last_command.throttle_permille == 0 and emu.applied == (0.0, 0.0)  # close() -> neutral


def test_safety_rejects_out_of_range_commands(emu):
    car = SerialCar(emu.path, DEFAULT_SPEC)
    try:
        with pytest.raises(SafetyError, match="steer"):
            car.command(1.0, 0.0)
        with pytest.raises(SafetyError, match="non-finite"):
            car.command(0.0, float("nan"))
    finally:
        car.close()


def test_stale_telemetry_trips_watchdog(emu):
    car = SerialCar(emu.path, DEFAULT_SPEC)
    try:
        car.read()
        emu.muted = True
        time.sleep(0.4)
        with pytest.raises(SafetyError, match="car telemetry is .* old"):
            car.read()
        with pytest.raises(SafetyError, match="e-stop is latched"):
            car.command(0.0, 0.1)
    finally:
        car.close()


def test_unplug_is_disconnected_and_emulator_goes_neutral(emu):
    car = SerialCar(emu.path, DEFAULT_SPEC, timeout_ms=80)
    car.command(0.0, 0.5)
    deadline = time.monotonic() + 2.0          # the emulator's thread applies it (late on a loaded machine)
    while emu.applied[1] != pytest.approx(0.5) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert emu.applied[1] == pytest.approx(0.5)
    emu.unplug()
    time.sleep(0.15)
    with pytest.raises(DeviceDisconnectedError, match="disconnected"):
        car.read()
    car.safe_stop()                                           # must not raise
    car.close()
    assert emu.failsafe and emu.applied == (0.0, 0.0)


def test_wrong_port_and_silent_device():
    with pytest.raises(DeviceError, match="cannot open car controller port"):
        SerialCar("/dev/nonexistent-car", DEFAULT_SPEC)
    from robolearn.drivers.ptylink import PtyDevice
    dev = PtyDevice()                                         # a port with nothing behind it
    try:
        t0 = time.monotonic()
        with pytest.raises(DeviceError, match="did not acknowledge CONFIG"):
            SerialCar(dev.path, DEFAULT_SPEC, connect_timeout=0.3)
        assert time.monotonic() - t0 < 1.0
    finally:
        dev.close()


def test_corrupted_frames_are_dropped_not_acted_on(emu):
    emu.faults.corrupt_rate = 0.5
    # half the CONFIG acks are corrupted too: 1 s of 0.2 s tries failed 1 connect in ~30 (3 %, more
    # under load); 5 s of tries fail ~1 in 10^7
    car = SerialCar(emu.path, DEFAULT_SPEC, connect_timeout=5.0)
    try:
        time.sleep(0.3)
        assert car.parser.errors > 3                          # bad telemetry frames rejected
        st = car.read()
        assert np.isfinite(st.speed)
    finally:
        car.close()


def test_car_backend_options_are_checked(emu):
    from robolearn.drivers.real import make_car_backend
    from robolearn.errors import ConfigError

    with pytest.raises(ConfigError, match="timeout_ms=5"):
        make_car_backend(port=emu.path, timeout_ms=5)
    with pytest.raises(ConfigError, match="unknown real car option"):
        make_car_backend(port=emu.path, throttle_limit=0.5)
    be = make_car_backend(port=emu.path, max_throttle=0.3, timeout_ms=300)
    try:
        assert be.kind == "real" and be.privileged is None and emu.timeout_ms == 300
        with pytest.raises(SafetyError, match="throttle 0.500 beyond"):
            be.robot.command(0.0, 0.5)
    finally:
        be.close()
