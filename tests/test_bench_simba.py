"""`robolearn bench simba` learning part: the learner options reach every run (algo, demos,
prior runs), each run's evaluation curve and env steps to the success threshold are kept."""
import json

import pytest

from robolearn.bench import simba
from robolearn.errors import ConfigError


def test_steps_to_is_the_first_evaluation_at_or_above_the_threshold():
    evals = [{"step": 1000, "success_rate": 0.5}, {"step": 2000, "success_rate": 0.8},
             {"step": 3000, "success_rate": 0.7}, {"step": 4000, "success_rate": 1.0}]
    assert simba.steps_to(evals, 0.8) == 2000
    assert simba.steps_to(evals, 0.9) == 4000
    assert simba.steps_to(evals, 1.01) is None


def test_summary_counts_the_seeds_that_never_reached_the_threshold_apart():
    rows = [{"env": "e", "network": "mlp", "seed": s, "eval_return": -1.0, "eval_success_rate": 0.5,
             "steps_to_threshold": t, "wall_s": 1.0} for s, t in ((0, 3000), (1, None), (2, 5000))]
    (summary,) = simba.summarise(rows)
    assert summary["reached_threshold"] == 2 and summary["steps_to_threshold_mean"] == 4000.0
    rows = [dict(r, steps_to_threshold=None) for r in rows]
    (summary,) = simba.summarise(rows)
    assert summary["reached_threshold"] == 0 and summary["steps_to_threshold_mean"] is None


def test_learning_runs_the_given_learner_with_demos_and_a_prior_run(tmp_path):
    """rlpd with scripted demos, then a second bench whose runs read the first one's data."""
    out = tmp_path / "b"
    common = ["--envs", "robolearn/ArmReach-v0", "--networks", "mlp", "--seeds", "0", "--steps", "120",
              "--eval-every", "60", "--eval-episodes", "1", "--no-update-cost", "--algo", "rlpd",
              "--demos", "scripted:1", "--learning-starts", "60", "--utd", "1",
              "--set", "num_critics=2", "--set", "critic_hidden=[16,16]", "--set", "actor_hidden=[16,16]",
              "--threshold", "0.0"]
    assert simba.main(common + ["--out", str(out / "first"), "--json", str(out / "first.json")]) == 0
    first = json.loads((out / "first.json").read_text())
    assert "update_cost" not in first
    (run,) = first["runs"]
    assert [e["step"] for e in run["evals"]] == [60, 120]
    assert run["steps_to_threshold"] == 60          # any success >= 0.0
    assert first["learner"]["algo"] == "rlpd" and first["learner"]["demos"] == "scripted:1"
    cfg = json.loads((out / "first" / "ArmReach-v0-mlp-s0" / "config.json").read_text())["train"]
    assert cfg["algo"] == "rlpd" and cfg["demos"] == "scripted:1" and cfg["utd"] == 1

    prior = str(out / "first" / "ArmReach-v0-mlp-s0")
    assert simba.main(common + ["--out", str(out / "second"), "--json", str(out / "second.json"),
                                "--prior-runs", prior]) == 0
    second = json.loads((out / "second" / "ArmReach-v0-mlp-s0" / "summary.json").read_text())
    assert second["prior_runs"] and second["prior_runs"][0]["path"].endswith("ArmReach-v0-mlp-s0")


def test_jobs_below_one_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="--jobs"):
        simba.learning(["robolearn/ArmReach-v0"], ["mlp"], [0], simba.Learner(), tmp_path, jobs=0)
