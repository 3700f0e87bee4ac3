"""GPU update speed: our sac / redq / drq (device replay, CUDA graphs) vs SB3 SAC on the same GPU."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from robolearn.data.replay import ReplayBuffer
from robolearn.policies.registry import make_config
from robolearn.policies.speed_harness import (_fill_ours, _interleaved, _our_runner, _random_data, _sb3_runner,
                                             _sb3_update_flops, _spaces, count_update_flops, preset_overrides)


def _pixel_setup(n: int, image: int, obs_dim: int, action_dim: int, seed: int):
    """Dict obs of one 84x84 RGB camera (HWC, our layout) + state, random contents."""
    rng = np.random.default_rng(seed)
    obs_space = gym.spaces.Dict({
        "state": gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
        "pixels": gym.spaces.Box(0, 255, (image, image, 3), np.uint8)})
    act_space = gym.spaces.Box(-1.0, 1.0, (action_dim,), np.float32)
    frames = rng.integers(0, 256, (n + 1, image, image, 3), dtype=np.uint8)
    state = rng.standard_normal((n + 1, obs_dim)).astype(np.float32)
    act = rng.uniform(-1, 1, (n, action_dim)).astype(np.float32)
    rew = rng.standard_normal(n).astype(np.float32)
    done = (np.arange(n) % 200) == 199
    return obs_space, act_space, (frames, state, act, rew, done)


def _sb3_pixel_runner(data, batch_size: int, device: str, seed: int):
    """SB3 SAC on the same camera + state observations (its MultiInputPolicy: NatureCNN on
    the image, channel-first as SB3 stores images)."""
    from stable_baselines3 import SAC
    from stable_baselines3.common.logger import configure

    frames, state, act, rew, done = data
    chw = frames.transpose(0, 3, 1, 2)

    class _Env(gym.Env):
        observation_space = gym.spaces.Dict({
            "state": gym.spaces.Box(-np.inf, np.inf, state.shape[1:], np.float32),
            "pixels": gym.spaces.Box(0, 255, chw.shape[1:], np.uint8)})
        action_space = gym.spaces.Box(-1.0, 1.0, act.shape[1:], np.float32)

        def reset(self, *, seed=None, options=None):
            return self.observation_space.sample(), {}

        def step(self, action):
            return self.observation_space.sample(), 0.0, False, False, {}

    model = SAC("MultiInputPolicy", _Env(), batch_size=batch_size, learning_starts=0,
                buffer_size=len(act) + 1, policy_kwargs=dict(net_arch=[256, 256]), device=device,
                seed=seed, verbose=0)
    model.set_logger(configure(None, []))
    for t in range(len(act)):
        o = {"state": state[t][None], "pixels": chw[t][None]}
        o2 = {"state": state[t + 1][None], "pixels": chw[t + 1][None]}
        model.replay_buffer.add(o, o2, act[t][None], rew[t][None], np.array([done[t]]),
                                [{"TimeLimit.truncated": bool(done[t])}])

    def run(k: int) -> None:
        model.train(gradient_steps=k, batch_size=batch_size)

    run.model = model
    return run


def measure_gpu_speed(device: str = "cuda", steps: int = 300, warmup: int = 100, rounds: int = 5,
                      batch_size: int = 256, obs_dim: int = 17, action_dim: int = 6, image: int = 84,
                      seed: int = 0, include_sb3: bool = True, print_fn=print) -> dict:
    """Gradient updates/s on a GPU: our sac / redq / drq (replay on the device, CUDA-graph
    updates, metrics read every `check_every` updates) against SB3 SAC on the same GPU (state
    obs, and camera + state obs with its CNN policy), plus our sac run eagerly from host replay
    (what the graph and device replay add). Wall clock, the GPU synchronised around each block."""
    from robolearn.data.replay import DeviceReplay

    cuda = str(device).startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)  # CPU: a smoke test of this code
    with torch.random.fork_rng(devices=[]):
        n = max(5000, 4 * batch_size)
        obs_space, act_space = _spaces(obs_dim, action_dim)
        data = _random_data(n, obs_dim, action_dim, seed)
        buf = ReplayBuffer(obs_space, act_space, n + 100, seed=seed)
        _fill_ours(buf, data)
        dev = DeviceReplay(buf, device, seed=seed)
        state = {
            "ours sac": _our_runner("sac", obs_space, act_space, dev, batch_size, device, seed),
            "ours sac (eager, host replay)": _our_runner(
                "sac", obs_space, act_space, buf, batch_size, device, seed, cuda_graph=False,
                check_every=1),
            "ours redq (N=10, M=2)": _our_runner("redq", obs_space, act_space, dev, batch_size,
                                                 device, seed),
        }
        if include_sb3:
            state["SB3 SAC"] = _sb3_runner(data, obs_dim, action_dim, batch_size, device, seed)
        res = _interleaved(state, steps, warmup, rounds, sync)

        pobs, pact, pdata = _pixel_setup(n, image, obs_dim, action_dim, seed)
        frames, pstate, act, rew, done = pdata
        pbuf = ReplayBuffer(pobs, pact, n + 100, seed=seed)
        for t in range(len(act)):
            pbuf.add({"state": pstate[t], "pixels": frames[t]}, act[t], float(rew[t]),
                     {"state": pstate[t + 1], "pixels": frames[t + 1]}, False, bool(done[t]))
        pdev = DeviceReplay(pbuf, device, seed=seed)
        pixel = {"ours drq": _our_runner("drq", pobs, pact, pdev, batch_size, device, seed)}
        if include_sb3:
            pixel["SB3 SAC (CNN)"] = _sb3_pixel_runner(pdata, batch_size, device, seed)
        res.update(_interleaved(pixel, max(steps // 3, 20), max(warmup // 2, 20), rounds, sync))
    ups = {k: v["wall"] for k, v in res.items()}
    flops = {"ours sac": count_update_flops("sac", obs_space, act_space, dev, batch_size, device, seed),
             "ours redq (N=10, M=2)": count_update_flops("redq", obs_space, act_space, dev, batch_size,
                                                         device, seed),
             "ours drq": count_update_flops("drq", pobs, pact, pdev, batch_size, device, seed)}
    if include_sb3:
        flops["SB3 SAC"] = _sb3_update_flops(state["SB3 SAC"].model, batch_size)
        flops["SB3 SAC (CNN)"] = _sb3_update_flops(pixel["SB3 SAC (CNN)"].model, batch_size)
    out = {"device": device, "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
           "torch": torch.__version__, "batch_size": batch_size, "obs_dim": obs_dim,
           "action_dim": action_dim, "image": [image, image, 3], "steps": steps,
           "updates_per_s": ups, "update_gflop": {k: v / 1e9 for k, v in flops.items()},
           "achieved_tflops": {k: ups[k] * flops[k] / 1e12 for k in flops},
           "preset_overrides": {"sac": preset_overrides(make_config("sac", batch_size=batch_size)),
                                "redq": preset_overrides(make_config("redq", batch_size=batch_size)),
                                "drq": preset_overrides(make_config("drq", batch_size=batch_size))}}
    if "SB3 SAC" in ups:
        out["sac_speedup_vs_sb3"] = ups["ours sac"] / ups["SB3 SAC"]
        out["sac_eager_speedup_vs_sb3"] = ups["ours sac (eager, host replay)"] / ups["SB3 SAC"]
        out["redq_updates_vs_sb3_sac"] = ups["ours redq (N=10, M=2)"] / ups["SB3 SAC"]
    if "SB3 SAC (CNN)" in ups:
        out["drq_speedup_vs_sb3_cnn"] = ups["ours drq"] / ups["SB3 SAC (CNN)"]
    print_fn(f"GPU update speed ({out['device_name']}, batch {batch_size}, wall clock):")
    for k, v in ups.items():
        extra = (f"  ({flops[k] / 1e9:.2f} GFLOP/update, {ups[k] * flops[k] / 1e12:.2f} TFLOP/s)"
                 if k in flops else "")
        print_fn(f"  {k:32s}: {v:9.1f} updates/s{extra}")
    for k in ("sac_speedup_vs_sb3", "sac_eager_speedup_vs_sb3", "redq_updates_vs_sb3_sac",
              "drq_speedup_vs_sb3_cnn"):
        if k in out:
            print_fn(f"  {k} = {out[k]:.2f}x")
    return out
