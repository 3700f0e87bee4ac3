"""Learned forward/backward resets and reset statistics in training runs."""
import json

import numpy as np
import pytest

import robolearn  # noqa: F401
from robolearn.errors import ConfigError
from robolearn.policies.train_config import TrainConfig, config_from_dict
from robolearn.policies.trainer import Trainer
from robolearn.compose.training import build_trainer, resume_trainer, train


def test_start_state_classifier_separates_start_region_from_elsewhere():
    from robolearn.resets.start_classifier import StartStateClassifier

    rng = np.random.default_rng(0)
    pos = rng.uniform([0.16, -0.12], [0.28, 0.12], size=(300, 2))
    neg = rng.uniform([0.30, 0.14], [0.40, 0.25], size=(300, 2))
    clf = StartStateClassifier(2, seed=0)
    assert clf.fit(pos, neg, steps=250) > 0.95
    assert clf.prob(np.array([[0.22, 0.0]]))[0] > 0.8 and clf.prob(np.array([[0.37, 0.2]]))[0] < 0.2


def test_start_classifier_agrees_with_the_true_push_start_region():
    """Start examples against uniform reference states: the verdict must match the ground truth
    (cube in its start region) off the examples too. With practice states as the negatives it
    did not (they are mostly start states too): 34 % agreement on such a grid."""
    import gymnasium as gym

    from robolearn.resets.start_classifier import fit_start_classifier, start_state_examples
    from robolearn.sim.arm_workspace import CUBE_REGION_HIGH, CUBE_REGION_LOW

    env = gym.make("robolearn/ArmPush-v0", privileged_obs=True)
    key, idx = env.unwrapped.task.start_state_features()
    pos, visited = start_state_examples(env, 60, seed=0, key=key, idx=idx)
    env.close()
    clf, thr, _ = fit_start_classifier(pos, visited, seed=0, steps=800)
    grid = np.random.default_rng(1).uniform([0.10, -0.22], [0.34, 0.22], size=(2000, 2))
    inside = np.all((grid >= CUBE_REGION_LOW) & (grid <= CUBE_REGION_HIGH), axis=1)
    said = clf.prob(grid) > thr
    assert (said == inside).mean() > 0.9
    assert said[inside].mean() > 0.8 and said[~inside].mean() < 0.1


def test_backward_reward_never_pays_for_staying_away():
    from robolearn.resets.learned import ForwardBackwardHooks

    r = ForwardBackwardHooks.backward_reward
    # every step before arriving costs; arriving (episode end) is the best a trajectory can do
    assert all(r(p) <= 0 for p in np.linspace(0, 1, 11)) and r(0.2) < r(0.6)
    assert all(r(p, lg, d) <= 0 for p in (0.0, 0.5, 1.0) for lg in (-100.0, -3.0, 0.0, 5.0) for d in (0.0, 0.1))
    # closer in log-odds and a hand nearer the object both pay; past the floor nothing changes
    assert r(0.0, -30.0) < r(0.0, -5.0) and r(0.0, -5.0, 0.02) > r(0.0, -5.0, 0.10)
    assert r(0.0, -500.0) == r(0.0, -40.0)


def test_the_start_models_log_odds_point_the_cube_back_to_the_region():
    """The backward reward's dense term: moving the cube toward the start region from any side
    raises it (the density-ratio classifier's log-odds fall with the distance from the region),
    while p(start) itself is flat out there."""
    import gymnasium as gym

    from robolearn.resets.learned import ForwardBackwardHooks
    from robolearn.resets.start_classifier import fit_start_classifier, start_state_examples
    from robolearn.sim.arm_workspace import CUBE_REGION_HIGH, CUBE_REGION_LOW

    env = gym.make("robolearn/ArmPush-v0", privileged_obs=True)
    key, idx = env.unwrapped.task.start_state_features()
    pos, visited = start_state_examples(env, 60, seed=0, key=key, idx=idx)
    env.close()
    clf, _, _ = fit_start_classifier(pos, visited, seed=0, steps=800)
    centre = 0.5 * (CUBE_REGION_LOW + CUBE_REGION_HIGH)
    half = 0.5 * (CUBE_REGION_HIGH - CUBE_REGION_LOW)
    for direction in ([1, 0], [-1, 0], [0, 1], [0, -1]):
        d = np.array(direction, float)
        edge = centre + d * half
        far, near = edge + 0.08 * d, edge + 0.03 * d
        lg_far, lg_near = clf.logit(np.array([far, near]))
        assert lg_far < lg_near < 0, (direction, lg_far, lg_near)
        p_far, p_near = clf.prob(np.array([far, near]))
        assert p_far < 0.05 and p_near < 0.5
        r = ForwardBackwardHooks.backward_reward
        assert r(p_far, lg_far) < r(p_near, lg_near)


