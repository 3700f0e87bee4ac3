"""Interventions through the async runtime, end to end: steps a device drove on the actor arrive
at the learner flagged, with the device's action, and land in the RLPD prior buffer as well as
the online replay (HIL-SERL); the session report's intervention rate per block of robot time."""
from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from robolearn.runtime.config import config_from_dict
from robolearn.runtime.transport import free_port
from robolearn.teleop.base import DeviceCommand

ENV = "robolearn/ArmReach-v0"
TAKEOVER = np.array([0.3, -0.2, 0.1, 1.0], np.float32)


class EveryOtherFive:
    """A device engaged on steps 5-9, 15-19, ... of each episode, always with TAKEOVER."""

    name = "test"

    def __init__(self):
        self.n = 0

    def reset(self):
        self.n = 0

    def read(self, obs=None):
        self.n += 1
        return DeviceCommand(TAKEOVER.copy(), (self.n - 1) // 5 % 2 == 1, set())

    def help(self):
        return "test"

    def close(self):
        pass


def test_intervention_steps_reach_the_learner_flagged_and_join_the_prior_buffer(tmp_path):
    from robolearn.policies.env_building import make_env
    from robolearn.runtime.actor import Actor
    from robolearn.runtime.learner import Learner
    from robolearn.teleop.intervention import InterventionWrapper

    port, wport = free_port(), free_port()
    cfg = config_from_dict({
        "env": ENV, "algo": "rlpd", "out": str(tmp_path / "run"),
        "learner": {"port": port, "weights_port": wport, "total_env_steps": 150, "eval_episodes": 0,
                    "demos": "scripted:1", "publish_every": 5,
                    "agent": {"batch_size": 16, "utd": 1, "actor_hidden": [16], "critic_hidden": [16],
                              "learning_starts": 10}},
        "actor": {"loop_hz": 0, "realtime": False, "send_batch": 8, "learner_timeout_s": 5.0}})
    learner = Learner(cfg)
    n_demos = len(learner.prior)
    assert n_demos > 0 and learner.prior.transitions()["intervention"].sum() == 0
    lt = threading.Thread(target=learner.run, daemon=True)
    lt.start()
    env = InterventionWrapper(make_env(ENV, "state", None, None, {}, {}), EveryOtherFive())
    actor = Actor(cfg, "a0", f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{wport}", env=env)
    at = threading.Thread(target=actor.run, daemon=True)
    at.start()
    lt.join(timeout=180)
    actor.stop_event.set()
    at.join(timeout=30)
    assert not lt.is_alive(), "the learner did not reach total_env_steps"
    online = learner.replay.transitions()
    prior = learner.prior.transitions()
    k = int(online["intervention"].sum())
    assert learner.env_steps >= 150 and k >= 40           # about half the steps were driven
    # every intervention step is in the prior buffer, after the demos, flagged, with the device's action
    assert len(learner.prior) == n_demos + k
    assert prior["intervention"][-k:].all() and not prior["intervention"][:-k].any()
    np.testing.assert_array_equal(prior["action"][-k:], np.tile(TAKEOVER, (k, 1)))
    np.testing.assert_array_equal(online["action"][online["intervention"]], np.tile(TAKEOVER, (k, 1)))
    # and the policy's own steps are not
    assert not np.all(online["action"][~online["intervention"]] == TAKEOVER, axis=1).any()


def test_intervention_rate_by_block_counts_steps_and_takeovers():
    from robolearn.runtime.intervention_report import intervention_rate_by_block

    hz = 10.0
    eps = [np.r_[np.zeros(5), np.ones(10), np.zeros(5)].astype(bool),   # 20 steps, 10 driven
           np.r_[np.ones(5), np.zeros(15)].astype(bool),                 # 20 steps, 5 driven
           np.zeros(20, bool)]                                           # 20 steps, none
    blocks = intervention_rate_by_block(eps, hz, block_s=2.5)           # 25 steps a block
    assert [b["steps"] for b in blocks] == [25, 35]                    # the 10-step tail joins the last
    assert [b["intervention_steps"] for b in blocks] == [15, 0]
    assert [b["takeovers"] for b in blocks] == [2, 0]                  # episode 2 starts driven: one
    assert [b["rate"] for b in blocks] == [0.6, 0.0]
    assert [(b["t_start_s"], b["t_end_s"]) for b in blocks] == [(0.0, 2.5), (2.5, 6.0)]
    blocks = intervention_rate_by_block(eps, hz, block_s=2.0)           # 20 a block: no tail
    assert [b["rate"] for b in blocks] == [0.5, 0.25, 0.0]
    blocks = intervention_rate_by_block(eps, hz, block_s=3.5)           # 35 a block: a 25-step tail stays
    assert [b["steps"] for b in blocks] == [35, 25]
    assert [b["intervention_steps"] for b in blocks] == [15, 0]
    assert intervention_rate_by_block(eps[:1], hz, block_s=60.0)[0]["steps"] == 20   # shorter than a block
    assert intervention_rate_by_block([], hz) == []


def _episodes_with_rates(root, rates, steps=10):
    """One recorded episode per block of `steps` steps, `rate` of them driven."""
    for i, r in enumerate(rates):
        d = root / f"episode_{i:06d}"
        d.mkdir(parents=True)
        (d / "episode.json").write_text("{}")
        np.savez(d / "data.npz", intervention=np.arange(steps) < round(r * steps))


@pytest.mark.parametrize("rates, fell", [
    ([0.4, 0.2, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.3], False),   # the last block dips: still flat
    ([0.3, 0.4, 0.3, 0.3, 0.2, 0.3, 0.2, 0.1, 0.2], True),    # thirds 0.33 -> 0.17
    ([0.5, 0.3], True),
])
def test_the_rate_fell_compares_the_first_and_last_third_of_the_session(tmp_path, rates, fell):
    from robolearn.runtime.intervention_report import intervention_report

    _episodes_with_rates(tmp_path, rates)
    rep = intervention_report(tmp_path, 10.0, block_s=1.0)
    assert [b["rate"] for b in rep["intervention_rate_by_block"]] == rates
    third = max(1, len(rates) // 3)
    assert rep["intervention_rate_first_third"] == pytest.approx(np.mean(rates[:third]), abs=1e-4)
    assert rep["intervention_rate_last_third"] == pytest.approx(np.mean(rates[-third:]), abs=1e-4)
    assert rep["intervention_rate_fell"] is fell


def test_session_report_has_the_intervention_rate_by_block_and_plots_it(tmp_path, monkeypatch):
    """A recorded session whose operator drives less and less: the report's blocks say so."""
    from robolearn.runtime import intervention_report

    monkeypatch.setattr(intervention_report, "BLOCK_S", 5.0)   # 50 steps a block
    from robolearn.data.recording import RecordingWrapper
    from robolearn.policies.env_building import make_env
    from robolearn.runtime.finetune_report import session_report
    from robolearn.teleop.intervention import InterventionWrapper

    class Fading(EveryOtherFive):   # drives the first 20, then 10, then 0 steps of an episode
        episode = 0

        def reset(self):
            self.n, self.episode = 0, self.episode + 1

        def read(self, obs=None):
            self.n += 1
            return DeviceCommand(TAKEOVER.copy(), self.n <= max(0, 30 - 10 * self.episode), set())

    run = tmp_path / "session"
    env = RecordingWrapper(InterventionWrapper(make_env(ENV, "state", None, None, {}, {}), Fading()),
                           run / "episodes", env_id=ENV)
    try:
        for ep in range(3):
            env.reset(seed=ep)
            for _ in range(50):
                *_, term, trunc, _ = env.step(np.zeros(4, np.float32))
                if term or trunc:
                    break
    finally:
        env.close()
    for i, (stuck, landing) in enumerate(((1, 0), (0, 1))):   # two actor incarnations' operator counts
        (run / f"actor_robot{i}.json").write_text(json.dumps({"operator": {
            "takeovers": 1, "driven_steps": 20 - 10 * i, "handbacks": {"lifted": 1, "gave_up": 0},
            "takeover_reasons": {"stuck": stuck, "landing": landing},
            **({"takeover_starts": {"close": 1}, "give_up_phases": {"descend": 1}} if i else {}),
            "late_looks": 2 * i}}))
    rep = session_report(run, 10.0, {"zero_shot": {"true_success_rate": 0.2},
                                     "final": {"true_success_rate": 0.6}, "robot_demos": {"robot_time_s": 12.0}})
    saved = json.loads((run / "session_report.json").read_text())
    assert saved["intervention_rate_by_block"] == rep["intervention_rate_by_block"]
    assert rep["operator"] == {"takeovers": 2, "driven_steps": 30, "handbacks": {"lifted": 2, "gave_up": 0},
                               "takeover_reasons": {"stuck": 1, "landing": 1}, "takeover_starts": {"close": 1},
                               "give_up_phases": {"descend": 1}, "reaims": 0, "late_looks": 2}
    blocks = rep["intervention_rate_by_block"]
    assert sum(b["intervention_steps"] for b in blocks) == rep["interventions"] == 20 + 10
    assert sum(b["steps"] for b in blocks) == round(rep["robot_time_s"] * 10)
    assert rep["takeovers"] == 2 and len(blocks) == 3 and rep["intervention_block_s"] == 5.0
    rates = [b["rate"] for b in blocks]
    assert rates[0] > rates[1] > rates[2] == 0.0 and rep["intervention_rate_fell"] is True
    assert rep["robot_time_with_demos_s"] == pytest.approx(rep["robot_time_s"] + 12.0)
    for k in ("zero_shot", "final", "robot_time_s", "interventions", "reward_model_agreement"):
        assert k in rep
    assert (run / "session_report.png").stat().st_size > 1000
