"""Cameras through the real path: MJPEG over HTTP from the emulator into `OpenCVCamera`.

Rendering on CPU is slow (tens of frames/s), so these tests read a handful of frames. Every
failure case is bounded by a pytest timeout and a measured deadline: a dead camera must
raise `CameraError` within 2 s, never hang.
"""
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

from robolearn.data.dataset import Dataset
from robolearn.data.dataset_writer import DatasetWriter
from robolearn.drivers.camera import OpenCVCamera
from robolearn.drivers.emulation import start_emulator
from robolearn.drivers.mjpeg_server import MjpegServer
from robolearn.registry import register_all
from robolearn.errors import CameraError

register_all()


class Producer:
    """Publishes synthetic frames (grey level = frame count) until stopped."""

    def __init__(self, server, name="front", size=(48, 64), fps=60.0):
        self.server, self.name, self.size, self.fps = server, name, size, fps
        self.k = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.wait(1.0 / self.fps):
            self.k += 1
            self.server.publish(self.name, np.full((*self.size, 3), (5 * self.k) % 250, np.uint8))

    def stop(self):
        self._stop.set()
        self._t.join()


@pytest.fixture
def stream():
    server = MjpegServer(["front"])
    prod = Producer(server)
    yield server
    prod.stop()
    server.close()


@pytest.mark.timeout(20)
def test_frames_arrive_resized_with_timestamps(stream):
    cam = OpenCVCamera(stream.url("front"), image_size=(32, 40))
    try:
        stamps = []
        for _ in range(5):
            t_before = time.monotonic()
            f = cam.read()
            assert f.image.shape == (32, 40, 3) and f.image.dtype == np.uint8
            assert f.stamp <= time.monotonic() and t_before - f.stamp < 1.0
            stamps.append(f.stamp)
            time.sleep(0.05)
        assert all(b > a for a, b in zip(stamps, stamps[1:]))      # new frames keep coming
    finally:
        cam.close()


@pytest.mark.timeout(10)
def test_unreachable_url_raises_camera_error_within_2s():
    t0 = time.monotonic()
    cam = OpenCVCamera("http://127.0.0.1:9/front.mjpg")     # discard port: nothing listens
    try:
        with pytest.raises(CameraError, match="could not connect.*127.0.0.1:9"):
            cam.read()
        assert time.monotonic() - t0 < 2.0
    finally:
        cam.close()


@pytest.mark.timeout(10)
def test_unknown_stream_name_raises_camera_error(stream):
    cam = OpenCVCamera(stream.url("front").replace("front", "back"))
    try:
        t0 = time.monotonic()
        with pytest.raises(CameraError):
            cam.read()
        assert time.monotonic() - t0 < 2.0
    finally:
        cam.close()


@pytest.mark.timeout(15)
@pytest.mark.parametrize("how", ["stall", "close"])
def test_stream_that_stops_raises_camera_error_within_2s(how):
    server = MjpegServer(["front"])
    prod = Producer(server)
    cam = OpenCVCamera(server.url("front"), image_size=(24, 24))
    try:
        cam.read()
        if how == "stall":
            server.stall()               # connection stays open, no bytes: a hung camera
        else:
            prod.stop()
            server.close()               # the camera goes away
        t0 = time.monotonic()
        with pytest.raises(CameraError, match="old"):
            while time.monotonic() - t0 < 5.0:
                cam.read()
                time.sleep(0.02)
        assert time.monotonic() - t0 < 2.0
        t1 = time.monotonic()
        cam.close()
        assert time.monotonic() - t1 < 2.5                       # the capture thread is not stuck
    finally:
        cam.close()
        if how == "stall":
            prod.stop()
            server.close()


@pytest.mark.timeout(60)
def test_real_env_reads_emulator_cameras_showing_its_physics():
    """backend="real" + a dict of camera URLs: the obs keys, shapes and spaces are the sim's,
    and the images change when the emulated arm moves."""
    with start_emulator("arm", reality="mild") as robot:
        env = gym.make("robolearn/ArmReach-v0", backend="real", port=robot.port, obs="pixels",
                       camera=robot.camera_urls, image_size=(48, 48), control_hz=20)
        sim = gym.make("robolearn/ArmReach-v0", obs="pixels", image_size=(48, 48))
        try:
            assert env.observation_space == sim.observation_space
            obs, _ = env.reset(seed=0)
            assert env.observation_space.contains(obs)
            first = obs["front"].astype(int)
            for _ in range(8):
                obs, *_ = env.step(np.array([1.0, 1.0, 0.0, -1.0], np.float32))
            time.sleep(0.2)                                      # let a fresh frame arrive
            obs, *_ = env.step(np.zeros(4, np.float32))
            assert np.abs(obs["front"].astype(int) - first).mean() > 1.0   # the arm moved on camera
            assert robot.streamer.frames > 0
        finally:
            env.close()
            sim.close()


@pytest.mark.timeout(60)
def test_camera_error_mid_episode_keeps_earlier_episodes(tmp_path):
    """Recording on the real backend: the camera dies in episode 2 -> CameraError, episode 1
    stays complete on disk and the broken episode leaves nothing behind."""
    from robolearn.teleop.base import DeviceCommand
    from robolearn.teleop.recorder import record

    # a light stream (15 fps at 32x32): rendering shares the CPU and the GIL with the emulator
    with start_emulator("arm", reality={"camera": {"fps": 15, "size": [32, 32]}}) as robot:
        env = gym.make("robolearn/ArmReach-v0", backend="real", port=robot.port, obs="both",
                       camera={"front": robot.camera_urls["front"]}, image_size=(32, 32),
                       control_hz=20, max_episode_steps=30)

        class StallInSecondEpisode:
            """Holds still (no success, so episodes run 30 steps = 1.5 s); the camera hangs at
            step 5 of episode 2, longer before its end than the camera's 1 s staleness limit."""
            name = "hold"

            def __init__(self):
                self.calls = 0

            def reset(self):
                pass

            def read(self, obs=None):
                self.calls += 1
                if self.calls == 35:
                    robot.streamer.stall()
                return DeviceCommand(np.zeros(4, np.float32), True, set())

            def help(self):
                return ""

            def close(self):
                pass

        writer = DatasetWriter(tmp_path / "ds", env_id="robolearn/ArmReach-v0", control_hz=20.0,
                               observation_space=env.observation_space,
                               action_space=env.action_space, obs_mode="both")
        t0 = time.monotonic()
        try:
            with pytest.raises(CameraError):
                record(env, StallInSecondEpisode(), writer, episodes=3, seed=0)
        finally:
            writer.close()
            env.close()
        assert time.monotonic() - t0 < 30
    ds = Dataset(tmp_path / "ds")
    assert len(ds) == 1
    ep = ds.episode(ds.indices[0])
    assert ep.steps == 30 and ep.frames("front").shape == (31, 32, 32, 3)
    assert not [p for p in (tmp_path / "ds").iterdir() if p.name.startswith(".tmp")]
