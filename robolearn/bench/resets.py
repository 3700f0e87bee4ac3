"""`robolearn bench resets`: physical resets in sim, against teleport resets in the same run.

arm: ArmPush with `reset_mode="physical"` for N consecutive episodes (the push is practised by
the task's scripted controller, `--arm-policy mixed` makes every other episode random actions,
which scatters the cube much more). Counts teleports (the sim's `set_state` counter: must stay
0), successful resets (cube back in the start region and arm home, no human), reset seconds; the
baseline is the same policy for the same episodes with teleport resets: the ratio of task
success rates shows whether physically reset episodes are as solvable as teleported ones.
car: CarLap autonomous practice (`AutonomousPractice` + physical resets) for `--car-steps` env
steps (24000 = 20 min simulated at 20 Hz) driven by a noisy pure-pursuit driver (no learning
here), counting collisions and stalls, recoveries, teleports and human prompts; its best lap
beside noise-free pure pursuit's.
learned (only when asked): `robolearn train` of ArmPush with teleport resets vs reset-free
forward/backward agents, same learner and env-step budget, per seed; true success on
teleport-reset evaluation episodes.
car-learned (only when asked): a learner practising on CarLap with physical resets
(`--resets practice`, prior data = one slow lap) for `--car-steps` env steps, counting what
`car` counts; then its deterministic lap times beside pure pursuit's on the same episodes.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robolearn bench resets", description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=200, help="ArmPush episodes (consecutive)")
    p.add_argument("--arm-policy", choices=("scripted", "mixed"), default="scripted")
    p.add_argument("--car-steps", type=int, default=24000, help="CarLap practice env steps (20 Hz)")
    p.add_argument("--only", choices=("arm", "car", "learned", "car-learned"), default=None,
                   help="one section (default: arm and car; `learned` and `car-learned` run only when "
                        "asked: they train)")
    p.add_argument("--steps", type=int, default=3000, help="learned: env-step budget per training run")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="learned: training seeds")
    p.add_argument("--arms", nargs="+", choices=("env", "learned", "scripted"), default=["env", "learned"],
                   help="learned: trainings to run (env = teleport resets, the baseline; learned = "
                        "reset-free forward/backward; scripted = physical mode, scripted cube reset)")
    p.add_argument("--out", default="runs/bench-resets", help="learned, car-learned: folder for the training runs")
    p.add_argument("--eval-episodes", type=int, default=None,
                   help="learned: teleport-reset evaluation episodes per evaluation; car-learned: 60 s "
                        "evaluation episodes of lap timing at the end (default 20 / 5 for car-learned)")
    p.add_argument("--jobs", type=int, default=1,
                   help="learned: trainings run at once, one core each (2 on a 2-core machine halves the wall time)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    return p


def arm_episodes(mode: str, episodes: int, policy: str, seed: int) -> dict:
    import gymnasium as gym

    from robolearn.reset_report import ResetStats

    env = gym.make("robolearn/ArmPush-v0", reset_mode=mode, reset_on_failure="continue")
    base = env.unwrapped
    ctrl = base.scripted_controller()
    rng = np.random.default_rng(seed)
    stats, task_success = ResetStats(), 0
    t0 = time.perf_counter()
    tele0 = base.teleport_count()
    try:
        for ep in range(episodes):
            obs, info = env.reset(seed=seed if ep == 0 else None)
            stats.add(info["reset"])
            ctrl.reset()
            random_ep = policy == "mixed" and ep % 2 == 1
            success = False
            while True:
                a = rng.uniform(-1, 1, 4).astype(np.float32) if random_ep else ctrl.act(obs)
                obs, _, term, trunc, info = env.step(a)
                success = success or bool(info["success"])
                if term or trunc:
                    break
            task_success += success
    finally:
        env.close()
    return {"mode": mode, "episodes": episodes, "policy": policy, "wall_s": round(time.perf_counter() - t0, 1),
            "teleports_total": base.teleport_count() - tele0, "task_success_rate": task_success / episodes,
            "resets": stats.as_dict()}


def car_practice(steps: int, seed: int) -> dict:
    import gymnasium as gym

    from robolearn.resets.practice import AutonomousPractice
    from robolearn.reset_report import ResetStats

    env = AutonomousPractice(gym.make("robolearn/CarLap-v0", reset_mode="physical",
                                      reset_on_failure="continue", max_episode_steps=1200))
    base = env.unwrapped
    driver = base.scripted_controller()
    rng = np.random.default_rng(seed)
    stats, laps, best = ResetStats(), 0, None
    t0 = time.perf_counter()
    n = 0
    obs, info = env.reset(seed=seed)
    stats.add(info["reset"])
    noise = np.zeros(2)
    try:
        while n < steps:
            if n % 20 == 0:   # a sloppy learner: steering noise held for 1 s, sometimes big
                noise = np.array([rng.normal(0, 0.2), rng.normal(0.1, 0.2)])
            a = np.clip(driver.act(obs) + noise, -1, 1).astype(np.float32)
            obs, _, term, trunc, info = env.step(a)
            n += 1
            if info["best_lap_time"] is not None:
                best = info["best_lap_time"] if best is None else min(best, info["best_lap_time"])
            if term or trunc:
                laps += info["laps"]
                obs, info = env.reset()
                driver.reset()
                stats.add(info["reset"])
    finally:
        env.close()
    ref = gym.make("robolearn/CarLap-v0")
    pp = ref.unwrapped.scripted_controller()
    obs, _ = ref.reset(seed=seed)
    pp_best = None
    for _ in range(1200):
        obs, _, term, trunc, info = ref.step(pp.act(obs))
        pp_best = info["best_lap_time"]
        if term or trunc:
            break
    ref.close()
    return {"env_steps": n, "sim_minutes": n / 20.0 / 60.0, "wall_s": round(time.perf_counter() - t0, 1),
            "collisions": env.collisions, "stalls": env.stalls, "laps": laps,
            "teleports_total": base.teleport_count(), "resets": stats.as_dict(),
            "practice_best_lap_s": best, "pure_pursuit_best_lap_s": pp_best}


#: the learner both trainings use (the claims-rlpd settings of `robolearn bench learners`)
#: Push needs the cube pose, which is simulator-only (`privileged`): both runs read it in actor and
#: critic, a SIM-ONLY study of the resets, not of perception (as claims-rlpd).
LEARNER = dict(algo="rlpd", demos="scripted:20", learning_starts=200, utd=5,
               env_kwargs={"privileged_obs": True},
               agent={"init_temperature": 0.01, "gamma": 0.95, "backup_entropy": False,
                      "normalize_obs": True, "num_critics": 2, "privileged": "actor_and_critic",
                      "critic_hidden": (256, 256), "actor_hidden": (256, 256)})


#: the trainings `--only learned` compares: `env` teleport resets (the baseline), `learned`
#: reset-free forward/backward agents, `scripted` physical mode with the scripted cube reset
#: (PlaceCube) after every episode (a control: physical resets without learning them)
#: In the reset-free runs a reset that fails even after the scripted fallback (a cube pushed out of
#: the arm's reach: a forward agent strands one at the workspace's far edge sooner or later) prompts
#: the emulated operator, whose hand puts the cube back (`operator:sim`, counted as human prompts):
#: on a robot that is the person at the table. Without it one stranded cube stalled every later
#: episode of the run (measured: both seeds from step ~4000 on).
#: The `scripted` control gets the same operator: with "continue" one cube pushed out of reach
#: stayed there and every later episode started unsolvable (measured 2026-11-24: 0.0 success, 43
#: of 102 resets failed from step ~7000 on, the cube at x = 0.085 m by the arm's base).
ARMS = {"env": ("env", {}), "learned": ("learned", {"reset_on_failure": "prompt", "reset_prompt": "operator:sim"}),
        "scripted": ("env", {"reset_mode": "physical", "reset_on_failure": "prompt", "reset_prompt": "operator:sim"})}


def _train_row(arm: str, seed: int, steps: int, out: str, eval_episodes: int) -> dict:
    """One training of `learned_vs_teleport` (a top-level function: `--jobs` runs it in a worker
    process), with its evaluation curve."""
    from robolearn.policies.train_config import TrainConfig
    from robolearn.compose.training import train

    resets, env_kwargs = ARMS[arm]
    learner = {**LEARNER, "env_kwargs": {**LEARNER["env_kwargs"], **env_kwargs}}
    cfg = TrainConfig(env="robolearn/ArmPush-v0", steps=steps, seed=seed, resets=resets,
                      out=f"{out}/{arm}-s{seed}", eval_every=max(steps // 5, 1),
                      eval_episodes=eval_episodes,
                      checkpoint_every=0, video=False, progress=False, **learner)
    s = train(cfg)
    row = {k: s.get(k) for k in (
        "seed", "eval_success_rate", "eval_return", "wall_s", "updates", "forward_env_steps",
        "backward_env_steps", "backward_updates", "backward_demo_episodes", "backward_reached_start",
        "classifier_threshold", "classifier_agreement_with_ground_truth", "fallback_resets", "resets")}
    row["evals"] = _evals(cfg.out)
    # the last three evaluations (the final one alone swings by +-0.2 on 20 episodes)
    row["late_success"] = float(np.mean([e["success_rate"] for e in row["evals"][-3:]]))
    return row


def _worker_init() -> None:
    """One core per worker (`--jobs 2` on 2 cores does not oversubscribe), and the worker dies
    with the bench (SIGKILL: its result could only go to the bench; the run folder it leaves is
    resumable). Without it a killed bench left its trainings running as orphans."""
    import os
    import signal

    import torch

    from robolearn.processes import die_with_parent

    torch.set_num_threads(1)
    tie = die_with_parent(os.getppid(), signum=signal.SIGKILL)
    if tie is not None:
        tie()


def learned_vs_teleport(steps: int, seeds: list[int], out: str, eval_episodes: int = 20,
                        arms: tuple = ("env", "learned"), jobs: int = 1) -> dict:
    """Same learner, same env-step budget: teleport resets vs reset-free forward/backward
    (physical mode). Success is measured on teleport-reset evaluation episodes (the truth).
    `jobs` > 1 runs that many trainings at once in worker processes (one torch thread each):
    the runs are independent, so on 2 cores `jobs=2` halves the wall time."""
    if jobs < 1:
        from robolearn.errors import ConfigError

        raise ConfigError(f"--jobs must be at least 1, got {jobs}")
    todo = [(arm, seed) for arm in arms for seed in seeds]
    if jobs > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        # longest first (the reset-free runs update two agents), so the pool ends together
        order = sorted(todo, key=lambda t: t[0] != "learned")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"),
                                 initializer=_worker_init) as pool:
            futures = {t: pool.submit(_train_row, t[0], t[1], steps, out, eval_episodes)
                       for t in order}
            done = {t: f.result() for t, f in futures.items()}
    else:
        done = {t: _train_row(t[0], t[1], steps, out, eval_episodes) for t in todo}
    rows = {}
    for arm, seed in todo:
        rows.setdefault(arm, []).append(done[(arm, seed)])
    mean = {k: float(np.mean([r["eval_success_rate"] for r in v])) for k, v in rows.items()}
    late = {k: float(np.mean([r["late_success"] for r in v])) for k, v in rows.items()}

    def ratios(m):
        return {k: (m[k] / m["env"] if m.get("env") else None) for k in m if k != "env"}

    return {"steps": steps, "seeds": seeds, "learner": LEARNER, "eval_episodes": eval_episodes, "runs": rows,
            "mean_success": mean, "mean_late_success": late, "ratio_vs_teleport": ratios(mean),
            "ratio_late_vs_teleport": ratios(late)}


def plot_learned(result: dict, path: str) -> None:
    """True success (teleport-reset evaluations) against env steps, each training arm's seeds
    and their mean: where reset-free falls behind shows, not only the final ratio."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, (arm, rows) in enumerate(result["runs"].items()):
        colour = f"C{i}"
        n = min(len(r["evals"]) for r in rows)
        steps = [e["step"] for e in rows[0]["evals"][:n]]
        vals = np.array([[e["success_rate"] for e in r["evals"][:n]] for r in rows], dtype=float)
        for v in vals:
            ax.plot(steps, v, color=colour, alpha=0.3, lw=1)
        label = {"env": "teleport resets", "learned": "reset-free (forward/backward)"}.get(arm, arm)
        ax.plot(steps, vals.mean(0), "o-", color=colour, ms=4, label=f"{label}, mean of {len(rows)} seeds")
    ax.set_xlabel("env steps")
    ax.set_ylabel("true success (teleport-reset eval)")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title(f"ArmPush {LEARNER['algo']}: reset-free vs teleport resets")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


