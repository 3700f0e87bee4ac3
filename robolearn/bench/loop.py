"""`robolearn bench loop`: actor control-loop timing with the learner idle vs training, plus
transport throughput and weight-broadcast latency.

Phase A (baseline): this process is an actor (env + SAC state policy + link) at `--hz`, and
a learner process receives its transitions but does not train. Phase B: the same, while the
learner process trains at full speed (`pace = "free"`) and broadcasts weights that the actor
swaps in between ticks. Goal: p99 period jitter < 2 ms and zero overruns at 50 Hz in B.
Then: transitions/s over loopback TCP through the real codec (state and 84x84x3 pixel
observations) against raw ZMQ with the same bytes (ratio = codec cost), and weight-broadcast
latency (learner encode -> actor decoded + loaded) against raw bytes of the same size.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

LEARNER_TOML = """
env = "{env}"
algo = "{algo}"
seed = 0
out = "{out}"
[learner]
total_env_steps = 0
learning_starts = {learning_starts}
pace = "free"
publish_every = {publish_every}
eval_episodes = 0
nice = {nice}
metrics_every_s = 1.0
"""


def _start_learner(tmp: Path, name: str, env: str, algo: str, train: bool, publish_every: int,
                   nice: int):
    from robolearn.runtime.transport import endpoint, free_port

    out = tmp / name
    toml = tmp / f"{name}.toml"
    toml.write_text(LEARNER_TOML.format(env=env, algo=algo, out=out,
                                        learning_starts=64 if train else 10**9,
                                        publish_every=publish_every, nice=nice))
    port, wport = free_port(), free_port()
    log = open(tmp / f"{name}.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "robolearn.cli", "learner", str(toml),
                             "--port", str(port), "--weights-port", str(wport)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    return proc, toml, out, endpoint("127.0.0.1", port), endpoint("127.0.0.1", wport), log


def _stop(proc, timeout=30):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=timeout)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def loop_phase(tmp: Path, name: str, env: str, algo: str, hz: float, seconds: float,
               train: bool, publish_every: int, nice: int, realtime: bool = True) -> dict:
    """Run this process as an actor against a learner process; return loop + learner stats."""
    import torch

    from robolearn.runtime.actor import Actor, _make_agent
    from robolearn.runtime.config import load_launch

    from robolearn.runtime.loop import FixedRateLoop, raise_priority

    proc, toml, out, d, w, log = _start_learner(tmp, name, env, algo, train, publish_every, nice)
    actor = None
    try:
        cfg = load_launch(toml)
        cfg.actor.loop_hz = hz
        torch.set_num_threads(1)
        actor = Actor(cfg, f"bench-{name}", d, w, seed=1)
        actor.active = _make_agent(cfg, actor.env, 1)  # act with the network from tick one
        actor.link.start()
        t_end = time.monotonic() + 60
        while not actor.link.learner_alive:
            if proc.poll() is not None or time.monotonic() > t_end:
                raise RuntimeError(f"learner did not come up: see {tmp / (name + '.log')}")
            time.sleep(0.05)
        priority = raise_priority() if realtime else "default"
        # warm-up (not measured): feed the learner past learning_starts, wait for training
        actor.control.run(max_seconds=2.0)
        while train and actor.link.weights_received == 0 and time.monotonic() < t_end:
            actor.control.run(max_seconds=0.5)
        swaps0, steps0 = actor.swaps, actor.control.env_steps
        actor.control.loop = FixedRateLoop(hz)
        actor.control.run(max_seconds=seconds)
        summary = actor.summary(seconds)
        summary["weight_swaps"] = actor.swaps - swaps0
        summary["env_steps"] = actor.control.env_steps - steps0
        summary["priority"] = priority
    finally:
        if actor is not None:
            actor.link.stop()
            actor.link.join(2)
            actor.env.close()
        _stop(proc)
        log.close()
    learner = {}
    if (out / "summary.json").exists():
        s = json.loads((out / "summary.json").read_text())
        learner = {"updates": s.get("updates"), "wall_s": s.get("wall_s"),
                   "weights_published": s.get("weights_published")}
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()] \
        if (out / "metrics.jsonl").exists() else []
    ups = [r["updates_per_s"] for r in recs if r.get("updates_per_s")]
    learner["updates_per_s_median"] = float(np.median(ups)) if ups else 0.0
    return {"loop": summary["loop"], "env_steps": summary["env_steps"],
            "weight_swaps": summary["weight_swaps"], "sent": summary["sent"],
            "dropped": summary["dropped"], "priority": summary["priority"], "learner": learner}


# ------------------------------------------------------------------------------- transport
def _transitions(n: int, pixels: bool, rng) -> list[dict]:
    def obs():
        o = {"state": rng.normal(size=20).astype(np.float32)}
        if pixels:
            o["front"] = rng.integers(0, 256, (84, 84, 3), dtype=np.uint8)
        return o

    return [{"obs": obs(), "next_obs": obs(), "action": rng.uniform(-1, 1, 4).astype(np.float32),
             "reward": 0.0, "terminated": False, "truncated": False, "intervention": False,
             "success": False, "step": i} for i in range(n)]


def throughput(pixels: bool, seconds: float, batch: int = 32) -> dict:
    """Transitions/s actor -> learner over loopback TCP, through the codec and raw."""
    import gymnasium as gym
    import zmq

    from robolearn.runtime import messages as M
    from robolearn.runtime.transport import free_port

    rng = np.random.default_rng(0)
    spaces = {"state": gym.spaces.Box(-np.inf, np.inf, (20,), np.float32)}
    if pixels:
        spaces["front"] = gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)
    fp = M.env_fingerprint("bench", gym.spaces.Dict(spaces), gym.spaces.Box(-1, 1, (4,)))
    pool = _transitions(batch * 4, pixels, rng)
    ctx = zmq.Context()
    results = {}
    try:
        for mode in ("raw", "codec"):
            port = free_port()
            router = ctx.socket(zmq.ROUTER)
            router.bind(f"tcp://127.0.0.1:{port}")
            dealer = ctx.socket(zmq.DEALER)
            dealer.sndhwm = 64
            dealer.connect(f"tcp://127.0.0.1:{port}")
            frame = M.encode(M.TRANSITIONS, batch=M.stack_transitions(pool[:batch]))
            received = [0]
            done = threading.Event()

            def receive():
                while not done.is_set() or router.poll(0):
                    if not router.poll(50):
                        continue
                    _, data = router.recv_multipart()
                    if mode == "codec":
                        received[0] += M.check_transitions(M.decode(data)["batch"], fp)
                    else:
                        received[0] += batch

            th = threading.Thread(target=receive)
            th.start()
            sent = 0
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                if mode == "codec":
                    k = (sent // batch) % 4
                    data = M.encode(M.TRANSITIONS,
                                    batch=M.stack_transitions(pool[k * batch:(k + 1) * batch]))
                else:
                    data = frame
                dealer.send(data)
                sent += batch
            done.set()
            th.join()
            dt = time.perf_counter() - t0
            results[mode] = {"transitions_per_s": received[0] / dt,
                             "mb_per_s": received[0] / dt * len(frame) / batch / 1e6}
            dealer.close(0)
            router.close(0)
    finally:
        ctx.term()
    results["bytes_per_transition"] = len(frame) / batch
    results["codec_vs_raw"] = results["codec"]["transitions_per_s"] / results["raw"]["transitions_per_s"]
    return results


def weights_latency(env_id: str, algo: str, n: int = 40) -> dict:
    """Learner publish -> actor decoded and loaded, over PUB/SUB loopback; raw bytes baseline."""
    import torch
    import zmq

    from robolearn.policies.env_building import make_env
    from robolearn.policies.registry import make_agent
    from robolearn.runtime import messages as M
    from robolearn.runtime.transport import free_port

    env = make_env(env_id)
    learner = make_agent(algo, env.observation_space, env.action_space, seed=0)
    actor = make_agent(algo, env.observation_space, env.action_space, seed=1)
    env.close()
    ctx = zmq.Context()
    out = {}
    try:
        for mode in ("raw", "codec"):
            port = free_port()
            pub = ctx.socket(zmq.PUB)
            pub.bind(f"tcp://127.0.0.1:{port}")
            sub = ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            sub.connect(f"tcp://127.0.0.1:{port}")
            time.sleep(0.3)  # PUB/SUB slow joiner
            lat = []
            size = 0
            blob = M.encode_weights(learner.policy_state(), 0, "x")
            for i in range(n):
                t0 = time.perf_counter()
                data = M.encode_weights(learner.policy_state(), i, "x") if mode == "codec" else blob
                size = len(data)
                pub.send(data)
                if not sub.poll(2000):
                    continue
                got = sub.recv()
                if mode == "codec":
                    actor.load_policy_state(M.decode_weights(M.decode(got)))
                lat.append(time.perf_counter() - t0)
                time.sleep(0.01)
            out[mode] = {"p50_ms": float(np.percentile(lat, 50) * 1e3),
                         "p99_ms": float(np.percentile(lat, 99) * 1e3), "n": len(lat)}
            pub.close(0)
            sub.close(0)
        out["bytes"] = size
        out["params"] = int(sum(v.numel() for v in learner.policy_state().values()))
        out["codec_vs_raw_p50"] = out["codec"]["p50_ms"] / max(out["raw"]["p50_ms"], 1e-9)
        torch.set_num_threads(1)
    finally:
        ctx.term()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="robolearn bench loop", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hz", type=float, default=50.0, help="control-loop rate (default 50)")
    p.add_argument("--seconds", type=float, default=30.0, help="seconds per loop phase (default 30)")
    p.add_argument("--env", default="robolearn/ArmReach-v0", help="env the actor runs (state obs)")
    p.add_argument("--algo", default="sac", help="learner preset (default sac)")
    p.add_argument("--publish-every", type=int, default=20, help="learner updates per weight broadcast")
    p.add_argument("--learner-nice", type=int, default=10, help="nice value of the learner process")
    p.add_argument("--no-realtime", action="store_true",
                   help="do not raise the actor loop's scheduling priority (shows its effect)")
    p.add_argument("--transport-seconds", type=float, default=3.0)
    p.add_argument("--json", help="also write the results to this JSON file")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    res = {"hz": args.hz, "seconds": args.seconds, "env": args.env, "algo": args.algo,
           "cpus": os.cpu_count(), "learner_nice": args.learner_nice,
           "realtime": not args.no_realtime}
    with tempfile.TemporaryDirectory(prefix="bench-loop-") as tmp:
        tmp = Path(tmp)
        for name, train in (("learner_idle", False), ("learner_training", True)):
            print(f"[{name}] {args.seconds:.0f} s at {args.hz:g} Hz ...", flush=True)
            res[name] = loop_phase(tmp, name, args.env, args.algo, args.hz, args.seconds, train,
                                   args.publish_every, args.learner_nice,
                                   realtime=not args.no_realtime)
    print("[transport] state / pixels throughput, weight broadcast ...", flush=True)
    res["throughput_state"] = throughput(False, args.transport_seconds)
    res["throughput_pixels"] = throughput(True, args.transport_seconds)
    res["weights"] = weights_latency(args.env, args.algo)
    a, b = res["learner_idle"]["loop"], res["learner_training"]["loop"]
    res["ratios"] = {
        "jitter_p99_training_vs_idle": b["jitter_p99_ms"] / max(a["jitter_p99_ms"], 1e-9),
        "latency_p99_training_vs_idle": b["latency_p99_ms"] / max(a["latency_p99_ms"], 1e-9),
        "state_transitions_per_s_vs_loop_rate":
            res["throughput_state"]["codec"]["transitions_per_s"] / args.hz,
        "pixel_transitions_per_s_vs_loop_rate":
            res["throughput_pixels"]["codec"]["transitions_per_s"] / args.hz,
    }
    res["goal_met"] = bool(b["jitter_p99_ms"] < 2.0 and b["overruns"] == 0)
    _print(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


def _print(r: dict) -> None:
    print(f"\nactor loop at {r['hz']:g} Hz, {r['seconds']:g} s per phase, env {r['env']}, "
          f"{r['cpus']} CPUs, learner nice {r['learner_nice']}, loop priority "
          f"{r['learner_training']['priority']}")
    print(f"{'phase':18s} {'lat p50':>8s} {'lat p99':>8s} {'jit p50':>8s} {'jit p99':>8s} "
          f"{'jit max':>8s} {'overruns':>8s} {'ticks':>6s} {'swaps':>6s} {'learner upd/s':>13s}")
    for name in ("learner_idle", "learner_training"):
        ph = r[name]
        lp = ph["loop"]
        print(f"{name:18s} {lp['latency_p50_ms']:7.3f}m {lp['latency_p99_ms']:7.3f}m "
              f"{lp['jitter_p50_ms']:7.3f}m {lp['jitter_p99_ms']:7.3f}m {lp['jitter_max_ms']:7.3f}m "
              f"{lp['overruns']:8d} {lp['ticks']:6d} {ph['weight_swaps']:6d} "
              f"{ph['learner'].get('updates_per_s_median', 0):13.1f}")
    print("(m = milliseconds; jitter = |actual period - nominal period|)")
    for kind in ("state", "pixels"):
        t = r[f"throughput_{kind}"]
        print(f"transport {kind:6s}: {t['codec']['transitions_per_s']:10.0f} transitions/s "
              f"({t['codec']['mb_per_s']:.0f} MB/s, {t['bytes_per_transition']:.0f} B each); raw ZMQ "
              f"same bytes {t['raw']['transitions_per_s']:.0f}/s; codec/raw {t['codec_vs_raw']:.2f}")
    w = r["weights"]
    print(f"weight broadcast ({w['params']} params, {w['bytes'] / 1e6:.2f} MB): p50 "
          f"{w['codec']['p50_ms']:.2f} ms, p99 {w['codec']['p99_ms']:.2f} ms (encode+send+decode+load); "
          f"raw bytes p50 {w['raw']['p50_ms']:.2f} ms; ratio {w['codec_vs_raw_p50']:.1f}x")
    for k, v in r["ratios"].items():
        print(f"ratio {k}: {v:.2f}")
    print(f"goal (training: p99 jitter < 2 ms and 0 overruns): {'MET' if r['goal_met'] else 'NOT MET'}")
