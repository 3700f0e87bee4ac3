"""Updates/s of the `robolearn train` loop on a CUDA GPU, ArmReach + sac, one code version.

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


def measure(graph: bool, utd: int, steps: int, seed: int = 0, device: str = "cuda") -> dict:
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)  # cpu: smoke test
    agent = {"device": device, "cuda_graph": graph, "check_every": 0 if graph else 1}
    # the code with the device path has it behind --device-replay (it was the CUDA default in
    # the commit measured, results.json); the old code has no such option
    extra = {"device_replay": True} if "device_replay" in TrainConfig.__dataclass_fields__ else {}
    with tempfile.TemporaryDirectory() as d:
        cfg = TrainConfig(env="robolearn/ArmReach-v0", algo="sac", steps=10**6, seed=seed,
                          learning_starts=STARTS, utd=utd, eval_every=0, checkpoint_every=0,
                          log_every=10**6, progress=False, video=False, agent=agent, out=d, **extra)
        t = Trainer(cfg)
        try:
            t.run(stop_at=STARTS + 20)  # random-action phase, then eager warm-up + graph capture
            sync()
            u0, s0, t0 = t.updates, t.env_steps, time.perf_counter()
            t.run(stop_at=STARTS + 20 + steps)
            sync()
            dt = time.perf_counter() - t0
            draws_on_device = type(getattr(t, "batches", None)).__name__ == "DeviceSampler"
            graphs = t.agent._graphs
            replays = getattr(graphs, "replays", None) if graphs is not None else 0
            draws = getattr(getattr(t, "batches", None), "_draw", {})
            draw_replays = sum(getattr(d, "replays", 0) for d in draws.values())
        finally:
            t.close()
    return {"graph": graph, "utd": utd, "metrics_every": 100 if graph else 1,
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
    a = p.parse_args()
    rows = []
    for utd, steps in ((1, a.steps_utd1), (20, a.steps_utd20)):
        for graph in (True, False):
            r = measure(graph, utd, steps, device=a.device)
            r["code"] = a.label
            print(json.dumps(r), flush=True)
            rows.append(r)
    with open(a.out, "w") as f:
        json.dump({"label": a.label, "device_name": torch.cuda.get_device_name(0) if a.device.startswith("cuda") else "cpu",
                   "torch": torch.__version__, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