#: the car learner (`--only car-learned`): SAC on state + the sim's track-relative `privileged`
#: entries (lateral offset, heading error, curvature ahead) in actor and critic: a SIM-ONLY study
#: of practising with physical resets, not of perception (FastRLAP learns from the camera; on
#: this 2-core CPU a pixel learner would not fit 24k steps). Seeded with one slow lap.
CAR_LEARNER = dict(algo="sac", utd=2, learning_starts=1000,
                   env_kwargs={"privileged_obs": True, "reset_on_failure": "continue"},
                   agent={"normalize_obs": True, "privileged": "actor_and_critic", "gamma": 0.99})
#: the slow demonstration lap: pure pursuit at walking-pace corners (FastRLAP's one slow lap)
SLOW_LAP = dict(v_straight=1.5, a_lat=2.0)


def slow_demo_lap(path: str, seed: int) -> dict:
    """Drive one slow lap from the start line with pure pursuit (`SLOW_LAP`) and write its
    transitions to `path` (.npz, the `--demos` format); returns its length and lap time."""
    import gymnasium as gym

    from robolearn.policies.demos import collect_rollouts
    from robolearn.tasks.car_scripted import PurePursuit, PurePursuitConfig

    lap = {}

    class OneLap(gym.Wrapper):   # the demonstration ends when its first lap is complete
        def step(self, action):
            obs, r, term, trunc, info = self.env.step(action)
            if info["laps"] >= 1:
                lap["lap_time_s"] = info["lap_time"]
                trunc = True
            return obs, r, term, trunc, info

    env = gym.make("robolearn/CarLap-v0", privileged_obs=True)
    drv = PurePursuit(env, PurePursuitConfig(**SLOW_LAP))
    try:
        t = collect_rollouts(OneLap(env), drv.act, 1, seed=seed, on_reset=drv.reset)
    finally:
        env.close()
    arrays = {"action": t["action"], "reward": t["reward"], "terminated": t["terminated"],
              "truncated": t["truncated"]}
    arrays.update({f"obs_{k}": v for k, v in t["obs"].items()})
    arrays.update({f"next_obs_{k}": v for k, v in t["next_obs"].items()})
    np.savez(path, **arrays)
    return {"transitions": int(len(t["action"])), **lap}


