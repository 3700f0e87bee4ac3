"""Update-speed measurement: our `sac` vs Stable-Baselines3 SAC, against the machine's limit.

Why: on a real robot the learner must keep up with a 10 Hz arm at UTD 20, so gradient
updates/s is a product requirement. Both learners are timed in this process, same network
sizes, same batch size, same obs/action dims, including replay sampling (SB3's `train()`
samples internally, so ours samples from our ReplayBuffer inside the timed loop).

A ratio against SB3 alone does not say how much is left to gain, so `measure_speed_suite`
also counts the FLOPs of one update (torch.utils.flop_counter over a real update, not a
formula), measures the fastest fp32 matrix-multiply path this machine offers (MKL `mm` and
`bmm`, oneDNN's inner product on dense, prepacked and mkldnn-typed operands, at the update's
shape and a large one) in the same run, and
reports `sac_fraction_of_limit` = achieved update FLOP/s / that GEMM rate. On CPU it also
times the `cpu_matmul="bf16"` option in the same interleaved rounds, against the bf16 kernels'
rate (`sac_bf16_fraction_of_bf16_limit`). `robolearn bench
learners --suite speed` calls it. The runners, timing and FLOP counting it shares with the GPU
measurement (`speed_gpu.py`) are in `speed_harness.py`.
"""
from __future__ import annotations

import copy
import os
import random
import time

import numpy as np
import torch

from robolearn.data.replay import ReplayBuffer
from robolearn.policies import onednn
from robolearn.policies.registry import make_config
from robolearn.policies.speed_harness import (_fill_ours, _interleaved, _our_runner, _random_data, _sb3_runner,
                                             _sb3_update_flops, _spaces, count_update_flops, cpu_identity,
                                             describe_cpu, preset_overrides)


