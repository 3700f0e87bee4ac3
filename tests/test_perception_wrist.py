"""A wrist-camera localiser in the policy's observation (issue 23 item 3).

The wrist localiser predicts the cube in the wrist camera's own frame; `PerceptionFeatures`
turns that into the world frame with the arm's kinematics at the joints measured in the same
observation, so `state`'s last 3 numbers mean "the cube in the world" whichever camera. The
models here are built locally (random or constant-output nets): these tests check the frame
plumbing, not accuracy.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import robolearn  # noqa: F401  (registers the envs)
from robolearn.errors import ConfigError
from robolearn.policies.env_building import make_env
from robolearn.policies.perception import (CAMERA_TARGETS, Localiser, LocaliserNet, default_frame,
                                           find_localiser, to_camera, to_world)
from robolearn.sim.kinematics import ArmKinematics

LIFT = "robolearn/ArmLift-v0"


def _save_localiser(out, camera="wrist", frame="camera", constant=None, seed=0):
    """A localiser folder; `constant`: the net always outputs this point (its last layer zeroed)."""
    torch.manual_seed(seed)
    net = LocaliserNet((84, 84, 3), 3)
    mean, std = np.float32([0.0, 0.0, -0.12]), np.float32([0.03, 0.03, 0.04])
    if constant is not None:
        with torch.no_grad():
            net.head[2].weight.zero_()
            net.head[2].bias.copy_(torch.as_tensor((np.float32(constant) - mean) / std))
    meta = {"env": LIFT, "camera": camera, "frame": frame, "image_shape": [84, 84, 3],
            "targets": CAMERA_TARGETS if frame == "camera" else ["cube_x", "cube_y", "cube_z"],
            "target_mean": mean.tolist(), "target_std": std.tolist(), "filters": 32}
    Localiser(net.eval().requires_grad_(False), meta).save(out)
    return out


def test_default_frame_follows_where_the_camera_is_mounted():
    assert default_frame("wrist") == "camera" and default_frame("front") == "world"
    kin = ArmKinematics()
    assert kin.camera_on_arm("wrist") and not kin.camera_on_arm("front") and not kin.camera_on_arm("nope")


def test_camera_frame_estimate_is_turned_into_the_world_at_the_measured_joints(tmp_path):
    """state[-3:] == to_world(net(wrist frame), camera pose at state[:5]); with a constant
    camera-frame output the world point follows the simulator's own wrist camera pose."""
    model = _save_localiser(tmp_path / "wrist")
    env = make_env(LIFT, "both", env_kwargs={"perception": str(model)})   # keeps the image
    kin = ArmKinematics()
    try:
        assert set(env.observation_space.spaces) == {"state", "wrist"}
        loc = find_localiser(env)
        assert loc.frame == "camera" and loc.camera == "wrist"
        obs, _ = env.reset(seed=0)
        rng = np.random.default_rng(0)
        moved = []
        for _ in range(4):
            raw = loc.predict(obs["wrist"])
            want = to_world(raw, *kin.camera_pose(obs["state"][:5], "wrist"))
            np.testing.assert_allclose(obs["state"][-3:], want, atol=1e-6)
            assert np.linalg.norm(obs["state"][-3:] - raw) > 0.05   # the conversion is not a no-op
            moved.append(obs["state"][:5].copy())
            obs, *_ = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
        assert np.ptp(np.stack(moved), axis=0).max() > 0.01        # the joints (and the pose) moved
    finally:
        env.close()

    # independent of ArmKinematics: a point 10 cm in front of the lens (MuJoCo cameras look
    # along -z) lands where the simulator's own camera pose puts it
    point = np.float32([0.0, 0.0, -0.10])
    model = _save_localiser(tmp_path / "const", constant=point)
    env = make_env(LIFT, "state", env_kwargs={"perception": str(model)})
    try:
        obs, _ = env.reset(seed=1)
        rng = np.random.default_rng(1)
        for _ in range(3):
            obs, *_ = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
            sim = env.unwrapped.sim
            cid = sim.model.camera("wrist").id
            truth = sim.data.cam_xpos[cid] + sim.data.cam_xmat[cid].reshape(3, 3) @ point
            assert np.linalg.norm(obs["state"][-3:] - truth) < 1e-3, (obs["state"][-3:], truth)
    finally:
        env.close()


