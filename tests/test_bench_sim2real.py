"""`robolearn bench sim2real` runs end to end (tiny settings) and writes what it claims."""
import json

import pytest

from robolearn.bench import sim2real


@pytest.mark.timeout(120)
def test_bench_sim2real_scripted_and_camera_sections(tmp_path):
    assert sim2real.main(["--sections", "scripted,camera", "--episodes", "1", "--camera-seconds", "1",
                          "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "results.json").read_text())
    assert [row["condition"] for row in r["scripted"]] == ["sim", "no-gap", "mild", "hard"]
    assert r["scripted"][0]["trajectory_error_rad"] < 1e-6          # the sim replays itself
    assert r["scripted"][1]["trajectory_error_vs_no_gap"] == pytest.approx(1.0)
    assert r["camera"]["emulator_stream"]["frames_per_s"] > 0
    assert r["camera"]["capture_latency"]["frames"] > 0
    md = (tmp_path / "results.md").read_text()
    assert md.startswith("# sim2real benchmark") and "robolearn bench sim2real --sections" in md


def test_bench_sim2real_rejects_unknown_section(tmp_path):
    from robolearn.errors import ConfigError

    with pytest.raises(ConfigError, match="calibrat"):
        sim2real.main(["--sections", "calibrat", "--out", str(tmp_path)])