def eval_laps(driver, episodes: int, seed: int) -> dict:
    """Deterministic laps on teleport-reset CarLap episodes (60 s each, seeds seed+10000+i, the
    same for every driver): lap times from the start line, collisions. `driver(env)` returns
    (act, reset or None) for that env."""
    import gymnasium as gym

    env = gym.make("robolearn/CarLap-v0", privileged_obs=True)
    act, reset = driver(env)
    laps, per_ep = [], []
    try:
        for i in range(episodes):
            obs, info = env.reset(seed=seed + 10_000 + i)
            if reset is not None:
                reset()
            n_laps = 0
            while True:
                obs, _, term, trunc, info = env.step(act(obs))
                if info["laps"] > n_laps:
                    n_laps = info["laps"]
                    laps.append(float(info["lap_time"]))
                if term or trunc:
                    break
            per_ep.append({"laps": n_laps, "collisions": info["collisions"]})
    finally:
        env.close()
    return {"episodes": episodes, "laps": len(laps), "lap_times_s": [round(x, 3) for x in laps],
            "best_lap_s": min(laps) if laps else None, "mean_lap_s": float(np.mean(laps)) if laps else None,
            "collisions": sum(e["collisions"] for e in per_ep), "per_episode": per_ep}


def _pure_pursuit(env):
    pp = env.unwrapped.scripted_controller()
    return pp.act, pp.reset


