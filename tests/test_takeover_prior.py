"""Which operator takeovers join the prior (BC-anchored) buffer: with `prior_takeovers =
"successful"` a takeover's rows wait until it ends and join only if the reward called one of its
steps a success; the replay keeps every row (runtime/takeover_prior.py)."""
from __future__ import annotations

import numpy as np
import pytest

from robolearn.errors import ConfigError
from robolearn.runtime.takeover_prior import (TakeoverPrior, climb_dims, climb_mask, successful_takeover_mask,
                                              takeover_climb_dims)


def _feed(tp, steps, actor="a0"):
    """steps: (intervention, success, episode_end) per step; the row is the step's index."""
    out = []
    for i, (interv, success, end) in enumerate(steps):
        out += tp.offer(actor, i, interv, success, end)
    return out


def test_a_failed_takeover_stays_out_and_a_successful_one_joins_whole():
    tp = TakeoverPrior("successful", grace_steps=2)
    steps = ([(False, False, False)] * 3 + [(True, False, False)] * 4      # 3-6: gave up
             + [(False, False, False)] * 2
             + [(False, True, True)]                                      # the policy's own lift, 3 steps on
             + [(False, False, False)] * 2 + [(True, False, False)] * 3
             + [(True, True, True)])                                      # 12-15: lifted, ends the episode
    assert _feed(tp, steps) == [12, 13, 14, 15]
    assert tp.report() == {"mode": "successful", "grace_steps": 2, "kept": 1, "dropped": 1, "rows_kept": 4,
                           "rows_dropped": 4, "climbs_left_out": None, "open": 0}


def test_the_reward_confirming_the_lift_just_after_the_hand_back_keeps_the_takeover():
    # a person lets go as soon as the cube is up; the reward's success comes a few steps later
    tp = TakeoverPrior("successful", grace_steps=3)
    assert _feed(tp, [(True, False, False)] * 3 + [(False, False, False)] * 2 + [(False, True, True)]) == [0, 1, 2]
    assert (tp.kept, tp.dropped) == (1, 0)
    # ... but a success after the grace is the policy's, not the takeover's
    tp = TakeoverPrior("successful", grace_steps=3)
    assert _feed(tp, [(True, False, False)] * 3 + [(False, False, False)] * 3 + [(False, True, True)]) == []
    assert (tp.kept, tp.dropped, tp.rows_dropped) == (0, 1, 3)
    # the grace runs at the control rate
    assert TakeoverPrior.at_rate("successful", 10.0).grace_steps == 20


def test_a_new_takeover_in_the_grace_closes_the_last_one():
    tp = TakeoverPrior("successful", grace_steps=5)
    steps = [(True, False, False), (False, False, False), (True, False, False), (True, True, True)]
    assert _feed(tp, steps) == [2, 3]
    assert (tp.kept, tp.dropped) == (1, 1)


def test_a_takeover_cut_by_the_episodes_end_closes_there_and_actors_are_apart():
    tp = TakeoverPrior("successful")
    assert tp.offer("a", "a0", True, False, False) == []
    assert tp.offer("b", "b0", True, False, False) == []
    assert tp.offer("a", "a1", True, False, True) == []            # a: truncated driving, no success
    assert tp.offer("a", "a2", True, False, False) == []           # a new takeover in the next episode
    assert tp.offer("b", "b1", True, True, True) == ["b0", "b1"]
    assert tp.offer("a", "a3", True, True, True) == ["a2", "a3"]
    assert (tp.kept, tp.dropped) == (2, 1)


def test_a_row_not_stored_still_carries_its_success():
    tp = TakeoverPrior("successful")   # the success step's reward was missing: no row, the takeover counts
    assert _feed(tp, [(True, False, False), (True, False, False)]) == []
    assert tp.offer("a0", None, True, True, True) == [0, 1]


def test_all_passes_every_driven_row_at_once():
    tp = TakeoverPrior("all")
    steps = [(False, False, False), (True, False, False), (True, False, False), (False, False, True)]
    assert _feed(tp, steps) == [1, 2]
    assert tp.offer("a0", None, True, False, False) == []
    with pytest.raises(ValueError, match="prior_takeovers"):
        TakeoverPrior("some")