def _gemm_paths(n: int, device: str) -> dict:
    """fp32 matrix-multiply routes torch offers here, each doing one n x n x n product (bmm: two).

    CPU: MKL `mm`/`bmm`; oneDNN's inner product on dense unpacked weights (the route the
    `cpu_matmul="onednn"` update takes), on a weight prepacked once by
    `_reorder_linear_weight`, and `mkldnn_linear` on tensors converted `to_mkldnn()`; the two
    prepacked routes are bounds for a learner that would repack after each optimiser step."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a2, b2 = torch.randn(2, n, n, device=device), torch.randn(2, n, n, device=device)
    paths = {f"mm {n}^3": (lambda: torch.mm(a, b), 2 * n ** 3),
             f"bmm 2x{n}^3": (lambda: torch.bmm(a2, b2), 4 * n ** 3)}
    if device != "cpu" or not torch.backends.mkldnn.is_available():
        return paths
    try:  # oneDNN's inner-product kernel on dense tensors (what policies/onednn.py calls)
        linear = torch.ops.mkldnn._linear_pointwise
        linear(a, b, None, "none", [], "")
        paths[f"oneDNN linear dense {n}^3"] = (lambda: linear(a, b, None, "none", [], ""), 2 * n ** 3)
    except (AttributeError, RuntimeError):
        return paths
    try:  # the same kernel on a weight reordered once into oneDNN's blocked layout
        packed = torch.ops.mkldnn._reorder_linear_weight(b)
        linear(a, packed, None, "none", [], "")
        paths[f"oneDNN linear packed {n}^3"] = (lambda: linear(a, packed, None, "none", [], ""), 2 * n ** 3)
    except (AttributeError, RuntimeError):
        pass
    try:  # torch's mkldnn tensor type: input and weight converted once
        am, bm = a.to_mkldnn(), b.to_mkldnn()
        mk = torch._C._nn.mkldnn_linear
        mk(am, bm, None)
        paths[f"mkldnn_linear mkldnn tensors {n}^3"] = (lambda: mk(am, bm, None), 2 * n ** 3)
    except (AttributeError, RuntimeError):
        pass
    return paths


def measure_gemm_limit(device: str = "cpu", sizes=(256, 1024), min_time: float = 0.25) -> dict:
    """GFLOP/s of every fp32 matrix-multiply path at the update's shape (256) and a large one,
    measured now; `limit_gflops` is the fastest. Wall and process-CPU clocks (the CPU clock is
    the robust one for one thread on a shared machine); tf32 stays off (fp32 accuracy)."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    res: dict[str, dict] = {}
    for n in sizes:
        for name, (fn, flops) in _gemm_paths(n, device).items():
            for _ in range(3):
                fn()
            sync()
            walls, cpus = [], []
            for _ in range(5):  # 5 blocks, median: robust to other processes' bursts
                reps, t0, c0 = 0, time.perf_counter(), time.process_time()
                while reps < 3 or time.perf_counter() - t0 < min_time / 5:
                    fn()
                    reps += 1
                sync()
                walls.append(flops * reps / (time.perf_counter() - t0) / 1e9)
                cpus.append(flops * reps / max(time.process_time() - c0, 1e-9) / 1e9)
            res[name] = {"wall": float(np.median(walls)), "cpu": float(np.median(cpus))}
    best = {clock: max(res, key=lambda k: res[k][clock]) for clock in ("wall", "cpu")}
    out = {"paths_gflops": res, "limit_path": best,
           "limit_gflops": {clock: res[best[clock]][clock] for clock in ("wall", "cpu")}}
    if device == "cpu":  # not fp32, so never the fp32 limit: the limit of cpu_matmul="bf16"
        a = torch.randn(256, 256, dtype=torch.bfloat16)
        bf16 = {"bf16_mm_256_gflops_cpu": lambda: torch.mm(a, a)}
        if torch.backends.mkldnn.is_available():  # the kernel the bf16 update's forward runs
            try:
                linear = torch.ops.mkldnn._linear_pointwise
                linear(a, a, None, "none", [], "")
                bf16["bf16_onednn_linear_256_gflops_cpu"] = lambda: linear(a, a, None, "none", [], "")
            except (AttributeError, RuntimeError):
                pass
        for key, fn in bf16.items():
            fn()
            rates = []
            for _ in range(5):  # 5 blocks, median, as for fp32
                reps, c0 = 0, time.process_time()
                while reps < 3 or time.process_time() - c0 < min_time / 5:
                    fn()
                    reps += 1
                rates.append(2 * 256 ** 3 * reps / max(time.process_time() - c0, 1e-9) / 1e9)
            out[key] = float(np.median(rates))
        out["bf16_limit_gflops_cpu"] = max(out[k] for k in bf16)
    return out


def measure_ensemble_batching(num_critics: int = 10, in_dim: int = 23, hidden: int = 256,
                              batch_size: int = 256, steps: int = 30, rounds: int = 3,
                              device: str = "cpu") -> dict:
    """Forward+backward of a critic ensemble as ONE batched EnsembleMLP (baddbmm over the
    members), as the same EnsembleMLP with one oneDNN product per member (`cpu_matmul="onednn"`,
    CPU only), and as a Python loop over separate nn.Sequential MLPs (what batching replaces)."""
    from torch import nn

    from robolearn.policies import onednn
    from robolearn.policies.networks import EnsembleMLP, mlp

    torch.manual_seed(0)
    x = torch.randn(batch_size, in_dim, device=device)
    batched = EnsembleMLP(num_critics, in_dim, (hidden, hidden), 1).to(device)
    looped = nn.ModuleList([mlp(in_dim, (hidden, hidden), 1) for _ in range(num_critics)]).to(device)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)

    def run_batched(k):
        for _ in range(k):
            batched(x).square().mean().backward()

    def run_looped(k):
        for _ in range(k):
            torch.stack([m(x) for m in looped]).square().mean().backward()

    runners = {"batched": run_batched, "loop": run_looped}
    if str(device) == "cpu" and onednn.available():
        per_member = onednn.use_onednn(copy.deepcopy(batched))

        def run_onednn(k):
            for _ in range(k):
                per_member(x).square().mean().backward()

        runners["onednn"] = run_onednn
    speed = _interleaved(runners, steps, 3, rounds, sync)
    out = {"ensemble_size": num_critics,
           "batched_steps_per_s": speed["batched"]["cpu"], "loop_steps_per_s": speed["loop"]["cpu"],
           "batched_vs_loop_speedup": speed["batched"]["cpu"] / speed["loop"]["cpu"]}
    if "onednn" in speed:
        out["onednn_steps_per_s"] = speed["onednn"]["cpu"]
        out["onednn_vs_batched_speedup"] = speed["onednn"]["cpu"] / speed["batched"]["cpu"]
    return out


