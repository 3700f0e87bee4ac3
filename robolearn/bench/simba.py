"""`robolearn bench simba`: SimBa networks vs the plain MLP, same preset, seeds and budget.

Two parts, both measured in this run:
- update cost: gradient updates/s of `sac` with the MLP (256, 256) actor and critics and with
  SimBa at three sizes, interleaved on the same random data (process CPU time, the robust figure
  on a shared machine), reported as time per update relative to the MLP;
- learning: `robolearn train` runs at equal env steps per (env, network, seed), the final and
  best evaluation return and success rate, the env steps to a success threshold (first
  evaluation at or above it), and wall time. The learner is `sac` unless `--algo`/`--demos` say
  otherwise (ArmPush needs `rlpd` with scripted demos to be learnt in a CPU budget, so the
  networks can only be compared where the baseline learns); `--prior-runs` mixes an earlier run's
  data into every run (Replay across Experiments, docs/bench/rae/).
The paper's claims it checks: larger SimBa networks do not learn worse than smaller ones, and a
small SimBa costs less than 1.3x the MLP's update time.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

#: name -> agent options; "mlp" is the baseline every ratio is taken against
NETWORKS = {
    "mlp": {},
    # the ablation: the MLP with SimBa's running observation normaliser and nothing else
    "mlp-norm": {"normalize_obs": True},
    # about the MLP's multiply-adds (critic 23x96 + 2 x 96x384 vs 23x256 + 256x256)
    "simba-s": {"network": "simba", "simba_actor_width": 64, "simba_actor_blocks": 1,
                "simba_critic_width": 96, "simba_critic_blocks": 1},
    "simba-m": {"network": "simba", "simba_actor_width": 128, "simba_actor_blocks": 1,
                "simba_critic_width": 128, "simba_critic_blocks": 2},
    "simba": {"network": "simba"},   # the paper's defaults: actor 128 x 1, critic 512 x 2
    "simba-l": {"network": "simba", "simba_critic_width": 512, "simba_critic_blocks": 4},
}


def update_cost(obs_dim: int = 17, action_dim: int = 6, batch_size: int = 256, steps: int = 60,
                seed: int = 0) -> dict:
    """Updates/s per network (interleaved rounds, median) and time per update / the MLP's."""
    import torch

    from robolearn.data.replay import ReplayBuffer
    from robolearn.policies.speed_harness import _fill_ours, _interleaved, _our_runner, _random_data, _spaces

    torch.set_num_threads(1)
    obs_space, act_space = _spaces(obs_dim, action_dim)
    buf = ReplayBuffer(obs_space, act_space, 5000, seed=seed)
    _fill_ours(buf, _random_data(4000, obs_dim, action_dim, seed))
    runners = {name: _our_runner("sac", obs_space, act_space, buf, batch_size, "cpu", seed, **opts)
               for name, opts in NETWORKS.items()}
    rates = _interleaved(runners, steps=steps, warmup=3, rounds=5, sync=lambda: None)
    base = rates["mlp"]["cpu"]
    return {name: {"updates_per_s_cpu": round(r["cpu"], 2), "updates_per_s_wall": round(r["wall"], 2),
                   "time_per_update_vs_mlp": round(base / r["cpu"], 3)} for name, r in rates.items()}


@dataclass(frozen=True)
class Learner:
    """What every training run of the learning part shares (only the network differs)."""
    algo: str = "sac"
    steps: int = 20_000
    eval_every: int = 5000
    eval_episodes: int = 10
    demos: str | None = None
    learning_starts: int | None = None
    utd: int | None = None
    prior_runs: tuple = ()
    env_kwargs: dict = field(default_factory=dict)
    agent: dict = field(default_factory=dict)      # --set, under each network's own options


def steps_to(evals: list[dict], threshold: float) -> int | None:
    """Env steps of the first evaluation with success >= threshold; None if none reached it
    (the learners bench's rule, on this bench's eval records)."""
    from robolearn.bench.learners import steps_to as first_at

    return first_at([(e["step"], e.get("return"), e["success_rate"]) for e in evals], threshold)


def _run(env: str, name: str, seed: int, learner: Learner, out: str, threshold: float) -> dict:
    """One training run (top-level: `--jobs` runs it in a worker process)."""
    from robolearn.compose.training import train
    from robolearn.policies.curves import read_metrics
    from robolearn.policies.train_config import TrainConfig

    run = f"{out}/{env.split('/')[-1]}-{name}-s{seed}"
    t0 = time.perf_counter()
    s = train(TrainConfig(env=env, algo=learner.algo, steps=learner.steps, seed=seed, out=run,
                          demos=learner.demos, learning_starts=learner.learning_starts, utd=learner.utd,
                          eval_every=learner.eval_every, eval_episodes=learner.eval_episodes,
                          agent={**learner.agent, **NETWORKS[name]}, env_kwargs=dict(learner.env_kwargs),
                          replay={"prior_runs": list(learner.prior_runs)} if learner.prior_runs else {},
                          checkpoint_every=0, video=False, progress=False, overwrite=True))
    evals = [{"step": e["step"], "success_rate": e["success_rate"], "return": round(e["return"], 2)}
             for e in read_metrics(f"{run}/metrics.jsonl", "eval")]
    return {"env": env, "network": name, "seed": seed, "eval_return": s["eval_return"],
            "best_eval_return": s.get("best_eval_return"), "eval_success_rate": s["eval_success_rate"],
            "steps_to_threshold": steps_to(evals, threshold), "evals": evals,
            "wall_s": round(time.perf_counter() - t0, 1)}


