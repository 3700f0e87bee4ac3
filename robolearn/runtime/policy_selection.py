"""Which policy the final evaluation runs: the learner's last, or (`[finetune] final_policy =
"reward"`) the kept snapshot whose training episodes the session's own reward called successful
without the operator most often.

Why: a session's policy can peak and then get worse. Lift session 14 (docs/bench/finetune/README.md)
lifted alone in 8 of its 9 episodes around env step 2000 and in most of them up to ~3800, then
the operator took over in most late episodes, and the last policy lifted 12 of 20 in the final
evaluation. A person at a robot would deploy the policy that worked best in the session, judged
by what the robot itself can see. So this reads the reward the episodes were trained on (the
success classifier + grasp check, `success` in episode.json) and whether the operator drove
(`interventions`), never the emulator's truth (`true_success`, kept for the report only).

Each snapshot (RUN/policy_snapshots/step_N: the policy weights and trainer.json, written by the
learner every `snapshot_every` env steps) is scored by the episodes recorded within
`snapshot_every` env steps either side of N: the weights the actor ran there were the ones
around N. Fewer than `MIN_EPISODES` episodes: no score. Ties go to the later snapshot."""
from __future__ import annotations

from pathlib import Path

from robolearn.errors import DatasetError
from robolearn.runtime.snapshots import kept_snapshots, snapshot_step

MIN_EPISODES = 5


def choose_policy(run_dir: str | Path, window: int) -> tuple[Path, dict]:
    """(the checkpoint folder the final evaluation should load, the report's `policy_selection`).
    Candidates: every kept snapshot and the learner's last checkpoint."""
    from robolearn.policies.checkpoints import find_checkpoint
    from robolearn.runtime.finetune_report import episode_records

    run_dir = Path(run_dir)
    last = find_checkpoint(run_dir)
    candidates = {snapshot_step(p): p for p in kept_snapshots(run_dir)}
    candidates[snapshot_step(last)] = last
    spans, end = [], 0
    for ep in episode_records(run_dir / "episodes"):
        steps = int(ep.get("steps", 0))
        alone = bool(ep.get("success")) and not int(ep.get("interventions") or 0)
        spans.append((end + steps / 2, alone))
        end += steps
    if not spans:
        raise DatasetError(f"{run_dir / 'episodes'} holds no recorded episodes to choose a policy by")
    rows = []
    for step, path in sorted(candidates.items()):
        near = [alone for mid, alone in spans if abs(mid - step) <= window]
        score = sum(near) / len(near) if len(near) >= MIN_EPISODES else None
        rows.append({"env_step": step, "episodes": len(near), "alone_successes": int(sum(near)),
                     "score": None if score is None else round(score, 4), "checkpoint": str(path)})
    scored = [r for r in rows if r["score"] is not None]
    best = max(scored, key=lambda r: (r["score"], r["env_step"])) if scored else rows[-1]
    report = {"rule": "reward", "window_env_steps": window, "min_episodes": MIN_EPISODES,
              "candidates": rows, "chosen_env_step": best["env_step"],
              "last_env_step": snapshot_step(last), "chosen_checkpoint": best["checkpoint"]}
    return Path(best["checkpoint"]), report
