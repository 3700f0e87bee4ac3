"""Pieces of `robolearn bench perception_transfer` (issue 23 item 3): the wrist camera's pose
from the arm's kinematics, camera-frame targets, frames kept with extras, head-only tuning."""
from __future__ import annotations

import gymnasium as gym
import mujoco
import numpy as np

import robolearn  # noqa: F401  (registers the envs)
from robolearn.policies.perception import Localiser, LocaliserNet, to_camera, to_world
from robolearn.runtime.perception_calibration import _Frames, adapt_localiser
from robolearn.sim.kinematics import ArmKinematics


def test_wrist_camera_pose_from_the_joints_is_the_sims():
    env = gym.make("robolearn/ArmLift-v0", obs="state")
    try:
        env.reset(seed=3)
        rng = np.random.default_rng(0)
        for _ in range(5):
            env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
        sim, kin = env.unwrapped.sim, ArmKinematics()
        mujoco.mj_forward(sim.model, sim.data)   # poses of the current qpos (mj_step leaves the last)
        pos, rot = kin.camera_pose(sim.data.qpos[:5], "wrist")
        cid = sim.model.camera("wrist").id
        assert np.allclose(pos, sim.data.cam_xpos[cid], atol=1e-6)
        assert np.allclose(rot, sim.data.cam_xmat[cid].reshape(3, 3), atol=1e-6)
        p = np.array([0.25, -0.03, 0.015])
        c = to_camera(p, pos, rot)
        assert np.linalg.norm(c) > 0.01 and np.allclose(to_world(c, pos, rot), p, atol=1e-6)
    finally:
        env.close()


def test_frames_keep_their_extras_aligned():
    n = [0]

    def extra():
        n[0] += 1
        return {"truth": np.full(3, n[0], np.float32)}

    f, g = _Frames(extra), _Frames(extra)
    f.add(np.zeros((2, 2, 3), np.uint8), [1, 2, 3], 0, 0)
    g.add(np.ones((2, 2, 3), np.uint8), [4, 5, 6], 1, 1)
    f.extend(g)
    a = f.arrays()
    assert a["truth"].shape == (2, 3) and a["truth"][:, 0].tolist() == [1, 2] and a["cycle"].tolist() == [0, 1]
    assert _Frames(extra).arrays() is None             # nothing kept: nothing to stack


def test_head_only_tuning_keeps_the_backbone():
    net = LocaliserNet((32, 32, 3), 3).eval().requires_grad_(False)
    loc = Localiser(net, {"target_mean": [0.0] * 3, "target_std": [1.0] * 3, "targets": ["a", "b", "c"]})
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (40, 32, 32, 3), dtype=np.uint8)
    y = rng.normal(size=(40, 3)).astype(np.float32)
    tuned = adapt_localiser(loc, x[:20], y[:20], x[20:], y[20:], epochs=2, head_only=True)
    for k, v in net.convs.state_dict().items():
        assert torch_equal(v, tuned.net.convs.state_dict()[k]), k
    assert not torch_equal(net.head[0].weight, tuned.net.head[0].weight)


def torch_equal(a, b) -> bool:
    return bool((a == b).all())