def measure_update_speed(obs_dim: int = 17, action_dim: int = 6, steps: int = 200, warmup: int = 20,
                         batch_size: int = 256, device: str = "cpu", seed: int = 0,
                         include_sb3: bool = True, num_threads: int | None = 1, rounds: int = 5,
                         print_fn=print, ensemble: bool = True, limit: bool = True,
                         rlpd: bool = False) -> dict:
    """Gradient updates/s of our `sac` (UTD 1) vs SB3 SAC, and of `redq` with 10 vs 2 critics;
    with `rlpd`, the `rlpd` preset's updates/s and the most this machine's GEMM rate allows it.

    Returns a dict with `ours_sac_updates_per_s`, `sb3_sac_updates_per_s` (None without SB3),
    `sac_speedup_vs_sb3`, `redq10_updates_per_s`, `redq2_updates_per_s`,
    `redq10_vs_2_cost_ratio` (time of a 10-critic update / a 2-critic update), the same
    figures from process CPU time (`*_cpu*` keys; robust on a shared machine) and the settings.
    """
    # leave the caller's process as it was: thread count and global RNGs (SB3 seeds them)
    threads_before = torch.get_num_threads()
    py_state, np_state = random.getstate(), np.random.get_state()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        with torch.random.fork_rng(devices=[]):
            return _measure(obs_dim, action_dim, steps, warmup, batch_size, device, seed,
                            include_sb3, rounds, print_fn, ensemble, limit, rlpd)
    finally:
        torch.set_num_threads(threads_before)
        random.setstate(py_state)
        np.random.set_state(np_state)


