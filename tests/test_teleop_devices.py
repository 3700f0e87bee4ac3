"""Gamepad / SpaceMouse mappings, their absent-hardware errors, and the leader arm over the
servo-bus emulator (real Feetech bytes over a pty)."""
import importlib.util
import struct

import numpy as np
import pytest

from robolearn.teleop import make_device
from robolearn.teleop.base import DeviceNotFoundError
from robolearn.teleop.gamepad import GamepadConfig, GamepadState
from robolearn.teleop.spacemouse import SpaceMouseConfig, SpaceMouseMapper, parse_report
from robolearn.teleop.session import open_env


def test_spacemouse_reports_to_actions():
    m = SpaceMouseMapper(4, SpaceMouseConfig())
    # report 1: translation x=+10 (below the 0.05 deadzone), y=-350 (full forward), z=-175 (half lift)
    assert parse_report(bytes([1]) + struct.pack("<hhh", 10, -350, -175), m.state) == 1
    cmd = m.command()
    np.testing.assert_allclose(cmd.action, [1.0, 0.0, 0.5, 0.0], atol=1e-6)
    assert cmd.engaged and not cmd.events
    parse_report(bytes([3, 0x01]), m.state)                   # left button: close gripper
    assert m.command().action[3] == -1.0
    parse_report(bytes([3, 0x03]), m.state)                   # both buttons: success (once)
    assert m.command().events == {"success"}
    assert m.command().events == set()
    # newer pucks: translation + rotation in one 13-byte report
    parse_report(bytes([1]) + struct.pack("<hhhhhh", 0, 0, 0, 10, 20, 30), m.state)
    assert (m.state["rx"], m.state["ry"], m.state["rz"]) == (10, 20, 30)


def test_gamepad_events_to_actions():
    g = GamepadState(4, GamepadConfig(), {"ABS_X": (-32768, 32767), "ABS_Y": (-32768, 32767),
                                          "ABS_RY": (0, 255), "ABS_RX": (0, 255)})
    g.apply("EV_ABS", "ABS_Y", -32768)                        # left stick fully up -> +dim0
    g.apply("EV_ABS", "ABS_X", 1000)                           # inside the deadzone
    g.apply("EV_ABS", "ABS_RY", 0)                             # right stick up -> +dim2
    cmd = g.command()
    np.testing.assert_allclose(cmd.action, [1.0, 0.0, 1.0, 0.0], atol=1e-4)
    assert not cmd.engaged
    g.apply("EV_KEY", "BTN_TL", 1)                             # hold the bumper: takeover
    g.apply("EV_KEY", "BTN_SOUTH", 1)
    cmd = g.command()
    assert cmd.engaged and cmd.events == {"success"}
    g.apply("EV_KEY", "BTN_TL", 0)
    assert not g.command().engaged and g.command().events == set()


@pytest.mark.skipif(importlib.util.find_spec("evdev") is not None, reason="evdev installed")
def test_gamepad_absent_library_error():
    env = open_env("robolearn/ArmReach-v0", "state")
    with pytest.raises(DeviceNotFoundError, match="pip install evdev"):
        make_device("gamepad", env)
    env.close()


@pytest.mark.skipif(importlib.util.find_spec("hid") is not None, reason="hidapi installed")
def test_spacemouse_absent_library_error():
    env = open_env("robolearn/ArmReach-v0", "state")
    with pytest.raises(DeviceNotFoundError, match="pip install hidapi"):
        make_device("spacemouse", env)
    env.close()


def test_leader_arm_over_emulated_servo_bus():
    from robolearn.drivers.emulator_arm import ArmEmulator, FirstOrderServos

    env = open_env("robolearn/ArmReach-v0", "state", action_mode="joint")
    task = env.unwrapped.task
    leader_q = task.home_q + np.array([0.15, 0.05, -0.05, 0.05, 0.3])
    g_open = float(task.spec.gripper_open)
    plant = FirstOrderServos(lower=np.r_[task.spec.lower, 0.0], upper=np.r_[task.spec.upper, g_open],
                             q0=np.r_[leader_q, 0.25 * g_open])
    with ArmEmulator(plant=plant, emulate_wire=False) as emu:
        dev = make_device("leader", env, port=emu.path)
        try:
            assert not any(emu.torque_enabled().values())      # leader left limp for the human
            q, g = dev.read_joints()
            np.testing.assert_allclose(q, leader_q, atol=3e-3)  # 1 tick = 1.5 mrad
            env.reset(seed=0)
            for _ in range(12):
                cmd = dev.read()
                assert cmd.engaged and cmd.action.shape == (6,)
                env.step(cmd.action)
            np.testing.assert_allclose(task.q_cmd, leader_q, atol=5e-3)  # follower tracks the leader
            assert cmd.action[5] == pytest.approx(-0.5, abs=0.01)          # gripper 25% open
        finally:
            dev.close()
    env.close()


def test_record_on_the_real_backend_over_the_emulator(tmp_path):
    """backend="real" (servo-bus driver + emulator): episodes store backend and calibration."""
    import os

    from robolearn.data.dataset import Dataset
    from robolearn.data.dataset_writer import DatasetWriter
    from robolearn.drivers.emulator_arm import ArmEmulator
    from robolearn.teleop.recorder import record
    from robolearn.teleop.session import Readout

    with ArmEmulator() as emu:
        env = open_env("robolearn/ArmReach-v0", "state", backend="real", port=emu.path)
        w = DatasetWriter(tmp_path / "real", env_id="robolearn/ArmReach-v0", control_hz=10.0,
                          observation_space=env.observation_space, action_space=env.action_space)
        try:
            res = record(env, make_device("scripted", env), w, episodes=1, seed=0, rate_hz=10, max_steps=25,
                         readout=Readout(open(os.devnull, "w")))
        finally:
            w.close()
            env.close()
    ep = Dataset(tmp_path / "real").episode(0)
    assert res.saved == [0] and ep.meta["backend"] == "real"
    assert list(ep.meta["calibration"]["servos"])[:2] == ["shoulder_pan", "shoulder_lift"]
    assert np.all(np.diff(ep.data["t_obs"])[1:] > 0.05)      # real time passed between observations
