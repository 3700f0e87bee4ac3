"""`[finetune] takeover_penalty`: the policy's last step before an operator takeover is stored
terminal with the penalty taken off its reward (RLIF), the operator's steps as before
(runtime/takeover_penalty.py)."""
from __future__ import annotations

import numpy as np
import pytest

from robolearn.errors import ConfigError
from robolearn.runtime.takeover_penalty import TakeoverPenalty
from robolearn.runtime.takeover_prior import successful_takeover_mask


def test_only_the_policy_step_right_before_a_takeover_is_ended_per_actor():
    tp = TakeoverPenalty(1.0)
    assert tp.offer("a", 10, False, False) is None
    assert tp.offer("b", 20, False, False) is None          # another actor's step between
    assert tp.offer("a", 11, True, False) == 10               # a's takeover starts: a's step before it
    assert tp.offer("a", 12, True, False) is None             # still driven: nothing more
    assert tp.offer("a", 13, False, False) is None            # handed back
    assert tp.offer("a", 14, False, True) is None             # its episode ends ...
    assert tp.offer("a", 15, True, False) is None             # ... so a takeover first in the next has none
    assert tp.offer("b", None, False, False) is None          # b's step not stored (no reward)
    assert tp.offer("b", 21, True, False) is None             # nothing stored to end
    assert tp.report() == {"penalty": 1.0, "policy_steps_ended": 1}
    off = TakeoverPenalty(None)
    assert not off.on and off.offer("a", 1, False, False) is None and off.offer("a", 2, True, False) is None
    with pytest.raises(ValueError, match="takeover_penalty"):
        TakeoverPenalty(-1.0)


def test_the_learner_ends_the_policy_step_into_a_takeover_and_keeps_the_stream(tmp_path):
    from robolearn.runtime.config import config_from_dict
    from robolearn.runtime.learner import ActorRecord, Learner

    cfg = config_from_dict({
        "env": "robolearn/ArmReach-v0", "algo": "rlpd", "out": str(tmp_path / "run"),
        "learner": {"port": 0, "weights_port": 0, "total_env_steps": 100, "eval_episodes": 0,
                    "agent": {"batch_size": 16, "actor_hidden": [16], "critic_hidden": [16]}}})
    learner = Learner(cfg)
    try:
        learner.takeover_penalty = TakeoverPenalty(0.5)
        space = learner.env.observation_space
        n = 8
        frames = [{k: np.full(s.shape, float(t), s.dtype) for k, s in space.spaces.items()} for t in range(n + 1)]
        interv = np.array([0, 0, 0, 1, 1, 0, 0, 0], bool)
        term = np.zeros(n, bool)
        term[-1] = True
        b = {"obs": {k: np.stack([f[k] for f in frames[:n]]) for k in space.spaces},
             "next_obs": {k: np.stack([f[k] for f in frames[1:]]) for k in space.spaces},
             "action": np.zeros((n, 4), np.float32), "terminated": term,
             "truncated": np.zeros(n, bool), "intervention": interv}
        reward = np.full(n, 0.25, np.float32)
        learner._store(ActorRecord("a0", b"a0", 0.0), b, n, reward, np.zeros(n, bool), None)
        t = learner.replay.transitions()
        assert len(t["reward"]) == n                                    # no row lost, none added
        np.testing.assert_allclose(t["reward"], [0.25, 0.25, -0.25, 0.25, 0.25, 0.25, 0.25, 0.25])
        np.testing.assert_array_equal(t["terminated"], [0, 0, 1, 0, 0, 0, 0, 1])
        key = next(iter(space.spaces))                                  # each row keeps its own frames
        np.testing.assert_array_equal([o.flat[0] for o in t["obs"][key]], np.arange(n))
        np.testing.assert_array_equal([o.flat[0] for o in t["next_obs"][key]], np.arange(1, n + 1))
        assert learner.progress()["takeover_penalty"] == {"penalty": 0.5, "policy_steps_ended": 1}
        # a resumed session refilling the prior does not read the ended step as a success
        assert not successful_takeover_mask(t["intervention"], t["terminated"], t["truncated"], 2)[:3].any()
    finally:
        learner.close()


def test_the_resume_mask_does_not_take_an_ended_policy_step_for_the_last_takeovers_success():
    interv = [1, 1, 0, 1, 1, 0]
    term = [0, 0, 1, 0, 0, 0]          # step 2: the policy's step into the second takeover, ended
    trunc = [0, 0, 0, 0, 0, 1]
    assert not successful_takeover_mask(interv, term, trunc, grace_steps=5).any()


def test_a_bad_penalty_is_a_config_error():
    from robolearn.runtime.config import config_from_dict

    for bad in (-1.0, "1", True, float("nan")):
        with pytest.raises(ConfigError, match="takeover_penalty"):
            config_from_dict({"env": "robolearn/ArmLift-v0", "algo": "rlpd",
                              "finetune": {"checkpoint": "x", "takeover_penalty": bad}})
    assert config_from_dict({"env": "robolearn/ArmLift-v0", "algo": "rlpd",
                             "finetune": {"checkpoint": "x", "takeover_penalty": 1}}).finetune.takeover_penalty == 1
