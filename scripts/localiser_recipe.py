"""Compare recipes of the session's localiser calibration (`adapt_localiser`) offline, on the robot
frames a finished fine-tuning session recorded (RUN/perception_calibration/frames.npz), with the
session's own split (the last 20% of cycles held out) and 1500 + 300 sim frames:

    python scripts/localiser_recipe.py runs/lift-camera-21 --recipe 6,3e-4 --recipe 15,1e-3

Why: the lift policy's failed grasps close 0.5-3 cm beside the cube with its estimate ~1 cm off
there (`eval_session_checkpoint.py --trace`, stop 50); what matters is the error on frames of the
cube on the table near the wrist camera, which this prints beside the overall held-out error.
Prints one JSON line per recipe: held-out mean/median error (mm), on the table within 12 cm of
the camera, in the hand, and the sim held-out error (the sim skill kept).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

NEAR_M = 0.12    # camera to cube: the closer half of the on-table frames (median 0.10 m)


def main() -> None:
    from robolearn.policies.perception import Localiser, collect_frames
    from robolearn.runtime.perception_calibration import (PerceptionCalibrationConfig, adapt_localiser,
                                                          heldout_cycles, localiser_frames)

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a fine-tuning session's run folder (RUN/perception_calibration/frames.npz)")
    ap.add_argument("--localiser", default="models/lift-wrist-perception", help="the sim-pretrained localiser")
    ap.add_argument("--recipe", action="append", default=None, help="EPOCHS,LR (repeatable; default: the "
                    "session's current recipe)")
    ap.add_argument("--env", default="robolearn/ArmLift-v0")
    args = ap.parse_args()
    path = Path(args.run) / "perception_calibration" / "frames.npz"
    if not path.is_file():
        raise SystemExit(f"{path} not found: pass the run folder of a session with calibrate_perception")
    z = np.load(path)
    data = {k[len("episode_"):]: z[k] for k in z.files if k.startswith("episode_")}
    loc = Localiser.load(args.localiser)
    images, labels = localiser_frames(data, loc, "front", args.localiser)
    pc = PerceptionCalibrationConfig()
    val = heldout_cycles(data["cycle"], pc.heldout)
    sx, sy = collect_frames(args.env, pc.sim_frames + pc.sim_heldout, loc.camera, seed=pc.seed + 17,
                            in_camera_frame=loc.frame == "camera")
    k = pc.sim_frames
    on_table = data["kind"][val] == 0
    near = on_table & (np.linalg.norm(labels[val], axis=1) < NEAR_M) if loc.frame == "camera" else on_table

    def errors(model, x, y):
        return np.linalg.norm(model.predict(x) - y, axis=1) * 1000

    base = errors(loc, images[val], labels[val])
    print(json.dumps({"run": args.run, "robot_frames": int((~val).sum()), "heldout_frames": int(val.sum()),
                      "near_frames": int(near.sum()), "before_mm": round(float(base.mean()), 1)}), flush=True)
    for recipe in args.recipe or [f"{pc.epochs},{pc.lr}"]:
        epochs, lr = recipe.split(",")
        t0 = time.monotonic()
        tuned = adapt_localiser(loc, images[~val], labels[~val], sx[:k], sy[:k], int(epochs), float(lr), pc.seed)
        e = errors(tuned, images[val], labels[val])
        print(json.dumps({"recipe": {"epochs": int(epochs), "lr": float(lr)},
                          "heldout_mean_mm": round(float(e.mean()), 1), "heldout_median_mm": round(float(np.median(e)), 1),
                          "near_on_table_mean_mm": round(float(e[near].mean()), 1),
                          "in_hand_mean_mm": round(float(e[data["kind"][val] == 1].mean()), 1),
                          "sim_heldout_mean_mm": round(float(errors(tuned, sx[k:], sy[k:]).mean()), 1),
                          "train_s": round(time.monotonic() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()