def test_env_with_a_wrist_localiser_steps_with_the_state_grown_by_three(tmp_path):
    model = _save_localiser(tmp_path / "wrist")
    plain = make_env(LIFT, "state")
    n = plain.observation_space["state"].shape[0]
    plain.close()
    env = make_env(LIFT, "state", env_kwargs={"perception": str(model), "camera": "wrist",
                                              "privileged_obs": True})
    try:
        space = env.observation_space
        assert set(space.spaces) == {"state", "privileged"} and space["state"].shape == (n + 3,)
        obs, _ = env.reset(seed=0)
        for _ in range(3):
            assert space.contains(obs) and np.all(np.isfinite(obs["state"]))
            obs, *_ = env.step(np.zeros(env.action_space.shape, np.float32))
    finally:
        env.close()


def test_a_camera_frame_localiser_refuses_a_camera_it_was_not_trained_for(tmp_path):
    model = _save_localiser(tmp_path / "wrist")
    with pytest.raises(ConfigError, match=r"trained on camera 'wrist' \(it gives the cube in that camera's "
                                          r"frame\); env_kwargs camera = 'front' lacks it: add 'wrist'"):
        make_env(LIFT, "state", env_kwargs={"perception": str(model), "camera": "front"})
    # on a real arm a single source is the front camera: refused before any port is opened
    with pytest.raises(ConfigError, match="trained on camera 'wrist'"):
        make_env(LIFT, "state", env_kwargs={"perception": str(model), "backend": "real",
                                            "port": "/dev/null", "camera": "http://robot/front.mjpg"})
    # a camera-frame model of a camera the arm model does not have
    bad = _save_localiser(tmp_path / "elbow", camera="elbow")
    env = make_env(LIFT, "both", env_kwargs={"camera": "wrist"})
    try:
        from robolearn.policies.perception import PerceptionFeatures

        with pytest.raises(ConfigError, match="camera 'elbow'"):
            PerceptionFeatures(env, Localiser.load(bad))
    finally:
        env.close()


@pytest.mark.timeout(120)
def test_wrist_localiser_on_the_emulated_robot_reads_its_http_camera_and_joints(tmp_path):
    """backend="real": the wrist frame comes from the emulator's MJPEG camera, the joints from
    the servo bus; the observation space is the sim's and the estimate is the conversion."""
    from robolearn.drivers.emulation import start_emulator

    class NoReward:
        def reset(self):
            pass

        def __call__(self, obs, info):
            return 0.0, False

    model = _save_localiser(tmp_path / "wrist")
    sim = make_env(LIFT, "state", env_kwargs={"perception": str(model), "camera": "wrist"})
    sim_space = sim.observation_space
    sim.close()
    kin = ArmKinematics()
    with start_emulator("arm", reality="mild") as robot:
        assert "wrist" in robot.camera_urls
        env = make_env(LIFT, "both", env_kwargs={
            "perception": str(model), "backend": "real", "port": robot.port, "timeout": 0.1,
            "camera": {"wrist": robot.camera_urls["wrist"]}, "control_hz": 20, "reward_source": NoReward()})
        try:
            assert env.observation_space["state"] == sim_space["state"]
            obs, _ = env.reset(seed=0)
            loc = find_localiser(env)
            for _ in range(3):
                assert sim_space["state"].contains(obs["state"])
                want = to_world(loc.predict(obs["wrist"]), *kin.camera_pose(obs["state"][:5], "wrist"))
                np.testing.assert_allclose(obs["state"][-3:], want, atol=1e-6)
                obs, *_ = env.step(np.zeros(env.action_space.shape, np.float32))
        finally:
            env.close()


