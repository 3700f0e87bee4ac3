"""`robolearn bench learners`: our learners vs Stable-Baselines3 SAC, same tasks, seeds, budget.

Every run happens in this process, on this machine, one after another (so they compete for
the CPU equally): our algorithms through the same `Trainer` as `robolearn train`, SB3's SAC
(`sb3-sac`, 256x256 nets, batch 256, UTD 1, the same learning_starts and initial temperature)
through `model.learn`, both evaluated by `robolearn.policies.evaluation.evaluate` on the same
fixed evaluation episodes. Outputs in --out: `results.json`, `results.md` (mean +- std over
seeds) and `learning_curves.png`. `--suite` selects the presets behind the issue's claims.

SB3 is a benchmark-only extra: `pip install -e .[bench]`.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from pathlib import Path

import numpy as np

from robolearn.errors import ConfigError

SB3 = "sb3-sac"

# Presets for the claims (budgets sized for a shared 2-core CPU; raise --steps and
# --seeds on a bigger machine). `agent` applies to every algorithm, SB3 included (init temp).
# A suite that sets `agent`/`per_algo` options does not run the plain presets: every run
# prints its overrides and records them (`overrides` in results.json), so no result is
# mistaken for a preset's default behaviour.
SUITES: dict[str, dict] = {
    # Default: the README's plain command, `robolearn train --env robolearn/ArmReach-v0 --algo
    # sac --steps 10000`, over 5 seeds; no options (the claim: >= 90% success in >= 4 of 5).
    "default": dict(envs=["robolearn/ArmReach-v0"], algos=["sac"], seeds=[0, 1, 2, 3, 4], steps=10000,
                    eval_every=1000, eval_episodes=10, learning_starts=1000),
    # Our sac vs SB3 SAC with the same (default) settings on the reach task.
    "vs-sb3": dict(envs=["robolearn/ArmReach-v0"], algos=["sac", SB3], seeds=[0, 1], steps=5000,
                   eval_every=500, eval_episodes=10, learning_starts=500),
    # (a) high UTD (DroQ, UTD 20) beats SAC (UTD 1) at the same env-step budget (plain presets).
    "claims-utd": dict(envs=["robolearn/ArmReach-v0"], algos=["sac", "droq"], seeds=[0, 1, 2],
                       steps=1000, eval_every=250, eval_episodes=10, learning_starts=200),
    # (b) RLPD with 20 scripted demos vs SAC without demos on the lift task (sparse reward).
    # To fit a shared 2-core CPU, RLPD runs UTD 5 with a 2-critic LayerNorm ensemble (the
    # paper: UTD 20, 10 critics); raise them with --utd / --set num_critics=10 on a bigger machine.
    # Shared by both learners: normalised observations (the cube height and cube-gripper offset
    # vary by ~1 cm, joint velocities by ~0.5 rad/s: raw, the critic barely sees the features
    # that decide success) and SERL's sparse-reward settings, discount 0.95 and no entropy term
    # in the TD target (with termination on success, an entropy bonus competes with the reward).
    # Learning lift from state needs the cube pose, which is simulator-only (`privileged`), so
    # both learners read it in actor and critic: a SIM-ONLY STUDY, its policies cannot run on
    # hardware (deployable: privileged="critic" with pixels).
    "claims-rlpd": dict(envs=["robolearn/ArmLift-v0"], algos=["rlpd", "sac"], seeds=[0, 1, 2],
                        steps=5000, eval_every=500, eval_episodes=10, learning_starts=200,
                        demos={"rlpd": "scripted:20"}, env_kwargs={"privileged_obs": True},
                        agent={"init_temperature": 0.01, "gamma": 0.95, "backup_entropy": False,
                               "normalize_obs": True, "privileged": "actor_and_critic"},
                        # 2x256 networks: the settings docs/bench/claims-rlpd/ was measured with
                        per_algo={"rlpd": {"utd": 5, "num_critics": 2, "critic_hidden": (256, 256),
                                           "actor_hidden": (256, 256)}}, threshold=0.5),
    # update speed only (no training runs): ours vs SB3 at 1 and 2 threads, FLOPs per update,
    # the machine's fastest fp32 GEMM and sac_fraction_of_limit, 10 vs 2 critics. With
    # --device cuda: sac/redq/drq vs SB3 on the GPU instead.
    "speed": dict(envs=[], algos=[], seeds=[], steps=0),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robolearn bench learners", description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", choices=sorted(SUITES), default="default",
                   help="preset: default | vs-sb3 | claims-utd | claims-rlpd | speed (flags below override it)")
    p.add_argument("--envs", nargs="+", help="env IDs")
    p.add_argument("--algos", nargs="+", help=f"our algorithm names and/or {SB3!r}")
    p.add_argument("--seeds", nargs="+", type=int, help="seeds (each run uses the same seeds)")
    p.add_argument("--steps", type=int, help="env-step budget per run")
    p.add_argument("--eval-every", type=int, help="env steps between evaluations")
    p.add_argument("--eval-episodes", type=int, help="episodes per evaluation")
    p.add_argument("--learning-starts", type=int, help="random-action steps before updates (all learners)")
    p.add_argument("--utd", type=int, help="override the UTD of our high-UTD presets (not sac / sb3-sac)")
    p.add_argument("--demos", action="append", default=[], metavar="ALGO=SPEC",
                   help="prior data for one algorithm, e.g. rlpd=scripted:20 (repeatable)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="learner option for every learner (SB3 where it has an equivalent), e.g. "
                        "--set gamma=0.99 (repeatable; merged over the suite's options)")
    p.add_argument("--threshold", type=float, help="success rate for the 'env steps to reach' column")
    p.add_argument("--speed", dest="speed", action="store_true", default=None,
                   help="also measure gradient updates/s (ours vs SB3, redq 10 vs 2 critics)")
    p.add_argument("--no-speed", dest="speed", action="store_false")
    p.add_argument("--speed-steps", type=int, default=300, help="updates per learner in the speed test")
    p.add_argument("--device", default="cpu",
                   help="speed test device: cpu (1 and 2 threads) or cuda (sac/redq/drq vs SB3 on the GPU)")
    p.add_argument("--out", default=None, help="output folder (default runs/bench-learners-<suite>)")
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local: runs one after another in this process; ray: each run a Ray task "
                        "(one CPU each, in parallel; same numbers: each task seeds itself as the "
                        "sequential run does). Needs pip install 'robolearn[ray]'")
    p.add_argument("--ray-address", default="",
                   help="with --engine ray: the cluster to use (\"auto\", HOST:6379); default a local one")
    return p


def resolve(args) -> dict:
    s = dict(SUITES[args.suite])
    s.setdefault("demos", {})
    s.setdefault("threshold", 0.9)
    for k in ("envs", "algos", "seeds", "steps", "eval_every", "eval_episodes", "learning_starts", "threshold"):
        if getattr(args, k) is not None:
            s[k] = getattr(args, k)
    for item in args.demos:
        algo, sep, spec = item.partition("=")
        if not sep:
            raise ConfigError(f"--demos {item!r}: write ALGO=SPEC, e.g. rlpd=scripted:20")
        s["demos"] = {**s["demos"], algo: spec}
    if args.set:  # applied last: over the suite's options and its per-algorithm ones
        from robolearn.commands.train import parse_overrides

        s["set"] = parse_overrides(args.set)
    s["utd"] = args.utd
    s["speed"] = args.speed if args.speed is not None else args.suite in ("speed", "default")
    if s["envs"] and s["steps"] < 1:
        raise ConfigError("--steps must be >= 1")
    return s


# ------------------------------------------------------------------------------- runs
def overrides(algo: str, s: dict) -> dict:
    """The options a suite sets over `algo`'s preset ({} = the plain preset)."""
    agent = {**s.get("agent", {}), **s.get("per_algo", {}).get(algo, {}), **s.get("set", {})}
    if s.get("utd") and algo not in ("sac", SB3):
        agent["utd"] = s["utd"]
    return agent


