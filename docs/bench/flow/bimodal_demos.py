"""Record N scripted ArmLift demos that approach the cube from two sides (issue 26 item 2).

Episode i goes first to a waypoint 6 cm to the left (i even) or right (i odd) of the cube at
hover height, then runs the task's own LiftController (above, descend, close, lift). So the
demos' first actions at the start state point two ways, as a teleoperator's would when some
people grasp from the left and others from the right.

    python docs/bench/flow/bimodal_demos.py --episodes 20 --out runs/flow/bimodal20.npz
"""
from __future__ import annotations

import argparse
from pathlib import Path

import gymnasium as gym
import numpy as np

import robolearn  # noqa: F401  (registers the env IDs)
from robolearn.policies.demos import collect_rollouts
from robolearn.tasks.arm_scripted import OPEN, LiftController

SIDE_OFFSET = 0.06  # m, along y


class TwoSidedLift(LiftController):
    def __init__(self, task, env):
        super().__init__(task, env)
        self.episode = -1

    def reset(self) -> None:
        super().reset()
        self.episode += 1
        self.side = -1.0 if self.episode % 2 == 0 else 1.0
        self.phase = "side"

    def act(self, obs) -> np.ndarray:
        if self.phase == "side":
            cube = self.cube()
            goal = np.array([cube[0], cube[1] + self.side * SIDE_OFFSET, cube[2] + self.hover])
            if self.at(goal, tol=0.01):
                self.phase = "above"
            return self.toward(goal, OPEN)
        return super().act(obs)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    env = gym.make("robolearn/ArmLift-v0", privileged_obs=True)
    try:
        ctrl = TwoSidedLift(env.unwrapped.task, env)
        d = collect_rollouts(env, ctrl.act, args.episodes, seed=args.seed, on_reset=ctrl.reset)
    finally:
        env.close()
    ends = np.flatnonzero(d["terminated"] | d["truncated"])
    starts = np.r_[0, ends[:-1] + 1]
    print(f"{args.episodes} episodes, {len(d['action'])} steps, successes (terminated): "
          f"{int(d['terminated'].sum())}; first action dy per episode: "
          f"{np.round(d['action'][starts, 1], 2).tolist()}")
    arrays = {"action": d["action"], "reward": d["reward"], "terminated": d["terminated"],
              "truncated": d["truncated"]}
    for k, v in d["obs"].items():
        arrays[f"obs_{k}"] = v
        arrays[f"next_obs_{k}"] = d["next_obs"][k]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.out, **arrays)


if __name__ == "__main__":
    main()
