"""Serving: a dead or NaN reward model gives a MISSING reward (never 0) that is never stored;
[reward] tables reject unknown keys; reward_source= takes an object, a path or a table."""
import math

import numpy as np
import pytest

from robolearn.errors import ConfigError
from robolearn.rewards.base import RewardModelError
from robolearn.reward_config import reward_config
from robolearn.rewards.serving import GuardedReward, TransitionLabeler, make_reward_source


class Dying:
    """A reward model that answers twice, then its process is gone."""

    def __init__(self):
        self.n = 0

    def reset(self):
        pass

    def __call__(self, obs, info):
        self.n += 1
        if self.n > 2:
            raise ConnectionError("reward model process died")
        return 1.0, True


class NaNScores:
    """A reward model that answers twice, then scores NaN (and still claims success)."""

    def __init__(self):
        self.n = 0

    def reset(self):
        pass

    def __call__(self, obs, info):
        self.n += 1
        return (1.0 if self.n <= 2 else float("nan")), True


def _env(source):
    import gymnasium as gym
    import robolearn.registry

    robolearn.registry.register_all()
    return gym.make("robolearn/ArmReach-v0", reward_source=source)


@pytest.mark.parametrize("model", [Dying, NaNScores])
def test_missing_reward_is_nan_flagged_and_not_zero(model):
    env = _env(GuardedReward(model()))
    env.reset(seed=0)
    a = np.zeros(4, np.float32)
    _, r1, term1, _, info1 = env.step(a)
    assert r1 == 1.0 and term1 and "reward_missing" not in info1      # the source's verdict ends it
    env.reset(seed=1)
    _, r2, _, _, _ = env.step(a)
    _, r3, term3, _, info3 = env.step(a)                              # model gone
    assert math.isnan(r3) and info3["reward_missing"] and not term3 and not info3["success"]
    assert env.unwrapped.reward_source.missing == 1
    env.close()


@pytest.mark.parametrize("model", [Dying, NaNScores])
def test_training_loop_never_stores_a_missing_reward(tmp_path, model):
    from robolearn.policies.train_config import TrainConfig
    from robolearn.policies.trainer import Trainer

    cfg = TrainConfig(env="robolearn/ArmReach-v0", algo="sac", steps=30, eval_every=0, eval_episodes=1,
                      learning_starts=40, video=False, progress=False, out=str(tmp_path / "run"))
    tr = Trainer(cfg)
    try:
        tr.env.unwrapped.reward_source = GuardedReward(model())
        tr.run()
        assert tr.rejected_missing_reward == 28       # 2 answered steps, then the model was gone / NaN
        assert len(tr.replay) <= 2 + 2                 # only the answered steps (+ episode-end padding)
        assert np.isfinite(tr.replay._reward).all()    # no NaN slipped in as a stored reward
    finally:
        tr.close()


@pytest.mark.parametrize("model", [Dying, NaNScores])
def test_labeler_marks_missing_transitions(model):
    lab = TransitionLabeler(model())
    r, s, ok = lab.label({"state": np.zeros((4, 3), np.float32)})
    assert ok.tolist() == [True, True, False, False]
    assert r[:2].tolist() == [1.0, 1.0] and np.isnan(r[2:]).all() and s.tolist() == [True, True, False, False]


def test_transition_messages_accept_nan_reward_but_not_inf():
    from robolearn.runtime import messages as M

    src = open(M.__file__).read()
    assert "np.isinf(batch[\"reward\"])" in src


def test_reward_tables_are_checked():
    with pytest.raises(ConfigError, match="did you mean 'threshold'"):
        reward_config({"model": "x", "treshold": 0.9})
    with pytest.raises(ConfigError, match="where"):
        reward_config({"model": "x", "where": "gpu"})
    with pytest.raises(ConfigError, match="alpha"):
        reward_config({"kind": "clip", "model": "x", "goal": "g", "alpha": 2})
    with pytest.raises(ConfigError, match="goal"):
        reward_config({"kind": "clip", "model": "x"})
    from robolearn.policies.train_config import config_from_dict
    from robolearn.runtime.config import config_from_dict as launch_from_dict

    with pytest.raises(ConfigError, match="unknown key"):
        config_from_dict({"reward": {"model": "m", "bogus": 1}})
    with pytest.raises(ConfigError, match="unknown key"):
        launch_from_dict({"reward": {"modle": "m"}})
    assert launch_from_dict({"reward": {"model": "m", "where": "learner"}}).reward["where"] == "learner"


def test_reward_source_spec_forms(tmp_path):
    with pytest.raises(RewardModelError, match="no such model folder"):
        make_reward_source(str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="RewardSource"):
        make_reward_source(42)
    d = Dying()
    assert make_reward_source(d) is d


def test_demos_labelled_by_a_model_skip_its_missing_rewards():
    """Demos collected through a reward source (rlpd's scripted:N with a learned reward) carry
    the model's NaN for steps it had no answer for: those rows are skipped, never stored."""
    from robolearn.data.replay import ReplayBuffer, transitions_to_buffer
    from robolearn.policies.demos import collect_scripted

    class EveryOtherNaN:
        n = 0

        def reset(self):
            pass

        def __call__(self, obs, info):
            self.n += 1
            return (float("nan") if self.n % 2 else 0.0), False

    env = _env(GuardedReward(EveryOtherNaN()))
    try:
        demos = collect_scripted(env, 1, seed=0)
    finally:
        env.close()
    missing = np.isnan(demos["reward"])
    assert missing.sum() >= 1 and (~missing).sum() >= 2
    buf = ReplayBuffer(env.observation_space, env.action_space, 500)
    transitions_to_buffer(demos, buf)
    assert len(buf) == int((~missing).sum())
    assert np.isfinite(buf._reward).all()