def run_ours(env_id: str, algo: str, seed: int, s: dict, out: Path) -> dict:
    from robolearn.policies.train_config import TrainConfig
    from robolearn.policies.trainer import Trainer
    from robolearn.policies.curves import read_metrics

    agent = overrides(algo, s)
    if agent:
        print(f"[bench learners]   {algo} is NOT the plain preset here: overrides {agent}", flush=True)
    cfg = TrainConfig(env=env_id, algo=algo, seed=seed, steps=s["steps"], eval_every=s["eval_every"],
                      eval_episodes=s["eval_episodes"], learning_starts=s["learning_starts"],
                      demos=s["demos"].get(algo), checkpoint_every=0, video=False, progress=False,
                      agent=agent, env_kwargs=dict(s.get("env_kwargs", {})), out=str(out / "runs" / f"{env_id.split('/')[-1]}-{algo}-s{seed}"))
    shutil.rmtree(cfg.out, ignore_errors=True)  # the benchmark owns its run folders
    t0 = time.perf_counter()
    trainer = Trainer(cfg)
    try:
        summary = trainer.run()
    finally:
        trainer.close()
    curve = [(r["step"], r["return"], r["success_rate"])
             for r in read_metrics(Path(cfg.out) / "metrics.jsonl", "eval")]
    return dict(env=env_id, algo=algo, seed=seed, overrides=agent, env_steps=summary["env_steps"], updates=summary["updates"],
                updates_per_s=summary["updates_per_s"], wall_s=time.perf_counter() - t0,
                eval_return=summary["eval_return"], eval_success_rate=summary["eval_success_rate"],
                demo_transitions=summary["demo_transitions"], utd=summary["utd"], curve=curve)


