"""The car firmware itself, compiled for the host (g++ with tests/firmware_host/ stand-ins for
the Arduino core) and run against simulated time: it must answer the Python driver's frames
with frames the Python parser accepts, drive the ESC/servo pulses, and trip its failsafe."""
import shutil
import subprocess
from pathlib import Path

import pytest

from robolearn.drivers import car_protocol as cp

ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "tests" / "firmware_host"
FW = ROOT / "drivers" / "firmware" / "car_controller"

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the firmware on the host")


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    exe = tmp_path_factory.mktemp("fw") / "harness"
    subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{HOST}", f"-I{FW}",
                    "-x", "c++", str(HOST / "harness.cpp"), "-o", str(exe)],
                   check=True, capture_output=True, text=True, timeout=120)
    return exe


def run_fw(exe, script: list[tuple[int, bytes]], end_ms: int):
    stdin = "".join(f"{t} {data.hex()}\n" for t, data in script)
    out = subprocess.run([str(exe), str(end_ms)], input=stdin, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    frames, pwm = [], []
    parser = cp.FrameParser()
    for line in out.splitlines():
        kind, t, *rest = line.split()
        if kind == "TX":
            frames += [(int(t), m) for m in parser.feed(bytes.fromhex(rest[0]))]
        elif kind == "PWM":
            pwm.append((int(t), int(rest[0]), int(rest[1])))
    return frames, pwm, parser


def esc_at(pwm, t_ms, pin=10):
    us = None
    for t, p, v in pwm:
        if p == pin and t <= t_ms:
            us = v
    return us


def test_firmware_speaks_the_python_protocol_and_fails_safe(harness):
    script = [(5, cp.encode_frame(cp.Config(100, 10)))]
    # commands every 20 ms until t=200 ms, then silence
    script += [(t, cp.encode_frame(cp.Command(t, 300, 500))) for t in range(10, 201, 20)]
    frames, pwm, parser = run_fw(harness, script, end_ms=400)
    assert parser.errors == 0
    configs = [m for _, m in frames if isinstance(m, cp.Config)]
    assert configs == [cp.Config(100, 10)]                    # CONFIG echoed as the ack
    tele = [(t, m) for t, m in frames if isinstance(m, cp.Telemetry)]
    assert 35 <= len(tele) <= 45                              # every 10 ms
    assert [m.seq for _, m in tele] == list(range(1, len(tele) + 1))
    at_100 = next(m for t, m in tele if t >= 100)
    assert at_100.cmd_seq == 90 and at_100.throttle_permille == 500 and at_100.steer_mrad == 300
    assert not at_100.failsafe and at_100.flags & cp.FLAG_CONFIGURED
    assert at_100.accel_cm_s2[2] == 981 and at_100.battery_mv == 340 * 22
    # ESC: neutral at power-up, 1500 + 500 * 500/1000 = 1750 us while commanded
    assert esc_at(pwm, 5) == 1500 and esc_at(pwm, 150) == 1750
    assert esc_at(pwm, 150, pin=9) == 1500 + 300 * 500 // 450
    # last command at t=190: failsafe strictly after 190 + 100 ms, neutral from then on
    assert esc_at(pwm, 290) == 1750
    assert esc_at(pwm, 292) == 1500 and esc_at(pwm, 400) == 1500
    late = [m for t, m in tele if t >= 300]
    assert late and all(m.failsafe and m.throttle_permille == 0 for m in late)


def test_firmware_drops_corrupted_and_garbage_frames(harness):
    bad = bytearray(cp.encode_frame(cp.Command(1, 0, 900)))
    bad[2] ^= 0x04                                            # CRC will not match
    script = [(5, b"\x01\x02\x03" * 30 + b"\x00"), (10, bytes(bad)),
              (20, cp.encode_frame(cp.Command(2, 0, -200)))]
    frames, pwm, _ = run_fw(harness, script, end_ms=60)
    assert 900 not in {m.throttle_permille for _, m in frames if isinstance(m, cp.Telemetry)}
    assert esc_at(pwm, 15) == 1500 and esc_at(pwm, 30) == 1500 - 100
