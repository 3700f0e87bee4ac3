"""How noisy is the policy a session samples? The sampled actions' spread per action dim, at the
states a session's episodes recorded, for one or more checkpoints (docs/finetune.md, "The sampled
policy's noise"; the session report plots the same for every policy snapshot).

    python scripts/sampled_action_noise.py runs/lift-camera-27/episodes runs/lift-wrist-perception runs/lift-camera-27/policy_snapshots/step_*

Why: the deterministic final policy can lift 17 of 20 while the sampled policy the actor runs in
training dithers near the cube, and the operator's no-progress rule takes over. This prints, per
checkpoint, the std of 16 sampled actions per state (action units; the arm moves 25 mm a step per
unit), the pre-tanh mean magnitude and std, and the entropy over all dims. State observations
only (the episodes' `obs.state`); the agent is rebuilt from the checkpoint's own options
(robolearn/runtime/policy_spread.py).
"""
from __future__ import annotations

import argparse
import json

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("episodes", help="a dataset's episodes folder (episode_*/data.npz)")
    p.add_argument("checkpoints", nargs="+", help="run folders or checkpoint folders")
    p.add_argument("--last", type=int, default=20, help="the last N episodes' states (default 20; 0: all)")
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--near", type=float, default=0.0,
                   help="ArmLift with the localiser's estimate appended (state[11:14] the hand, "
                        "state[14:17] the estimate): only states with the hand this near the cube (m)")
    a = p.parse_args()
    import torch

    from robolearn.runtime.policy_spread import checkpoint_spread, recorded_states

    recorded = recorded_states(a.episodes, last=a.last, max_states=10 ** 9)
    if recorded is None:
        raise SystemExit(f"no episode_*/data.npz with obs.state and action in {a.episodes}")
    states, act_dim = recorded
    if a.near > 0:
        if states.shape[1] < 17:
            raise SystemExit(f"--near needs ArmLift states with the estimate (17 values), not {states.shape[1]}")
        states = states[np.linalg.norm(states[:, 11:14] - states[:, 14:17], axis=1) < a.near]
        if not len(states):
            raise SystemExit(f"no state with the hand within {a.near} m of the cube")
    torch.manual_seed(0)
    for run in a.checkpoints:
        print(json.dumps(checkpoint_spread(run, states, act_dim, samples=a.samples)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
