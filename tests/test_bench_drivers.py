"""`robolearn bench drivers` smoke test (tiny --seconds): table printed, JSON sane."""
import json

from robolearn.bench.drivers import main


def test_bench_drivers_reports_latency_rate_and_ratios(tmp_path, capsys):
    out = tmp_path / "drivers.json"
    assert main(["--seconds", "0.3", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "baseline: raw pty round trip" in text and "achievable control rate" in text
    r = json.loads(out.read_text())
    assert r["servos"] == 6 and r["baud"] == 1_000_000
    assert 0 < r["baseline_raw_pty"]["p50_ms"] < r["sync_read"]["p50_ms"]
    assert r["sync_read"]["p50_ms"] >= r["wire_time_ms"]       # the emulated UART time is paid
    assert r["sync_read"]["p50_ms"] <= r["sync_read"]["p99_ms"]
    assert r["control_rate_hz"] > 20
    assert abs(r["ratio_sync_read_p50_to_baseline"]
               - r["sync_read"]["p50_ms"] / r["baseline_raw_pty"]["p50_ms"]) < 1e-9