def sb3_options(agent: dict) -> dict:
    """Our learner options that SB3's SAC has an equivalent for (same defaults otherwise)."""
    from robolearn.policies.agent_config import AgentConfig

    unsupported = sorted(set(agent) - {"init_temperature", "gamma", "n_step", "actor_lr", "critic_lr"})
    if unsupported:
        raise ConfigError(f"sb3-sac has no equivalent of {unsupported}; drop them or sb3-sac")
    lr = {agent.get("actor_lr", 3e-4), agent.get("critic_lr", 3e-4)}
    if len(lr) != 1:
        raise ConfigError("sb3-sac uses one learning rate: set actor_lr == critic_lr")
    return dict(learning_rate=lr.pop(), gamma=agent.get("gamma", 0.99), n_steps=agent.get("n_step", 1),
                ent_coef=f"auto_{agent.get('init_temperature', AgentConfig.init_temperature)}")


def _state_only(env):
    """SB3 gets the plain `state` vector (its n-step replay does not take Dict observations)."""
    import gymnasium as gym

    if list(env.observation_space.spaces) != ["state"]:
        raise ConfigError(f"sb3-sac runs on state observations only; this env gives "
                          f"{list(env.observation_space.spaces)}")
    return gym.wrappers.TransformObservation(env, lambda o: o["state"], env.observation_space["state"])


def run_sb3(env_id: str, seed: int, s: dict) -> dict:
    try:
        from stable_baselines3 import SAC
        from stable_baselines3.common.callbacks import BaseCallback
    except ImportError:
        raise ConfigError("sb3-sac needs Stable-Baselines3, a benchmark-only extra: "
                          "pip install -e '.[bench]' (or drop sb3-sac from --algos)") from None
    import torch

    from robolearn.policies import evaluation
    from robolearn.policies.env_building import make_env

    torch.set_num_threads(1)
    opts = sb3_options({**s.get("agent", {}), **s.get("per_algo", {}).get(SB3, {}), **s.get("set", {})})
    env = _state_only(make_env(env_id))
    eval_env = make_env(env_id)
    model = SAC("MlpPolicy", env, buffer_size=s["steps"] + 1, learning_starts=s["learning_starts"],
                batch_size=256, tau=0.005, train_freq=1, gradient_steps=1,
                policy_kwargs=dict(net_arch=[256, 256]), seed=seed, device="cpu", verbose=0, **opts)
    timing = {"t": 0.0, "n": 0}
    train = model.train

    def timed_train(gradient_steps: int, batch_size: int = 64) -> None:
        t = time.perf_counter()
        train(gradient_steps=gradient_steps, batch_size=batch_size)
        timing["t"] += time.perf_counter() - t
        timing["n"] += gradient_steps

    model.train = timed_train
    curve: list = []

    def policy(obs):
        return model.predict(obs["state"], deterministic=True)[0]

    class EvalEvery(BaseCallback):
        def _on_step(self) -> bool:
            if s["eval_every"] and self.num_timesteps % s["eval_every"] == 0:
                r = evaluation.evaluate(eval_env, policy, s["eval_episodes"], seed=seed)
                curve.append((self.num_timesteps, r.mean_return, r.success_rate))
            return True

    t0 = time.perf_counter()
    model.learn(total_timesteps=s["steps"], callback=EvalEvery())
    if not curve or curve[-1][0] != s["steps"]:
        r = evaluation.evaluate(eval_env, policy, s["eval_episodes"], seed=seed)
        curve.append((s["steps"], r.mean_return, r.success_rate))
    wall = time.perf_counter() - t0
    env.close()
    eval_env.close()
    return dict(env=env_id, algo=SB3, seed=seed, overrides=overrides(SB3, s), env_steps=int(model.num_timesteps), updates=timing["n"],
                updates_per_s=timing["n"] / timing["t"] if timing["t"] else None, wall_s=wall,
                eval_return=curve[-1][1], eval_success_rate=curve[-1][2], demo_transitions=0, utd=1,
                curve=curve)