def test_resets_option_is_checked():
    with pytest.raises(ConfigError, match="resets='bogus'.*learned"):
        config_from_dict({"resets": "bogus"})


def test_train_logs_reset_records_and_totals(tmp_path):
    cfg = TrainConfig(env="robolearn/ArmReach-v0", algo="sac", steps=120, out=str(tmp_path / "r"),
                      eval_every=0, eval_episodes=1, checkpoint_every=0, video=False, progress=False,
                      learning_starts=200, env_kwargs={"reset_mode": "physical", "reset_on_failure": "raise"})
    trainer = Trainer(cfg)
    try:
        # physical resets train; evaluation in sim starts from the task's own starts (teleport),
        # as a teleport-trained run's does, so the two success rates compare
        assert trainer.env.unwrapped.reset_mode == "physical"
        assert trainer.eval_env.unwrapped.reset_mode == "teleport"
        summary = trainer.run()
    finally:
        trainer.close()
    eps = [json.loads(ln) for ln in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
           if '"episode"' in ln]
    assert eps and all(e["reset"]["kind"] == "scripted" and e["reset"]["teleports"] == 0 for e in eps)
    assert summary["resets"]["teleports"] == 0 and summary["resets"]["kinds"] == {"scripted": 3}
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["resets"]["episodes"] == 3


def test_forward_backward_training_runs_reset_free(tmp_path, monkeypatch):
    from robolearn.resets import learned

    monkeypatch.setattr(learned.ForwardBackwardHooks, "examples", 6)
    monkeypatch.setattr(learned.ForwardBackwardHooks, "classifier_steps", 100)
    cfg = TrainConfig(env="robolearn/ArmPush-v0", algo="sac", steps=200, out=str(tmp_path / "fb"),
                      eval_every=0, eval_episodes=1, checkpoint_every=0, video=False, progress=False,
                      learning_starts=200, resets="learned", max_episode_steps=50)
    trainer = build_trainer(cfg)
    assert isinstance(trainer.hooks, learned.ForwardBackwardHooks)
    try:
        summary = trainer.run()
        sim = trainer.env.unwrapped.sim
        assert trainer.env.unwrapped.reset_mode == "physical" and sim.teleports == 0
        assert trainer.eval_env.unwrapped.reset_mode == "teleport"   # the true success rate
        # shared experience: every env step is in both replays, each with its own reward
        assert len(trainer.replay) == len(trainer.hooks.backward_replay) == 200
    finally:
        trainer.close()
    assert summary["forward_env_steps"] + summary["backward_env_steps"] == 200
    assert summary["resets"]["teleports"] == 0
    assert summary["resets"]["kinds"].get("learned", 0) >= 1
    # a backward episode that did not get back is followed by the task's physical reset
    assert summary["resets"]["kinds"].get("scripted", 0) == summary["fallback_resets"]
    reached, backward_eps = summary["backward_reached_start"]
    assert summary["fallback_resets"] in (backward_eps - reached, backward_eps - reached - 1)
    recs = [json.loads(ln) for ln in (tmp_path / "fb" / "metrics.jsonl").read_text().splitlines()]
    phases = [r["phase"] for r in recs if r["kind"] == "episode"]
    assert phases[:2] == ["forward", "backward"]
    back = [r for r in recs if r.get("phase") == "backward"]
    assert all("start_state_true" in r for r in back)
    assert all(r["return"] <= 0 for r in back)     # p(start) - 1: staying away never pays


