"""Frame 0 after reset shows the new goal, not the previous episode's."""
import numpy as np
import pytest

import gymnasium as gym

import robolearn  # noqa: F401


@pytest.mark.parametrize("env_id", ["robolearn/ArmReach-v0", "robolearn/ArmPush-v0"])
def test_marker_is_where_the_goal_is_at_reset(env_id):
    env = gym.make(env_id, obs="pixels")
    try:
        sim = env.unwrapped.sim
        env.reset(seed=0)
        obs0, _ = env.reset(seed=1)   # a different goal than seed 0's
        body = sim.model.body("target").id
        # the rendered marker (the body pose the renderer reads) is the mocap target already
        np.testing.assert_allclose(sim.data.xpos[body], sim.data.mocap_pos[0], atol=1e-9)
        obs1, *_ = env.step(np.zeros(env.action_space.shape, np.float32))
        # the repro in pixels: the arm barely moves on a zero action, so the fixed front
        # camera's frames 0 and 1 differ only a little (measured 0.09 % of pixels at 84x84),
        # never by a marker jumping across the image (0.8-0.9 % without the fix; the wrist
        # camera moves with the arm, so it is not compared)
        diff = np.abs(obs0["front"].astype(int) - obs1["front"].astype(int)).sum(-1) > 60
        assert diff.mean() < 0.003, f"{diff.mean():.3%} of pixels changed after a zero step"
    finally:
        env.close()
