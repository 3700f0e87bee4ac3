"""The learning claim: `sac` solves robolearn/ArmReach-v0 (state) to >= 90% eval success within
10k env steps. Slow (minutes): run with `make test-slow` / `pytest -m slow`."""
import json

import pytest

from robolearn.policies.train_config import TrainConfig
from robolearn.policies.curves import read_metrics
from robolearn.compose.training import train


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_sac_solves_arm_reach_within_10k_steps(tmp_path):
    # The README command with no options: the `sac` preset's defaults (init temperature 0.1)
    # and the reach reward in decimetres are what make this work (docs/learners.md).
    cfg = TrainConfig(env="robolearn/ArmReach-v0", algo="sac", seed=0, steps=10_000, eval_every=1000,
                      eval_episodes=20, checkpoint_every=0, progress=False,
                      video=False, out=str(tmp_path / "reach"))
    summary = train(cfg)
    evals = read_metrics(tmp_path / "reach" / "metrics.jsonl", "eval")
    curve = [(r["step"], r["success_rate"]) for r in evals]
    print("eval success by env step:", curve, "wall_s:", summary["wall_s"])
    print(json.dumps(summary))
    assert summary["env_steps"] == 10_000
    best_step, best = max(curve, key=lambda c: (c[1], -c[0]))
    assert best >= 0.9, f"best eval success {best:.2f} at step {best_step}; curve {curve}"
    assert summary["eval_success_rate"] >= 0.8, f"final eval success {summary['eval_success_rate']:.2f}"
