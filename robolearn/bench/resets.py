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
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robolearn bench resets", description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=200, help="ArmPush episodes (consecutive)")
    p.add_argument("--arm-policy", choices=("scripted", "mixed"), default="scripted")
    p.add_argument("--car-steps", type=int, default=24000, help="CarLap practice env steps (20 Hz)")
    p.add_argument("--only", choices=("arm", "car", "learned"), default=None,
                   help="one section (default: arm and car; `learned` runs only when asked: it trains)")
    p.add_argument("--steps", type=int, default=3000, help="learned: env-step budget per training run")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="learned: training seeds")
    p.add_argument("--out", default="runs/bench-resets", help="learned: folder for the training runs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    return p


def arm_episodes(mode: str, episodes: int, policy: str, seed: int) -> dict:
    import gymnasium as gym

    from robolearn.resets.stats import ResetStats

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
    from robolearn.resets.stats import ResetStats

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


def learned_vs_teleport(steps: int, seeds: list[int], out: str) -> dict:
    """Same learner, same env-step budget: teleport resets vs reset-free forward/backward
    (physical mode). Success is measured on teleport-reset evaluation episodes (the truth)."""
    from robolearn.policies.training import TrainConfig, train

    rows = {}
    for resets in ("env", "learned"):
        for seed in seeds:
            cfg = TrainConfig(env="robolearn/ArmPush-v0", steps=steps, seed=seed, resets=resets,
                              out=f"{out}/{resets}-s{seed}", eval_every=max(steps // 3, 1), eval_episodes=10,
                              checkpoint_every=0, video=False, progress=False, **LEARNER)
            s = train(cfg)
            rows.setdefault(resets, []).append({k: s.get(k) for k in (
                "seed", "eval_success_rate", "eval_return", "wall_s", "forward_env_steps", "backward_env_steps",
                "classifier_agreement_with_ground_truth", "resets")})
    mean = {k: float(np.mean([r["eval_success_rate"] for r in v])) for k, v in rows.items()}
    return {"steps": steps, "seeds": seeds, "learner": LEARNER, "runs": rows, "mean_success": mean,
            "ratio_learned_vs_teleport": mean["learned"] / mean["env"] if mean["env"] else None}


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
    if args.only == "learned":
        r = learned_vs_teleport(args.steps, args.seeds, args.out)
        out["learned"] = r
        for k, v in r["runs"].items():
            print(f"ArmPush {LEARNER['algo']} resets={k}: eval success "
                  + ", ".join(f"s{x['seed']} {x['eval_success_rate']:.2f}" for x in v) + f" (mean {r['mean_success'][k]:.2f})")
        print(f"reset-free / teleport success ratio at {args.steps} env steps: {r['ratio_learned_vs_teleport']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
