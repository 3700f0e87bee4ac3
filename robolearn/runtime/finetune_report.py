"""The fine-tuning session's report (session_report.json and its plot), built from a finished run folder."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from robolearn.jsonfile import write_json_atomic

log = logging.getLogger("robolearn.runtime.finetune")


def session_report(run_dir: str | Path, control_hz: float, extra: dict | None = None) -> dict:
    """session_report.json + session_report.png from the recorded episodes, the learner's
    metrics and the actor summaries of a finetune run folder."""
    run_dir = Path(run_dir)
    eps = episode_records(run_dir / "episodes")
    robot_s = np.cumsum([e["steps"] for e in eps]) / control_hz if eps else np.zeros(0)
    model = [bool(e.get("success")) for e in eps]
    truth = [e.get("true_success") for e in eps]
    have_truth = [t for t in truth if t is not None]
    agree = [bool(t) == m for t, m in zip(truth, model) if t is not None]
    actors = {}
    for p in sorted(run_dir.glob("actor_*.json")):
        try:
            actors[p.stem] = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
    resets = [e.get("reset", {}) for e in eps if isinstance(e.get("reset"), dict)]
    report = {
        "run": str(run_dir), "control_hz": control_hz, "episodes": len(eps),
        "robot_time_s": float(robot_s[-1]) if len(robot_s) else 0.0,
        "robot_time_per_episode_s": robot_s.tolist(),
        "model_success": model, "true_success": truth,
        "model_success_rate_last10": float(np.mean(model[-10:])) if model else None,
        "true_success_rate_last10": (float(np.mean([bool(t) for t in truth[-10:] if t is not None]))
                                     if have_truth else None),
        "reward_model_agreement": float(np.mean(agree)) if agree else None,
        "interventions": int(sum(e.get("interventions", 0) for e in eps)),
        "episodes_with_interventions": int(sum(1 for e in eps if e.get("interventions", 0))),
        "reward_missing_steps": int(sum(e.get("reward_missing", 0) for e in eps)),
        # reset records (robolearn/reset_report.py): `seconds` of robot time, `ok`, `failures`
        "resets": len(resets), "reset_time_s": float(sum(r.get("seconds", 0.0) for r in resets)),
        "reset_failures": int(sum(1 for r in resets if r.get("ok") is False or r.get("failures", 0))),
        "human_prompts": int(sum(r.get("human_prompts", 0) for r in resets)),
        "loop": {k: a.get("loop") for k, a in actors.items()},
        # the servo bus as the driver saw it, over every actor process of the session
        "bus": _sum_counts([a.get("bus") for a in actors.values()]),
        # the car's link as the driver saw it: serial write timeouts retried, the pose tracker's
        # late frames and silences, steps with missing progress (runtime/actor.py car_stats)
        "car_link": _sum_counts([a.get("car") for a in actors.values()]),
        "checkpoint_failures": _count_lines(run_dir / "logs" / "learner.log", "checkpoint at env step",
                                            "failed"),
        # episodes the actors dropped on purpose, by reason ("camera_dropped": a camera stopped
        # mid-episode, the robot was held; runtime/camera_outage.py), and those outages
        "episodes_discarded": _sum_counts([a.get("episodes_discarded") for a in actors.values()]) or {},
        "camera_outages": int(sum(len(a.get("camera_outages") or []) for a in actors.values())),
        "camera_outage_s": round(float(sum(a.get("camera_outage_s") or 0.0 for a in actors.values())), 2),
        # an episode the recorder could not write (disk full, ...), at its end or mid-way
        "episodes_not_written": (_count_lines(run_dir / "logs" / "actor.log", "could not write episode")
                                 + _count_lines(run_dir / "logs" / "actor.log", "recording failed at step")),
        **(extra or {}),
    }
    served = reward_server_counts(run_dir)
    if served is not None:
        report["reward_server"] = {**served, **report.get("reward_server", {})}
    from robolearn.runtime.finetune_labels import label_report

    report.update(label_report(run_dir, control_hz))  # operator labels (finetune.label_successes)
    if "reward_precision_by_block" not in report:      # no labels (e.g. push's camera reward): the episodes
        report.update(episode_precision_report(eps, control_hz))
    report.update(_interventions(run_dir, control_hz, report))
    # every human prompt of the session: training episodes, zero-shot and final evaluations
    evals = [report.get(k) or {} for k in ("zero_shot", "final")]
    report["human_prompts_total"] = report["human_prompts"] + int(
        sum((e.get("resets") or {}).get("human_prompts", 0) for e in evals))
    report["reset_time_total_s"] = round(report["reset_time_s"] + float(
        sum((e.get("resets") or {}).get("seconds", 0.0) for e in evals)), 1)
    spread = _policy_spread(run_dir, control_hz)
    if spread is not None:
        report["policy_spread"] = spread
    write_json_atomic(run_dir / "session_report.json", report, indent=1)
    try:
        _plot(report, run_dir / "session_report.png")
    except Exception as exc:  # a plot must never cost the JSON
        log.warning("session_report.png not written: %s", exc)
    return report


def _policy_spread(run_dir: Path, control_hz: float) -> dict | None:
    """The sampled policy's spread per policy snapshot (runtime/policy_spread.py), with the robot
    time of policy steps at each snapshot's env step; None (and a warning) if it cannot be
    measured: a diagnostic never costs the report."""
    try:
        from robolearn.runtime.policy_spread import session_spread

        spread = session_spread(run_dir)
        if spread is None:
            return None
        spread["robot_time_s"] = [round(s / control_hz, 1) for s in spread["env_steps"]]
        return spread
    except Exception as exc:
        log.warning("policy_spread not measured: %s", exc)
        return None


SERVER_COUNTS = ("labelled", "held", "relabelled", "dropped", "server_timeouts", "server_unreachable", "missing")


def reward_server_counts(run_dir: Path) -> dict | None:
    """The learner's reward-server counters (`[reward] where = "server"`) over every learner
    process of the session: the last metrics line of each (by pid), the final one from
    summary.json. A killed learner's counts are those of its last metrics line (at most
    `metrics_every_s` old), and what it held then was lost with it (`held_lost_with_learner`).
    None when the session had no reward server."""
    last: dict[int, dict] = {}
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except OSError:
        lines = []
    for ln in lines:
        try:
            rec = json.loads(ln)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("reward_server"), dict):
            last[rec.get("pid", 0)] = rec["reward_server"]
    final_pid = None
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        if isinstance(summary.get("reward_server"), dict):
            final_pid = summary.get("pid", 0)
            last[final_pid] = summary["reward_server"]
    except (OSError, ValueError):
        pass
    if not last:
        return None
    out = {k: int(sum(c.get(k, 0) for c in last.values())) for k in SERVER_COUNTS}
    out["learner_processes"] = len(last)
    out["still_held_at_end"] = int(last[final_pid].get("still_held", 0)) if final_pid in last else None
    out["held_lost_with_learner"] = int(sum(c.get("still_held", 0) for p, c in last.items() if p != final_pid))
    return out


def episode_precision_report(eps: list[dict], control_hz: float, block_s: float = 600.0) -> dict:
    """The reward's precision and recall against the truth per `block_s` of robot time, from the
    recorded episodes (for a session without operator labels, whose label log has them): the
    reward's success ended an episode (`success`), the truth at that step (`true_success_last`)
    and at any step (`true_success`). {} without truth (a physical robot)."""
    from robolearn.rewards.session_metrics import precision_by_block

    if not any(e.get("true_success") is not None for e in eps):
        return {}
    rows = [{"steps": int(e.get("steps", 0)), "reward_success": bool(e.get("success")),
             "true_at_fire": e.get("true_success_last") if e.get("success") else None,
             "true_any": e.get("true_success"), "reward_missing": int(e.get("reward_missing", 0))}
            for e in eps]
    blocks = precision_by_block(rows, control_hz, block_s)
    precisions = [b["precision"] for b in blocks if b["precision"] is not None]
    return {"reward_precision_by_block": blocks,
            "reward_precision_min_block": min(precisions) if precisions else None}


def _interventions(run_dir: Path, control_hz: float, report: dict) -> dict:
    """The intervention rate per block of robot time (runtime/intervention_report.py), and the
    robot time with the operator's demos recorded before the learner started."""
    from robolearn.runtime.intervention_report import intervention_report

    out = intervention_report(run_dir / "episodes", control_hz)
    # the emulated operator's own counts, over every actor process of the session
    ops = []
    for p in sorted(run_dir.glob("actor_*.json")):
        try:
            ops.append(json.loads(p.read_text()).get("operator"))
        except (OSError, ValueError):
            continue
    ops = [o for o in ops if isinstance(o, dict)]
    if ops:
        out["operator"] = {"takeovers": int(sum(o.get("takeovers", 0) for o in ops)),
                           "driven_steps": int(sum(o.get("driven_steps", 0) for o in ops)),
                           "handbacks": _sum_counts([o.get("handbacks") for o in ops]),
                           "takeover_reasons": _sum_counts([o.get("takeover_reasons") for o in ops]),
                           "takeover_starts": _sum_counts([o.get("takeover_starts") for o in ops]),
                           "give_up_phases": _sum_counts([o.get("give_up_phases") for o in ops]),
                           "reaims": int(sum(o.get("reaims", 0) for o in ops)),
                           "late_looks": int(sum(o.get("late_looks", 0) for o in ops))}
    demos = report.get("robot_demos") or {}
    out["robot_time_with_demos_s"] = round(report["robot_time_s"] + float(demos.get("robot_time_s", 0.0)), 1)
    return out