def test_the_resume_mask_keeps_takeovers_whose_episode_terminated_during_them_or_just_after():
    interv = [0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0]
    term = [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    trunc = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    keep = successful_takeover_mask(interv, term, trunc, grace_steps=2)
    # rows 1-2: no end in the grace; 5-7: terminated driven; 9-12: terminated 2 steps after the
    # hand-back; 17: its episode truncated
    np.testing.assert_array_equal(np.flatnonzero(keep), [5, 6, 7, 9, 10, 11, 12])
    # terminated after the grace: the policy's success, not the takeover's
    assert not successful_takeover_mask([1, 1, 0, 0, 0], [0, 0, 0, 0, 1], [0] * 5, grace_steps=2).any()
    np.testing.assert_array_equal(
        successful_takeover_mask([1, 1, 0, 0, 0], [0, 0, 0, 0, 1], [0] * 5, grace_steps=3), [1, 1, 0, 0, 0])


def test_the_learner_stores_every_row_in_replay_and_only_successful_takeovers_in_the_prior(tmp_path):
    from robolearn.runtime.config import config_from_dict
    from robolearn.runtime.learner import ActorRecord, Learner

    cfg = config_from_dict({
        "env": "robolearn/ArmReach-v0", "algo": "rlpd", "out": str(tmp_path / "run"),
        "learner": {"port": 0, "weights_port": 0, "total_env_steps": 100, "eval_episodes": 0,
                    "demos": "scripted:1",
                    "agent": {"batch_size": 16, "actor_hidden": [16], "critic_hidden": [16]}}})
    learner = Learner(cfg)
    try:
        learner.takeover_prior = TakeoverPrior("successful")
        n_prior = len(learner.prior)
        obs = learner.env.observation_space.sample()
        n = 12
        interv = np.array([0, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1], bool)
        term = np.zeros(n, bool)
        term[[5, 11]] = True                   # episode 1 ends unattended; episode 2 lifted while driven
        success = term.copy()
        success[5] = False
        b = {"obs": {k: np.stack([v] * n) for k, v in obs.items()},
             "next_obs": {k: np.stack([v] * n) for k, v in obs.items()},
             "action": np.tile(np.float32([0.1, 0.2, 0.3, 1.0]), (n, 1)) * (1 + np.arange(n))[:, None] / n,
             "terminated": term, "truncated": np.zeros(n, bool), "intervention": interv}
        rec = ActorRecord("a0", b"a0", 0.0)
        learner._store(rec, b, n, np.zeros(n, np.float32), success, None)
        assert len(learner.replay) == n
        prior = learner.prior.transitions()
        assert len(learner.prior) == n_prior + 4
        np.testing.assert_allclose(prior["action"][-4:], b["action"][8:12], rtol=1e-6)
        assert prior["intervention"][-4:].all()
        assert learner.progress()["prior_takeovers"]["dropped"] == 1
    finally:
        learner.close()


def test_a_bad_mode_is_a_config_error():
    from robolearn.runtime.config import config_from_dict

    with pytest.raises(ConfigError, match="prior_takeovers"):
        config_from_dict({"env": "robolearn/ArmLift-v0", "algo": "rlpd",
                          "finetune": {"checkpoint": "x", "prior_takeovers": "failed"}})


# (dz, gripper): +1 open, -1 closed; 0.1 is the climb threshold (2.5 mm a step)
_CLIMB, _DOWN, _STILL, _LIFT = [0, 0, 0.6, 1], [0, 0, -0.5, 1], [0.2, 0, 0.05, 1], [0, 0, 0.8, -1]


def _rows(actions):
    return [(None, np.float32(a), 0.0, None, False, False) for a in actions]


def _feed_rows(tp, rows):
    """One takeover driving every row, lifted (and the episode ended) at the last."""
    out = []
    for i, row in enumerate(rows):
        out += tp.offer("a0", row, True, i == len(rows) - 1, i == len(rows) - 1)
    return out


def test_a_kept_takeover_leaves_its_open_hand_climbs_out_of_the_prior():
    # the hands climb to the hover, come down, close and lift: only the climb stays out
    dims = climb_dims("robolearn/ArmLift-v0", 4)
    assert dims == (2, 3)
    np.testing.assert_array_equal(climb_mask([_CLIMB, _DOWN, _STILL, _LIFT, [0, 0, 0.11, 0.01]], dims),
                                  [True, False, False, False, True])
    rows = _rows([_CLIMB, _CLIMB, _STILL, _DOWN, _DOWN, _LIFT, _LIFT])
    tp = TakeoverPrior("successful", grace_steps=2, climb=dims)
    assert [id(r) for r in _feed_rows(tp, rows)] == [id(r) for r in rows[2:]]
    assert tp.report()["climbs_left_out"] == 2 and tp.report()["rows_kept"] == 5
    # a failed takeover's climbs are not counted (none of its rows joins), and "all" leaves them out too
    tp = TakeoverPrior("all", climb=dims)
    assert [tp.offer("a0", r, True, False, False) for r in _rows([_CLIMB, _DOWN])][0] == []
    assert (tp.climbs_left_out, tp.rows_kept) == (1, 1)
    # without climb dims every row joins, as before
    tp = TakeoverPrior("successful", grace_steps=2)
    assert len(_feed_rows(tp, rows)) == 7


def test_the_resume_mask_leaves_the_same_climbs_out():
    interv = [1, 1, 1, 1, 0]
    term = [0, 0, 0, 1, 0]
    acts = [_CLIMB, _DOWN, _STILL, _LIFT, _CLIMB]
    np.testing.assert_array_equal(successful_takeover_mask(interv, term, [0] * 5, 2, acts, (2, 3)),
                                  [False, True, True, True, False])


def test_climbs_left_out_needs_an_arms_end_effector_actions():
    from robolearn.runtime.config import config_from_dict

    assert climb_dims("robolearn/CarLap-v0", 2) is None
    assert climb_dims("robolearn/ArmLift-v0", 6) is None      # joint-delta actions: no height command
    ft = {"checkpoint": "x", "prior_takeover_climbs": False}
    car = config_from_dict({"env": "robolearn/CarLap-v0", "algo": "rlpd", "finetune": ft})

    class Env:
        class action_space:
            shape = (2,)
    with pytest.raises(ConfigError, match="prior_takeover_climbs"):
        takeover_climb_dims(car, Env)
    lift = config_from_dict({"env": "robolearn/ArmLift-v0", "algo": "rlpd", "finetune": ft})
    Env.action_space.shape = (4,)
    assert takeover_climb_dims(lift, Env) == (2, 3)
    lift.finetune.prior_takeover_climbs = True
    assert takeover_climb_dims(lift, Env) is None
    with pytest.raises(ConfigError, match="prior_takeover_climbs"):
        config_from_dict({"env": "robolearn/ArmLift-v0", "algo": "rlpd",
                          "finetune": {"checkpoint": "x", "prior_takeover_climbs": "no"}})
