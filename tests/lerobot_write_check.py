"""Write SO-100 reach episodes with lerobot's own writer (run by tests/test_lerobot_import.py in a
Python that has lerobot 0.4.4: ROBOLEARN_LEROBOT_PYTHON).

    python tests/lerobot_write_check.py EPISODES.npz OUT

EPISODES.npz holds `state_<i>` and `action_<i>` arrays (frames x 6: the follower's measured joint
positions and the leader's targets, `shoulder_pan.pos` ... `wrist_roll.pos` in degrees,
`gripper.pos` 0..100), as an SO-100 follower records them. The dataset is written with
`LeRobotDataset.create` / `add_frame` / `save_episode` / `finalize`, local root, no Hub.
"""
import sys
from pathlib import Path

import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset

NAMES = ["shoulder_pan.pos", "shoulder_lift.pos", "elbow_flex.pos", "wrist_flex.pos", "wrist_roll.pos",
         "gripper.pos"]


def main(npz: str, out: str) -> int:
    z = np.load(npz)
    episodes = sorted({int(k.split("_")[1]) for k in z.files})
    features = {"observation.state": {"dtype": "float32", "shape": (6,), "names": NAMES},
                "action": {"dtype": "float32", "shape": (6,), "names": NAMES}}
    ds = LeRobotDataset.create(repo_id="robolearn/so100_reach", fps=10, features=features, root=Path(out),
                               robot_type="so100_follower", use_videos=False)
    for e in episodes:
        for s, a in zip(z[f"state_{e}"], z[f"action_{e}"]):
            ds.add_frame({"observation.state": s.astype(np.float32), "action": a.astype(np.float32),
                          "task": "Reach the target"})
        ds.save_episode()
    ds.finalize()
    back = LeRobotDataset("robolearn/so100_reach", root=Path(out))   # and lerobot reads it back
    assert back.num_episodes == len(episodes), back.num_episodes
    print(f"wrote {back.num_episodes} episodes / {back.num_frames} frames with lerobot to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