def _worker_init() -> None:
    """One torch thread per worker (`--jobs 2` on 2 cores does not oversubscribe)."""
    import torch

    torch.set_num_threads(1)


def learning(envs: list[str], networks: list[str], seeds: list[int], learner: Learner, out: Path,
             threshold: float = 0.8, jobs: int = 1) -> list[dict]:
    """Every (env, network, seed) run; `jobs` > 1 runs that many at once in worker processes."""
    from robolearn.errors import ConfigError

    if jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {jobs}")
    todo = [(env, name, seed) for env in envs for name in networks for seed in seeds]
    if jobs == 1:
        rows = []
        for t in todo:
            rows.append(_run(*t, learner, str(out), threshold))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "evals"}), flush=True)
        return rows
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"),
                             initializer=_worker_init) as pool:
        futures = [pool.submit(_run, *t, learner, str(out), threshold) for t in todo]
        rows = []
        for f in futures:
            rows.append(f.result())
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "evals"}), flush=True)
    return rows


def _mean_reached(rows: list[dict]) -> float | None:
    reached = [r["steps_to_threshold"] for r in rows if r.get("steps_to_threshold") is not None]
    return round(float(np.mean(reached)), 1) if reached else None


def summarise(rows: list[dict]) -> list[dict]:
    out = []
    for env in dict.fromkeys(r["env"] for r in rows):
        for name in dict.fromkeys(r["network"] for r in rows):
            rs = [r for r in rows if r["env"] == env and r["network"] == name]
            if rs:
                out.append({"env": env, "network": name, "seeds": len(rs),
                            "eval_return_mean": round(float(np.mean([r["eval_return"] for r in rs])), 2),
                            "eval_return_std": round(float(np.std([r["eval_return"] for r in rs])), 2),
                            "success_mean": round(float(np.nanmean([r["eval_success_rate"] for r in rs])), 3),
                            # env steps to the threshold; seeds that never reached it are counted apart
                            "reached_threshold": sum(r.get("steps_to_threshold") is not None for r in rs),
                            "steps_to_threshold_mean": _mean_reached(rs),
                            "wall_s_mean": round(float(np.mean([r["wall_s"] for r in rs])), 1)})
    return out


def main(argv=None) -> int:
    from robolearn.commands.env_kwargs import add_env_kw_argument, parse_env_kwargs
    from robolearn.commands.train import parse_overrides

    p = argparse.ArgumentParser(prog="robolearn bench simba", description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", nargs="+", default=["robolearn/ArmPush-v0"],
                   help="env IDs for the learning part (e.g. robolearn/dmc-cheetah-run-v0 robolearn/dmc-walker-walk-v0)")
    p.add_argument("--networks", nargs="+", choices=sorted(NETWORKS), default=["mlp", "simba-s", "simba-m"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=20_000, help="env steps per training run")
    p.add_argument("--eval-every", type=int, default=5000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--no-learning", action="store_true", help="only the update-cost part")
    p.add_argument("--no-update-cost", action="store_true",
                   help="only the learning part (the update cost does not depend on the env)")
    p.add_argument("--speed-steps", type=int, default=60, help="updates timed per network")
    p.add_argument("--algo", default="sac", help="learner preset of every run (see `robolearn algos`)")
    p.add_argument("--demos", default=None, help="prior data of every run, e.g. scripted:20 (with --algo rlpd)")
    p.add_argument("--learning-starts", type=int, default=None, help="random-action env steps (default: the preset's)")
    p.add_argument("--utd", type=int, default=None, help="updates per env step (default: the preset's)")
    p.add_argument("--prior-runs", nargs="+", default=[], metavar="PATH",
                   help="earlier runs' data mixed into every run ([replay] prior_runs, RaE)")
    p.add_argument("--threshold", type=float, default=0.8,
                   help="eval success whose first reaching is reported in env steps")
    p.add_argument("--jobs", type=int, default=1, help="training runs at once (one torch thread each)")
    p.add_argument("--out", default="runs/bench-simba")
    p.add_argument("--json", default=None, help="also write the results as JSON")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="agent option for every run, e.g. --set privileged=actor_and_critic (repeatable)")
    add_env_kw_argument(p, note="e.g. --env-kw privileged_obs=true for ArmPush, whose state has no cube pose")
    a = p.parse_args(argv)
    env_kwargs, agent = parse_env_kwargs(a.env_kw), parse_overrides(a.set)
    res = {"command": "robolearn bench simba " + " ".join(argv or [])}
    if not a.no_update_cost:
        res["update_cost"] = update_cost(steps=a.speed_steps)
        print(json.dumps({"update_cost": res["update_cost"]}, indent=1), flush=True)
    if not a.no_learning:
        learner = Learner(algo=a.algo, steps=a.steps, eval_every=a.eval_every, eval_episodes=a.eval_episodes,
                          demos=a.demos, learning_starts=a.learning_starts, utd=a.utd,
                          prior_runs=tuple(a.prior_runs), env_kwargs=env_kwargs, agent=agent)
        rows = learning(a.envs, a.networks, a.seeds, learner, Path(a.out), threshold=a.threshold, jobs=a.jobs)
        res["learner"], res["threshold"] = asdict(learner), a.threshold
        res["env_kwargs"], res["agent"] = env_kwargs, agent
        res["runs"], res["summary"] = rows, summarise(rows)
        for r in res["summary"]:
            print(json.dumps(r), flush=True)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0
