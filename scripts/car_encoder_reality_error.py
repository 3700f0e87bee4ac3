"""How far a car camera encoder's estimates are from the sim's truth on frames the way the
emulated car's camera renders them (a reality's camera pose, field of view, light and tint),
so encoders trained on different randomisations are compared on the same frames (docs/car.md).

    MUJOCO_GL=egl python scripts/car_encoder_reality_error.py MODEL_DIR [MODEL_DIR ...] \
        [--reality hard] [--episodes 6] [--out FILE.json]

Frames: noisy pure pursuit episodes (seeds 100..), every 5th step. Reported per target: the mean
absolute error in the encoder's units, and the mean length of the error vector in the units the
held-out report uses (the target's own units), beside always guessing the training mean.
"""
from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np

import robolearn  # noqa: F401  (registers the envs)
from robolearn.drivers.reality import apply_car_model, load_reality, shipped_path
from robolearn.policies.perception import TARGETS, Localiser

ENV = "robolearn/CarLap-v0"


def frames(reality: str, episodes: int, every: int = 5) -> tuple[np.ndarray, np.ndarray]:
    env = gym.make(ENV, obs="state", camera="front", privileged_obs=True)
    if reality != "sim":
        apply_car_model(env.unwrapped.sim, load_reality(shipped_path(reality)))
    ctrl = env.unwrapped.scripted_controller()
    cam = env.unwrapped.backend.cameras["front"]
    rng = np.random.default_rng(0)
    sl = TARGETS[ENV][0]
    images, truth = [], []
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=100 + ep)
            ctrl.reset()
            for t in range(400):
                if t % every == 0:
                    images.append(cam.read().image.copy())
                    truth.append(obs["privileged"][sl])
                a = np.asarray(ctrl.act(obs), float) + rng.normal(0, 0.2, env.action_space.shape)
                obs, _, term, trunc, _ = env.step(np.clip(a, -1, 1).astype(np.float32))
                if term or trunc:
                    break
    finally:
        env.close()
    return np.stack(images), np.stack(truth).astype(np.float32)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--reality", default="hard", help="a shipped reality (mild, hard) or sim")
    p.add_argument("--episodes", type=int, default=6)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    t0 = time.time()
    out = {"reality": a.reality, "episodes": a.episodes, "targets": TARGETS[ENV][1], "models": {}}
    for reality in dict.fromkeys(["sim", a.reality]):
        x, y = frames(reality, a.episodes)
        for model in a.models:
            loc = Localiser.load(model)
            pred = loc.predict(x)
            guess = np.asarray(loc.meta["target_mean"], np.float32)
            out["models"].setdefault(model, {})[reality] = {
                "frames": len(x),
                "mae": np.round(np.abs(pred - y).mean(0), 4).tolist(),
                "mean_dist": round(float(np.linalg.norm(pred - y, axis=1).mean()), 4),
                "mean_dist_guess": round(float(np.linalg.norm(guess - y, axis=1).mean()), 4)}
    out["wall_s"] = round(time.time() - t0, 1)
    text = json.dumps(out, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