def test_camera_calibration_adapts_a_wrist_localiser_on_labels_in_its_frame(tmp_path):
    import robolearn.runtime.perception_calibration as PC
    from robolearn.policies.cube_finder import render_look_frames

    model = _save_localiser(tmp_path / "wrist")
    loc = Localiser.load(model)
    rng = np.random.default_rng(0)
    n = 40
    q = np.float32(rng.uniform(-0.5, 0.5, (n, 5)))
    labels = np.float32(np.c_[rng.uniform(0.15, 0.3, n), rng.uniform(-0.1, 0.1, n), np.full(n, 0.015)])
    data = {"images": rng.integers(0, 255, (n, 84, 84, 3), dtype=np.uint8),     # front
            "wrist": rng.integers(0, 255, (n, 84, 84, 3), dtype=np.uint8), "q": q,
            "labels": labels, "cycle": np.arange(n) // 8, "kind": np.zeros(n, int)}
    images, cam = PC.localiser_frames(data, loc, "front", "wrist model")
    assert images is data["wrist"]
    kin = ArmKinematics()
    for i in (0, 17, 39):   # each label in the camera's frame at that frame's joints
        pos, rot = kin.camera_pose(q[i], "wrist")
        np.testing.assert_allclose(cam[i], to_camera(labels[i], pos, rot), atol=1e-6)
        np.testing.assert_allclose(to_world(cam[i], pos, rot), labels[i], atol=1e-5)
    assert np.linalg.norm(cam - labels, axis=1).min() > 0.01
    with pytest.raises(ConfigError, match="need the measured joints"):
        PC.localiser_frames({k: v for k, v in data.items() if k != "q"}, loc, "front", "wrist model")
    with pytest.raises(ConfigError, match="recorded no 'wrist' frames"):
        PC.localiser_frames({k: v for k, v in data.items() if k != "wrist"}, loc, "front", "wrist model")

    env = make_env(LIFT, "both", env_kwargs={"camera": "front"})
    try:
        lx, lxy = render_look_frames(env.unwrapped, 12, np.random.default_rng(1))
    finally:
        env.close()
    frames = {"episode": data, "look": {"images": lx, "labels": lxy, "cycle": np.arange(12) // 2,
                                        "kind": np.full(12, 2)}}
    cfg = PC.PerceptionCalibrationConfig(sim_frames=20, sim_heldout=10, epochs=1)
    rep = PC.calibrate_localisers(frames, model, tmp_path / "cal", LIFT, cfg, camera="front", log=lambda s: None)
    p = rep["perception"]
    assert (p["camera"], p["frame"], p["robot_frames"], p["heldout_robot_frames"]) == ("wrist", "camera", 32, 8)
    saved = Localiser.load(tmp_path / "cal" / "perception")
    assert saved.frame == "camera" and saved.camera == "wrist"
    assert rep["cube_finder"]["seen"] >= 1


def test_session_camera_calibration_says_which_camera_is_missing(tmp_path):
    """Before any robot is opened: the cube finder needs the front camera, the policy
    localiser its own."""
    from robolearn.runtime.finetune_calibration import calibrate_robot_perception

    model = _save_localiser(tmp_path / "wrist")
    for camera, need in (({"wrist": "http://robot/wrist.mjpg"}, "'front' for the reset's cube finder"),
                         ("http://robot/front.mjpg", "'wrist' for the policy localiser")):
        cfg = SimpleNamespace(env=LIFT, seed=0, env_kwargs={"backend": "real", "port": "/dev/null",
                                                            "camera": camera, "perception": str(model)})
        with pytest.raises(ConfigError, match=need):
            calibrate_robot_perception(cfg, tmp_path)


def test_wrist_launch_file_parses_and_builds_its_learner(tmp_path, capsys, monkeypatch):
    import shutil
    from pathlib import Path

    from robolearn import cli
    from robolearn.policies.registry import make_agent
    from robolearn.policies.train_config import load_launch

    launch = Path(__file__).resolve().parents[1] / "launch" / "sim_arm_lift_wrist_perception.toml"
    cfg = load_launch(launch)
    assert (cfg.env, cfg.algo, cfg.demos) == (LIFT, "rlpd", "scripted:20")
    assert cfg.env_kwargs == {"perception": "models/lift-wrist-perception", "camera": "wrist",
                              "privileged_obs": True}
    monkeypatch.chdir(tmp_path)       # before the localiser exists: says what to run, writes nothing
    assert cli.main(["train", str(launch), "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    assert "robolearn perception train" in capsys.readouterr().err and not (tmp_path / "run").exists()
    model = _save_localiser(tmp_path / "m")
    shutil.copytree(model, tmp_path / "models" / "lift-wrist-perception")
    env = make_env(cfg.env, cfg.obs, env_kwargs=cfg.env_kwargs)
    try:
        assert find_localiser(env).frame == "camera"
        agent = make_agent(cfg.algo, env.observation_space, env.action_space, **{**cfg.agent, "utd": cfg.utd})
        obs, _ = env.reset(seed=0)
        a = agent.act(obs, deterministic=True)
        assert a.shape == env.action_space.shape and np.all(np.isfinite(a))
    finally:
        env.close()


def test_wrist_finetune_launch_file_loads_with_both_cameras():
    from robolearn.policies.perception import camera_names
    from robolearn.runtime.config import load_launch

    cfg = load_launch("launch/finetune_arm_lift_real.toml")
    ft = cfg.finetune
    assert ft.calibrate_arm and ft.calibrate_perception and ft.calibrate_reward
    assert set(camera_names(cfg.env_kwargs)) == {"front", "wrist"}        # finder + policy localiser
    assert camera_names(ft.sim_env_kwargs) == ["wrist"]
    assert cfg.env_kwargs["perception"] == ft.sim_env_kwargs["perception"]
    # the sampled policy's entropy covers x, y, z: the saturated gripper pays none of the target
    import gymnasium as gym

    from robolearn.policies.registry import make_agent

    obs = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (17,), np.float32)})
    agent = make_agent(cfg.algo, obs, gym.spaces.Box(-1, 1, (4,), np.float32),
                       **{**cfg.learner.agent, "privileged": "none"})
    assert agent.target_entropy == -0.5 * 3 and agent.actor.entropy_dims == 3
    assert float(agent.log_alpha.exp()) < 1e-3


def test_cli_trains_the_wrist_localiser_in_the_cameras_frame(tmp_path):
    import json

    from robolearn import cli

    out = tmp_path / "w"
    assert cli.main(["perception", "train", "--env", LIFT, "--camera", "wrist", "--out", str(out),
                     "--frames", "100", "--epochs", "1", "--threads", "1"]) == 0
    meta = json.loads((out / "perception.json").read_text())
    assert (meta["camera"], meta["frame"], meta["targets"]) == ("wrist", "camera", CAMERA_TARGETS)
    # camera frame: the cube lies in front of the lens (MuJoCo cameras look along -z), within reach
    assert meta["target_mean"][2] < 0 and np.linalg.norm(meta["target_mean"]) < 0.4, meta["target_mean"]
    assert cli.main(["perception", "train", "--env", LIFT, "--camera", "wrist", "--frame", "world",
                     "--out", str(tmp_path / "ww"), "--frames", "100", "--epochs", "1", "--threads", "1"]) == 0
    world = json.loads((tmp_path / "ww" / "perception.json").read_text())
    assert world["frame"] == "world" and world["targets"] == ["cube_x", "cube_y", "cube_z"]
    assert world["target_mean"][0] > 0.1      # the cube in front of the arm's base, in the world
