"""An actor that cannot reach its learner says so within seconds and, by
default, never acts (no untrained random actions on a robot)."""
import logging
import shutil
import threading
import time

import pytest

from robolearn.runtime.actor import Actor
from robolearn.runtime.config import config_from_dict
from robolearn.runtime.transport import free_port, generate_keys


def _cfg(tmp_path, **top):
    actor = top.pop("actor", {})
    return config_from_dict({"env": "Pendulum-v1", "max_episode_steps": 20, "out": str(tmp_path),
                             "learner": {"agent": {"actor_hidden": [8], "critic_hidden": [8]}},
                             "actor": {"loop_hz": 100, "realtime": False, **actor}, **top})


class _Clock(logging.Handler):
    """Records when each error record was emitted (relative to `t0`)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.t0 = time.monotonic()
        self.records = []

    def emit(self, record):
        self.records.append((time.monotonic() - self.t0, record.getMessage()))


def _run_for(actor, seconds):
    clock = _Clock()
    logger = logging.getLogger("robolearn.runtime.actor")
    logger.addHandler(clock)
    sent = []
    real_step = actor.env.step
    actor.env.step = lambda a: (sent.append(a), real_step(a))[1]   # every action sent to the env
    threading.Timer(seconds, actor.stop_event.set).start()
    try:
        summary = actor.run()
    finally:
        logger.removeHandler(clock)
    return summary, clock.records, sent


def test_wrong_port_is_reported_within_seconds_and_no_random_actions(tmp_path):
    cfg = _cfg(tmp_path)
    port = free_port()  # nobody listens here
    actor = Actor(cfg, "arm", f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{free_port()}")
    summary, records, sent = _run_for(actor, 4.0)
    assert records, "no error logged for an unreachable learner"
    t, msg = records[0]
    assert t < 5.0 and "cannot reach the learner" in msg and str(port) in msg
    assert sent == [] and summary["env_steps"] == 0          # held still, no random actions
    assert summary["exit_reason"] == "stopped" and summary["learner_reached"] is False


def test_random_actions_without_learner_only_when_allowed(tmp_path):
    cfg = _cfg(tmp_path, actor={"act_without_learner": True})
    actor = Actor(cfg, "sim", f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}")
    summary, records, sent = _run_for(actor, 1.0)
    assert summary["env_steps"] >= 50 and len(sent) == summary["env_steps"]


def test_wrong_curve_keys_are_reported_and_actor_holds_still(tmp_path):
    from robolearn.runtime.learner import Learner

    keys, stranger = tmp_path / "keys", tmp_path / "stranger"
    generate_keys(keys)
    generate_keys(stranger, names=("actor",))
    shutil.copy(keys / "learner.key", stranger / "learner.key")  # right server, unknown client
    lrn = Learner(_cfg(tmp_path / "l", keys=str(keys), learner={"eval_episodes": 0}))
    d, w = lrn.bind(free_port(), free_port())
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            lrn.poll(timeout_ms=20)

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        actor = Actor(_cfg(tmp_path / "a", keys=str(stranger)), "arm", d, w)
        summary, records, sent = _run_for(actor, 4.0)
    finally:
        stop.set()
        th.join(2)
        lrn.close()
    assert records and records[0][0] < 5.0 and "Curve keys" in records[0][1]
    assert sent == [] and summary["env_steps"] == 0
