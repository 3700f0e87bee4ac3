"""`robolearn bench fleet`: env steps/s into the learner with 1, 2, 4 sim actors on Ray vs
today's `launch` (local processes), and the per-transition cost of each data plane.

Throughput: the same launch file (ArmReach, unpaced actors `loop_hz = 0`, the learner not
training: `learning_starts` above the run, so what is measured is acting + the data plane +
the learner's receive path) run by `robolearn launch` (engine local) and by `RayRun` (engine
ray, a local Ray cluster), `--seconds` after a warm-up; the rate is the learner's own count of
received transitions (metrics.jsonl) over that window. The baseline (`launch`) is measured in
the same run, on the same machine, right before or after.

Data plane: K batches of `--batch` real ArmReach transitions from one process to another,
received and checked (`messages.check_transitions`) on the far side: (a) ZeroMQ, today's
path: stack + msgpack encode, DEALER -> ROUTER, decode; (b) Ray: the stacked batch passed as
the argument of a Ray actor call (Ray's serialisation, object store for large ones). Wall
time per transition, both in this run.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ENV = "robolearn/ArmReach-v0"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robolearn bench fleet", description=__doc__.split("\n\n")[0])
    p.add_argument("--actors", nargs="+", type=int, default=[1, 2, 4], help="actor counts")
    p.add_argument("--engines", nargs="+", choices=("local", "ray"), default=["local", "ray"])
    p.add_argument("--seconds", type=float, default=15.0, help="measurement window per configuration")
    p.add_argument("--warmup", type=float, default=4.0, help="seconds after the first transition before measuring")
    p.add_argument("--envs-per-actor", type=int, default=1, help="ray: sim envs per actor (vector env)")
    p.add_argument("--batches", type=int, default=2000, help="data plane: batches per transport")
    p.add_argument("--batch", type=int, default=32, help="data plane: transitions per batch")
    p.add_argument("--out", default="runs/bench-fleet", help="output folder (results.json, README.md)")
    return p


def launch_dict(actors: int, out: Path, engine: str, envs_per_actor: int = 1) -> dict:
    return {"env": ENV, "algo": "sac", "seed": 0, "actors": actors, "out": str(out),
            "learner": {"port": 0, "weights_port": 0, "total_env_steps": 0,
                        "learning_starts": 10**9, "eval_episodes": 0, "metrics_every_s": 0.5},
            "actor": {"loop_hz": 0, "realtime": False, "send_batch": 32,
                      "act_without_learner": False},
            "cluster": {"engine": engine, "envs_per_actor": envs_per_actor,
                        # logical CPUs only (accounting): 4 actors + learner on a 2-core machine
                        "actor_cpus": 0.25, "learner_cpus": 0.25}}


def _toml(d: dict, prefix: str = "") -> str:
    lines, tables = [], []
    for k, v in d.items():
        if isinstance(v, dict):
            tables.append((k, v))
        else:
            lines.append(f"{k} = {json.dumps(v)}")
    text = "\n".join(lines) + "\n"
    for k, v in tables:
        text += f"\n[{prefix}{k}]\n" + _toml(v, prefix=f"{prefix}{k}.")
    return text


def _rate(metrics_path: Path, warmup: float, seconds: float, deadline: float) -> dict:
    """Wait for the window and return transitions/s from the learner's metrics records."""
    first = None
    while time.monotonic() < deadline:
        recs = _records(metrics_path)
        live = [r for r in recs if r.get("env_steps", 0) > 0]
        if live and first is None:
            first = live[0]["wall_s"]
        if first is not None and live[-1]["wall_s"] >= first + warmup + seconds:
            win = [r for r in live if r["wall_s"] >= first + warmup]
            a, b = win[0], win[-1]
            return {"env_steps_per_s": (b["env_steps"] - a["env_steps"]) / (b["wall_s"] - a["wall_s"]),
                    "window_s": b["wall_s"] - a["wall_s"], "actors_alive": b.get("actors_alive")}
        time.sleep(0.25)
    raise RuntimeError(f"no learner metrics in {metrics_path} in time")


def _records(path: Path) -> list[dict]:
    out = []
    try:
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("kind") == "train":
                out.append(rec)
    except OSError:
        pass
    return out


