"""OpenCVCamera on a generated video file: latest frame + timestamp, resize/crop, dropout and
reconnect, missing source -> DeviceError in bounded time."""
import time

import cv2
import numpy as np
import pytest

from robolearn.drivers.camera import OpenCVCamera, prepare
from robolearn.errors import ConfigError, DeviceError
from robolearn.robot import Camera


def write_video(path, n=12, size=(64, 48), fps=40.0):
    """Frame k: blue level 20*k on the left half, red on the right half (BGR on disk)."""
    w, h = size
    vw = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (w, h))
    assert vw.isOpened()
    for k in range(n):
        img = np.zeros((h, w, 3), np.uint8)
        img[:, : w // 2, 0] = 20 * k
        img[:, w // 2:, 2] = 200
        vw.write(img)
    vw.release()
    return path


@pytest.fixture
def video(tmp_path):
    return write_video(tmp_path / "cam.avi")


def test_frames_are_rgb_resized_and_timestamped(video):
    cam = OpenCVCamera(str(video), name="front", image_size=(24, 32))
    try:
        assert isinstance(cam, Camera) and cam.shape == (24, 32, 3)
        f1 = cam.read()
        assert f1.image.shape == (24, 32, 3) and f1.image.dtype == np.uint8
        assert f1.image[:, -1, 0].mean() > 150 and f1.image[:, -1, 2].mean() < 30   # BGR -> RGB
        time.sleep(0.1)
        f2 = cam.read()
        assert f2.stamp > f1.stamp                      # the latest frame, not a buffered one
        assert time.monotonic() - f2.stamp < 0.25
    finally:
        cam.close()


def test_video_end_reconnects_and_frames_keep_coming(video):
    cam = OpenCVCamera(str(video), image_size=(16, 16))   # 12 frames at 40 fps: 0.3 s
    try:
        cam.read()
        time.sleep(0.8)
        assert cam.reconnects >= 1
        assert time.monotonic() - cam.read().stamp < 0.2
    finally:
        cam.close()


def test_dropout_then_recovery(tmp_path):
    path = write_video(tmp_path / "drop.avi", n=6)
    cam = OpenCVCamera(str(path), image_size=(16, 16), stale_after=0.3, reconnect_delay=0.05)
    try:
        cam.read()
        path.unlink()                                    # the device goes away
        time.sleep(0.6)
        with pytest.raises(DeviceError, match="old"):
            cam.read()
        write_video(path, n=6)                           # ...and comes back
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            try:
                cam.read()
                break
            except DeviceError:
                time.sleep(0.05)
        assert time.monotonic() - cam.read().stamp < 0.3
    finally:
        cam.close()


def test_missing_source_is_a_device_error_in_bounded_time(tmp_path):
    cam = OpenCVCamera(str(tmp_path / "none.avi"), first_frame_timeout=0.3)
    try:
        t0 = time.monotonic()
        with pytest.raises(DeviceError, match="gave no frame within 0.3 s.*does not exist"):
            cam.read()
        assert time.monotonic() - t0 < 1.0
    finally:
        cam.close()


def test_crop_center_and_box():
    img = np.zeros((40, 80, 3), np.uint8)
    img[:, 20:60] = (255, 0, 0)                          # BGR blue in the centre square
    out = prepare(img, (10, 10), "center")
    assert out.shape == (10, 10, 3) and out[..., 2].min() == 255   # only the blue centre
    out = prepare(img, (8, 8), (0, 0, 20, 40))
    assert out.max() == 0
    with pytest.raises(DeviceError, match="outside"):
        prepare(img, (8, 8), (100, 100, 5, 5))


def test_bad_options():
    with pytest.raises(ConfigError, match="image_size"):
        OpenCVCamera("x.avi", image_size=(0, 5))
    with pytest.raises(ConfigError, match="crop"):
        OpenCVCamera("x.avi", crop="left")