def test_a_learned_run_checkpoints_and_resumes_as_a_learned_run(tmp_path, monkeypatch):
    """`robolearn train --resume` of a --resets learned run continues it with both agents, both
    replays, the same start-state classifier and the phase it stopped in; a plain
    `Trainer.resume` refuses it rather than continuing it as a teleport-reset run."""
    from robolearn.resets import learned

    monkeypatch.setattr(learned.ForwardBackwardHooks, "examples", 4)
    monkeypatch.setattr(learned.ForwardBackwardHooks, "classifier_steps", 50)
    cfg = TrainConfig(env="robolearn/ArmReach-v0", algo="sac", steps=120, out=str(tmp_path / "fb"),
                      eval_every=0, eval_episodes=1, checkpoint_every=40, video=False, progress=False,
                      learning_starts=30, resets="learned", max_episode_steps=20,
                      agent={"actor_hidden": [16], "critic_hidden": [16], "batch_size": 16})
    trainer = build_trainer(cfg)
    try:
        assert trainer.run(stop_at=60)["env_steps"] == 60
        hooks = trainer.hooks
        saved = dict(back=len(hooks.backward_replay), back_updates=int(hooks.backward.num_updates),
                     threshold=hooks.threshold)
    finally:
        trainer.close()
    with pytest.raises(ConfigError, match="resets='learned' run"):
        Trainer.resume(tmp_path / "fb")
    resumed = resume_trainer(tmp_path / "fb")
    try:
        h = resumed.hooks
        assert isinstance(h, learned.ForwardBackwardHooks) and resumed.env_steps == 40
        assert h.threshold == saved["threshold"] and 0 < len(h.backward_replay) <= saved["back"]
        assert int(h.backward.num_updates) > 0 and h.fwd_steps + h.back_steps == 40
        summary = resumed.run()
    finally:
        resumed.close()
    assert summary["env_steps"] == 120 and summary["resets_mode"] == "learned"
    assert summary["forward_env_steps"] + summary["backward_env_steps"] == 120
    assert summary["resets"]["teleports"] == 0


def test_practice_training_runs_on_physical_resets_and_resumes(tmp_path):
    """`--resets practice`: crashes and stalls end the learner's episodes, the car's recovery is
    the reset (no teleport), evaluation stays on teleport resets; a resumed run stays practice."""
    from robolearn.resets.practice_trainer import PracticeHooks

    cfg = TrainConfig(env="robolearn/CarLap-v0", algo="sac", steps=400, out=str(tmp_path / "car"),
                      eval_every=0, eval_episodes=1, checkpoint_every=150, video=False, progress=False,
                      learning_starts=1000, resets="practice", max_episode_steps=200,
                      env_kwargs={"reset_on_failure": "raise"})
    trainer = build_trainer(cfg)
    assert isinstance(trainer.hooks, PracticeHooks)
    try:
        assert trainer.env.unwrapped.reset_mode == "physical"
        assert trainer.eval_env.unwrapped.reset_mode == "teleport"
        part = trainer.run(stop_at=300)
        assert part["env_steps"] == 300
        ended = trainer.env.collisions + trainer.env.stalls
        assert ended >= 1 and trainer.env.unwrapped.teleport_count() == 0   # random actions crash or stall
    finally:
        trainer.close()
    eps = [json.loads(ln) for ln in (tmp_path / "car" / "metrics.jsonl").read_text().splitlines()
           if '"episode"' in ln]
    assert len(eps) >= 2 and all(e["reset"]["kind"] == "scripted" and e["reset"]["ok"] for e in eps)
    resumed = resume_trainer(tmp_path / "car")
    assert isinstance(resumed.hooks, PracticeHooks)
    try:
        summary = resumed.run()
    finally:
        resumed.close()
    assert summary["env_steps"] == 400 and summary["resets_mode"] == "practice"
    assert summary["practice"]["teleports"] == 0 and summary["resets"]["teleports"] == 0
    with pytest.raises(ConfigError, match="progress.*collisions"):
        build_trainer(TrainConfig(env="robolearn/ArmPush-v0", algo="sac", steps=10, resets="practice",
                                 out=str(tmp_path / "arm"), video=False, progress=False))


