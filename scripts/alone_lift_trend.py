"""Is a lift session's "late turn" more than the windows' sampling noise? Reads the policy
selection's windows (`policy_selection.candidates` of RUN/session_report.json: the episodes each
policy snapshot ran in training and how many the reward called lifted without the operator) and
prints, per session:

- the pooled alone-lift rate of the trained snapshots from `--from-step` env steps on (the plateau);
- Pearson's chi-square of those windows against one shared rate, and its p-value (a small p: the
  rate moved more than ~20-episode windows swing by chance);
- the last third of those windows against the windows before them: both rates and the two-proportion
  z (z <= -2: the policy got worse late, beyond the noise).

    python scripts/alone_lift_trend.py runs/lift-camera-52 runs/lift-camera-53

Why (stop 66): the share driven rose over the last third in 3 of 6 sessions (48, 51, 53) and the
windows looked like a policy that turned late; with ~20 episodes a window, one window swings by
~0.1 either way, so a turn is only shown where the windows, pooled, say so.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from scipy.stats import chi2 as chi_square


def trend(windows: list[tuple[int, int]]) -> dict:
    """windows: (alone successes, episodes) in env-step order."""
    succ, eps = sum(s for s, _ in windows), sum(n for _, n in windows)
    p = succ / eps
    chi2 = sum((s - n * p) ** 2 / (n * p) + ((n - s) - n * (1 - p)) ** 2 / (n * (1 - p))
               for s, n in windows) if 0 < p < 1 else 0.0
    k = max(1, len(windows) // 3)
    early, late = windows[:-k], windows[-k:]
    es, en = sum(s for s, _ in early), sum(n for _, n in early)
    ls, ln = sum(s for s, _ in late), sum(n for _, n in late)
    pooled = (es + ls) / (en + ln)
    se = math.sqrt(pooled * (1 - pooled) * (1 / en + 1 / ln)) if en and ln and 0 < pooled < 1 else float("nan")
    return {"windows": len(windows), "episodes": eps, "rate": round(p, 3),
            "chi2": round(chi2, 2), "chi2_p": round(float(chi_square.sf(chi2, len(windows) - 1)), 3),
            "early_rate": round(es / en, 3) if en else None, "late_rate": round(ls / ln, 3),
            "late_minus_early_z": round((ls / ln - es / en) / se, 2) if en else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="finished session folders (hold session_report.json)")
    ap.add_argument("--from-step", type=int, default=1000,
                    help="windows of snapshots from this env step on (the learning before it is not a plateau)")
    ap.add_argument("--min-episodes", type=int, default=10, help="windows with fewer episodes are left out")
    args = ap.parse_args(argv)
    for run in args.runs:
        report = json.loads((Path(run) / "session_report.json").read_text())
        cands = (report.get("policy_selection") or {}).get("candidates") or []
        windows = [(c["alone_successes"], c["episodes"]) for c in cands
                   if c["actor_trained"] and c["env_step"] >= args.from_step and c["episodes"] >= args.min_episodes]
        if len(windows) < 3:
            print(json.dumps({"run": run, "error": f"{len(windows)} windows: too few to compare"}))
            continue
        out = {"run": run, **trend(windows),
               "final_true": (report.get("final") or {}).get("true_success_rate"),
               "share_driven_first_third": report.get("intervention_rate_first_third"),
               "share_driven_last_third": report.get("intervention_rate_last_third")}
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
