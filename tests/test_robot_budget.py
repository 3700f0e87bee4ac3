"""`[finetune] robot_minutes`: training ends so that the final evaluation fits the robot-time budget."""
import pytest

from robolearn.errors import ConfigError
from robolearn.runtime.config import config_from_dict
from robolearn.runtime.finetune import FINAL_EVAL_MARGIN, FINAL_EVAL_S_PER_EPISODE, RobotBudget


def test_the_reserve_is_timed_by_the_zero_shot_evaluation():
    budget = RobotBudget(30, final_episodes=20, t0=0.0)
    assert budget.final_reserve_s == pytest.approx(20 * FINAL_EVAL_S_PER_EPISODE * FINAL_EVAL_MARGIN)
    budget.timed_evaluation({"episodes": 10, "wall_s": 150.0})       # 15 s per episode, resets included
    assert budget.final_reserve_s == pytest.approx(20 * 15.0 * FINAL_EVAL_MARGIN)
    budget.timed_evaluation({"episodes": 0, "wall_s": 0.0})          # nothing timed: keeps the last
    assert budget.final_reserve_s == pytest.approx(20 * 15.0 * FINAL_EVAL_MARGIN)


def test_training_ends_when_used_time_and_the_reserve_reach_the_budget():
    budget = RobotBudget(30, final_episodes=20, t0=100.0)
    budget.timed_evaluation({"episodes": 10, "wall_s": 150.0})
    reserve = 20 * 15.0 * FINAL_EVAL_MARGIN
    end = 100.0 + 1800.0 - reserve
    assert not budget.training_over(now=end - 1.0)
    assert budget.training_over(now=end)
    assert budget.as_dict(now=end) == {"robot_minutes": 30.0, "final_reserve_s": round(reserve, 1),
                                       "final_time_margin": FINAL_EVAL_MARGIN,
                                       "used_s": round(1800.0 - reserve, 1)}


def test_a_task_sets_its_own_margin_and_training_runs_longer():
    tight = RobotBudget(30, final_episodes=20, t0=0.0, margin=1.0)
    loose = RobotBudget(30, final_episodes=20, t0=0.0)
    for b in (tight, loose):
        b.timed_evaluation({"episodes": 20, "wall_s": 600.0})       # the lift's 30 s an episode
    assert tight.final_reserve_s == pytest.approx(600.0)
    now = 1800.0 - 700.0                                            # 700 s left: fits 1.0 x, not 1.4 x
    assert not tight.training_over(now=now) and loose.training_over(now=now)


@pytest.mark.parametrize("bad", [0.2, "1", True, 9.0])
def test_bad_margin_refused(bad):
    with pytest.raises(ConfigError, match="final_time_margin"):
        config_from_dict({**BASE, "finetune": {**BASE["finetune"], "final_time_margin": bad}})


def test_no_budget_never_ends_training():
    assert not RobotBudget(0, final_episodes=20, t0=0.0).training_over(now=1e9)


BASE = {"env": "robolearn/ArmPush-v0", "algo": "rlpd",
        "finetune": {"checkpoint": "runs/x", "warm_start": "rlpd", "prior_data": "sim:2"}}


@pytest.mark.parametrize("bad", [-1, "29", True, float("nan")])
def test_bad_budget_refused(bad):
    with pytest.raises(ConfigError, match="robot_minutes"):
        config_from_dict({**BASE, "finetune": {**BASE["finetune"], "robot_minutes": bad}})


def test_budget_accepted():
    cfg = config_from_dict({**BASE, "finetune": {**BASE["finetune"], "robot_minutes": 29}})
    assert cfg.finetune.robot_minutes == 29
