"""`robolearn bench sim`: env steps/s per task vs raw `mujoco.mj_step` on the same model.

Why interleaved: this machine is shared, so its speed drifts during a run. Each iteration times
one `env.step` (state obs, random action), then copies the env's `MjData` into a scratch copy
and times the bare physics of one control period on it (`mj_step(model, scratch,
nstep=n_substeps)`, the fastest way MuJoCo can advance that period). Both timings see the same
states (the same contacts) and the same machine load, so their ratio,

    overhead = (time per env step) / (n_substeps x time per mj_step),

is the cost of everything the env adds (action checks, IK, observation, reward, info) on top
of physics. 1.0 would be a free env. Resets are not timed. The table's ratio uses total
times (means); the `(median)` column uses per-step medians of both timings, which a busy
machine's preemption spikes distort less.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

DEFAULT_ENVS = ("robolearn/ArmReach-v0", "robolearn/ArmPush-v0", "robolearn/ArmLift-v0",
                "robolearn/CarLap-v0", "robolearn/dmc-cheetah-run-v0", "robolearn/dmc-walker-walk-v0")
#: the issue's goal for the arm tasks with state observations
ARM_RATIO_GOAL = 1.5


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robolearn bench sim", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=3.0,
                   help="measuring time per env (about twice this in wall time: env + physics)")
    p.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS), metavar="ID",
                   help="env IDs (default: the three arm tasks, CarLap, dmc cheetah-run and walker-walk)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    p.add_argument("--seed", type=int, default=0, help="seed of the env reset and the random actions")
    return p


def measure(env_id: str, seconds: float, seed: int = 0) -> dict:
    """Interleaved timing of env steps and raw physics for one env (see module docstring)."""
    import gymnasium as gym
    import mujoco
    import numpy as np

    try:
        env = gym.make(env_id, obs="state")
    except TypeError:  # an env family without the obs= option
        env = gym.make(env_id)
    try:
        sim = getattr(env.unwrapped, "sim", None)
        if sim is None or not hasattr(sim, "model") or not hasattr(sim, "data"):
            raise LookupError("no simulator handle (env.unwrapped.sim with model/data)")
        model, data = sim.model, sim.data
        n_sub = int(getattr(sim, "n_substeps", 1))
        scratch = mujoco.MjData(model)
        env.action_space.seed(seed)
        actions = [env.action_space.sample() for _ in range(1000)]
        env.reset(seed=seed)
        clock = time.perf_counter
        t_env = t_phys = 0.0
        steps = 0
        env_times, phys_times = [], []
        deadline = clock() + seconds
        while True:
            a = actions[steps % len(actions)]
            t0 = clock()
            _, _, term, trunc, _ = env.step(a)
            t1 = clock()
            mujoco.mj_copyData(scratch, model, data)
            t2 = clock()
            mujoco.mj_step(model, scratch, nstep=n_sub)
            t3 = clock()
            t_env += t1 - t0
            t_phys += t3 - t2
            env_times.append(t1 - t0)
            phys_times.append(t3 - t2)
            steps += 1
            if term or trunc:
                env.reset()
            if t3 > deadline and steps >= 20:
                break
    finally:
        env.close()
    per_env = t_env / steps
    per_mj = t_phys / (steps * n_sub)
    return {
        "env_id": env_id,
        "steps": steps,
        "env_steps_per_s": 1.0 / per_env,
        "n_substeps": n_sub,
        "mj_steps_per_s": 1.0 / per_mj,
        "overhead_ratio": per_env / (n_sub * per_mj),
        # medians resist the preemption spikes of a shared machine; same estimator both sides
        "overhead_ratio_median": float(np.median(env_times) / np.median(phys_times)),
    }


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("MUJOCO_GL", "egl")
    args = build_parser().parse_args(argv)
    from robolearn.errors import ConfigError

    if not args.seconds > 0:
        raise ConfigError(f"--seconds {args.seconds}: must be > 0")
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    from robolearn.registry import registered_ids

    known = set(registered_ids())
    results, skipped = [], []
    print(f"{'env':34s} {'env steps/s':>12s} {'substeps':>9s} {'mj_step/s':>11s} {'overhead':>9s} {'(median)':>9s}")
    for env_id in args.envs:
        if env_id not in known:
            skipped.append({"env_id": env_id, "reason": "not registered"})
            print(f"{env_id:34s} skipped: not registered (see `robolearn envs`)")
            continue
        try:
            r = measure(env_id, args.seconds, args.seed)
        except LookupError as exc:
            skipped.append({"env_id": env_id, "reason": str(exc)})
            print(f"{env_id:34s} skipped: {exc}")
            continue
        results.append(r)
        print(f"{env_id:34s} {r['env_steps_per_s']:12.0f} {r['n_substeps']:9d} "
              f"{r['mj_steps_per_s']:11.0f} {r['overhead_ratio']:8.2f}x {r['overhead_ratio_median']:8.2f}x", flush=True)
    arm = [r for r in results if "/Arm" in r["env_id"]]
    if arm:
        worst = max(r["overhead_ratio"] for r in arm)
        verdict = "meets" if worst < ARM_RATIO_GOAL else "MISSES"
        print(f"arm tasks: worst overhead {worst:.2f}x ({verdict} the < {ARM_RATIO_GOAL}x goal)")
    if args.json:
        out = {"seconds": args.seconds, "results": results, "skipped": skipped,
               "arm_ratio_goal": ARM_RATIO_GOAL}
        parent = os.path.dirname(os.path.abspath(args.json))
        os.makedirs(parent, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
