"""Resume holds for the newer agent options (issue 26): a run with the SAC Flow actor (with its
flow-matching BC term on rlpd demos) or SimBa networks, stopped and resumed, ends bit-identical
to the same run done in one go: agent state, replay, prior buffer and summary."""
import json

import numpy as np
import pytest

from robolearn.compose.training import build_trainer, resume_trainer
from robolearn.policies.train_config import TrainConfig
from test_resume import assert_same_agent

PEND = dict(env="Pendulum-v1", steps=100, learning_starts=30, eval_every=0, eval_episodes=1, seed=3,
            max_episode_steps=20, checkpoint_every=20, progress=False, video=False)


def _demos(path):
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((30, 3)).astype(np.float32)
    np.savez(path, obs_state=obs, next_obs_state=np.roll(obs, -1, 0), action=rng.uniform(-1, 1, (30, 1)).astype(np.float32),
             reward=rng.standard_normal(30).astype(np.float32), terminated=np.zeros(30, bool),
             truncated=np.arange(30) % 10 == 9)
    return str(path)


@pytest.mark.parametrize("case", ["flow_bc", "simba"])
def test_stopped_and_resumed_equals_straight(tmp_path, case):
    if case == "flow_bc":
        extra = dict(algo="rlpd", demos=_demos(tmp_path / "demos.npz"),
                     agent={"actor": "flow", "flow_bc_weight": 1.0, "utd": 2, "actor_hidden": [8],
                            "critic_hidden": [8], "batch_size": 8})
    else:
        extra = dict(algo="sac", agent={"network": "simba", "simba_actor_width": 8, "simba_critic_width": 8,
                                        "batch_size": 8})
    cfg = lambda out: TrainConfig(out=str(tmp_path / out), **PEND, **extra)  # noqa: E731
    straight = build_trainer(cfg("straight"))
    straight.run()
    first = build_trainer(cfg("stopped"))
    first.run(stop_at=40)
    first.close()
    resumed = resume_trainer(tmp_path / "stopped")
    try:
        assert resumed.env_steps == 40
        resumed.run()
        assert resumed.replay.state_equal(straight.replay)
        if straight.prior is not None:
            assert resumed.prior.state_equal(straight.prior)
        assert_same_agent(straight, resumed)
    finally:
        resumed.close()
        straight.close()
    a = json.loads((tmp_path / "straight" / "summary.json").read_text())
    b = json.loads((tmp_path / "stopped" / "summary.json").read_text())
    assert a["eval_return"] == b["eval_return"] and a["updates"] == b["updates"]