def _measure(obs_dim, action_dim, steps, warmup, batch_size, device, seed, include_sb3, rounds,
             print_fn, ensemble=True, limit=True, rlpd=False) -> dict:
    obs_space, act_space = _spaces(obs_dim, action_dim)
    n = max(5000, 4 * batch_size)
    data = _random_data(n, obs_dim, action_dim, seed)
    buf = ReplayBuffer(obs_space, act_space, n + 100, seed=seed)
    _fill_ours(buf, data)

    threads = torch.get_num_threads()
    # one thread on CPU: process CPU time is the robust clock on a shared machine; with more
    # threads (or a GPU) it no longer equals elapsed time, so wall clock is the figure
    clock = "cpu" if str(device) == "cpu" and threads == 1 else "wall"
    out: dict = dict(obs_dim=obs_dim, action_dim=action_dim, batch_size=batch_size, steps=steps,
                     device=device, threads=threads, clock=clock, cpu_cores=os.cpu_count(),
                     load_average_1min=os.getloadavg()[0] if hasattr(os, "getloadavg") else None)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    # ours: the fastest path we have. On CPU that depends on the CPU (cpu_identity), so the
    # fp32 candidates run in the same rounds and "ours" is the fastest of them in this run;
    # the default path ("ours_default") and the previous fast path are measured beside it.
    candidates = ({"manual+onednn": {"cpu_update": "manual", "cpu_matmul": "onednn"},
                   "manual+torch": {"cpu_update": "manual"},
                   "autograd+onednn": {"cpu_matmul": "onednn"}} if str(device) == "cpu" else {"": {}})
    runners = {f"ours:{k}": _our_runner("sac", obs_space, act_space, buf, batch_size, device, seed, **v)
               for k, v in candidates.items()}
    if str(device) == "cpu":
        out["cpu"] = cpu_identity()
        runners["ours_default"] = _our_runner("sac", obs_space, act_space, buf, batch_size, device, seed)
    if include_sb3:
        try:
            runners["sb3"] = _sb3_runner(data, obs_dim, action_dim, batch_size, device, seed)
        except ImportError:
            print_fn("stable-baselines3 not installed (pip install -e .[bench]); skipping SB3")
    if str(device) == "cpu" and onednn.bf16_available():  # the bf16 option, same rounds
        runners["ours_bf16"] = _our_runner("sac", obs_space, act_space, buf, batch_size, device, seed,
                                           cpu_matmul="bf16")
    speed = _interleaved(runners, steps, warmup, rounds, sync)
    best = max(candidates, key=lambda k: speed[f"ours:{k}"][clock])
    speed["ours"] = speed[f"ours:{best}"]
    out["ours_sac_preset_overrides"] = preset_overrides(make_config("sac", batch_size=batch_size,
                                                                    **candidates[best]))
    if len(candidates) > 1:
        out["cpu_paths_updates_per_s"] = {k: speed[f"ours:{k}"][clock] for k in candidates}
        out["cpu_paths_updates_per_s"]["autograd+torch (default)"] = speed["ours_default"][clock]
    if "ours_bf16" in speed:
        out["ours_sac_bf16_updates_per_s"] = speed["ours_bf16"][clock]
        if "sb3" in speed:
            out["sac_bf16_speedup_vs_sb3"] = speed["ours_bf16"][clock] / speed["sb3"][clock]
    if "ours_default" in speed:
        out["ours_sac_default_path_updates_per_s"] = speed["ours_default"][clock]
        if "sb3" in speed:
            out["sac_default_path_speedup_vs_sb3"] = speed["ours_default"][clock] / speed["sb3"][clock]
    out["ours_sac_updates_per_s"] = speed["ours"]["wall"]
    out["ours_sac_cpu_updates_per_s"] = speed["ours"]["cpu"]
    out["sb3_sac_updates_per_s"] = speed["sb3"]["wall"] if "sb3" in speed else None
    out["sb3_sac_cpu_updates_per_s"] = speed["sb3"]["cpu"] if "sb3" in speed else None
    out["sac_speedup_vs_sb3"] = out["sac_speedup_vs_sb3_cpu"] = None
    if "sb3" in speed:
        out["sac_speedup_vs_sb3"] = speed["ours"]["wall"] / speed["sb3"]["wall"]
        out["sac_speedup_vs_sb3_cpu"] = speed["ours"]["cpu"] / speed["sb3"]["cpu"]
    if limit:
        out["sac_update_flops"] = count_update_flops("sac", obs_space, act_space, buf, batch_size,
                                                     device, seed)
        out["sb3_update_flops"] = (_sb3_update_flops(runners["sb3"].model, batch_size)
                                   if "sb3" in runners else None)
        gemm = measure_gemm_limit(str(device))
        out["gemm"] = gemm
        out["gemm_limit_gflops"] = gemm["limit_gflops"][clock]
        out["gemm_limit_path"] = gemm["limit_path"][clock]
        achieved = speed["ours"][clock] * out["sac_update_flops"] / 1e9
        out["sac_achieved_gflops"] = achieved
        out["sac_fraction_of_limit"] = achieved / out["gemm_limit_gflops"]
        if "ours_bf16" in speed and "bf16_limit_gflops_cpu" in gemm:
            # the bf16 update against the bf16 kernels' rate (CPU time, one thread: the limit's clock)
            out["sac_bf16_fraction_of_bf16_limit"] = (speed["ours_bf16"]["cpu"] * out["sac_update_flops"]
                                                      / 1e9 / gemm["bf16_limit_gflops_cpu"])
        if "sb3" in speed:
            out["sb3_fraction_of_limit"] = (speed["sb3"][clock] * out["sb3_update_flops"] / 1e9
                                            / out["gemm_limit_gflops"])
            # the most any fp32 implementation of this update could gain over SB3 here: all of
            # its FLOPs at the fastest GEMM rate and nothing else (no elementwise work, no Python)
            out["fp32_bound_speedup_vs_sb3"] = (out["gemm_limit_gflops"] * 1e9 / out["sac_update_flops"]
                                                / speed["sb3"][clock])
    # the path "ours" took above (the manual update covers redq and rlpd too)
    path = {k: v for k, v in candidates[best].items() if k in ("cpu_update", "cpu_matmul")}
    if rlpd:
        out.update(_measure_rlpd(obs_space, act_space, buf, batch_size, device, seed, path, steps,
                                 warmup, rounds, sync, clock, out.get("gemm_limit_gflops")))
    if ensemble:
        # Same preset and policy delay, only the ensemble size differs: isolates the critic cost.
        runners = {k: _our_runner("redq", obs_space, act_space, buf, batch_size, device, seed,
                                  num_critics=k, **path) for k in (10, 2)}
        speed = _interleaved(runners, steps, warmup, rounds, sync)
        out["redq10_updates_per_s"], out["redq2_updates_per_s"] = speed[10]["wall"], speed[2]["wall"]
        out["redq10_vs_2_cost_ratio"] = speed[2]["wall"] / speed[10]["wall"]
        out["redq10_vs_2_cost_ratio_cpu"] = speed[2]["cpu"] / speed[10]["cpu"]
        flops = {k: count_update_flops("redq", obs_space, act_space, buf, batch_size, device, seed,
                                       num_critics=k) for k in (10, 2)}
        out["redq10_update_flops"], out["redq2_update_flops"] = flops[10], flops[2]
        out["redq10_vs_2_flop_ratio"] = flops[10] / flops[2]
        out["redq_preset_overrides"] = {k: preset_overrides(make_config("redq", num_critics=k,
                                                                        batch_size=batch_size, **path))
                                        for k in (10, 2)}
        for e in (10, 2):
            ens = measure_ensemble_batching(num_critics=e, device=device)
            out[f"ensemble{e}_batched_vs_loop_speedup"] = ens["batched_vs_loop_speedup"]
            if "onednn_vs_batched_speedup" in ens:
                out[f"ensemble{e}_onednn_vs_batched_speedup"] = ens["onednn_vs_batched_speedup"]
    _print(out, print_fn)
    return out


