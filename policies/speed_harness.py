"""What the speed measurements share: random data, update runners (ours, SB3), timing, FLOP counts."""
from __future__ import annotations

import dataclasses
import platform
import time

import gymnasium as gym
import numpy as np
import torch

from robolearn.data.replay import ReplayBuffer
from robolearn.policies.registry import make_agent, make_config


def cpu_identity() -> dict:
    """Which CPU ran a speed figure. Why: the ratios depend on the microarchitecture, not only
    on the code: on an AMD EPYC of family 25 (Zen 4, AVX-512 on 256-bit units) oneDNN's fp32
    inner product ran at about MKL's rate, on the EPYC of earlier runs at about twice it
    (docs/learners.md), so a figure without its CPU cannot be compared."""
    info = {"machine": platform.machine(), "model_name": platform.processor() or None,
            "family": None, "model": None, "flags": [],
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read().split("\n\n")[0]
    except OSError:
        return info
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    info["model_name"] = fields.get("model name", info["model_name"])
    info["family"] = int(fields["cpu family"]) if fields.get("cpu family", "").isdigit() else None
    info["model"] = int(fields["model"]) if fields.get("model", "").isdigit() else None
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
    info["flags"] = [f for f in fields.get("flags", "").split() if f in wanted]
    return info


def describe_cpu(info: dict) -> str:
    """One line for a results table: model name, family/model, the vector flags that matter."""
    fam = (f", family {info['family']} model {info['model']}" if info.get("family") is not None else "")
    return (f"{info.get('model_name') or info.get('machine')}{fam}; "
            f"{' '.join(info.get('flags') or []) or 'no AVX flags read'}; "
            f"torch CPU capability {info.get('torch_cpu_capability')}")


def _spaces(obs_dim: int, action_dim: int):
    obs = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)})
    act = gym.spaces.Box(-1.0, 1.0, (action_dim,), np.float32)
    return obs, act


def _random_data(n: int, obs_dim: int, action_dim: int, seed: int):
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n + 1, obs_dim)).astype(np.float32)
    act = rng.uniform(-1, 1, (n, action_dim)).astype(np.float32)
    rew = rng.standard_normal(n).astype(np.float32)
    done = (np.arange(n) % 200) == 199
    return obs, act, rew, done


def _fill_ours(buf: ReplayBuffer, data) -> None:
    obs, act, rew, done = data
    for t in range(len(act)):
        buf.add({"state": obs[t]}, act[t], float(rew[t]), {"state": obs[t + 1]}, False, bool(done[t]))


def _our_runner(algo: str, obs_space, act_space, buf, batch_size: int, device: str, seed: int,
                **overrides):
    """A callable doing k sample+update steps of our learner."""
    agent = make_agent(algo, obs_space, act_space, seed=seed, device=device, batch_size=batch_size,
                       **overrides)

    def run(k: int) -> None:
        for _ in range(k):
            agent.update(buf.sample(batch_size))

    return run


def _interleaved(runners: dict, steps: int, warmup: int, rounds: int, sync) -> dict[str, dict]:
    """Updates/s per runner, by wall clock and by process CPU time: blocks of steps/rounds
    updates, alternating runners, median per runner. On a shared machine the CPU-time figure
    is the robust one (single-threaded, so it equals wall time on an idle machine)."""
    for run in runners.values():
        run(warmup)
    per = max(1, steps // rounds)
    wall: dict[str, list[float]] = {k: [] for k in runners}
    cpu: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(rounds):
        for name, run in runners.items():
            sync()
            t0, c0 = time.perf_counter(), time.process_time()
            run(per)
            sync()
            wall[name].append((time.perf_counter() - t0) / per)
            cpu[name].append((time.process_time() - c0) / per)
    return {k: {"wall": 1.0 / float(np.median(wall[k])), "cpu": 1.0 / float(np.median(cpu[k]))}
            for k in runners}


class _SpacesOnlyEnv(gym.Env):
    """SB3 needs an env to read spaces from; training here never steps it."""

    def __init__(self, obs_dim: int, action_dim: int):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (action_dim,), np.float32)

    def reset(self, *, seed=None, options=None):
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action):
        return np.zeros(self.observation_space.shape, np.float32), 0.0, False, False, {}


def _sb3_runner(data, obs_dim: int, action_dim: int, batch_size: int, device: str, seed: int):
    from stable_baselines3 import SAC
    from stable_baselines3.common.logger import configure

    obs, act, rew, done = data
    model = SAC("MlpPolicy", _SpacesOnlyEnv(obs_dim, action_dim), batch_size=batch_size,
                learning_starts=0, buffer_size=len(act) + 1, policy_kwargs=dict(net_arch=[256, 256]),
                device=device, seed=seed, verbose=0)
    model.set_logger(configure(None, []))
    for t in range(len(act)):
        model.replay_buffer.add(obs[t][None], obs[t + 1][None], act[t][None], rew[t][None],
                                np.array([done[t]]), [{"TimeLimit.truncated": bool(done[t])}])

    def run(k: int) -> None:
        model.train(gradient_steps=k, batch_size=batch_size)

    run.model = model  # for the FLOP count
    return run


def preset_overrides(config) -> dict:
    """Options of `config` that differ from its plain preset ({} = the plain preset), so a
    speed figure always says what it measured (placement excluded)."""
    plain = make_config(config.algo)
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if f.name != "device" and getattr(config, f.name) != getattr(plain, f.name)}


def count_update_flops(algo: str, obs_space, act_space, buf, batch_size: int, device: str,
                       seed: int, **overrides) -> float:
    """FLOPs of one gradient update, counted by torch.utils.flop_counter while a real update
    runs (matrix products and convolutions; elementwise work is not counted). Averaged over
    one actor period (`actor_every` updates), so delayed actor steps count at their rate."""
    from torch.utils.flop_counter import FlopCounterMode

    overrides.setdefault("cuda_graph", False)  # a graph replay dispatches no ops to count
    # the flop counter knows aten's matmuls, not oneDNN's op: count the same products on them
    overrides.setdefault("cpu_matmul", "torch")
    agent = make_agent(algo, obs_space, act_space, seed=seed, device=device, batch_size=batch_size,
                       **overrides)
    k = agent.config.actor_every
    with FlopCounterMode(display=False) as fc:
        for _ in range(k):
            agent.update(buf.sample(batch_size))
    return fc.get_total_flops() / k


def _sb3_update_flops(model, batch_size: int) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        model.train(gradient_steps=1, batch_size=batch_size)
    return float(fc.get_total_flops())
