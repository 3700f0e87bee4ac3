"""The arm and car tasks on `backend="real"`, against device emulators over real ptys.

The emulators run the MuJoCo backends behind the wire, so these are full episodes with
physically sensible motion; unplugging mid-episode must raise `DeviceDisconnectedError`, leave
the device safe, and leave the caller's recorded transitions intact.
"""
import time

import gymnasium as gym
import numpy as np
import pytest

from robolearn.drivers.emulator_arm import ArmEmulator, ArmSimPlant
from robolearn.drivers.emulator_car import CarEmulator
from robolearn.registry import register_all
from robolearn.errors import ConfigError, DeviceDisconnectedError
from robolearn.tasks.scripted import make_scripted

HZ = 20.0          # faster than the default 10 Hz so the real-time episodes stay short

register_all()


def eventually(pred, timeout=0.5):
    """Unacknowledged writes (sync/broadcast) land a moment later: poll, bounded."""
    end = time.monotonic() + timeout
    while not pred() and time.monotonic() < end:
        time.sleep(0.002)
    return pred()


@pytest.fixture
def arm_emu():
    emu = ArmEmulator(plant=ArmSimPlant(control_hz=200.0), mounting="scrambled", seed=11).start()
    yield emu
    emu.close()


@pytest.fixture
def arm_cal(arm_emu, tmp_path):
    return str(arm_emu.calibration.save(tmp_path / "arm_calibration.json"))


def make_arm(emu, cal, **kw):
    return gym.make("robolearn/ArmReach-v0", backend="real", port=emu.path, calibration=cal,
                    control_hz=HZ, **kw)


def test_arm_reach_full_episode_on_emulated_hardware(arm_emu, arm_cal):
    env = make_arm(arm_emu, arm_cal)
    try:
        assert env.unwrapped.sim is None and env.unwrapped.backend.kind == "real"
        obs, info = env.reset(seed=1)
        # the state comes from the wire: measured joints equal the emulator's physics
        np.testing.assert_allclose(obs["state"][:5], arm_emu.positions_rad()[:5], atol=0.02)
        ctrl = make_scripted(env)
        ctrl.reset()
        steps, t0 = 0, time.monotonic()
        while True:
            obs, reward, term, trunc, info = env.step(ctrl.act(obs))
            steps += 1
            assert {"t_obs", "overrun", "distance"} <= set(info)
            if term or trunc:
                break
        # the episode ends by success (reach terminates there), through the real wire
        assert term and not trunc and info["success"] and info["distance"] < 0.02, info
        assert 3 <= steps < 50
        assert time.monotonic() - t0 >= (steps - 1) / HZ       # real time passed in advance()
        np.testing.assert_allclose(obs["state"][:5], arm_emu.positions_rad()[:5], atol=0.05)
    finally:
        env.close()
    assert eventually(lambda: not any(arm_emu.torque_enabled().values()))  # close() -> torque off


def test_arm_unplug_mid_episode_keeps_recorded_steps(arm_emu, arm_cal):
    env = make_arm(arm_emu, arm_cal)
    recorded = []
    obs, _ = env.reset(seed=2)
    ctrl = make_scripted(env)
    with pytest.raises(DeviceDisconnectedError, match="disconnected"):
        for k in range(50):
            if k == 6:
                arm_emu.unplug(servo_power=True)                # bus adapter + servo supply pulled
            action = ctrl.act(obs)
            nxt, reward, term, trunc, info = env.step(action)
            recorded.append((obs, action, reward, nxt, term))
            obs = nxt
    assert len(recorded) == 6 and all(np.isfinite(r[2]) for r in recorded)
    t0 = time.monotonic()
    env.close()                                                 # must not raise or hang
    assert time.monotonic() - t0 < 1.0
    assert not any(arm_emu.torque_enabled().values())


def test_arm_usb_only_unplug_leaves_arm_holding_still(arm_emu, arm_cal):
    env = make_arm(arm_emu, arm_cal)
    obs, _ = env.reset(seed=3)
    env.step(np.array([1.0, 0.0, 0.0, 1.0], np.float32))
    arm_emu.unplug(servo_power=False)
    with pytest.raises(DeviceDisconnectedError):
        env.step(np.zeros(4, np.float32))
    env.close()
    time.sleep(0.3)
    q1 = arm_emu.positions_rad()
    time.sleep(0.3)
    np.testing.assert_allclose(arm_emu.positions_rad(), q1, atol=1e-3)  # powered, holding still


