"""Does the camera calibration's hover (kind 3: still frames over the cube before each grasp) make
the wrist localiser better where the lift policy decides to come down? Scored against the
emulator's truth, on the calibration's held-out cycles, fine-tuned with and without those frames
(docs/bench/finetune/README.md, "Lift: the localiser over the cube (stop 59)").

    python scripts/hover_frames_ab.py --work /tmp/pt59 --record     # record 30 cycles first (~6 min)
    python scripts/hover_frames_ab.py --work /tmp/pt59 --seeds 0 1  # then score (~1.5 min a seed)

Why: the session's held-out error is against the arm's own labels, which are 5-6 mm off the truth
themselves; and its frames on the table were all taken moving (the approach), while the policy
hovers 3-6 cm over the cube when it decides. The truth here comes from the bench's recording
(`robolearn bench perception_transfer`'s `record`: the emulator's /truth.json beside each frame,
as a motion-capture system would give it in a lab), never from anything a session reads.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

BINS_M = ((0.0, 0.08), (0.08, 0.11), (0.11, 0.14), (0.14, 0.20))
KINDS = {0: "moving, cube on the table", 3: "hovering still over it"}        # the ones scored
LABELLED = {**KINDS, 1: "in the hand", 2: "at the look pose"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", default="/tmp/pt59", help="the recording's folder (frames.npz with truth)")
    p.add_argument("--record", action="store_true", help="record the calibration on the emulated hard arm first")
    p.add_argument("--cycles", type=int, default=30)
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="fine-tuning seeds")
    p.add_argument("--localiser", default="models/lift-wrist-perception", help="the sim wrist localiser")
    a = p.parse_args()
    import torch

    from robolearn.bench.perception_transfer import LIFT, record
    from robolearn.policies.perception import Localiser, collect_frames, to_camera
    from robolearn.runtime.perception_calibration import (PerceptionCalibrationConfig, adapt_localiser,
                                                          heldout_cycles, load_frames_npz, localiser_frames)
    from robolearn.sim.kinematics import ArmKinematics

    torch.set_num_threads(2)
    work = Path(a.work)
    if a.record:
        record(work, a.cycles, 0)
    data = load_frames_npz(work / "frames.npz")["episode"]
    if "truth" not in data:
        raise SystemExit(f"{work}/frames.npz has no truth: record it with --record (or the bench)")
    loc = Localiser.load(a.localiser)
    images, labels = localiser_frames(data, loc, "front", a.localiser)
    kin = ArmKinematics()
    poses = [kin.camera_pose(q, loc.camera) for q in data["q"]]
    truth = np.stack([to_camera(t, *pose) for t, pose in zip(data["truth"], poses)])
    kind, val = data["kind"], heldout_cycles(data["cycle"], 0.2)
    dist = np.linalg.norm(truth, axis=1)
    print(f"{len(kind)} frames, {val.sum()} held out; the arm's labels off the truth: "
          + ", ".join(f"{LABELLED.get(k, k)} {1000 * np.linalg.norm(labels - truth, axis=1)[kind == k].mean():.1f} mm"
                      for k in np.unique(kind)))
    pc = PerceptionCalibrationConfig()
    sx, sy = collect_frames(LIFT, pc.sim_frames, loc.camera, seed=pc.seed + 17, in_camera_frame=True)
    for seed in a.seeds:
        for name, use in (("without the hover frames", ~val & (kind != 3)), ("with them", ~val)):
            pred = adapt_localiser(loc, images[use], labels[use], sx, sy, pc.epochs, pc.lr, seed).predict(images)
            err, plane = np.linalg.norm(pred - truth, axis=1), np.linalg.norm((pred - truth)[:, :2], axis=1)
            print(f"seed {seed}, {name} ({use.sum()} robot frames): held-out error against the truth "
                  f"{1000 * err[val].mean():.1f} mm")
            for k, what in KINDS.items():
                for lo, hi in BINS_M:
                    s = val & (kind == k) & (dist >= lo) & (dist < hi)
                    if s.sum() >= 5:
                        print(f"  {what}, camera {100 * lo:.0f}-{100 * hi:.0f} cm from the cube: {s.sum():3d} frames, "
                              f"{1000 * err[s].mean():5.1f} mm, in the image plane {1000 * plane[s].mean():5.1f} mm")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
