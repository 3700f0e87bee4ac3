"""Run an exported policy on the robot with no learner: the actor's control loop, nothing else.

Why a separate runner: a deployed policy needs no replay, no weights link and no training
code, so the robot computer needs only onnxruntime (or libtorch) and the drivers. The loop is
the same fixed-rate `ControlLoop` the actor uses; a non-finite action from the exported
policy stops the loop before anything reaches the robot, and the env is closed (which
holds the hardware safe) whatever happens.
"""
from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import numpy as np

from robolearn.env import env_control_hz
from robolearn.errors import ConfigError, InvalidActionError


def run_exported(cfg, policy_path: str | Path, max_steps: int = 0, episodes: int = 0,
                 seed: int | None = None, env=None, hz: float | None = None) -> dict:
    """Act with `policy_path` (ONNX/TorchScript from `robolearn export`) in cfg's env until
    `max_steps`, `episodes`, SIGINT/SIGTERM or a refused action. Returns a summary dict."""
    from robolearn.policies.export import ExportedPolicy
    from robolearn.runtime.actor import _make_env
    from robolearn.runtime.loop import ControlLoop

    policy = ExportedPolicy(Path(policy_path))
    env = env if env is not None else _make_env(cfg)
    stop = threading.Event()
    reason = {"exit": "stopped"}
    if policy.spec.get("env") and policy.spec["env"] != cfg.env:
        env.close()
        raise ConfigError(f"{policy_path} was exported from a policy trained on {policy.spec['env']!r}, "
                          f"the launch file runs {cfg.env!r}")
    if hz is None:
        hz = cfg.actor.loop_hz
    if hz is None:
        hz = env_control_hz(env, 0.0)
    seed = cfg.seed if seed is None else seed

    def before_tick():
        if max_steps and loop.env_steps >= max_steps:
            reason["exit"] = "max_steps"
            stop.set()
        if episodes and len(loop.episodes) >= episodes:
            reason["exit"] = "episodes"
            stop.set()
        return "pause" if stop.is_set() else None

    loop = ControlLoop(env, lambda: policy, float(hz), before_tick=before_tick, seed=seed)
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    t0 = time.monotonic()
    try:
        loop.run(stop=stop)
    except InvalidActionError as exc:
        reason["exit"] = f"refused: {exc}"
    finally:
        env.close()
        for s, h in handlers.items():
            signal.signal(s, h)
    eps = loop.episodes
    return {"policy": str(policy_path), "format": policy.spec["format"], "exit_reason": reason["exit"],
            "env_steps": loop.env_steps, "episodes": len(eps),
            "success_rate": float(np.mean([e["success"] for e in eps])) if eps else None,
            "mean_return": float(np.mean([e["return"] for e in eps])) if eps else None,
            "wall_s": round(time.monotonic() - t0, 3), "loop": loop.stats.summary()}
