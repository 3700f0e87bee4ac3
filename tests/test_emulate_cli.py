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


@pytest.mark.slow
def test_emulate_car_camera_serves_frames_without_a_display_setting():
    """Without MUJOCO_GL in the environment MuJoCo picks glfw, which renders nothing headless:
    the camera stream then served no frame and `robolearn finetune` died on its first one."""
    import json
    import urllib.request

    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY")}
    p = subprocess.Popen([sys.executable, "-m", "robolearn.cli", "emulate", "car", "--reality", "hard",
                          "--duration", "40"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=dict(env, PYTHONUNBUFFERED="1"))
    try:
        assert p.stdout.readline().startswith("/dev/")
        url = json.loads(p.stdout.readline())["cameras"]["front"].replace(".mjpg", ".jpg")
        deadline, jpeg = time.monotonic() + 20, b""
        while time.monotonic() < deadline and not jpeg:
            try:
                jpeg = urllib.request.urlopen(url, timeout=2).read()
            except OSError:
                time.sleep(0.5)
        assert jpeg[:2] == b"\xff\xd8", "no JPEG frame from the emulated car's camera"
    finally:
        assert stop(p) == 0


def test_emulate_rejects_bad_fault_options():
    r = subprocess.run([sys.executable, "-m", "robolearn.cli", "emulate", "arm", "--drop-rate", "2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--drop-rate=2.0: a probability in [0, 1]" in r.stderr
