"""`robolearn bench learners` smoke test: a tiny budget, our sac and SB3 SAC side by side."""
import json

import pytest

from robolearn.bench import learners


def test_bench_learners_writes_table_json_and_curves(tmp_path):
    pytest.importorskip("stable_baselines3")
    out = tmp_path / "bench"
    rc = learners.main(["--envs", "robolearn/ArmReach-v0", "--algos", "sac", "sb3-sac", "--seeds", "0",
                        "--steps", "120", "--learning-starts", "60", "--eval-every", "60",
                        "--eval-episodes", "1", "--no-speed", "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    assert [(r["algo"], r["env_steps"]) for r in res["runs"]] == [("sac", 120), ("sb3-sac", 120)]
    for r in res["runs"]:
        assert [c[0] for c in r["curve"]] == [60, 120]
        assert r["updates"] >= 60 and r["updates_per_s"] > 0
    md = (out / "results.md").read_text()
    assert "| robolearn/ArmReach-v0 | sac |" in md and "| robolearn/ArmReach-v0 | sb3-sac |" in md
    assert (out / "learning_curves.png").read_bytes()[:4] == b"\x89PNG"


def test_sb3_options_refuse_what_sb3_cannot_do():
    from robolearn.errors import ConfigError

    assert learners.sb3_options({"gamma": 0.9, "n_step": 3, "init_temperature": 0.01}) == dict(
        learning_rate=3e-4, gamma=0.9, n_steps=3, ent_coef="auto_0.01")
    with pytest.raises(ConfigError, match="num_critics"):
        learners.sb3_options({"num_critics": 10})


def test_claims_rlpd_suite_is_a_fair_comparison():
    """rlpd and sac share every agent option except RLPD's own (UTD, ensemble) and the demos:
    observation normalisation and SERL's discount 0.95 / entropy-free backup apply to both."""
    s = learners.resolve(learners.build_parser().parse_args(["--suite", "claims-rlpd"]))
    assert s["algos"] == ["rlpd", "sac"] and s["envs"] == ["robolearn/ArmLift-v0"]
    assert s["demos"] == {"rlpd": "scripted:20"} and s["threshold"] == 0.5
    assert s["agent"]["normalize_obs"] is True and s["agent"]["backup_entropy"] is False
    assert s["agent"]["gamma"] == 0.95 and len(s["seeds"]) >= 2
    assert set(s["per_algo"]) == {"rlpd"} and set(s["per_algo"]["rlpd"]) <= {"utd", "num_critics"}
    # lift from state needs the cube pose: simulator-only, so a declared sim-only study
    assert s["env_kwargs"] == {"privileged_obs": True} and s["agent"]["privileged"] == "actor_and_critic"
    md = learners.markdown([{"env": "robolearn/ArmLift-v0", "algo": "rlpd", "demo_transitions": 1, "utd": 5,
                             "seeds": [0], "env_steps": 1, "eval_return": 0.0, "eval_return_std": 0.0,
                             "eval_success_rate": 0.0, "eval_success_rate_std": 0.0, "reached": 0,
                             "steps_to_threshold": [None], "steps_to_threshold_mean": 1,
                             "steps_to_first_success": [None], "updates": 1, "updates_per_s": 1.0,
                             "updates_per_s_std": 0.0, "wall_s": 1.0}], s, None, [])
    assert "Sim-only study" in md