def test_arm_real_options_are_checked(arm_emu, tmp_path):
    with pytest.raises(ConfigError, match="unknown real arm option"):
        make_arm(arm_emu, None, baud=9600)
    with pytest.raises(ConfigError, match="not found"):
        make_arm(arm_emu, str(tmp_path / "missing.json"))


def test_arm_real_with_video_camera(arm_emu, arm_cal, tmp_path):
    import cv2

    path = str(tmp_path / "front.avi")
    vw = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), 30.0, (64, 48))
    for k in range(10):
        vw.write(np.full((48, 64, 3), 20 * k, np.uint8))
    vw.release()
    env = make_arm(arm_emu, arm_cal, obs="both", camera=path, image_size=(32, 40))
    try:
        obs, _ = env.reset(seed=0)
        assert obs["front"].shape == (32, 40, 3) and obs["front"].dtype == np.uint8
        obs, *_ = env.step(np.zeros(4, np.float32))
        assert env.observation_space.contains(obs)
    finally:
        env.close()


class TrackProgress:
    """Reward source for the car on 'hardware': progress along the track centre line as a
    motion-capture system would measure it (here read from the emulator's simulator)."""

    def __init__(self, emu):
        self.emu = emu
        self.s_prev = None

    def _s(self):
        sim = self.emu.plant
        x, y, _ = sim.pose()
        return sim.track.project(x, y)[0]

    def reset(self):
        self.s_prev = self._s()

    def __call__(self, obs, info):
        s = self._s()
        L = self.emu.plant.track.length
        ds = (s - self.s_prev + L / 2) % L - L / 2
        self.s_prev = s
        return ds, False


@pytest.fixture
def car_emu():
    emu = CarEmulator(timeout_ms=200).start()                  # MuJoCo CarSim behind the wire
    yield emu
    emu.close()


def test_car_episode_on_emulated_hardware(car_emu):
    env = gym.make("robolearn/CarLap-v0", backend="real", port=car_emu.path,
                   reward_source=TrackProgress(car_emu), max_episode_steps=30)
    try:
        obs, info = env.reset(seed=0)
        total, steps = 0.0, 0
        while True:
            obs, reward, term, trunc, info = env.step(np.array([0.0, 0.6], np.float32))
            total += reward
            steps += 1
            if term or trunc:
                break
        assert steps == 30
        assert obs["state"][0] > 0.5                           # measured speed from telemetry
        assert total > 0.3                                      # moved forward along the track
        assert car_emu.applied[1] == pytest.approx(0.6) and not car_emu.failsafe
    finally:
        env.close()
    time.sleep(0.05)
    assert car_emu.applied == (0.0, 0.0)                        # close() -> neutral


def test_car_unplug_mid_episode(car_emu):
    env = gym.make("robolearn/CarLap-v0", backend="real", port=car_emu.path,
                   reward_source=TrackProgress(car_emu))
    recorded = []
    obs, _ = env.reset(seed=0)
    with pytest.raises(DeviceDisconnectedError):
        for k in range(100):
            if k == 5:
                car_emu.unplug()
            a = np.array([0.0, 0.5], np.float32)
            nxt, r, term, trunc, info = env.step(a)
            recorded.append((obs, a, r, nxt))
            obs = nxt
    assert 5 <= len(recorded) <= 6
    unplugged_at = time.monotonic()
    env.close()
    while not car_emu.failsafe and time.monotonic() - unplugged_at < 1.0:
        time.sleep(0.005)
    assert car_emu.failsafe and car_emu.applied == (0.0, 0.0)  # firmware failsafe: neutral


def test_arm_servo_going_silent_mid_episode_names_it_in_bounded_time(arm_emu, arm_cal):
    from robolearn.drivers.servo_bus import ServoTimeoutError

    env = make_arm(arm_emu, arm_cal)
    try:
        env.reset(seed=4)
        env.step(np.zeros(4, np.float32))
        arm_emu.faults.silent_ids.add(3)
        t0 = time.monotonic()
        with pytest.raises(ServoTimeoutError, match=r"servo ID\(s\) \[3\]") as ei:
            env.step(np.zeros(4, np.float32))
        assert ei.value.ids == [3]
        assert time.monotonic() - t0 < 1 / HZ + 3 * 0.02 + 0.2
    finally:
        env.close()
