"""Emulated reality: reality files parse strictly, and the emulator's physics really differ.

The plant-level tests step the emulator's plant directly (no wall clock), so "the same goal
sequence gives different joint trajectories" is a deterministic comparison.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from robolearn.drivers.emulator_arm import ArmSimPlant
from robolearn.drivers.reality import (ArmReality, RealArmPlant, RealCarPlant, Reality, load_reality,
                                       shipped_path)
from robolearn.errors import ConfigError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write(tmp_path, text):
    p = tmp_path / "reality.toml"
    p.write_text(text)
    return str(p)


def test_unknown_key_names_it_and_the_allowed_ones(tmp_path):
    path = write(tmp_path, "[arm]\nservo_gain = 0.5\n")
    with pytest.raises(ConfigError) as e:
        load_reality(path)
    msg = str(e.value)
    assert "servo_gain" in msg and "servo_gain_scale" in msg and "latency_ms" in msg and "[arm]" in msg


def test_unknown_table_and_bad_values_are_errors(tmp_path):
    with pytest.raises(ConfigError, match="'robot'.*valid keys: arm, camera, car"):
        load_reality(write(tmp_path, "[robot]\nx = 1\n"))
    with pytest.raises(ConfigError, match="arm.latency_ms"):
        load_reality(write(tmp_path, "[arm]\nlatency_ms = -5\n"))
    with pytest.raises(ConfigError, match="joint_offsets_rad"):
        load_reality(write(tmp_path, "[arm]\njoint_offsets_rad = [0.1, 0.2]\n"))
    with pytest.raises(ConfigError, match="not found"):
        load_reality(str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_reality(write(tmp_path, "[arm\n"))


def test_shipped_realities_load_and_hard_is_harder():
    mild, hard = load_reality("mild"), load_reality("hard")
    assert os.path.isfile(shipped_path("mild")) and os.path.isfile(shipped_path("hard"))
    assert mild.source.endswith("mild.toml") and hard.source.endswith("hard.toml")
    for attr in ("latency_ms", "backlash_rad", "sensor_noise_rad"):
        assert getattr(hard.arm, attr) > getattr(mild.arm, attr) > 0
    assert hard.arm.max_speed_scale < mild.arm.max_speed_scale < 1
    assert abs(hard.car.steering_offset_rad) > abs(mild.car.steering_offset_rad) > 0


def arm_trajectory(plant, goals, dt=0.005):
    out = []
    for g in goals:
        q, _, _ = plant.step(g, np.ones(6, bool), dt)
        out.append(q.copy())
    return np.array(out)


def goal_sequence(plant, n=240):
    rng = np.random.default_rng(0)
    q0 = plant.q.copy()
    goals, g = [], q0.copy()
    for k in range(n):
        if k % 40 == 0:          # a new goal every 0.2 s: moves, holds and reversals
            g = np.clip(q0 + rng.uniform(-0.6, 0.6, 6), plant.lower, plant.upper)
        goals.append(g.copy())
    return goals


def test_same_goals_give_different_arm_trajectories_under_hard_reality():
    base = ArmSimPlant(control_hz=200.0)
    same = RealArmPlant(ArmSimPlant(control_hz=200.0), Reality())
    hard = RealArmPlant(ArmSimPlant(control_hz=200.0), load_reality("hard"), seed=1)
    try:
        goals = goal_sequence(base)
        ref = arm_trajectory(base, goals)
        # the default reality is exactly the training sim (the wrapper itself adds nothing)
        np.testing.assert_allclose(arm_trajectory(same, goals), ref, atol=1e-9)
        got = arm_trajectory(hard, goals)
        err = np.sqrt(np.mean((got[:, :5] - ref[:, :5]) ** 2))
        assert err > 0.05, err
        # the calibration offsets show in what the servos report at rest
        assert np.abs(hard.q[:5] - hard.true_positions()[:5]).max() > 0.03
    finally:
        for p in (base, same, hard):
            p.close()


def test_arm_latency_and_speed_limit_are_what_the_file_says():
    r = Reality(arm=ArmReality(latency_ms=50.0, max_speed_scale=0.5))
    p = RealArmPlant(ArmSimPlant(control_hz=200.0), r)
    try:
        q0 = p.q.copy()
        goal = q0.copy()
        goal[0] += 0.8
        traj = arm_trajectory(p, [goal] * 100)      # 0.5 s
        moved = np.flatnonzero(np.abs(traj[:, 0] - q0[0]) > 1e-3)
        assert 9 <= moved[0] <= 13                   # 50 ms = 10 physics ticks of 5 ms
        speed = np.max(np.abs(np.diff(traj[:, 0]))) / 0.005
        assert 2.0 <= speed <= 3.0                   # about half the servo's 5 rad/s (PD overshoot aside)
    finally:
        p.close()


def test_car_reality_changes_speed_and_heading():
    from robolearn.sim.car import CarSim

    def drive(plant):
        speeds, yaws = [], []
        for _ in range(25):                      # 1.25 s: well before the first wall
            plant.command(0.0, 0.5)
            plant.advance(0.05)
            st = plant.read()
            speeds.append(st.speed)
            yaws.append(st.gyro[2])
        return np.array(speeds), np.array(yaws)

    base, hard = CarSim(control_hz=20.0), RealCarPlant(CarSim(control_hz=20.0), load_reality("hard"))
    try:
        s0, y0 = drive(base)
        s1, y1 = drive(hard)
        assert s1[-1] < 0.85 * s0[-1]                # weaker motor and battery sag
        assert np.mean(y1[10:]) > 0.05 > abs(np.mean(y0[10:]))   # steering offset turns it left
        assert hard.read().battery_v < base.read().battery_v
    finally:
        base.close()
        hard.close()


def test_emulate_cli_rejects_a_bad_reality_file(tmp_path):
    path = write(tmp_path, "[car]\nmotor = 2\n")
    r = subprocess.run([sys.executable, "-m", "robolearn.cli", "emulate", "car", "--reality", path,
                        "--duration", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "'motor'" in r.stderr and "motor_gain" in r.stderr


def test_emulate_cli_with_reality_prints_port_and_camera_urls():
    from robolearn.drivers.emulation import start_emulator

    robot = start_emulator("arm", reality="mild", subprocess=True)
    try:
        assert robot.port.startswith("/dev/pts/")
        assert set(robot.camera_urls) == {"wrist", "front"}
        assert all(u.startswith("http://127.0.0.1:") and u.endswith(".mjpg") for u in robot.camera_urls.values())
    finally:
        robot.close()
    assert robot.process.returncode == 0
