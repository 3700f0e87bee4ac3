"""`robolearn emulate arm|car` as a user runs it: a subprocess printing its pty path."""
import os
import signal
import subprocess
import sys
import time

import pytest

from robolearn.drivers import feetech as ft
from robolearn.drivers.calibration import Calibration
from robolearn.drivers.servo_bus import ServoBus, ServoTimeoutError


def start(*args):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, "-m", "robolearn.cli", "emulate", *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    path = p.stdout.readline().strip()
    assert path.startswith("/dev/"), (path, p.stderr.read() if p.poll() is not None else "")
    return p, path


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        return p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        raise


def test_emulate_arm_with_calibration_and_silent_servo(tmp_path):
    cal_path = tmp_path / "cal.json"
    p, path = start("arm", "--plant", "first_order", "--scrambled", "--calibration-out", str(cal_path),
                    "--silent-id", "5", "--duration", "20")
    try:
        deadline = time.monotonic() + 5
        while not cal_path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        cal = Calibration.load(cal_path)
        assert cal.ids == [1, 2, 3, 4, 5, 6] and {c.direction for c in cal.servos.values()} <= {1, -1}
        with ServoBus(path) as bus:
            assert bus.read_register(1, ft.MODEL) == ft.STS3215_MODEL
            with pytest.raises(ServoTimeoutError, match=r"\[5\]"):
                bus.read_positions([4, 5, 6])
    finally:
        assert stop(p) == 0


def test_emulate_car_prints_path_and_speaks_protocol():
    from robolearn.drivers.car import SerialCar
    from robolearn.drivers.emulator_car import DEFAULT_SPEC

    p, path = start("car", "--plant", "bicycle", "--duration", "20")
    try:
        car = SerialCar(path, DEFAULT_SPEC)
        assert car.read().battery_v > 7
        car.close()
    finally:
        assert stop(p) == 0


def test_emulate_rejects_bad_fault_options():
    r = subprocess.run([sys.executable, "-m", "robolearn.cli", "emulate", "arm", "--drop-rate", "2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--drop-rate=2.0: a probability in [0, 1]" in r.stderr
