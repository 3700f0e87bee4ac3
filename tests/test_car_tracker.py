"""The car's external pose tracker on `backend="real"`, against the emulated car: its serial
protocol over a pty, the tracker's NDJSON stream over real HTTP, faults from `POST /faults`.

What a real car has (tracker pose + IMU + odometry) must give lap progress, checkpoints, lap
times, collisions and recovery; a tracker dropout must give a *missing* reward (not zero) and a
car braked to a stop; an unplugged controller must leave neutral throttle and the recorded
episodes; a recovery that keeps failing must reach the operator.
"""
import math
import time

import gymnasium as gym
import numpy as np
import pytest

from robolearn.drivers.emulation import start_emulator
from robolearn.drivers.fault_control import post_faults
from robolearn.drivers.tracker import PoseTracker
from robolearn.errors import ConfigError, DeviceDisconnectedError, DeviceError
from robolearn.registry import register_all

register_all()
QUIET = {"tracker": {"dropout_per_s": 0.0}}     # no spontaneous dropouts: faults come from the test


def car_env(robot, **kw):
    kw.setdefault("max_episode_steps", 2000)
    return gym.make("robolearn/CarLap-v0", backend="real", port=robot.port, tracker=robot.tracker_url, **kw)


def true_s(robot):
    plant = robot.emulator.plant
    with robot.emulator.physics_lock:
        x, y, _ = plant.pose()
    return plant.track.project(x, y)[0]


@pytest.mark.timeout(60)
def test_tracker_stream_has_the_configured_noise_latency_and_rate():
    cfg = {"tracker": {"dropout_per_s": 0.0, "noise_xy_m": 0.02, "noise_yaw_deg": 2.0,
                       "latency_ms": [30.0, 50.0], "rate_hz": 50.0}}
    with start_emulator("car", reality=cfg, cameras=False, seed=3) as robot:
        trk = PoseTracker(robot.tracker_url)
        try:
            x0, y0, yaw0 = robot.emulator.plant.pose()        # the car stands still
            seqs, poses = set(), []
            t0 = time.monotonic()
            while time.monotonic() - t0 < 2.0:
                p = trk.wait_pose(0.2)
                assert p is not None
                if p.seq not in seqs:
                    seqs.add(p.seq)
                    poses.append((p.x - x0, p.y - y0, p.yaw - yaw0, p.latency))
                time.sleep(0.005)
        finally:
            trk.close()
    a = np.array(poses)
    assert 50 <= len(a) <= 110                 # ~50 frames/s for 2 s (fewer when the CPU is busy)
    assert 0.014 < a[:, 0].std() < 0.027 and 0.014 < a[:, 1].std() < 0.027
    assert abs(a[:, 0].mean()) < 0.008 and abs(a[:, 1].mean()) < 0.008
    assert math.radians(1.4) < a[:, 2].std() < math.radians(2.7)
    # latency 30-50 ms: never less; late wake-ups of a busy machine only add to it
    assert 0.029 <= a[:, 3].min() and 0.033 < np.median(a[:, 3]) < 0.055


@pytest.mark.timeout(60)
def test_tracker_dropouts_and_forced_dropout_over_http():
    with start_emulator("car", reality={"tracker": {"dropout_per_s": 3.0, "dropout_s": [0.2, 0.3]}},
                        cameras=False, seed=1) as robot:
        trk = PoseTracker(robot.tracker_url)
        try:
            states = []
            t0 = time.monotonic()
            while time.monotonic() - t0 < 2.0:               # spontaneous dropouts, seeded
                states.append(trk.pose() is None)
                time.sleep(0.01)
            lost = float(np.mean(states))
            assert robot.tracker.dropouts >= 1 and 0.1 < lost < 0.9, lost
            assert robot.tracker.untracked_frames > 0
            robot.tracker.cfg.dropout_per_s = 0.0
            time.sleep(0.4)
            assert trk.wait_pose(0.5) is not None
            state = post_faults(robot.faults_url, {"tracker_dropout": True})
            assert state["tracker_dropout"] is True
            time.sleep(0.2)
            assert trk.pose() is None and trk.status() == "untracked"
            post_faults(robot.faults_url, {"tracker_dropout": False})
            assert trk.wait_pose(0.5) is not None and trk.status() == "tracked"
        finally:
            trk.close()
        with pytest.raises(DeviceError, match="unknown fault"):
            post_faults(robot.faults_url, {"tracker_gone": True})