def measure_local(n: int, tmp: Path, args) -> dict:
    out = tmp / f"local-{n}"
    toml = tmp / f"local-{n}.toml"
    toml.write_text(_toml(launch_dict(n, out, "local")))
    log = open(tmp / f"local-{n}.log", "w")
    p = subprocess.Popen([sys.executable, "-m", "robolearn.cli", "launch", str(toml), "--quiet",
                          "--overwrite"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        return _rate(out / "metrics.jsonl", args.warmup, args.seconds,
                     time.monotonic() + 120 + args.seconds)
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        log.close()


def measure_ray(n: int, tmp: Path, args) -> dict:
    from robolearn.runtime.config import config_from_dict
    from robolearn.runtime.ray_cluster import RayRun

    out = tmp / f"ray-{n}"
    cfg = config_from_dict(launch_dict(n, out, "ray", args.envs_per_actor), "bench fleet")
    run = RayRun(cfg, out, printer=lambda m: None).start()
    try:
        return _rate(out / "metrics.jsonl", args.warmup, args.seconds,
                     time.monotonic() + 120 + args.seconds)
    finally:
        run.stop()
        run.wait(timeout_s=60)
        run.shutdown()


# -------------------------------------------------------------------------- data plane
def sample_transitions(n: int) -> list[dict]:
    from robolearn.policies.env_building import make_env

    env = make_env(ENV)
    obs, _ = env.reset(seed=0)
    items = []
    for i in range(n):
        a = env.action_space.sample()
        nxt, r, term, trunc, info = env.step(a)
        items.append({"obs": {k: np.array(v) for k, v in obs.items()}, "action": a, "reward": float(r),
                      "next_obs": {k: np.array(v) for k, v in nxt.items()}, "terminated": term,
                      "truncated": trunc, "success": bool(info.get("success")), "step": i})
        obs = nxt if not (term or trunc) else env.reset()[0]
    from robolearn.runtime import messages as M

    fp = M.env_fingerprint(ENV, env.observation_space, env.action_space)
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    return items, fp, obs_space, act_space


def with_camera(items: list[dict], obs_space, act_space, size: int = 84):
    """The same transitions with an 84x84x3 uint8 camera frame in obs and next_obs (what a
    pixel policy sends), and the matching fingerprint."""
    import gymnasium as gym

    from robolearn.runtime import messages as M

    rng = np.random.default_rng(0)
    out = []
    for t in items:
        t = dict(t)
        t["obs"] = {**t["obs"], "camera": rng.integers(0, 255, (size, size, 3), np.uint8)}
        t["next_obs"] = {**t["next_obs"], "camera": rng.integers(0, 255, (size, size, 3), np.uint8)}
        out.append(t)
    space = gym.spaces.Dict({**obs_space.spaces,
                             "camera": gym.spaces.Box(0, 255, (size, size, 3), np.uint8)})
    return out, M.env_fingerprint(ENV, space, act_space)


def _zmq_receiver(endpoint: str, expect: int, fingerprint: dict, q) -> None:
    import zmq

    from robolearn.runtime import messages as M

    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind(endpoint)
    q.put("ready")
    got = 0
    while got < expect:
        ident, frame = router.recv_multipart()
        msg = M.decode(frame)
        got += M.check_transitions(msg["batch"], fingerprint)
    q.put(got)
    router.close(0)
    ctx.term()


def measure_zmq(items: list[dict], fp: dict, batches: int) -> dict:
    import multiprocessing as mp

    import zmq

    from robolearn.runtime import messages as M
    from robolearn.runtime.transport import endpoint, free_port

    ep = endpoint("127.0.0.1", free_port())
    q = mp.get_context("spawn").Queue()
    proc = mp.get_context("spawn").Process(target=_zmq_receiver, args=(ep, batches * len(items), fp, q))
    proc.start()
    assert q.get(timeout=60) == "ready"
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(ep)
    time.sleep(0.3)
    t0 = time.perf_counter()
    for _ in range(batches):  # what the actor's link thread does per batch
        dealer.send(M.encode(M.TRANSITIONS, actor_id="bench", session="s",
                             batch=M.stack_transitions(items)))
    got = q.get(timeout=300)
    wall = time.perf_counter() - t0
    proc.join(timeout=10)
    dealer.close(0)
    ctx.term()
    n = batches * len(items)
    assert got == n
    return {"transport": "zeromq (msgpack, today's format)", "transitions": n,
            "bytes_per_transition": len(M.encode(M.TRANSITIONS, actor_id="bench", session="s",
                                                 batch=M.stack_transitions(items))) / len(items),
            "wall_s": wall, "us_per_transition": wall / n * 1e6}


class _RayReceiver:
    def __init__(self, fingerprint: dict):
        self.fp = fingerprint
        self.got = 0

    def add(self, batch: dict) -> int:
        from robolearn.runtime import messages as M

        self.got += M.check_transitions(batch, self.fp)
        return self.got


def measure_ray_calls(items: list[dict], fp: dict, batches: int) -> dict:
    import ray

    from robolearn.runtime import messages as M

    recv = ray.remote(_RayReceiver).options(num_cpus=0).remote(fp)
    ray.get(recv.add.remote(M.stack_transitions(items)))  # started and warm
    t0 = time.perf_counter()
    refs = [recv.add.remote(M.stack_transitions(items)) for _ in range(batches)]
    last = ray.get(refs[-1])
    wall = time.perf_counter() - t0
    ray.kill(recv)
    n = batches * len(items)
    assert last == n + len(items)
    return {"transport": "ray (actor call with the stacked batch)", "transitions": n,
            "wall_s": wall, "us_per_transition": wall / n * 1e6}


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if "ray" in args.engines:
        from robolearn.runtime.ray_cluster import init_ray

        init_ray("", num_cpus=0.25 + 0.25 * max(args.actors))
    results = {"argv": argv, "cpu_count": os.cpu_count(), "env": ENV, "throughput": [],
               "data_plane": []}
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as td:
        tmp = Path(td)
        for n in args.actors:
            for engine in args.engines:
                f = measure_local if engine == "local" else measure_ray
                r = {"engine": engine, "actors": n,
                     "envs_per_actor": args.envs_per_actor if engine == "ray" else 1, **f(n, tmp, args)}
                print(f"[bench fleet] {engine:5s} actors {n}: {r['env_steps_per_s']:.0f} env steps/s "
                      f"into the learner ({r['window_s']:.1f} s window)", flush=True)
                results["throughput"].append(r)
    items, fp, obs_space, act_space = sample_transitions(args.batch)
    pixels, fp_pix = with_camera(items, obs_space, act_space)
    for obs, its, f, nb in (("state", items, fp, args.batches),
                            ("state + 84x84x3 camera", pixels, fp_pix, max(1, args.batches // 10))):
        rows = [measure_zmq(its, f, nb)]
        if "ray" in args.engines:
            rows.append(measure_ray_calls(its, f, nb))
        for d in rows:
            d["obs"] = obs
            print(f"[bench fleet] {obs}, {d['transport']}: {d['us_per_transition']:.1f} us per "
                  f"transition ({d['transitions']} in {d['wall_s']:.2f} s)", flush=True)
        if len(rows) == 2:
            rows[1]["ray_vs_zeromq"] = rows[1]["us_per_transition"] / rows[0]["us_per_transition"]
        results["data_plane"] += rows
    base = {r["actors"]: r["env_steps_per_s"] for r in results["throughput"] if r["engine"] == "local"}
    for r in results["throughput"]:
        if r["engine"] == "ray" and r["actors"] in base:
            r["ray_vs_launch"] = r["env_steps_per_s"] / base[r["actors"]]
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "README.md").write_text(markdown(results, argv))
    print(markdown(results, argv))
    return 0


def markdown(res: dict, argv: list[str]) -> str:
    lines = ["# Fleet benchmark: sim actors feeding one learner", "",
             f"Command: `robolearn bench fleet {' '.join(argv)}` ({res['cpu_count']} CPU cores).", "",
             f"Env steps/s received by the learner ({res['env']}, unpaced actors, learner not "
             "training), the learner's own count over the window. `launch` = today's local "
             "processes; `ray` = the same launch file with `[cluster] engine = \"ray\"` on a local "
             "Ray cluster. ZeroMQ is the data plane in both.", "",
             "| actors | engine | envs/actor | env steps/s | ray / launch |", "|---|---|---|---|---|"]
    for r in res["throughput"]:
        ratio = f"{r['ray_vs_launch']:.2f}" if "ray_vs_launch" in r else "-"
        lines.append(f"| {r['actors']} | {r['engine']} | {r['envs_per_actor']} | "
                     f"{r['env_steps_per_s']:.0f} | {ratio} |")
    lines += ["", f"With {res['cpu_count']} cores, the learner and the actors share them: more actors "
              "than free cores contend (4 actors + learner = 5 busy processes), so the rate stops "
              "growing with the actor count; on a shared machine, other jobs move these figures "
              "between configurations too (each row is one window, not an average)."]
    lines += ["", "## Data plane: cost per transition", "",
              "Batches of real transitions from one process to another, checked on arrival "
              "(wall time over sender + receiver).", "",
              "| observation | transport | transitions | us per transition | Ray / ZeroMQ |",
              "|---|---|---|---|---|"]
    for d in res["data_plane"]:
        ratio = f"**{d['ray_vs_zeromq']:.2f}x**" if "ray_vs_zeromq" in d else "-"
        lines.append(f"| {d['obs']} | {d['transport']} | {d['transitions']} | "
                     f"{d['us_per_transition']:.1f} | {ratio} |")
    return "\n".join(lines) + "\n"
