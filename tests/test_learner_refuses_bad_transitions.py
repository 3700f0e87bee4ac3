"""Non-finite transitions are refused at the door and the
learner keeps training; a huge message is logged, never dropped silently; HELLOs alone do not
count as live actors."""
import logging

import numpy as np
import pytest
import zmq

from robolearn.runtime import messages as M
from robolearn.runtime.learner import Learner
from robolearn.runtime.transport import free_port
from tests.test_transport import dealer, exchange, hello, small_cfg


@pytest.fixture
def learner(tmp_path):
    lrn = Learner(small_cfg(tmp_path, learner={"total_env_steps": 100, "eval_episodes": 0,
                                               "learning_starts": 4,
                                               "agent": {"batch_size": 4, "actor_hidden": [8],
                                                         "critic_hidden": [8]}}))
    lrn.bind(free_port(), free_port())
    yield lrn
    lrn.close()


def _batch(n, start=0):
    rng = np.random.default_rng(start)
    return M.stack_transitions([{
        "obs": {"state": rng.normal(size=3).astype(np.float32)},
        "next_obs": {"state": rng.normal(size=3).astype(np.float32)},
        "action": rng.uniform(-1, 1, 1).astype(np.float32), "reward": -1.0,
        "terminated": False, "truncated": False, "step": start + i} for i in range(n)])


@pytest.mark.parametrize("where", ["obs", "next_obs", "action", "reward"])
def test_non_finite_transitions_are_refused_and_training_goes_on(learner, caplog, where):
    ctx = zmq.Context()
    try:
        s = dealer(learner, ctx, identity=b"arm-1")
        reply = exchange(learner, s, hello(learner, actor_id="arm-1"))
        caplog.set_level(logging.WARNING, logger="robolearn.runtime.learner")
        b = _batch(8, start=100)
        if where in ("obs", "next_obs"):
            b[where]["state"][2, 1] = np.nan
            b[where]["state"][5, 0] = np.inf
        elif where == "action":
            b["action"][2, 0] = np.nan
            b["action"][5, 0] = np.inf
        else:
            b["reward"][2] = np.nan
            b["reward"][5] = -np.inf
        exchange(learner, s, M.encode(M.TRANSITIONS, session=reply["session"], batch=b), wait_ms=500)
        # the six good rows are in, the two bad ones named by actor and step, and counted
        assert len(learner.replay) == 6
        assert "arm-1" in caplog.text and "102" in caplog.text and "105" in caplog.text
        if where == "reward":  # NaN reward = a reward model's "no answer": dropped, counted apart
            assert learner.progress()["nonfinite_transitions"] == 1
            assert learner.progress()["rejected_missing_reward"] == 1
        else:
            assert learner.progress()["nonfinite_transitions"] == 2
        # the learner keeps training on the clean data (no "contains NaN/inf" crash)
        for _ in range(5):
            learner.train_slice(10)
        assert learner.agent.num_updates > 0
    finally:
        ctx.destroy(0)


def test_huge_message_is_logged_not_dropped_silently(learner, caplog):
    learner.lcfg.max_message_bytes = 1 << 20      # 1 MiB limit; the message is 8 MiB
    learner.sockets.close()
    learner.bind(free_port(), free_port())
    ctx = zmq.Context()
    try:
        s = dealer(learner, ctx)
        caplog.set_level(logging.WARNING, logger="robolearn.runtime.learner")
        big = M.encode(M.HEARTBEAT, pad=b"x" * (8 << 20), max_bytes=1 << 30)
        assert exchange(learner, s, big, wait_ms=1000) is None
        # ZeroMQ drops it at the socket (maxmsgsize = the limit) by closing the connection:
        # counted and logged, never silent
        assert "max_message_bytes = 1048576" in caplog.text
        assert learner.progress()["peer_disconnects"] >= 1
    finally:
        ctx.destroy(0)


def test_fake_hellos_do_not_count_as_live_actors(learner):
    ctx = zmq.Context()
    try:
        fakes = [dealer(learner, ctx, identity=f"fake{i}".encode()) for i in range(50)]
        for s in fakes:
            s.send(hello(learner, actor_id="fake"))
        real = dealer(learner, ctx, identity=b"real")
        reply = exchange(learner, real, hello(learner, actor_id="real"))
        for _ in range(20):
            learner.poll(timeout_ms=20)
        exchange(learner, real, M.encode(M.TRANSITIONS, session=reply["session"], batch=_batch(4)),
                 wait_ms=500)
        assert learner.progress()["actors_alive"] == 1
        # silent handshakes expire instead of piling up
        learner.lcfg.actor_timeout_s = 0.01
        import time
        time.sleep(0.05)
        learner.check_actors()
        assert len(learner.actors) == 1
    finally:
        ctx.destroy(0)
