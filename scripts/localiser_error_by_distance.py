"""How far off is a session's calibrated wrist localiser, by how far its camera is from the cube?
On the camera calibration's own robot frames (labels from the arm's kinematics), held-out cycles
and training cycles apart (docs/bench/finetune/README.md, "Lift: what the anchor cloned").

    python scripts/localiser_error_by_distance.py runs/lift-camera-39 [runs/lift-camera-40 ...]

Why: the session report gives one held-out error (13-16 mm in lift sessions 34-40), but the
policy decides to come down over the cube from 3-6 cm above it, where the camera is 8-14 cm from
the cube; the operator's lifted takeovers there moved the hand a median 11-12 mm across before
closing. The error in the image plane (camera x, y) is what puts a finger on the cube's top.
"""
from __future__ import annotations

import argparse

import numpy as np

BINS_M = ((0.0, 0.08), (0.08, 0.11), (0.11, 0.14), (0.14, 0.20), (0.20, 1.0))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="session folders (their perception_calibration/)")
    p.add_argument("--heldout", type=float, default=0.2, help="share of cycles held out, as the calibration")
    a = p.parse_args()
    from robolearn.policies.perception import Localiser
    from robolearn.runtime.perception_calibration import heldout_cycles, load_frames_npz, localiser_frames

    for run in a.runs:
        frames = load_frames_npz(f"{run}/perception_calibration/frames.npz")
        loc = Localiser.load(f"{run}/perception_calibration/perception")
        data = frames["episode"]
        images, labels = localiser_frames(data, loc, "front", run)
        if loc.frame != "camera":
            raise SystemExit(f"{run}: the localiser gives world coordinates; this reads a camera-frame one")
        val = heldout_cycles(data["cycle"], a.heldout)
        diff = loc.predict(images) - labels
        err, plane = np.linalg.norm(diff, axis=1), np.linalg.norm(diff[:, :2], axis=1)
        dist = np.linalg.norm(labels, axis=1)
        for name, part in (("held out", val), ("trained on", ~val)):
            print(f"{run}: {name}, {part.sum()} frames, mean error {1000 * err[part].mean():.1f} mm")
            for lo, hi in BINS_M:
                s = part & (dist >= lo) & (dist < hi)
                if s.any():
                    print(f"  camera {100 * lo:4.0f}-{100 * hi:3.0f} cm from the cube: {s.sum():4d} frames, "
                          f"error {1000 * err[s].mean():5.1f} mm, in the image plane {1000 * plane[s].mean():5.1f} mm")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
