"""Progress-model validation: the true-progress definitions, the spans they are scored over, and
the time-order target, checked by hand (the learning itself: test_reward_cli's slow test)."""
import numpy as np
import pytest

from robolearn.rewards.evaluate import HEADLINE, episode_span, progress_table, time_oracle
from robolearn.rewards.progress import time_progress


def test_time_progress_saturates_at_the_first_success():
    assert time_progress(6, 4).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    assert time_progress(5, 4).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]   # a cut demonstration


def test_progress_table_by_hand():
    """Episode span = reset .. first success frame; rollout = everything; both truths scored."""
    success = np.array([0, 0, 0, 1, 1, 0, 1], bool)
    ep = {"success": success,
          "task_progress": np.array([0.0, 0.2, 0.5, 0.9, 1.0, 0.8, 0.95]),
          "progress": np.array([0.0, 0.0, 0.5, 0.9, 1.0, 0.8, 0.95])}      # flat while approaching
    assert episode_span(success) == 4 and episode_span(np.zeros(3, bool)) == 3
    pred = np.array([0.0, 0.1, 0.3, 0.7, 0.2, 0.2, 0.2])                  # right until success, then lost
    t = progress_table([(pred, ep)])
    assert t["task_potential"]["episode"]["mean"] == pytest.approx(1.0)
    # cube_goal ties the first two frames, which the model orders: ranks (1.5, 1.5, 3, 4) vs (1, 2, 3, 4)
    r = np.array([1.5, 1.5, 3, 4]), np.array([1.0, 2, 3, 4])
    assert t["cube_goal"]["episode"]["mean"] == pytest.approx(np.corrcoef(*r)[0, 1])
    assert t["task_potential"]["rollout"]["mean"] < 0.7                  # the frames after success count there
    assert t[HEADLINE[0]][HEADLINE[1]]["episodes"] == 1
    # the oracle is the training target: frame / first success frame, then 1
    assert time_oracle(ep).tolist() == [0.0, 1 / 3, 2 / 3, 1.0, 1.0, 1.0, 1.0]
    assert t["task_potential"]["episode"]["time_oracle_mean"] == pytest.approx(1.0)


def test_push_episode_records_the_tasks_own_potential():
    """task_progress = 1 - phi / phi_0 with phi = cube-goal + 0.5 grasp point-cube distance, the
    quantity ArmPush's dense reward is -10 x; progress (cube-goal only) stays 0 until the cube moves."""
    from robolearn.policies.env_building import make_env
    from robolearn.rewards.sim_episodes import run_episode, task_potential
    from robolearn.sim.arm_workspace import DISTANCE_REWARD_SCALE

    env = make_env("robolearn/ArmPush-v0", "state")
    try:
        env.reset(seed=3)
        phi0 = task_potential(env)
        ep = run_episode(env, "scripted", seed=3, steps=40)
        phi_end = task_potential(env)
        _, r, *_ = env.unwrapped.step(np.zeros(env.action_space.shape, np.float32))
        assert -DISTANCE_REWARD_SCALE * task_potential(env) == pytest.approx(r, abs=1e-6)
    finally:
        env.close()
    tp, p = ep["task_progress"], ep["progress"]
    assert tp[0] == 0.0 and p[0] == 0.0
    assert p[5] == pytest.approx(0.0, abs=1e-3) and tp[5] > 0.05       # the approach counts only in the task's own
    assert tp[-1] == pytest.approx(1.0 - phi_end / phi0) and phi0 > phi_end > 0
    assert ep["success"].any()
