"""The world-frame cube estimate a policy reads (`state[-3:]`, through PerceptionFeatures) vs the
sim's truth, on the scripted lift's episodes and on random actions (docs/perception.md).

    MUJOCO_GL=egl python scripts/perception_world_error.py MODEL_DIR [--episodes 30]

Why both: a wrist camera sees the cube only when the arm looks at it, so its error depends on
the motions; the localiser's held-out error mixes the two (its frames come from scripted, noisy
and random episodes). Episode seeds 100.., random actions from seed 0.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

import robolearn  # noqa: F401  (registers the envs)
from robolearn.policies.env_building import make_env


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("--episodes", type=int, default=30)
    a = p.parse_args()
    t0 = time.time()
    env = make_env("robolearn/ArmLift-v0", "state", env_kwargs={"perception": a.model, "privileged_obs": True})
    ctrl = env.unwrapped.scripted_controller()
    rng = np.random.default_rng(0)
    out = {"model": a.model, "episodes": a.episodes}
    try:
        for mode in ("scripted", "random"):
            errs = []
            for ep in range(a.episodes):
                obs, _ = env.reset(seed=100 + ep)
                ctrl.reset()
                while True:
                    errs.append(float(np.linalg.norm(obs["state"][-3:] - obs["privileged"][3:6])))
                    act = ctrl.act(obs) if mode == "scripted" else rng.uniform(-1, 1, env.action_space.shape)
                    obs, _, term, trunc, _ = env.step(np.asarray(act, np.float32))
                    if term or trunc:
                        break
            e = np.asarray(errs)
            out[mode] = {"steps": len(e), "mean_m": round(float(e.mean()), 4),
                         "median_m": round(float(np.median(e)), 4), "p90_m": round(float(np.quantile(e, 0.9)), 4)}
    finally:
        env.close()
    out["wall_s"] = round(time.time() - t0, 1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
