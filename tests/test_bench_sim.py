"""`robolearn bench sim` smoke test (tiny --seconds) and the arm overhead goal (slow)."""
import json

import pytest

from robolearn.bench import sim as bench_sim
from robolearn.cli import main


def test_bench_sim_smoke(tmp_path, capsys):
    path = tmp_path / "bench.json"
    assert main(["bench", "sim", "--seconds", "0.2", "--envs", "robolearn/ArmReach-v0",
                 "robolearn/NotThere-v0", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "robolearn/ArmReach-v0" in out and "skipped: not registered" in out
    data = json.loads(path.read_text())
    (r,) = data["results"]
    assert r["env_id"] == "robolearn/ArmReach-v0"
    assert r["n_substeps"] == 50
    assert r["steps"] >= 20
    assert 0 < r["env_steps_per_s"] < r["mj_steps_per_s"]
    # the ratio is computed from the two rates in the same run
    assert r["overhead_ratio"] == pytest.approx(r["mj_steps_per_s"] / (r["n_substeps"] * r["env_steps_per_s"]))
    assert r["overhead_ratio"] > 0  # (> 1 on a quiet machine; the two rates are timed apart, so load moves it)
    assert data["skipped"] == [{"env_id": "robolearn/NotThere-v0", "reason": "not registered"}]


def test_bench_sim_bad_seconds(capsys):
    assert main(["bench", "sim", "--seconds", "0"]) == 2


@pytest.mark.slow
def test_arm_overhead_goal():
    """Issue goal: env overhead under 1.5x the physics cost for the arm tasks (state obs)."""
    for env_id in ("robolearn/ArmReach-v0", "robolearn/ArmPush-v0", "robolearn/ArmLift-v0"):
        r = bench_sim.measure(env_id, seconds=3.0)
        assert r["overhead_ratio"] < bench_sim.ARM_RATIO_GOAL, r
