"""`robolearn calibrate-sim`: recover hidden physics of an emulated reality from recorded episodes.

Small case (fast suite): the emulated arm's servos are slower than the sim's by a hidden
factor; three short excitation episodes are recorded through the real driver stack, and the
CLI's CMA-ES fit must find the factor within 15% and cut the trajectory error. The full case
(10 episodes on launch/reality/hard.toml) is `robolearn bench sim2real`.
"""
import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from robolearn.data.dataset import DatasetWriter
from robolearn.drivers.emulation import start_emulator
from robolearn.env import register_all
from robolearn.errors import ConfigError
from robolearn.policies.training import make_env
from robolearn.sim.sysid import ExcitationDevice, load_sim_params, save_sim_params
from robolearn.teleop.recorder import record

register_all()
HIDDEN = 0.4


def record_excitation(robot, out, episodes, steps=30, hz=20.0, seed=0):
    env = gym.make("robolearn/ArmReach-v0", backend="real", port=robot.port, obs="state",
                   action_mode="joint", control_hz=hz, max_episode_steps=steps)
    writer = DatasetWriter(out, env_id="robolearn/ArmReach-v0", control_hz=hz,
                           observation_space=env.observation_space, action_space=env.action_space,
                           obs_mode="state")
    try:
        record(env, ExcitationDevice(env, seed=seed), writer, episodes, seed=seed)
    finally:
        writer.close()
        env.close()


@pytest.mark.timeout(120)
def test_calibrate_sim_recovers_a_hidden_servo_speed(tmp_path):
    ds = tmp_path / "hw"
    with start_emulator("arm", reality={"arm": {"max_speed_scale": HIDDEN}}, cameras=False) as robot:
        record_excitation(robot, ds, episodes=3, steps=24)
    out = tmp_path / "sim_params.toml"
    r = subprocess.run([sys.executable, "-m", "robolearn.cli", "calibrate-sim", str(ds), "--out", str(out),
                        "--params", "max_speed_scale", "--budget", "16"],
                       capture_output=True, text=True, timeout=110)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(r.stdout)
    fitted = load_sim_params(out)
    assert fitted["robot"] == "arm"
    assert abs(fitted["max_speed_scale"] - HIDDEN) / HIDDEN < 0.15, (fitted, summary)
    assert summary["error_after"] * 2 < summary["error_before"], summary

    # train / launch accept the file: the sim's servo speed limit is the fitted one
    env = make_env("robolearn/ArmReach-v0", sim_params=str(out))
    try:
        ctrl = env.unwrapped.sim.model.actuator_ctrlrange[0, 1]
        assert ctrl == pytest.approx(5.0 * fitted["max_speed_scale"])
    finally:
        env.close()


def test_train_and_launch_configs_accept_sim_params(tmp_path):
    from robolearn.policies.training import config_from_dict as train_config
    from robolearn.runtime.actor import _make_env
    from robolearn.runtime.config import config_from_dict as launch_config

    p = tmp_path / "sim_params.toml"
    save_sim_params(p, "arm", {"max_speed_scale": 0.5, "latency_ms": 30.0})
    assert train_config({"env": "robolearn/ArmReach-v0", "sim_params": str(p)}).sim_params == str(p)
    env = _make_env(launch_config({"env": "robolearn/ArmReach-v0", "sim_params": str(p)}))
    try:
        assert env.unwrapped.sim.model.actuator_ctrlrange[0, 1] == pytest.approx(2.5)
        _, info = env.reset(seed=0)
        assert info["randomization"]["latency_ms"] == pytest.approx(30.0)
    finally:
        env.close()


def test_sim_params_files_are_checked(tmp_path):
    p = tmp_path / "p.toml"
    p.write_text('[sim_params]\nrobot = "arm"\nservo_gain = 0.5\n')
    with pytest.raises(ConfigError, match="'servo_gain'.*did you mean 'servo_gain_scale'"):
        load_sim_params(p)
    p.write_text('[sim_params]\nrobot = "arm"\nlatency_ms = 900\n')
    with pytest.raises(ConfigError, match="latency_ms.*0.0, 200.0"):
        load_sim_params(p)
    p.write_text('[sim_params]\nmotor_gain = 0.5\n')
    with pytest.raises(ConfigError, match='robot = "arm" or "car"'):
        load_sim_params(p)
    with pytest.raises(ConfigError, match="not found"):
        load_sim_params(tmp_path / "missing.toml")


def test_car_sim_params_change_the_car(tmp_path):
    p = tmp_path / "car.toml"
    save_sim_params(p, "car", {"motor_gain": 0.5, "steering_offset_rad": 0.08, "latency_ms": 50.0})

    def drive(env):
        env.reset(seed=0)
        yaw = []
        for _ in range(20):
            obs, *_ = env.step(np.array([0.0, 0.5], np.float32))
            yaw.append(obs["state"][7])
        return obs["state"][0], np.mean(yaw[5:])

    base, fitted = make_env("robolearn/CarLap-v0"), make_env("robolearn/CarLap-v0", sim_params=str(p))
    try:
        v0, w0 = drive(base)
        v1, w1 = drive(fitted)
        assert v1 < 0.8 * v0 and w1 > 0.05 > abs(w0)
    finally:
        base.close()
        fitted.close()


def test_calibrate_sim_bad_inputs(tmp_path):
    r = subprocess.run([sys.executable, "-m", "robolearn.cli", "calibrate-sim", str(tmp_path / "nope"),
                        "--out", str(tmp_path / "o.toml")], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "no such dataset directory" in r.stderr
    r = subprocess.run([sys.executable, "-m", "robolearn.cli", "calibrate-sim", str(tmp_path),
                        "--out", str(tmp_path / "o.toml"), "--params", "warp_factor"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "warp_factor" in r.stderr and "servo_gain_scale" in r.stderr
