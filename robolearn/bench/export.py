"""`robolearn bench export`: latency per action of an exported policy vs the torch agent.

Measures, in one run and on this CPU, single-observation (unbatched, as on a robot) action
latency of: the torch `Agent.act(deterministic=True)` (baseline), the ONNX file on
onnxruntime and the TorchScript file, for a state policy (ArmReach, sac) and a pixel policy
(ArmReach obs="both": one 84x84 camera + state, drq). Also reports export parity (max |a_torch -
a_export| over 1000 observations). The agents are freshly initialised: latency does not
depend on the weights' values.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np


def _agent(obs_mode: str, algo: str):
    import gymnasium as gym

    from robolearn.policies.registry import make_agent

    env = gym.make("robolearn/ArmReach-v0", obs="both", camera="front") if obs_mode != "state" \
        else gym.make("robolearn/ArmReach-v0")
    try:
        agent = make_agent(algo, env.observation_space, env.action_space, seed=0)
    finally:
        env.close()
    return agent


def measure(obs_mode: str, algo: str, n: int, workdir: Path) -> dict:
    from robolearn.policies.export import (ExportedPolicy, export_policy, latency_per_action,
                                           sample_observations)

    agent = _agent(obs_mode, algo)
    one = {k: v[0] for k, v in sample_observations(agent, 1, seed=1).items()}
    row = {"obs": obs_mode, "algo": algo,
           "torch": latency_per_action(lambda o: agent.act(o, deterministic=True), one, n)}
    for fmt, suffix in (("onnx", ".onnx"), ("torchscript", ".pt")):
        path = workdir / f"{obs_mode}_{algo}{suffix}"
        spec = export_policy(agent, fmt, path, parity_samples=1000)
        lat = latency_per_action(ExportedPolicy(path), one, n)
        lat["speedup_vs_torch_p50"] = row["torch"]["p50_ms"] / lat["p50_ms"]
        lat["parity_max_abs_error"] = spec["parity_max_abs_error"]
        row[fmt] = lat
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="robolearn bench export", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--actions", type=int, default=300, help="timed actions per case (default 300)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: one action at a time)")
    p.add_argument("--skip-pixels", action="store_true", help="state policy only")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)
    os.environ.setdefault("MUJOCO_GL", "egl")
    import torch

    torch.set_num_threads(args.threads)
    cases = [("state", "sac")] + ([] if args.skip_pixels else [("both", "drq")])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for obs_mode, algo in cases:
            rows.append(measure(obs_mode, algo, args.actions, Path(tmp)))
    print(f"latency per action, 1 observation at a time, torch threads={args.threads}")
    print(f"{'policy':<14}{'torch p50/p99 ms':>20}{'onnx p50/p99 ms':>20}{'x torch':>9}"
          f"{'torchscript p50/p99':>22}{'x torch':>9}{'parity':>10}")
    for r in rows:
        t, o, s = r["torch"], r["onnx"], r["torchscript"]
        parity = max(o["parity_max_abs_error"], s["parity_max_abs_error"])
        print(f"{r['obs'] + '/' + r['algo']:<14}{t['p50_ms']:>10.3f}/{t['p99_ms']:<9.3f}"
              f"{o['p50_ms']:>10.3f}/{o['p99_ms']:<9.3f}{o['speedup_vs_torch_p50']:>9.2f}"
              f"{s['p50_ms']:>12.3f}/{s['p99_ms']:<9.3f}{s['speedup_vs_torch_p50']:>9.2f}{parity:>10.1e}")
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": args.threads, "rows": rows}, indent=1))
    return 0
