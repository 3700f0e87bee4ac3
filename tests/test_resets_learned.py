"""Learned forward/backward resets and reset statistics in training runs."""
import json

import numpy as np
import pytest

import robolearn  # noqa: F401
from robolearn.errors import ConfigError
from robolearn.policies.training import TrainConfig, config_from_dict, train


def test_start_state_classifier_separates_start_region_from_elsewhere():
    from robolearn.resets.learned import StartStateClassifier

    rng = np.random.default_rng(0)
    pos = rng.uniform([0.16, -0.12], [0.28, 0.12], size=(300, 2))
    neg = rng.uniform([0.30, 0.14], [0.40, 0.25], size=(300, 2))
    clf = StartStateClassifier(2, seed=0)
    assert clf.fit(pos, neg, steps=250) > 0.95
    assert clf.prob(np.array([[0.22, 0.0]]))[0] > 0.8 and clf.prob(np.array([[0.37, 0.2]]))[0] < 0.2


def test_resets_option_is_checked():
    with pytest.raises(ConfigError, match="resets='bogus'.*learned"):
        config_from_dict({"resets": "bogus"})


def test_train_logs_reset_records_and_totals(tmp_path):
    cfg = TrainConfig(env="robolearn/ArmReach-v0", algo="sac", steps=120, out=str(tmp_path / "r"),
                      eval_every=0, eval_episodes=1, checkpoint_every=0, video=False, progress=False,
                      learning_starts=200, env_kwargs={"reset_mode": "physical", "reset_on_failure": "raise"})
    summary = train(cfg)
    eps = [json.loads(ln) for ln in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
           if '"episode"' in ln]
    assert eps and all(e["reset"]["kind"] == "scripted" and e["reset"]["teleports"] == 0 for e in eps)
    assert summary["resets"]["teleports"] == 0 and summary["resets"]["kinds"] == {"scripted": 3}
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["resets"]["episodes"] == 3


def test_forward_backward_training_runs_reset_free(tmp_path, monkeypatch):
    from robolearn.resets import learned

    monkeypatch.setattr(learned.ForwardBackwardTrainer, "examples", 6)
    monkeypatch.setattr(learned.ForwardBackwardTrainer, "classifier_steps", 100)
    cfg = TrainConfig(env="robolearn/ArmPush-v0", algo="sac", steps=200, out=str(tmp_path / "fb"),
                      eval_every=0, eval_episodes=1, checkpoint_every=0, video=False, progress=False,
                      learning_starts=200, resets="learned", max_episode_steps=50)
    trainer = learned.make_trainer(cfg)
    assert isinstance(trainer, learned.ForwardBackwardTrainer)
    try:
        summary = trainer.run()
        sim = trainer.env.unwrapped.sim
        assert trainer.env.unwrapped.reset_mode == "physical" and sim.teleports == 0
        assert trainer.eval_env.unwrapped.reset_mode == "teleport"   # the true success rate
    finally:
        trainer.close()
    assert summary["forward_env_steps"] + summary["backward_env_steps"] == 200
    assert summary["resets"]["teleports"] == 0
    assert summary["resets"]["kinds"].get("learned", 0) >= 1
    recs = [json.loads(ln) for ln in (tmp_path / "fb" / "metrics.jsonl").read_text().splitlines()]
    phases = [r["phase"] for r in recs if r["kind"] == "episode"]
    assert phases[:2] == ["forward", "backward"]
    back = [r for r in recs if r.get("phase") == "backward"]
    assert all("start_state_true" in r for r in back)
    with pytest.raises(ConfigError, match="--resume is not supported"):
        learned.ForwardBackwardTrainer(cfg, _resumed_state={"demo_count": 0})
