"""scripts/alone_lift_trend.py: the test that tells a lift session's late turn from the windows'
sampling noise (docs/bench/finetune/README.md, stop 66)."""
import importlib.util
import json
from pathlib import Path


SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "alone_lift_trend.py"


def _load():
    spec = importlib.util.spec_from_file_location("alone_lift_trend", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_flat_rate_is_noise_and_a_late_drop_is_a_turn(tmp_path, capsys):
    mod = _load()
    flat = mod.trend([(12, 20), (13, 20), (11, 20), (12, 20), (13, 20), (12, 20)])
    assert flat["chi2_p"] > 0.9 and abs(flat["late_minus_early_z"]) < 1
    turned = mod.trend([(15, 20), (16, 20), (15, 20), (16, 20), (5, 20), (4, 20)])
    assert turned["late_rate"] == 0.225 and turned["early_rate"] == 0.775
    assert turned["late_minus_early_z"] < -4 and turned["chi2_p"] < 1e-4

    cands = [{"env_step": s, "episodes": n, "alone_successes": k, "actor_trained": s > 0}
             for s, k, n in [(0, 9, 10), (500, 1, 20), (1000, 15, 20), (1500, 16, 20), (2000, 4, 9),
                             (2500, 15, 20), (3000, 5, 20)]]
    (tmp_path / "session_report.json").write_text(json.dumps(
        {"policy_selection": {"candidates": cands}, "final": {"true_success_rate": 0.8}}))
    assert mod.main([str(tmp_path)]) == 0
    row = json.loads(capsys.readouterr().out)
    # the untrained snapshot, the learning before 1000 env steps and the thin window are left out
    assert row["windows"] == 4 and row["episodes"] == 80 and row["final_true"] == 0.8
    assert row["late_rate"] == 0.25