def test_tracker_that_is_not_there_is_a_clear_error():
    with pytest.raises(DeviceError, match="no frame from the pose tracker"):
        PoseTracker("http://127.0.0.1:9/pose.ndjson", connect_timeout=0.5)
    with pytest.raises(ConfigError, match="stream URL"):
        PoseTracker("/dev/ttyACM0")
    with pytest.raises(ConfigError, match="tracker=URL"):
        gym.make("robolearn/CarLap-v0", backend="real", port="/dev/null")


@pytest.mark.timeout(60)
def test_lap_progress_and_lap_time_from_the_tracker_match_the_truth():
    """Pure pursuit on the tracker's pose: progress, checkpoints and the lap time come from the
    tracker alone and agree with the emulator's physics (read by the test, not the env)."""
    with start_emulator("car", reality=QUIET, cameras=False) as robot:
        env = car_env(robot)
        try:
            obs, info = env.reset(seed=0)
            p0 = info["progress"]
            pp = env.unwrapped.scripted_controller()
            pp.reset()
            L = env.unwrapped.task.track.length
            s_prev, t_prev, crossings = true_s(robot), time.monotonic(), []
            total, cps = 0.0, set()
            for _ in range(900):
                obs, r, term, trunc, info = env.step(pp.act(obs))
                assert not info.get("reward_missing") and math.isfinite(r)
                total += r
                cps.add(info["checkpoint"])
                s, t = true_s(robot), time.monotonic()
                if s < s_prev - L / 2:                        # the true car crossed the start line
                    crossings.append(t_prev + (L - s_prev) / (L - s_prev + s) * (t - t_prev))
                s_prev, t_prev = s, t
                if info["laps"] >= 1:
                    break
            assert info["laps"] == 1 and info["collisions"] == 0
            assert cps == set(range(-1, env.unwrapped.task.track.n_checkpoints)) | {0}
            true_lap = crossings[-1] - crossings[-2]
            assert 6.5 < info["lap_time"] < 10.0
            assert abs(info["lap_time"] - true_lap) < 0.15, (info["lap_time"], true_lap)
            assert total == pytest.approx(info["progress"] - p0, abs=1e-6)   # reward = progress made
            assert env.unwrapped.teleport_count() == 0 and robot.emulator.plant.teleports == 0
        finally:
            env.close()


@pytest.mark.timeout(60)
def test_tracker_dropout_marks_reward_missing_and_brakes_the_car_to_a_stop():
    with start_emulator("car", reality=QUIET, cameras=False) as robot:
        env = car_env(robot)
        try:
            obs, _ = env.reset(seed=0)
            pp = env.unwrapped.scripted_controller()
            pp.reset()
            for _ in range(40):                                # ~2 s: up to speed
                obs, r, *_ = env.step(pp.act(obs))
            assert obs["state"][0] > 1.5 and math.isfinite(r)
            post_faults(robot.faults_url, {"tracker_dropout": True})
            blind = []
            for k in range(40):                                # policy keeps asking for throttle
                obs, r, term, trunc, info = env.step(np.array([0.0, 0.8], np.float32))
                blind.append((r, info.get("reward_missing", False), info.get("tracker_hold", False),
                              float(obs["state"][0])))
            held = [b for b in blind if b[2]]
            assert len(held) >= 35
            assert all(math.isnan(b[0]) and b[1] for b in held)     # missing, not zero
            assert not any(b[0] == 0.0 for b in blind)
            assert abs(blind[-1][3]) < 0.1                     # measured speed: stopped
            assert robot.emulator.applied[1] == pytest.approx(0.0, abs=1e-3)  # neutral at the ESC
            x0 = robot.emulator.plant.pose()[0]
            progress_blind = env.unwrapped.task.progress
            post_faults(robot.faults_url, {"tracker_dropout": False})
            after = []
            for _ in range(30):
                obs, r, term, trunc, info = env.step(pp.act(obs))
                after.append((r, info.get("reward_missing", False)))
            assert after[-1][1] is False and math.isfinite(after[-1][0])
            assert sum(1 for r, m in after if m) <= 3          # the step that began blind, at most
            assert robot.emulator.plant.pose()[0] != pytest.approx(x0, abs=0.05)   # driving again
            assert env.unwrapped.task.progress > progress_blind + 0.3
        finally:
            env.close()


