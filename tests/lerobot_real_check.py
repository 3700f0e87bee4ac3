"""Load a robolearn LeRobot export with the REAL `lerobot` package and compare it with the source.

Run by tests/test_lerobot_v30.py in whichever interpreter has lerobot: this one when it
imports here, else the one named by ROBOLEARN_LEROBOT_PYTHON (a side environment, because
lerobot pins a torch the project does not use). It imports only lerobot's own stack (numpy,
torch, lerobot), never robolearn, so it runs in that environment unchanged.

    python lerobot_real_check.py load ROOT EXPECTED.npz BACKEND   -> JSON report, exit 0 if all match
    python lerobot_real_check.py refuse ROOT                       -> exit 0 if lerobot refuses ROOT
                                                                      with BackwardCompatibilityError

EXPECTED.npz holds the source's per-frame `action`, `state`, `frames` (N, H, W, 3 uint8),
`episode_index`, `frame_index` and a 0-d `task` string; optionally `state_names`, `action_names`
and `robot_type`, which the dataset's features and metadata must carry.
"""
from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local root: any Hub access is a failure


def load(root: str, expected: str, backend: str) -> dict:
    import numpy as np
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    import lerobot

    exp = np.load(expected, allow_pickle=False)
    ds = LeRobotDataset("local/robolearn-export", root=root, video_backend=backend)
    cam = [k for k in ds.meta.video_keys][0]
    n = len(exp["action"])
    worst = {"action": 0.0, "state": 0.0, "frame_mae": 0.0}
    problems = []
    if len(ds) != n:
        problems.append(f"len {len(ds)} != {n}")
    if ds.num_episodes != int(exp["episode_index"].max()) + 1:
        problems.append(f"num_episodes {ds.num_episodes}")
    for i in range(min(n, len(ds))):
        item = ds[i]
        worst["action"] = max(worst["action"], float(np.abs(item["action"].numpy() - exp["action"][i]).max()))
        worst["state"] = max(worst["state"],
                             float(np.abs(item["observation.state"].numpy() - exp["state"][i]).max()))
        frame = (item[cam].permute(1, 2, 0).numpy() * 255).round().astype(int)
        worst["frame_mae"] = max(worst["frame_mae"], float(np.abs(frame - exp["frames"][i].astype(int)).mean()))
        if int(item["episode_index"]) != int(exp["episode_index"][i]) or \
                int(item["frame_index"]) != int(exp["frame_index"][i]):
            problems.append(f"frame {i}: episode/frame index {int(item['episode_index'])}/"
                            f"{int(item['frame_index'])}")
        if item["task"] != str(exp["task"]):
            problems.append(f"frame {i}: task {item['task']!r}")
    if "state_names" in exp.files:          # per-joint names, as LeRobot datasets carry them
        for key, want in (("observation.state", exp["state_names"]), ("action", exp["action_names"])):
            got = ds.meta.features[key]["names"]
            if list(got) != [str(x) for x in want]:
                problems.append(f"{key} names {got} != {list(want)}")
        if ds.meta.robot_type != str(exp["robot_type"]):
            problems.append(f"robot_type {ds.meta.robot_type!r}")
    if worst["action"] > 1e-6 or worst["state"] > 1e-6:
        problems.append(f"values differ: {worst}")
    if worst["frame_mae"] >= 6:
        problems.append(f"decoded frames too far from the recording: {worst}")
    return {"lerobot": lerobot.__version__, "backend": backend, "frames": len(ds),
            "state_names": list(ds.meta.features["observation.state"]["names"]), "robot_type": ds.meta.robot_type,
            "episodes": ds.num_episodes, "fps": ds.fps, "worst": worst, "problems": problems[:10]}


def refuse(root: str) -> dict:
    from lerobot.datasets.backward_compatibility import BackwardCompatibilityError
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    try:
        LeRobotDataset("local/robolearn-export", root=root)
    except BackwardCompatibilityError as exc:
        return {"refused": True, "error": type(exc).__name__, "problems": []}
    return {"refused": False, "problems": ["loaded a dataset it should refuse"]}


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    report = load(*args) if mode == "load" else refuse(*args)
    print(json.dumps(report))
    sys.exit(1 if report["problems"] else 0)
