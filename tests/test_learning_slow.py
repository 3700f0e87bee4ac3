"""The learning claim: `sac` solves robolearn/ArmReach-v0 (state) to >= 90% eval success within
10k env steps. Slow (minutes): run with `make test-slow` / `pytest -m slow`."""
import json

import pytest

from robolearn.policies.training import TrainConfig, read_metrics, train


REACH_AGENT = {"init_temperature": 0.01, "gamma": 0.9, "n_step": 3, "actor_lr": 1e-3, "critic_lr": 1e-3}


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_sac_solves_arm_reach_within_10k_steps(tmp_path):
    cfg = TrainConfig(env="robolearn/ArmReach-v0", algo="sac", seed=0, steps=10_000, eval_every=1000,
                      eval_episodes=20, learning_starts=500, checkpoint_every=0, progress=False,
                      video=False, out=str(tmp_path / "reach"),
                      # SAC with automatic entropy tuning. The reach reward is -distance in
                      # metres (about -0.1 a step) over 50-step episodes, so: temperature starts
                      # at 0.01 instead of 1, discount 0.9, 3-step returns, learning rates 1e-3.
                      agent=REACH_AGENT)
    summary = train(cfg)
    evals = read_metrics(tmp_path / "reach" / "metrics.jsonl", "eval")
    curve = [(r["step"], r["success_rate"]) for r in evals]
    print("eval success by env step:", curve, "wall_s:", summary["wall_s"])
    print(json.dumps(summary))
    assert summary["env_steps"] == 10_000
    best_step, best = max(curve, key=lambda c: (c[1], -c[0]))
    assert best >= 0.9, f"best eval success {best:.2f} at step {best_step}; curve {curve}"
    assert summary["eval_success_rate"] >= 0.8, f"final eval success {summary['eval_success_rate']:.2f}"
