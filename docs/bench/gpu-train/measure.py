"""Updates/s of the `robolearn train` loop on a CUDA GPU, ArmReach + sac, one code version
(`--env/--obs/--algo` for another task, e.g. camera observations with drq; `--replay both` times
host batches and the device mirror in one process).

Run once with the code before this change and once with it, in the same call on the same card
(run.sh): the Trainer is built as `robolearn train --set device=cuda` builds it (agent on
CUDA; the new code then mirrors the replay on the GPU, the old one sampled host batches), the
random-action phase and a 20-step warm-up (graph capture) run untimed, then N env steps of the
learning phase are timed by wall clock, the GPU synchronised at both ends. Rows: graphed
update with metrics read every 100 updates (the CUDA default) and the eager update reading
metrics every update (`cuda_graph=false check_every=1`), at the preset's UTD (1) and at UTD 20.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch

from robolearn.policies.train_config import TrainConfig
from robolearn.policies.trainer import Trainer

STARTS = 1000


def measure(graph: bool, utd: int, steps: int, seed: int = 0, device: str = "cuda",
            env: str = "robolearn/ArmReach-v0", obs: str = "state", algo: str = "sac",
            starts: int = STARTS, device_replay: bool = True) -> dict:
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)  # cpu: smoke test
    agent = {"device": device, "cuda_graph": graph, "check_every": 0 if graph else 1}
    # the code with the device path has it behind --device-replay (it was the CUDA default in
    # the commit measured, results.json); the old code has no such option
    extra = ({"device_replay": device_replay} if "device_replay" in TrainConfig.__dataclass_fields__
             else {})
    with tempfile.TemporaryDirectory() as d:
        cfg = TrainConfig(env=env, algo=algo, obs=obs, steps=10**6, seed=seed,
                          learning_starts=starts, utd=utd, eval_every=0, checkpoint_every=0,
                          log_every=10**6, progress=False, video=False, agent=agent, out=d, **extra)
        t = Trainer(cfg)
        try:
            t.run(stop_at=starts + 20)  # random-action phase, then eager warm-up + graph capture
            sync()
            u0, s0, t0 = t.updates, t.env_steps, time.perf_counter()
            t.run(stop_at=starts + 20 + steps)
            sync()
            dt = time.perf_counter() - t0
            draws_on_device = type(getattr(t, "batches", None)).__name__ == "DeviceSampler"
            graphs = t.agent._graphs
            replays = getattr(graphs, "replays", None) if graphs is not None else 0
            draws = getattr(getattr(t, "batches", None), "_draw", {})
            draw_replays = sum(getattr(d, "replays", 0) for d in draws.values())
        finally:
            t.close()
    return {"env": env, "obs": obs, "algo": algo, "graph": graph, "utd": utd,
            "metrics_every": 100 if graph else 1,
            "updates": t.updates - u0, "env_steps": t.env_steps - s0, "seconds": dt,
            "updates_per_s": (t.updates - u0) / dt, "env_steps_per_s": (t.env_steps - s0) / dt,
            "device_replay": draws_on_device, "graph_replays": replays, "draw_graph_replays": draw_replays}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--label", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps-utd1", type=int, default=2000)
    p.add_argument("--steps-utd20", type=int, default=200)
    p.add_argument("--device", default="cuda")
    p.add_argument("--env", default="robolearn/ArmReach-v0")
    p.add_argument("--obs", default="state")
    p.add_argument("--algo", default="sac")
    p.add_argument("--starts", type=int, default=STARTS, help="random-action steps, untimed")
    p.add_argument("--replay", choices=("device", "host", "both"), default="device",
                   help="device: the mirror (--device-replay); host: host batches; both: each in turn")
    p.add_argument("--no-eager", action="store_true", help="time the graphed update only")
    a = p.parse_args()
    rows = []
    replays = {"device": (True,), "host": (False,), "both": (False, True)}[a.replay]
    for utd, steps in ((1, a.steps_utd1), (20, a.steps_utd20)):
        for on_device in replays:
            for graph in ((True,) if a.no_eager else (True, False)):
                if steps <= 0:
                    continue
                try:
                    r = measure(graph, utd, steps, device=a.device, env=a.env, obs=a.obs, algo=a.algo,
                                starts=a.starts, device_replay=on_device)
                except Exception as exc:  # a path that fails is a row too, with its error
                    r = {"graph": graph, "utd": utd, "device_replay": on_device,
                         "error": f"{type(exc).__name__}: {exc}"}
                r["code"] = a.label
                print(json.dumps(r), flush=True)
                rows.append(r)
    with open(a.out, "w") as f:
        json.dump({"label": a.label, "device_name": torch.cuda.get_device_name(0) if a.device.startswith("cuda") else "cpu",
                   "torch": torch.__version__, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
