"""Where was the lift policy's hand, its cube estimate and the cube when the operator took over
from over the cube? Read from a session's recorded training episodes (docs/bench/finetune/README.md,
"Lift: the localiser over the cube (stop 59)").

    python scripts/takeover_estimate_offset.py runs/lift-camera-40 runs/lift-camera-41

Why: the operator (who aims at the truth) moved the hand 11-12 mm across before closing in the
lifted takeovers that began over the cube. That move is two things: the estimate's error (where
the operator closed, against the policy's estimate when it took over), and a policy that did not
centre itself on its own estimate (its hand against that estimate), which is compared with the
episodes the policy lifted alone when they began their descent. Only lifted takeovers count:
there the fingers closed around the cube, so the hand when the operator closes marks it within the fingers'
play (a few mm along them).
"""
from __future__ import annotations

import argparse
import glob
import json

import numpy as np

EE, ESTIMATE = slice(11, 14), slice(14, 17)   # ArmLift state: ee.x|y|z, then the localiser's 3 outputs


def offsets(run: str) -> dict:
    est_err, off_est, move, alone = [], [], [], []
    for d in sorted(glob.glob(f"{run}/episodes/episode_*")):
        z = np.load(f"{d}/data.npz")
        driven = z["intervention"].astype(bool)
        if not json.load(open(f"{d}/episode.json")).get("true_success"):
            continue
        s, a, t = z["obs.state"], z["action"], int(np.argmax(driven))
        if not driven.any():           # lifted alone: the hand against its estimate as it began down
            rel = s[:-1, EE] - s[:-1, ESTIMATE]
            closes = np.where(a[:, 3] < 0)[0]
            above = np.where(rel[:closes[0], 2] > 0.035)[0] if len(closes) else []
            if len(above):
                alone.append(np.linalg.norm(rel[above[-1], :2]))
            continue
        closes = np.where(driven & (a[:, 3] < 0))[0]
        rel = s[t, EE] - s[t, ESTIMATE]
        if not len(closes) or not (np.linalg.norm(rel[:2]) < 0.02 and 0.025 < rel[2] < 0.06):
            continue                                     # not over the cube's estimate, fingers open
        hand0, hand_close, est0 = s[t, EE][:2], s[closes[0], EE][:2], s[t, ESTIMATE][:2]
        est_err.append(np.linalg.norm(est0 - hand_close))
        off_est.append(np.linalg.norm(est0 - hand0))
        move.append(np.linalg.norm(hand_close - hand0))
    return {k: 1000 * np.asarray(v) for k, v in
            (("estimate_to_close", est_err), ("hand_to_estimate", off_est), ("operator_move", move),
             ("alone_hand_to_estimate", alone))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="session folders (their episodes/)")
    for run in p.parse_args().runs:
        o = offsets(run)
        n = len(o["operator_move"])
        if not n:
            print(f"{run}: no lifted takeover began over the cube")
            continue
        med = {k: float(np.median(v)) for k, v in o.items()}
        print(f"{run}: {n} lifted takeovers from over the cube (medians, across): the estimate at the "
              f"takeover to where the operator closed {med['estimate_to_close']:.1f} mm; the hand to its "
              f"estimate {med['hand_to_estimate']:.1f} mm; the operator moved the hand "
              f"{med['operator_move']:.1f} mm (over 10 mm in {(o['operator_move'] > 10).sum()}); in the "
              f"{len(o['alone_hand_to_estimate'])} episodes lifted alone, the hand to its estimate at its last "
              f"step above 3.5 cm {med['alone_hand_to_estimate']:.1f} mm")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