@pytest.mark.timeout(60)
def test_controller_unplugged_mid_lap_neutral_throttle_and_recorded_laps_kept(tmp_path):
    """A demonstration session through the teleop path (the scripted operator drives on the
    tracker's pose): the USB cable is pulled mid-lap in episode 2 -> a clear
    DeviceDisconnectedError, the firmware failsafe sets neutral throttle, episode 1 stays on
    disk and the broken one leaves nothing behind."""
    from robolearn.data.dataset import Dataset
    from robolearn.data.dataset_writer import DatasetWriter
    from robolearn.teleop.recorder import record
    from robolearn.teleop.scripted import ScriptedDevice

    with start_emulator("car", reality=QUIET, cameras=False, timeout_ms=200) as robot:
        env = car_env(robot, max_episode_steps=40)
        dev = ScriptedDevice(env)
        read = dev.read
        calls = {"n": 0}

        def read_and_unplug(*a, **kw):
            calls["n"] += 1
            if calls["n"] == 60:                              # episode 2, step ~20, at speed
                robot.emulator.unplug()
            return read(*a, **kw)

        dev.read = read_and_unplug
        writer = DatasetWriter(tmp_path / "ds", env_id="robolearn/CarLap-v0", control_hz=20.0,
                               observation_space=env.observation_space,
                               action_space=env.action_space, obs_mode="state")
        try:
            with pytest.raises(DeviceDisconnectedError, match="disconnected.*1 episode"):
                record(env, dev, writer, episodes=3, seed=0)
        finally:
            writer.close()
            env.close()
        unplugged = time.monotonic()
        while not robot.emulator.failsafe and time.monotonic() - unplugged < 1.0:
            time.sleep(0.005)
        assert robot.emulator.failsafe and robot.emulator.applied == (0.0, 0.0)
    ds = Dataset(tmp_path / "ds")
    assert len(ds) == 1 and ds.episode(ds.indices[0]).steps == 40
    assert not [p for p in (tmp_path / "ds").iterdir() if p.name.startswith(".tmp")]


@pytest.mark.timeout(60)
def test_recovery_backs_off_the_wall_with_tracker_pose_no_teleport():
    with start_emulator("car", reality=QUIET, cameras=False) as robot:
        env = car_env(robot, reset_mode="physical", reset_on_failure="raise")
        try:
            obs, info = env.reset(seed=0)
            hit = False
            for _ in range(120):                               # straight on into the first bend's wall
                obs, r, term, trunc, info = env.step(np.array([0.0, 0.6], np.float32))
                if info["collisions"]:
                    hit = True
                    break
            assert hit, "the IMU impact of the wall hit was not seen"
            task = env.unwrapped.task
            plant = robot.emulator.plant
            obs, info = env.reset()                            # the recovery drives the car out
            assert info["reset"]["ok"] and info["reset"]["human_prompts"] == 0
            with robot.emulator.physics_lock:
                x, y, yaw = plant.pose()
            s, lateral, _, heading = task.track.project(x, y)
            assert abs(lateral) < task.track.half_width - 0.12 - 0.05     # inside the lane (truth)
            assert abs(task.track.heading_error(yaw, heading)) < 0.8
            assert plant.teleports == 0 and env.unwrapped.teleport_count() == 0
        finally:
            env.close()


class RecordingPrompt:
    """The operator's side of the reset prompt, answering "continue" (the person fixed it)."""

    def __init__(self):
        self.messages = []

    def ask(self, message):
        self.messages.append(message)
        post_faults(self.faults_url, {"tracker_dropout": False})   # the person clears the view
        return "continue"


@pytest.mark.timeout(60)
def test_recovery_that_fails_n_times_asks_the_operator_once():
    with start_emulator("car", reality=QUIET, cameras=False) as robot:
        prompt = RecordingPrompt()
        prompt.faults_url = robot.faults_url
        env = car_env(robot, reset_mode="physical", reset_prompt=prompt, reset_on_failure="prompt",
                      reset_attempts=3)
        try:
            env.reset(seed=0)
            post_faults(robot.faults_url, {"tracker_dropout": True})
            time.sleep(0.2)                                    # frames in flight (latency) arrive
            t0 = time.monotonic()
            obs, info = env.reset()
            rep = info["reset"]
            assert rep["failures"] == 3 and rep["human_prompts"] == 1 and rep["kind"] == "human"
            assert len(prompt.messages) == 1 and "pose tracker has not seen the car" in prompt.messages[0]
            assert time.monotonic() - t0 < 15
            assert env.unwrapped.teleport_count() == 0 and robot.emulator.plant.teleports == 0
            obs, r, *_ = env.step(np.array([0.0, 0.3], np.float32))   # the episode starts
        finally:
            env.close()