def car_learned(steps: int, seed: int, out: str, eval_episodes: int = 5) -> dict:
    """`robolearn train --env robolearn/CarLap-v0 --resets practice` with `CAR_LEARNER`, prior
    data = one slow lap; then the learned policy's deterministic laps beside pure pursuit's."""
    from pathlib import Path

    from robolearn.policies.train_config import TrainConfig
    from robolearn.compose.training import build_trainer

    Path(out).mkdir(parents=True, exist_ok=True)
    demo_path = str(Path(out) / "slow_lap.npz")
    demo = slow_demo_lap(demo_path, seed)
    cfg = TrainConfig(env="robolearn/CarLap-v0", steps=steps, seed=seed, resets="practice", demos=demo_path,
                      out=f"{out}/car-practice-s{seed}", eval_every=max(steps // 6, 1), eval_episodes=2,
                      checkpoint_every=0, video=False, progress=False, overwrite=True, **CAR_LEARNER)
    trainer = build_trainer(cfg)
    try:
        s = trainer.run()
        learned = eval_laps(lambda env: (trainer.policy, None), eval_episodes, seed)
    finally:
        trainer.close()
    pure = eval_laps(_pure_pursuit, eval_episodes, seed)
    r = s.get("resets", {})
    return {"env_steps": s["env_steps"], "practice_sim_minutes": s["env_steps"] / 20.0 / 60.0,
            "recovery_sim_minutes": r.get("seconds", 0.0) / 60.0, "wall_s": s["wall_s"],
            "learner": CAR_LEARNER, "slow_lap": demo, "updates": s["updates"],
            "updates_per_s": s["updates_per_s"], "collisions": s["practice"]["collisions"],
            "stalls": s["practice"]["stalls"], "teleports_total": s["practice"]["teleports"], "resets": r,
            "evals_during_training": _evals(cfg.out), "learned": learned, "pure_pursuit": pure, "run": cfg.out}


def _evals(run: str) -> list:
    from robolearn.policies.curves import read_metrics

    return [{k: e[k] for k in ("step", "return", "success_rate")} for e in read_metrics(f"{run}/metrics.jsonl", "eval")]


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    out: dict = {"command": "robolearn bench resets " + " ".join(argv or [])}
    if args.only in (None, "arm"):
        phys = arm_episodes("physical", args.episodes, args.arm_policy, args.seed)
        tele = arm_episodes("teleport", args.episodes, args.arm_policy, args.seed)
        r = phys["resets"]
        out["arm"] = {"physical": phys, "teleport": tele,
                      "success_ratio_physical_vs_teleport":
                          phys["task_success_rate"] / tele["task_success_rate"] if tele["task_success_rate"] else None}
        print(f"ArmPush physical resets, {args.episodes} consecutive episodes ({args.arm_policy} policy): "
              f"teleports {phys['teleports_total']}, successful resets {r['ok']}/{r['episodes']} "
              f"({r['success_rate']:.1%}), mean reset {r['seconds'] / max(r['episodes'], 1):.1f} s robot time; "
              f"task success {phys['task_success_rate']:.1%} vs {tele['task_success_rate']:.1%} with teleport "
              f"resets (ratio {out['arm']['success_ratio_physical_vs_teleport']:.2f}); wall {phys['wall_s']} s vs "
              f"{tele['wall_s']} s")
    if args.only in (None, "car"):
        c = car_practice(args.car_steps, args.seed)
        out["car"] = c
        r = c["resets"]
        print(f"CarLap autonomous practice, {c['sim_minutes']:.1f} simulated min: {c['collisions']} collisions, "
              f"{c['stalls']} stalls, recoveries ok {r['ok']}/{r['episodes']}, teleports {c['teleports_total']}, "
              f"human prompts {r['human_prompts']}; best lap {c['practice_best_lap_s']} s (noisy driver, no "
              f"learning) vs pure pursuit {c['pure_pursuit_best_lap_s']} s")
    if args.only == "car-learned":
        c = car_learned(args.car_steps, args.seed, args.out, eval_episodes=args.eval_episodes or 5)
        out["car_learned"] = c
        r, L, P = c["resets"], c["learned"], c["pure_pursuit"]
        print(f"CarLap learning by autonomous practice ({CAR_LEARNER['algo']}, {c['env_steps']} env steps = "
              f"{c['practice_sim_minutes']:.1f} simulated min + {c['recovery_sim_minutes']:.1f} min of recoveries): "
              f"{c['collisions']} collisions, {c['stalls']} stalls, recoveries ok {r.get('ok')}/{r.get('episodes')}, "
              f"teleports {c['teleports_total']}, human prompts {r.get('human_prompts')}; learned policy "
              f"{L['laps']} laps in {L['episodes']} x 60 s (best {L['best_lap_s']} s, mean {L['mean_lap_s']} s, "
              f"{L['collisions']} collisions) vs pure pursuit {P['laps']} laps (best {P['best_lap_s']} s, "
              f"mean {P['mean_lap_s']} s, {P['collisions']} collisions)")
    if args.only == "learned":
        r = learned_vs_teleport(args.steps, args.seeds, args.out, eval_episodes=args.eval_episodes or 20,
                                arms=tuple(args.arms), jobs=args.jobs)
        out["learned"] = r
        png = str(Path(args.json).with_suffix(".png")) if args.json else f"{args.out}/learned_curve.png"
        Path(png).parent.mkdir(parents=True, exist_ok=True)
        plot_learned(r, png)
        r["curve_png"] = png
        print(f"learning curves: {png}")
        for k, v in r["runs"].items():
            print(f"ArmPush {LEARNER['algo']} resets={k}: eval success "
                  + ", ".join(f"s{x['seed']} {x['eval_success_rate']:.2f}" for x in v) + f" (mean {r['mean_success'][k]:.2f})")
        print(f"success ratio vs teleport resets at {args.steps} env steps: {r['ratio_vs_teleport']} "
              f"(mean of the last 3 evaluations: {r['mean_late_success']}, ratio {r['ratio_late_vs_teleport']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
