"""Pure pursuit on the emulated car's external pose tracker (backend="real"): lap time, collisions
and missing-reward steps, as docs/car.md reports them.

    MUJOCO_GL=egl .venv/bin/python scripts/car_tracker_lap.py [--reality hard] [--laps 2]
"""
import argparse
import json
import time

import gymnasium as gym

from robolearn.drivers.emulation import start_emulator
from robolearn.registry import register_all


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reality", default=None)
    ap.add_argument("--laps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    register_all()
    with start_emulator("car", reality=args.reality, cameras=False, seed=args.seed) as robot:
        truth = {"contacts": 0, "touching": False}      # wall contacts begun, from the emulator's physics
        plant, advance = robot.emulator.plant, robot.emulator.plant.advance

        def advance_and_count(dt):
            out = advance(dt)
            if plant.wall_contact and not truth["touching"]:
                truth["contacts"] += 1
            truth["touching"] = plant.wall_contact
            return out

        plant.advance = advance_and_count
        env = gym.make("robolearn/CarLap-v0", backend="real", port=robot.port,
                       tracker=robot.tracker_url, max_episode_steps=20 * 30 * (args.laps + 1))
        try:
            obs, info = env.reset(seed=args.seed)
            pp = env.unwrapped.scripted_controller()
            pp.reset()
            t0, steps, missing, total = time.monotonic(), 0, 0, 0.0
            while True:
                obs, r, term, trunc, info = env.step(pp.act(obs))
                steps += 1
                if info.get("reward_missing"):
                    missing += 1
                else:
                    total += r
                if info["laps"] >= args.laps or term or trunc:
                    break
            print(json.dumps({"reality": args.reality, "steps": steps, "laps": info["laps"],
                              "lap_time_s": info["lap_time"], "best_lap_time_s": info["best_lap_time"],
                              "collisions": info["collisions"], "true_wall_contacts": truth["contacts"],
                              "reward_missing_steps": missing,
                              "reward": round(total, 3), "wall_s": round(time.monotonic() - t0, 1),
                              "teleports": env.unwrapped.teleport_count(),
                              "emulator_teleports": robot.emulator.plant.teleports}))
        finally:
            env.close()


if __name__ == "__main__":
    main()