# ---------------------------------------------------------------------------- reporting
def steps_to(curve: list, threshold: float) -> int | None:
    for step, _, succ in curve:
        if succ is not None and not math.isnan(succ) and succ >= threshold:
            return int(step)
    return None


def _ms(values: list) -> tuple[float, float]:
    v = [x for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not v:
        return math.nan, math.nan
    return float(np.mean(v)), float(np.std(v))


def aggregate(runs: list[dict], threshold: float) -> list[dict]:
    rows = []
    keys = []
    for r in runs:
        if (r["env"], r["algo"]) not in keys:
            keys.append((r["env"], r["algo"]))
    for env_id, algo in keys:
        rs = [r for r in runs if r["env"] == env_id and r["algo"] == algo]
        reach = [steps_to(r["curve"], threshold) for r in rs]
        row = dict(env=env_id, algo=algo, overrides=rs[0].get("overrides", {}), seeds=[r["seed"] for r in rs],
                   env_steps=rs[0]["env_steps"],
                   utd=rs[0]["utd"], demo_transitions=rs[0]["demo_transitions"])
        for k in ("eval_return", "eval_success_rate", "updates", "updates_per_s", "wall_s"):
            row[k], row[k + "_std"] = _ms([r[k] for r in rs])
        row["steps_to_threshold"] = reach
        row["steps_to_first_success"] = [steps_to(r["curve"], 1e-9) for r in rs]
        row["reached"] = sum(x is not None for x in reach)
        row["steps_to_threshold_mean"] = (float(np.mean([x if x is not None else rs[0]["env_steps"] * 1.0
                                                         for x in reach])) if reach else math.nan)
        rows.append(row)
    return rows


def markdown(rows: list[dict], s: dict, speed: dict | None, argv: list[str]) -> str:
    th = s["threshold"]
    lines = ["# Learner benchmark", "",
             f"Command: `robolearn bench learners {' '.join(argv)}`", ""]
    if rows:
        lines += [f"Budget: {s['steps']} env steps per run, evaluation every {s['eval_every']} steps "
                  f"on {s['eval_episodes']} fixed episodes (deterministic policy), learning_starts "
                  f"{s['learning_starts']}. Agent options for all learners: {s.get('agent', {})}; "
                  f"per algorithm: {s.get('per_algo', {})}; from --set: {s.get('set', {})}. "
                  f"Env options: {s.get('env_kwargs', {})}. Demos: {s['demos'] or 'none'}.", ""]
        if s.get("agent", {}).get("privileged") == "actor_and_critic":
            lines += ["**Sim-only study:** the actors read the simulator's `privileged` observation "
                      "(cube pose), which hardware does not have; these policies are not deployable.", ""]
        lines += [f"| env | algo | UTD | seeds | env steps | final eval return | eval success | "
                  f"runs reaching {th:.0%} | env steps to {th:.0%} (mean; unreached = budget) | "
                  f"env steps to first eval success | gradient updates | updates/s | wall s |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            reach = ", ".join(str(x) if x is not None else "-" for x in r["steps_to_threshold"])
            first = ", ".join(str(x) if x is not None else "-" for x in r["steps_to_first_success"])
            lines.append(
                f"| {r['env']} | {r['algo']}{' + demos' if r['demo_transitions'] else ''} "
                f"({'overrides ' + json.dumps(r['overrides']) if r.get('overrides') else 'plain preset'}) | {r['utd']} | "
                f"{len(r['seeds'])} | {r['env_steps']} | {r['eval_return']:.2f} +- {r['eval_return_std']:.2f} | "
                f"{r['eval_success_rate']:.2f} +- {r['eval_success_rate_std']:.2f} | {r['reached']}/{len(r['seeds'])} | "
                f"{r['steps_to_threshold_mean']:.0f} ({reach}) | {first} | {r['updates']:.0f} | "
                f"{r['updates_per_s']:.1f} +- {r['updates_per_s_std']:.1f} | {r['wall_s']:.0f} |")
        lines.append("")
    if speed:
        lines += speed_markdown(speed)
    return "\n".join(lines)


def speed_markdown(speed: dict) -> list[str]:
    """The update-speed section (CPU suite or GPU figures)."""
    from robolearn.policies.speed_harness import describe_cpu

    if "updates_per_s" in speed:  # GPU
        lines = ["## Update speed on the GPU", "",
                 f"{speed['device_name']}, torch {speed['torch']}, batch {speed['batch_size']}, "
                 f"obs {speed['obs_dim']}, action {speed['action_dim']}, camera "
                 f"{'x'.join(map(str, speed['image']))} for the pixel rows; wall clock, measured by "
                 "`robolearn.policies.speed_gpu.measure_gpu_speed`. Ours: replay on the device "
                 "(`DeviceReplay`), each update one CUDA graph, metrics read every 100 updates. "
                 f"Presets as shipped (overrides: {speed['preset_overrides']}).", "",
                 "| learner | updates/s | GFLOP per update (counted) | achieved TFLOP/s |",
                 "|---|---|---|---|"]
        gf, tf = speed.get("update_gflop", {}), speed.get("achieved_tflops", {})
        lines += [f"| {k} | {v:.1f} | " + (f"{gf[k]:.2f} | {tf[k]:.2f} |" if k in gf else "- | - |")
                  for k, v in speed["updates_per_s"].items()]
        lines.append("")
        names = {"sac_speedup_vs_sb3": "ours sac / SB3 SAC",
                 "sac_eager_speedup_vs_sb3": "ours sac eager from host replay / SB3 SAC",
                 "redq_updates_vs_sb3_sac": "ours redq (10 critics) / SB3 SAC (2 critics)",
                 "drq_speedup_vs_sb3_cnn": "ours drq / SB3 SAC with its CNN policy, same camera + state obs"}
        lines += [f"- {txt}: **{speed[k]:.2f}x**" for k, txt in names.items() if k in speed]
        return lines + [""]
    per = speed["per_threads"]
    first = per[str(speed["threads"][0])]
    plain = speed["ours_sac_preset_overrides"]
    lines = ["## Update speed", "",
             f"Measured in this process by `robolearn.policies.speed.measure_speed_suite` (batch "
             f"{first['batch_size']}, obs {first['obs_dim']}, action {first['action_dim']}, 256x256 "
             "nets, replay sampling included). Ours is the "
             + ("plain `sac` preset" if not plain else f"`sac` preset with {plain}")
             + "; SB3 is stock `SAC('MlpPolicy')` with net_arch [256, 256]. One thread: process CPU "
             "time (robust on a shared machine); two threads: wall clock.", "",
             "| threads | ours sac updates/s | SB3 SAC updates/s | ours / SB3 | load average (cores) |",
             "|---|---|---|---|---|"]
    for t in speed["threads"]:
        r = per[str(t)]
        c = "cpu_" if r["clock"] == "cpu" else ""
        lines.append(f"| {t} | {r[f'ours_sac_{c}updates_per_s']:.1f} | "
                     + (f"{r[f'sb3_sac_{c}updates_per_s']:.1f} | **{speed[f'sac_speedup_vs_sb3_{t}thread']:.2f}x** |"
                        if r.get("sb3_sac_updates_per_s") else "- | - |")
                     + f" {r.get('load_average_1min') or 0:.1f} ({r.get('cpu_cores')}) |")
    lines += ["", "A multi-thread figure only means something when that many cores are free: with "
              "the load average above the core count, threads wait on each other and rates collapse.", ""]
    if first.get("cpu"):
        lines.append(f"- CPU: {describe_cpu(first['cpu'])} (the ratios depend on it: docs/learners.md)")
    for t in speed["threads"]:
        paths = per[str(t)].get("cpu_paths_updates_per_s")
        if paths:
            lines.append(f"- {t} thread(s), every fp32 path in the same rounds (ours = the fastest): "
                         + ", ".join(f"`{k}` {v:.1f}" for k, v in paths.items()) + " updates/s")
    for t in speed["threads"]:
        r = per[str(t)]
        if "ours_sac_default_path_updates_per_s" in r:
            lines.append(f"- {t} thread(s), the default path (`cpu_matmul=\"torch\"`, F.linear / baddbmm): "
                         f"{r['ours_sac_default_path_updates_per_s']:.1f} updates/s"
                         + (f" = {r['sac_default_path_speedup_vs_sb3']:.2f}x SB3"
                            if r.get("sac_default_path_speedup_vs_sb3") else ""))
    if speed.get("sac_update_flops"):
        gemm = first["gemm"]
        lines += [f"- one update: **{speed['sac_update_flops'] / 1e9:.3f} GFLOP** (counted by "
                  "torch.utils.flop_counter over a real update)"
                  + (f"; SB3's: {speed['sb3_update_flops'] / 1e9:.3f} GFLOP (it also computes critic "
                     "weight gradients in the actor loss)" if speed.get("sb3_update_flops") else ""),
                  f"- fastest fp32 GEMM path on this machine, measured in this run (1 thread, CPU "
                  f"time): **{speed['gemm_limit_gflops']:.1f} GFLOP/s** ({speed['gemm_limit_path']}); all "
                  "paths: " + ", ".join(f"{k} {v['cpu']:.0f}" for k, v in gemm["paths_gflops"].items())
                  + (f"; bf16 (not fp32, the `cpu_matmul=\"bf16\"` limit): mm 256^3 "
                     f"{gemm['bf16_mm_256_gflops_cpu']:.1f}"
                     + (f", oneDNN linear 256^3 {gemm['bf16_onednn_linear_256_gflops_cpu']:.1f}"
                        if "bf16_onednn_linear_256_gflops_cpu" in gemm else "")
                     if "bf16_mm_256_gflops_cpu" in gemm else ""),
                  f"- **sac_fraction_of_limit = {speed['sac_fraction_of_limit']:.2f}** (ours "
                  f"{first['sac_achieved_gflops']:.1f} GFLOP/s)"
                  + (f"; SB3: {speed['sb3_fraction_of_limit']:.2f}" if speed.get("sb3_fraction_of_limit") else "")]
        if speed.get("fp32_bound_speedup_vs_sb3"):
            lines.append(f"- **fp32 bound: {speed['fp32_bound_speedup_vs_sb3']:.2f}x SB3**: the speed-up an update "
                         "would have if all of its counted FLOPs ran at the GEMM limit above and nothing "
                         "else took time; no fp32 implementation of this update can exceed it on this machine")
        if speed.get("ours_sac_bf16_updates_per_s"):
            lines.append(f"- ours with `cpu_matmul=\"bf16\"` (an option, not a default: bf16 products in "
                         f"the update, fp32 master weights; same interleaved rounds): "
                         f"**{speed['ours_sac_bf16_updates_per_s']:.1f}** updates/s"
                         + (f" = **{speed['sac_bf16_speedup_vs_sb3']:.2f}x SB3**"
                            if speed.get("sac_bf16_speedup_vs_sb3") else "")
                         + (f", {speed['sac_bf16_fraction_of_bf16_limit']:.2f} of the bf16 GEMM limit"
                            if speed.get("sac_bf16_fraction_of_bf16_limit") else ""))
        for t in speed["threads"][1:]:
            r = per[str(t)]
            lines.append(f"- {t} threads: GEMM limit {r['gemm_limit_gflops']:.1f} GFLOP/s (wall), "
                         f"sac_fraction_of_limit {r['sac_fraction_of_limit']:.2f}")
    if speed.get("redq10_vs_2_cost_ratio"):
        lines += [f"- 10-critic redq update cost / 2-critic: **{first['redq10_vs_2_cost_ratio']:.2f}x** (wall), "
                  f"**{first['redq10_vs_2_cost_ratio_cpu']:.2f}x** (CPU time); the FLOP ratio of the two "
                  f"updates is {speed['redq10_vs_2_flop_ratio']:.2f}x (redq preset, only num_critics differs), so "
                  f"a cost ratio of 2x would need the 10-critic update to run at "
                  f"{speed['redq10_vs_2_flop_ratio'] / 2:.2f}x the FLOP rate of the 2-critic one; it runs at "
                  f"{speed['redq10_vs_2_flop_ratio'] / first['redq10_vs_2_cost_ratio_cpu']:.2f}x",
                  f"- 10-critic forward+backward as one batched op vs a Python loop over 10 MLPs: "
                  f"{first['ensemble10_batched_vs_loop_speedup']:.2f}x faster (CPU time)"]
        lines += [f"- {e}-critic forward+backward, one oneDNN product per member (`cpu_matmul=\"onednn\"`, "
                  f"an option) vs one batched baddbmm: {first[f'ensemble{e}_onednn_vs_batched_speedup']:.2f}x "
                  "faster (CPU time)" for e in (10, 2) if f"ensemble{e}_onednn_vs_batched_speedup" in first]
    if speed.get("rlpd_updates_per_s"):
        line = (f"- `rlpd` (10 critics, 3x256, UTD 20) on {speed['rlpd_threads']} thread(s): "
                f"**{speed['rlpd_updates_per_s']:.1f} updates/s** (wall); a 10 Hz robot needs "
                f"{speed['rlpd_keep_up_updates_per_s']}")
        if speed.get("rlpd_bound_updates_per_s"):
            line += (f". Bound (every counted FLOP at this run's fastest GEMM rate, nothing else): "
                     f"**{speed['rlpd_bound_updates_per_s']:.1f}** updates/s "
                     f"({speed['rlpd_update_flops'] / 1e9:.2f} GFLOP an update); with 2x256 networks "
                     f"{speed['rlpd_2x256_bound_updates_per_s']:.1f} "
                     f"({speed['rlpd_2x256_update_flops'] / 1e9:.2f} GFLOP)")
        lines.append(line)
    return lines + [""]


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(r["env"] for r in runs))
    fig, axes = plt.subplots(2, len(envs), figsize=(6 * len(envs), 7), squeeze=False)
    for j, env_id in enumerate(envs):
        for algo in dict.fromkeys(r["algo"] for r in runs if r["env"] == env_id):
            rs = [r for r in runs if r["env"] == env_id and r["algo"] == algo]
            steps = [c[0] for c in rs[0]["curve"]]
            n = min(len(r["curve"]) for r in rs)
            for i, idx in enumerate((1, 2)):
                vals = np.array([[c[idx] for c in r["curve"][:n]] for r in rs], dtype=float)
                m, sd = vals.mean(0), vals.std(0)
                ax = axes[i][j]
                ax.plot(steps[:n], m, "o-", ms=3, label=f"{algo} ({len(rs)} seeds)")
                ax.fill_between(steps[:n], m - sd, m + sd, alpha=0.2)
        axes[0][j].set_title(env_id)
        axes[0][j].set_ylabel("eval return")
        axes[1][j].set_ylabel("eval success rate")
        axes[1][j].set_ylim(-0.05, 1.05)
        axes[1][j].set_xlabel("env steps")
        for ax in axes[:, j]:
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    s = resolve(args)
    out = Path(args.out or f"runs/bench-learners-{args.suite}")
    out.mkdir(parents=True, exist_ok=True)
    if SB3 in s["algos"]:
        try:
            import stable_baselines3  # noqa: F401
        except ImportError:
            raise ConfigError("sb3-sac needs Stable-Baselines3, a benchmark-only extra: "
                              "pip install -e '.[bench]' (or drop sb3-sac from --algos)") from None
    runs: list[dict] = []
    t_all = time.perf_counter()
    if args.engine == "ray":
        from robolearn.runtime.ray_cluster import require_ray

        require_ray()  # before any work: without Ray, one line saying how to install it
        s["engine"] = "ray"
        runs = _runs_on_ray(s, out, argv, t_all, args.ray_address)
    for env_id in (s["envs"] if args.engine == "local" else []):
        for seed in s["seeds"]:  # seeds outermost per env: a partial run still compares algos
            for algo in s["algos"]:
                print(f"[bench learners] {env_id} {algo} seed {seed}: {s['steps']} env steps", flush=True)
                r = run_sb3(env_id, seed, s) if algo == SB3 else run_ours(env_id, algo, seed, s, out)
                print(f"[bench learners]   eval return {r['eval_return']:.2f}, success "
                      f"{r['eval_success_rate']:.2f}, {r['updates']} updates at "
                      f"{r['updates_per_s'] or 0:.1f}/s, {r['wall_s']:.0f} s", flush=True)
                runs.append(r)
                _write(out, runs, s, None, argv, t_all)  # keep partial results on disk
    speed = None
    if s["speed"]:
        from robolearn.policies.speed import measure_speed_suite
        from robolearn.policies.speed_gpu import measure_gpu_speed

        if args.device.startswith("cuda"):
            speed = measure_gpu_speed(args.device, steps=args.speed_steps)
        else:
            speed = measure_speed_suite(threads=(1, 2), steps=args.speed_steps)
    rows = _write(out, runs, s, speed, argv, t_all)
    print(markdown(rows, s, speed, argv))
    print(f"[bench learners] wrote {out}/results.md, results.json" + (", learning_curves.png" if runs else ""))
    return 0


def run_one(env_id: str, algo: str, seed: int, s: dict, out: Path) -> dict:
    """One (env, algo, seed) run, exactly as the sequential loop does it (each run seeds its
    own generators and sets 1 torch thread), so a Ray task gives the same numbers."""
    return run_sb3(env_id, seed, s) if algo == SB3 else run_ours(env_id, algo, seed, s, out)


def _runs_on_ray(s: dict, out: Path, argv: list[str], t_all: float, address: str) -> list[dict]:
    """Every (env, seed, algo) of the sequential order as a Ray task (1 CPU each); results kept
    in that order, written as they arrive."""
    from robolearn.runtime.ray_cluster import init_ray

    ray = init_ray(address)
    task = ray.remote(num_cpus=1, max_retries=0)(run_one)
    keys = [(env_id, algo, seed) for env_id in s["envs"] for seed in s["seeds"] for algo in s["algos"]]
    refs = {}
    for env_id, algo, seed in keys:
        refs[task.remote(env_id, algo, seed, s, out.resolve())] = (env_id, algo, seed)
    print(f"[bench learners] {len(keys)} runs as Ray tasks on {ray.cluster_resources().get('CPU', 0):.0f} "
          f"CPUs: {s['steps']} env steps each", flush=True)
    done: dict = {}
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        r = ray.get(ready[0])
        done[refs[ready[0]]] = r
        print(f"[bench learners] {r['env']} {r['algo']} seed {r['seed']}: eval return "
              f"{r['eval_return']:.2f}, success {r['eval_success_rate']:.2f}, {r['updates']} updates at "
              f"{r['updates_per_s'] or 0:.1f}/s, {r['wall_s']:.0f} s", flush=True)
        _write(out, [done[k] for k in keys if k in done], s, None, argv, t_all)
    return [done[k] for k in keys]


def _write(out: Path, runs: list, s: dict, speed: dict | None, argv: list[str], t_all: float) -> list[dict]:
    rows = aggregate(runs, s["threshold"])
    (out / "results.json").write_text(json.dumps(
        {"settings": {k: v for k, v in s.items()}, "argv": argv, "rows": rows, "runs": runs,
         "update_speed": speed, "total_wall_s": time.perf_counter() - t_all}, indent=1))
    (out / "results.md").write_text(markdown(rows, s, speed, argv))
    if runs:
        plot(runs, out / "learning_curves.png")
    return rows
