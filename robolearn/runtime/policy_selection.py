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
around N. Fewer than `MIN_EPISODES` episodes: no score. Ties go to the later snapshot.

The score is the Wilson lower bound (`Z` = 1 standard error) of the alone-success rate, not the
rate itself: windows hold 9-23 episodes, and the raw rate let a thin lucky window win (lift
session 33 chose 6/11 at step 99 over 11/21 at step 3504, and its final ran 0.25).
A snapshot whose actor had not been trained yet (its `updates` <= the agent's
`actor_frozen_updates`: the pretrained weights exactly, as session 33's step-99 one was) does not
compete: the zero-shot evaluation has measured that policy already."""
from __future__ import annotations

import math
from pathlib import Path

from robolearn.errors import DatasetError
from robolearn.runtime.snapshots import kept_snapshots, snapshot_step

MIN_EPISODES = 5
Z = 1.0          # standard errors below the rate: the Wilson bound the windows are ranked by


def wilson_lower(successes: int, n: int, z: float = Z) -> float:
    """The Wilson score interval's lower end: a rate that a thin window must earn."""
    p, zz = successes / n, z * z
    return (p + zz / (2 * n) - z * math.sqrt(p * (1 - p) / n + zz / (4 * n * n))) / (1 + zz / n)


def actor_untrained(checkpoint: Path) -> bool:
    """True when the checkpoint's actor still holds the loaded weights: its learner had done no
    more updates than the agent's `actor_frozen_updates` (read from its own trainer.json)."""
    from robolearn.policies.checkpoints import read_json_file

    try:
        state = read_json_file(Path(checkpoint) / "trainer.json")
    except DatasetError:       # unreadable: load_policy will say so if it is chosen
        return False
    if not isinstance(state, dict):
        return False
    frozen = (((state.get("launch") or {}).get("learner") or {}).get("agent") or {}).get("actor_frozen_updates")
    updates = state.get("updates")
    return isinstance(frozen, int) and frozen > 0 and isinstance(updates, int) and updates <= frozen


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
        untrained = actor_untrained(path)
        score = wilson_lower(sum(near), len(near)) if len(near) >= MIN_EPISODES and not untrained else None
        rows.append({"env_step": step, "episodes": len(near), "alone_successes": int(sum(near)),
                     "actor_trained": not untrained,
                     "score": None if score is None else round(score, 4), "checkpoint": str(path)})
    scored = [r for r in rows if r["score"] is not None]
    best = max(scored, key=lambda r: (r["score"], r["env_step"])) if scored else rows[-1]
    report = {"rule": "reward", "score": "wilson_lower", "z": Z, "window_env_steps": window,
              "min_episodes": MIN_EPISODES,
              "candidates": rows, "chosen_env_step": best["env_step"],
              "last_env_step": snapshot_step(last), "chosen_checkpoint": best["checkpoint"]}
    return Path(best["checkpoint"]), report
