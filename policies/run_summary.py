"""A training run's summary.json: what a finished or a stopped run reports.

Why its own module: the summary is the run's result as people and benchmarks read it (final
and best evaluation, steps to 90 % success, resets, the learning curve and eval video), and a
stopped run's says where it stopped and the command that continues it.
"""
from __future__ import annotations

from robolearn.policies import evaluation
from robolearn.policies.checkpoints import find_checkpoint
from robolearn.policies.curves import plot_learning_curve, read_metrics

EVAL_VIDEO_EPISODES = 3  # episodes in a finished run's eval.mp4 (docs/training.md says so)


def finished_summary(trainer) -> dict:
    """summary.json of a finished run: final evaluation, totals, learning curve, eval video."""
    summary = {
        "env": trainer.cfg.env, "algo": trainer.cfg.algo, "seed": trainer.cfg.seed, "obs": trainer.cfg.obs,
        "env_steps": trainer.env_steps, "updates": trainer.updates, "episodes": trainer.episodes,
        "wall_s": round(trainer.wall_before, 3),
        "updates_per_s": trainer.updates / trainer.update_time if trainer.update_time > 0 else None,
        "eval_return": trainer.last_eval["return"], "eval_success_rate": trainer.last_eval["success_rate"],
        "eval_episodes": trainer.last_eval["episodes"],
        "utd": int(trainer.agent.config.utd), "demo_transitions": trainer.demo_count,
        "checkpoint": str(find_checkpoint(trainer.dir)),
        "rejected_missing_reward": trainer.rejected_missing_reward,
        # where batches came from: "host" (numpy gather + copy) or "device" (the GPU mirror)
        "batches": "host" if getattr(trainer, "batches", None) in (None, trainer.sampler) else "device",
    }
    if trainer.prior_runs_report:  # RaE: what each earlier run / dataset added, relabelled or not
        summary["prior_runs"] = trainer.prior_runs_report
        summary["prior_fraction"] = trainer.prior_fraction
        if getattr(trainer, "earlier_fraction", None) is not None:  # RaE beside rlpd's demos
            summary["earlier_runs_fraction"] = trainer.earlier_fraction
    if trainer.cfg.profile:
        summary["profile"] = trainer.cfg.profile
        summary["profile_options"] = {k: getattr(trainer.agent.config, k) for k in trainer.profile}
    if trainer.reset_stats.episodes:
        summary["resets"] = trainer.reset_stats.as_dict()   # this session's resets (not resumed ones)
    evals = read_metrics(trainer.dir / "metrics.jsonl", "eval")
    if evals:
        best = max(evals, key=lambda r: r["return"])
        summary["best_eval_return"] = best["return"]
        hit = [r["step"] for r in evals if r["success_rate"] >= 0.9]
        summary["steps_to_90pct_success"] = hit[0] if hit else None
    plot_learning_curve(trainer.dir / "metrics.jsonl", trainer.dir / "learning_curve.png",
                        title=f"{trainer.cfg.algo} on {trainer.cfg.env} (seed {trainer.cfg.seed})")
    summary["learning_curve"] = "learning_curve.png"
    if trainer.cfg.video:
        try:
            path, _ = evaluation.record(trainer.eval_env, trainer.policy, trainer.dir / "eval.mp4",
                                        episodes=EVAL_VIDEO_EPISODES, seed=trainer.cfg.seed)
            summary["video"] = path.name
        except Exception as exc:  # noqa: BLE001 - the video is optional: no GL, no ffmpeg,
            # a renderer-less env... must not throw away a finished run; say why instead
            print(f"could not record an evaluation video: {exc}")
            summary["video"] = None
    summary.update(trainer.hooks.summary(trainer))
    trainer._write_json("summary.json", summary)
    return summary


def interrupted_summary(trainer) -> dict:
    """summary.json of a run stopped by a signal: where it stopped and how to go on."""
    summary = {
        "env": trainer.cfg.env, "algo": trainer.cfg.algo, "seed": trainer.cfg.seed, "obs": trainer.cfg.obs,
        "interrupted": True, "signal": trainer._interrupted,
        "env_steps": trainer.env_steps, "steps": trainer.cfg.steps, "updates": trainer.updates,
        "episodes": trainer.episodes, "wall_s": round(trainer.wall_before, 3),
        "eval_return": trainer.last_eval["return"] if trainer.last_eval else None,
        "eval_success_rate": trainer.last_eval["success_rate"] if trainer.last_eval else None,
        "checkpoint": str(find_checkpoint(trainer.dir)),
        "resume": f"robolearn train --resume {trainer.dir}",
    }
    trainer._write_json("summary.json", summary)
    return summary