#: a 10 Hz robot at RLPD's UTD 20 needs this many updates/s from the learner (issue 25)
RLPD_KEEP_UP_UPDATES_PER_S = 200


def _measure_rlpd(obs_space, act_space, buf, batch_size, device, seed, path, steps, warmup, rounds,
                  sync, clock, gemm_limit_gflops) -> dict:
    """Can the `rlpd` preset (RLPD's paper setting: 10 critics, UTD 20) keep up with a 10 Hz
    robot? Its measured updates/s and its bound: every counted FLOP at the fastest GEMM rate
    measured in the same run with nothing else taking time. The bound is given for the preset's
    3x256 networks and for 2x256 ones (RLPD's locomotion setting), so that the verdict does not
    hang on the network size. Timed on the run's `clock` (wall with 2+ threads)."""
    runner = _our_runner("rlpd", obs_space, act_space, buf, batch_size, device, seed, **path)
    # ~30 ms an update on 2 CPU cores: a third of the sac steps keeps the suite's time in bounds
    speed = _interleaved({"rlpd": runner}, max(20, steps // 3), warmup, rounds, sync)
    out = {"rlpd_updates_per_s": speed["rlpd"][clock], "rlpd_keep_up_updates_per_s": RLPD_KEEP_UP_UPDATES_PER_S}
    small = {"critic_hidden": (256, 256), "actor_hidden": (256, 256)}
    for key, over in (("rlpd", {}), ("rlpd_2x256", small)):
        flops = count_update_flops("rlpd", obs_space, act_space, buf, batch_size, device, seed, **over)
        out[f"{key}_update_flops"] = flops
        if gemm_limit_gflops:
            out[f"{key}_bound_updates_per_s"] = gemm_limit_gflops * 1e9 / flops
    return out


def _print(out: dict, print_fn) -> None:
    plain = out["ours_sac_preset_overrides"]
    print_fn(f"update speed ({out['device']}, {out['threads']} thread(s), batch {out['batch_size']}, "
             f"obs {out['obs_dim']}, act {out['action_dim']}, 256x256 nets; wall clock | process CPU time):")
    print_fn(f"  ours sac  : {out['ours_sac_updates_per_s']:8.1f} | {out['ours_sac_cpu_updates_per_s']:8.1f} "
             f"updates/s ({'plain sac preset' if not plain else f'sac preset with {plain}'})")
    if "cpu" in out:
        print_fn(f"  CPU: {describe_cpu(out['cpu'])}")
    if "cpu_paths_updates_per_s" in out:
        print_fn("  fp32 paths (same rounds): " + ", ".join(
            f"{k} {v:.1f}" for k, v in out["cpu_paths_updates_per_s"].items()) + f" updates/s ({out['clock']} clock)")
    if "ours_sac_default_path_updates_per_s" in out:
        print_fn(f"  ours sac, default cpu_matmul='torch' path: {out['ours_sac_default_path_updates_per_s']:8.1f} "
                 f"updates/s ({out['clock']} clock)")
    if out["sb3_sac_updates_per_s"] is not None:
        print_fn(f"  SB3 SAC   : {out['sb3_sac_updates_per_s']:8.1f} | {out['sb3_sac_cpu_updates_per_s']:8.1f} updates/s"
                 f"  -> ours/SB3 = {out['sac_speedup_vs_sb3']:.2f}x | {out['sac_speedup_vs_sb3_cpu']:.2f}x")
    if "sac_fraction_of_limit" in out:
        print_fn(f"  one update: {out['sac_update_flops'] / 1e9:.3f} GFLOP (counted); fastest fp32 GEMM "
                 f"here: {out['gemm_limit_gflops']:.1f} GFLOP/s ({out['gemm_limit_path']}, {out['clock']} clock)"
                 f" -> ours at {out['sac_achieved_gflops']:.1f} GFLOP/s = sac_fraction_of_limit "
                 f"{out['sac_fraction_of_limit']:.2f}"
                 + (f", SB3 {out['sb3_fraction_of_limit']:.2f}" if "sb3_fraction_of_limit" in out else ""))
    if "fp32_bound_speedup_vs_sb3" in out:
        print_fn(f"  fp32 bound: with every FLOP at the GEMM limit and no other work, an update would be "
                 f"{out['fp32_bound_speedup_vs_sb3']:.2f}x SB3's rate (the most fp32 can give here)")
    if "ours_sac_bf16_updates_per_s" in out:
        print_fn(f"  ours sac, cpu_matmul='bf16' (an option; same rounds): "
                 f"{out['ours_sac_bf16_updates_per_s']:8.1f} updates/s ({out['clock']} clock)"
                 + (f" = {out['sac_bf16_speedup_vs_sb3']:.2f}x SB3" if "sac_bf16_speedup_vs_sb3" in out else "")
                 + (f"; {out['sac_bf16_fraction_of_bf16_limit']:.2f} of the bf16 GEMM limit "
                    f"{out['gemm']['bf16_limit_gflops_cpu']:.1f} GFLOP/s (CPU time)"
                    if "sac_bf16_fraction_of_bf16_limit" in out else ""))
    if "redq10_updates_per_s" in out:
        print_fn(f"  redq N=10 : {out['redq10_updates_per_s']:8.1f} updates/s (wall)")
        print_fn(f"  redq N=2  : {out['redq2_updates_per_s']:8.1f} updates/s (wall)  -> a 10-critic update costs "
                 f"{out['redq10_vs_2_cost_ratio']:.2f}x | {out['redq10_vs_2_cost_ratio_cpu']:.2f}x a 2-critic one "
                 f"(FLOP ratio {out['redq10_vs_2_flop_ratio']:.2f}x)")
        print_fn(f"  10-critic forward+backward, one batched op vs a Python loop over 10 MLPs: "
                 f"{out['ensemble10_batched_vs_loop_speedup']:.2f}x faster (CPU time)")
        for e in (10, 2):
            if f"ensemble{e}_onednn_vs_batched_speedup" in out:
                print_fn(f"  {e}-critic forward+backward, one oneDNN product per member vs one batched "
                         f"baddbmm: {out[f'ensemble{e}_onednn_vs_batched_speedup']:.2f}x faster (CPU time)")
    if "rlpd_updates_per_s" in out:
        print_fn(f"  rlpd (10 critics, UTD 20): {out['rlpd_updates_per_s']:.1f} updates/s ({out['clock']} clock); "
                 f"a 10 Hz robot needs {out['rlpd_keep_up_updates_per_s']}"
                 + (f"; bound at the GEMM limit: {out['rlpd_bound_updates_per_s']:.1f} "
                    f"({out['rlpd_update_flops'] / 1e9:.2f} GFLOP an update), with 2x256 nets "
                    f"{out['rlpd_2x256_bound_updates_per_s']:.1f} ({out['rlpd_2x256_update_flops'] / 1e9:.2f} GFLOP)"
                    if "rlpd_bound_updates_per_s" in out else ""))


def measure_speed_suite(threads=(1, 2), steps: int = 300, device: str = "cpu",
                        print_fn=print, **kwargs) -> dict:
    """`robolearn bench learners --suite speed`: ours vs SB3 at each thread count, the FLOP
    count, the GEMM limit and `sac_fraction_of_limit` per thread count, and the 10- vs
    2-critic cost (first thread count only: it is a ratio of our own updates), and `rlpd`'s
    updates/s against its bound and a 10 Hz robot's need (last thread count: the machine's cores)."""
    per = {}
    for i, t in enumerate(threads):
        per[str(t)] = measure_update_speed(steps=steps, device=device, num_threads=t,
                                           ensemble=(i == 0), rlpd=(i == len(threads) - 1),
                                           print_fn=print_fn, **kwargs)
    first = per[str(threads[0])]
    summary = {k: first.get(k) for k in (
        "sac_update_flops", "sb3_update_flops", "gemm_limit_gflops", "gemm_limit_path",
        "sac_fraction_of_limit", "sb3_fraction_of_limit", "redq10_vs_2_cost_ratio",
        "redq10_vs_2_cost_ratio_cpu", "redq10_vs_2_flop_ratio", "ours_sac_preset_overrides",
        "redq_preset_overrides", "fp32_bound_speedup_vs_sb3", "ours_sac_bf16_updates_per_s",
        "sac_bf16_speedup_vs_sb3", "sac_bf16_fraction_of_bf16_limit", "cpu", "cpu_paths_updates_per_s")}
    last = per[str(threads[-1])]
    summary.update({k: last[k] for k in (
        "rlpd_updates_per_s", "rlpd_keep_up_updates_per_s", "rlpd_update_flops", "rlpd_bound_updates_per_s",
        "rlpd_2x256_update_flops", "rlpd_2x256_bound_updates_per_s") if k in last})
    summary["rlpd_threads"] = threads[-1]
    for t in threads:
        r = per[str(t)]
        summary[f"sac_speedup_vs_sb3_{t}thread"] = (
            r["sac_speedup_vs_sb3_cpu"] if r["clock"] == "cpu" else r["sac_speedup_vs_sb3"])
    return {"suite": "speed", "device": device, "threads": list(threads), "per_threads": per,
            **summary}