def test_a_failed_reset_stops_training_with_the_run_saved(tmp_path, monkeypatch):
    """reset_on_failure='raise': the run stops at the failed reset with the controller's message
    and how to continue; checkpoint, metrics and summary are on disk, and --resume continues."""
    from robolearn.policies.trainer import Trainer
    from robolearn.errors import ResetError
    from robolearn.tasks.arm import ArmReach

    class Raises:
        kind = "scripted"

        def run(self, task, rng):
            yield 0.1
            raise RuntimeError("gripper encoder not found")

    original = ArmReach.reset_controller
    calls = []

    def flaky(self):
        calls.append(1)
        return original(self) if len(calls) == 1 else Raises()

    monkeypatch.setattr(ArmReach, "reset_controller", flaky)
    run = tmp_path / "r"
    cfg = TrainConfig(env="robolearn/ArmReach-v0", algo="sac", steps=150, out=str(run), eval_every=0,
                      eval_episodes=1, checkpoint_every=0, video=False, progress=False, learning_starts=20,
                      env_kwargs={"reset_mode": "physical", "reset_on_failure": "raise"})
    with pytest.raises(ResetError, match=r"gripper encoder not found.*held still.*stopped at env step 50"
                                         r".*robolearn train --resume"):
        train(cfg)
    eps = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines() if '"episode"' in ln]
    assert len(eps) == 1 and eps[0]["step"] == 50
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped"] == "reset failed" and "gripper encoder" in summary["message"]
    monkeypatch.setattr(ArmReach, "reset_controller", original)   # the scene was put right
    resumed = Trainer.resume(run)
    try:
        assert resumed.env_steps == 50 and resumed.updates > 0      # what it had learned is back
        assert resumed.run()["env_steps"] == 150
    finally:
        resumed.close()


@pytest.mark.parametrize("fallback", [True, False])
def test_a_backward_agent_that_does_not_get_back_escalates_to_the_task_reset(tmp_path, monkeypatch, fallback):
    """Backward episodes that never reach the start distribution: with the fallback the task's
    own physical reset (scripted PlaceCube, no teleport) runs before the next forward episode;
    without it the forward episode starts from the unfixed world and the reset counts as failed."""
    from robolearn.resets import learned

    monkeypatch.setattr(learned.ForwardBackwardHooks, "examples", 6)
    monkeypatch.setattr(learned.ForwardBackwardHooks, "classifier_steps", 50)
    monkeypatch.setattr(learned.ForwardBackwardHooks, "_backward_score", lambda self, obs, info: (0.0, -1.0))
    monkeypatch.setattr(learned.ForwardBackwardHooks, "fallback_to_task_reset", fallback)
    monkeypatch.setattr(learned.ForwardBackwardHooks, "backward_max_steps", 12)
    cfg = TrainConfig(env="robolearn/ArmPush-v0", algo="sac", steps=130, out=str(tmp_path / "fb"),
                      eval_every=0, eval_episodes=1, checkpoint_every=0, video=False, progress=False,
                      learning_starts=500, resets="learned", max_episode_steps=30)
    summary = train(cfg)
    assert summary["backward_reached_start"][0] == 0 and summary["resets"]["teleports"] == 0
    recs = [json.loads(ln) for ln in (tmp_path / "fb" / "metrics.jsonl").read_text().splitlines()]
    fwd = [r for r in recs if r.get("phase") == "forward"][1:]      # after the first backward phase
    assert len(fwd) >= 1
    # a backward episode that gets nowhere hands over after `backward_max_steps`, not the env's 30
    back = [r for r in recs if r.get("phase") == "backward"]
    assert back and all(r["length"] == 12 and not r["success"] for r in back[:-1])
    if fallback:
        assert summary["fallback_resets"] >= 1 and all(r["reset"]["kind"] == "scripted" for r in fwd)
        assert all(r["reset"]["seconds"] > 1.0 for r in fwd)          # PlaceCube moved the arm and cube
    else:
        assert summary["fallback_resets"] == 0 and all(r["reset"]["kind"] == "learned" and not r["reset"]["ok"] for r in fwd)


def test_start_classifier_says_no_far_outside_what_it_was_trained_on():
    """A cube flung far off the table must never read as a start state, whatever the MLP would
    extrapolate there."""
    from robolearn.resets.start_classifier import fit_start_classifier

    rng = np.random.default_rng(0)
    pos = rng.uniform([0.16, -0.12], [0.28, 0.12], size=(100, 2))
    clf, thr, _ = fit_start_classifier(pos, pos, seed=0, steps=300)
    far = np.array([[-1.37, 19.7], [30.0, -4.0], [0.22, -50.0]])
    assert np.all(clf.prob(far) < 1e-6) and np.all(clf.prob(far) < thr)
    assert clf.logit(far[:1])[0] < clf.logit(np.array([[0.5, 0.5]]))[0]