def _sum_counts(dicts: list) -> dict | None:
    dicts = [d for d in dicts if isinstance(d, dict)]
    if not dicts:
        return None
    out: dict = {}
    for d in dicts:
        for k, v in d.items():
            if isinstance(v, (int, float)):
                out[k] = out.get(k, 0) + v
    return out


def _count_lines(path: Path, *words: str) -> int:
    """Lines of a log holding all `words` (each process incarnation appends to the same log)."""
    try:
        with open(path, errors="replace") as f:
            return sum(1 for line in f if all(w in line for w in words))
    except OSError:
        return 0


def episode_records(root: Path) -> list[dict]:
    """Every readable RUN/episodes/episode_*/episode.json, in recording order."""
    if not (root / "meta.json").is_file():
        return []
    out = []
    for p in sorted(root.glob("episode_*/episode.json")):
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue
    return out


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.asarray(report["robot_time_per_episode_s"]) / 60.0
    labels = bool(report.get("reward_precision_by_block"))   # operator labels: a panel for the reward
    spread = report.get("policy_spread") or {}
    panels = 1 + labels + bool(spread.get("robot_time_s"))
    fig, axes = plt.subplots(panels, 1, figsize=(8, 4.5 if panels == 1 else 3.6 * panels), squeeze=False)
    ax, rest = axes[0, 0], list(axes[1:, 0])
    if labels:
        from robolearn.runtime.finetune_labels import plot_labels

        plot_labels(rest.pop(0), report)
    if rest:
        _plot_spread(rest.pop(0), spread)

    def rolling(xs, w=10):
        xs = np.asarray(xs, float)
        return np.array([xs[max(0, i - w + 1):i + 1].mean() for i in range(len(xs))])

    if len(t):
        ax.plot(t, rolling(report["model_success"]), label="reward-model success (rolling 10)")
        truth = report["true_success"]
        if any(v is not None for v in truth):
            idx = [i for i, v in enumerate(truth) if v is not None]
            ax.plot(t[idx], rolling([bool(truth[i]) for i in idx]), label="true success (rolling 10)")
    for key, style in (("zero_shot", "--"), ("final", ":")):
        ev = report.get(key) or {}
        v = ev.get("true_success_rate")
        v = ev.get("success_rate") if v is None else v
        if v is not None:
            ax.axhline(v, ls=style, color="grey", label=f"{key.replace('_', '-')} eval: {v:.2f}")
    from robolearn.runtime.intervention_report import plot_intervention_rate

    plot_intervention_rate(ax, report)
    ax.set_xlabel("robot time (min)")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.05, 1.05)
    upd = (report.get("learner_summary") or {}).get("updates_per_env_step")
    ax.set_title(f"fine-tuning session: {report['episodes']} episodes, "
                 f"{report['interventions']} intervention steps, {report['resets']} resets"
                 + (f"\nlearner: {upd:g} updates per control step" if upd is not None else ""), fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_spread(ax, spread: dict) -> None:
    """The sampled actions' spread per action dim at each policy snapshot, over robot time."""
    t = np.asarray(spread["robot_time_s"]) / 60.0
    std = np.asarray(spread["sampled_action_std"], float)
    names = spread.get("action_names") or [f"action_{i}" for i in range(std.shape[1])]
    for i, name in enumerate(names[:std.shape[1]]):
        ax.plot(t, std[:, i], marker=".", label=name)
    ax.set_xlabel("robot time (min)")
    ax.set_ylabel("sampled action std")
    ax.set_title(f"the sampled policy's spread at {spread['states']} recorded states, per policy snapshot")
    ax.legend(loc="upper right", fontsize=8)
