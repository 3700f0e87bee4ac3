"""Evaluate any checkpoint or policy snapshot of a finished fine-tuning session on a fresh emulated
robot, with the session's own calibrations, perception and reward (docs/bench/finetune/README.md,
"Lift: choosing the final policy"): what the final evaluation would have given on another policy.

    python scripts/eval_session_checkpoint.py runs/lift-camera-17 runs/lift-camera-17/checkpoints/step_000006000

Why: a session's final evaluation runs one policy (`final_policy`); comparing the reward's choice
with the last checkpoint needs the other one run the same way. It reads RUN/finetune_launch.toml
(the launch file the session's actor read, calibrations already in it), starts the emulator its
`[finetune] reality` names and runs `runtime.finetune.evaluate_checkpoint` (the same seeds and
mean actions as the final evaluation; true success from the emulator's truth). Prints the result
as JSON. This is extra emulated robot time that a session report does not count.

`--trace` also prints one JSON line per episode from the emulator's truth: how high the cube
got, how close the hand came, how far the cube was pushed, the gripper at the end and the
policy's cube estimate error over the first 5 steps and while the hand is within 5 cm of the
cube on the table (all such steps, and those where the hand moved under 2 mm): what a failed
lift did (stop 48); and at the end, that error near the cube by the hand's speed over all
episodes (stop 50). Near the cube the error is also split along the fingers' closing axis (mean
absolute and signed: the 4 cm gripper leaves the 3 cm cube 5 mm either side there), across it,
and signed in height, and where the arm believes its hand is against the truth along that axis
(the estimate is placed in the believed frame, so what the grasp sees is their difference) (stop 51).

`--estimate-shift-mm X` moves the policy's cube estimate X mm along the fingers' closing axis
(from the truth's finger poses: a diagnostic) before the policy sees it (stop 51).

`--scripted estimate|truth` runs the scripted lift (robolearn/tasks/arm_scripted.py, the
operator's own controller) instead of a checkpoint, steered by the policy's cube estimate (the
last 3 state entries: the wrist localiser in the world frame) or by the emulator's truth: what a
controller that knows how to lift achieves with the policy's perception, another route to the
limit a learned policy can reach on this robot (stop 49). The checkpoint argument is then omitted.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import gymnasium as gym
import numpy as np

from robolearn.errors import ConfigError
from robolearn.runtime import finetune as F
from robolearn.runtime.config import load_launch


class TruthTrace(gym.Wrapper):
    """Prints a summary of each episode from the emulator's truth (never seen by the policy)."""

    def __init__(self, env, truth_url: str):
        super().__init__(env)
        self.url, self.steps, self.episode = truth_url, [], 0
        self.near_steps = []     # (hand speed m/s, error m, x-y error m) near the cube, all episodes

    def reset(self, **kw):
        self._report()
        return self.env.reset(**kw)

    def step(self, action):
        from robolearn.drivers.truth import fetch_truth

        obs, r, term, trunc, info = self.env.step(action)
        t = fetch_truth(self.url)
        state = obs["state"] if isinstance(obs, dict) else obs
        est = np.asarray(state, np.float64).ravel()[-3:]   # the perception's cube estimate (world)
        fingers = np.subtract(t["bodies"]["finger_left"][:2], t["bodies"]["finger_right"][:2])
        self.steps.append((np.asarray(t["bodies"]["cube"][:3], np.float64), np.asarray(t["sites"]["ee"]),
                           float(self.env.unwrapped.task.measured_gripper), est,
                           bool(info.get("success")), bool(info.get("true_success")),
                           fingers / max(float(np.linalg.norm(fingers)), 1e-9),
                           np.asarray(self.env.unwrapped.task.ee_pos, np.float64)))   # from the measured joints
        return obs, r, term, trunc, info

    def close(self):
        self._report()
        self._report_by_speed()
        return self.env.close()

    def _report_by_speed(self) -> None:
        """The estimate's error near the cube by the hand's speed, over all episodes: the wrist
        camera's frame is placed with the joints read at the same step, so a lag between the two
        shows as error that grows with motion (stop 50)."""
        if not self.near_steps:
            return
        a = np.array(self.near_steps)
        rows = []
        for lo, hi in ((0.0, 0.02), (0.02, 0.05), (0.05, 0.10), (0.10, np.inf)):
            m = (a[:, 0] >= lo) & (a[:, 0] < hi)
            if m.any():
                rows.append({"hand_speed_m_s": [lo, None if hi == np.inf else hi], "steps": int(m.sum()),
                             "error_mm": round(float(a[m, 1].mean()) * 1000, 1),
                             "error_xy_mm": round(float(a[m, 2].mean()) * 1000, 1)})
        print(json.dumps({"estimate_error_near_by_hand_speed": rows}), flush=True)
        self.near_steps = []

    def _report(self) -> None:
        from robolearn.sim.arm_workspace import CUBE_HALF

        if not self.steps:
            return
        cube = np.array([s[0] for s in self.steps])
        ee = np.array([s[1] for s in self.steps])
        est_err = [float(np.linalg.norm(s[3] - s[0])) for s in self.steps[:5]]
        # where it matters: the estimate while the hand is within 5 cm of the cube, before a lift
        near_ix = [i for i, s in enumerate(self.steps)
                   if np.linalg.norm(s[1] - s[0]) < 0.05 and s[0][2] - CUBE_HALF < 0.01]
        near = [float(np.linalg.norm(self.steps[i][3] - self.steps[i][0])) for i in near_ix]
        # ... and on the steps the hand moved under 2 mm (0.02 m/s at 10 Hz): the wrist camera's
        # frame and the joints it is placed with then agree whatever their latency (stop 50)
        still = [e for i, e in zip(near_ix, near) if i and np.linalg.norm(ee[i] - ee[i - 1]) < 0.002]
        # ... split along the fingers' closing axis (the 4 cm gripper leaves the 3 cm cube 5 mm
        # either side there) and across it, signed along it (the episode's bias) (stop 51)
        along = [float(np.dot(self.steps[i][3][:2] - self.steps[i][0][:2], self.steps[i][6])) for i in near_ix]
        across = [float(abs(np.dot(self.steps[i][6][::-1] * (1, -1), self.steps[i][3][:2] - self.steps[i][0][:2])))
                  for i in near_ix]
        hz = float(self.env.unwrapped.task.control_hz)
        self.near_steps += [(float(np.linalg.norm(ee[i] - ee[i - 1])) * hz, e,
                             float(np.linalg.norm(self.steps[i][3][:2] - self.steps[i][0][:2])))
                            for i, e in zip(near_ix, near) if i]
        print(json.dumps({
            "episode": self.episode, "steps": len(self.steps),
            "success": any(s[4] for s in self.steps), "true_success": any(s[5] for s in self.steps),
            "max_lift_m": round(float(cube[:, 2].max() - CUBE_HALF), 4),
            "hand_to_cube_min_m": round(float(np.linalg.norm(ee - cube, axis=1).min()), 4),
            "cube_pushed_m": round(float(np.linalg.norm(cube[-1, :2] - cube[0, :2])), 4),
            "gripper_last_rad": round(self.steps[-1][2], 2),
            "estimate_error_first5_m": round(float(np.mean(est_err)), 4),
            "estimate_error_near_m": round(float(np.mean(near)), 4) if near else None,
            "estimate_error_near_still_m": round(float(np.mean(still)), 4) if still else None,
            "estimate_error_near_closing_axis_mm": round(float(np.mean(np.abs(along))) * 1000, 1) if along else None,
            "estimate_bias_near_closing_axis_mm": round(float(np.mean(along)) * 1000, 1) if along else None,
            "estimate_error_near_across_mm": round(float(np.mean(across)) * 1000, 1) if across else None,
            "estimate_bias_near_vertical_mm": round(float(np.mean([self.steps[i][3][2] - self.steps[i][0][2]
                                                                    for i in near_ix])) * 1000, 1) if near_ix else None,
            # where the arm believes its hand is (kinematics of the measured joints) against the
            # truth, along the closing axis: the estimate is placed in that believed frame too
            "hand_believed_offset_near_closing_axis_mm": round(float(np.mean(
                [np.dot(self.steps[i][7][:2] - self.steps[i][1][:2], self.steps[i][6]) for i in near_ix])) * 1000, 1)
            if near_ix else None}),
            flush=True)
        self.steps, self.episode = [], self.episode + 1


class ShiftedEstimate(gym.Wrapper):
    """Moves the policy's cube estimate (the last 3 state entries) `shift_mm` along the fingers'
    closing axis (finger_right -> finger_left, from the truth: a diagnostic, never a product
    path): does the grasp's window sit off the estimate (stop 51)?"""

    def __init__(self, env, shift_mm: float, truth_url: str):
        super().__init__(env)
        self.shift, self.url = shift_mm / 1000.0, truth_url

    def _moved(self, obs):
        from robolearn.drivers.truth import fetch_truth

        bodies = fetch_truth(self.url)["bodies"]
        u = np.subtract(bodies["finger_left"][:2], bodies["finger_right"][:2])
        u = u / max(float(np.linalg.norm(u)), 1e-9)
        obs = dict(obs) if isinstance(obs, dict) else obs
        state = np.array(obs["state"] if isinstance(obs, dict) else obs, copy=True)
        state[..., -3:-1] += (self.shift * u).astype(state.dtype)
        if isinstance(obs, dict):
            obs["state"] = state
            return obs
        return state

    def reset(self, **kw):
        obs, info = self.env.reset(**kw)
        return self._moved(obs), info

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        return self._moved(obs), r, term, trunc, info


class ScriptedLift(gym.Wrapper):
    """The scripted lift as the policy: `act` steers `LiftControllerWithRetry` toward the cube the
    source gives (`estimate`: the policy's perception; `truth`: the emulator's /truth.json)."""

    def __init__(self, env, source: str, truth_url: str):
        from robolearn.tasks.arm_scripted import LiftControllerWithRetry

        super().__init__(env)
        self.source, self.url, self.obs = source, truth_url, None
        self.ctrl = LiftControllerWithRetry(env.unwrapped.task, env)
        self.ctrl.cube = self._cube
        self.ctrl.cmd_tol = 0.003    # the goal follows the estimate: within 3 mm is there

    def _cube(self) -> np.ndarray:
        from robolearn.drivers.truth import fetch_truth
        from robolearn.sim.arm_workspace import CUBE_HALF

        if self.source == "truth":
            return np.asarray(fetch_truth(self.url)["bodies"]["cube"][:3], np.float64)
        state = self.obs["state"] if isinstance(self.obs, dict) else self.obs
        est = np.asarray(state, np.float64).ravel()[-3:].copy()
        est[2] = max(est[2], CUBE_HALF)      # the cube rests on the table at the lowest
        return est

    def reset(self, **kw):
        self.obs, info = self.env.reset(**kw)
        self.ctrl.reset()
        return self.obs, info

    def act(self, obs) -> np.ndarray:
        self.obs = obs
        return self.ctrl.act(obs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="the session's run folder (holds finetune_launch.toml)")
    ap.add_argument("checkpoint", nargs="?", help="a checkpoint or RUN/policy_snapshots/step_N folder")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--trace", action="store_true", help="a line per episode from the truth (arm tasks)")
    ap.add_argument("--estimate-shift-mm", type=float, default=0.0,
                    help="move the policy's cube estimate this far along the fingers' closing axis (diagnostic)")
    ap.add_argument("--scripted", choices=("estimate", "truth"),
                    help="run the scripted lift on the policy's cube estimate or on the truth, not a checkpoint")
    args = ap.parse_args()
    if (args.checkpoint is None) == (args.scripted is None):
        raise SystemExit("pass a checkpoint or --scripted estimate|truth (one of the two)")
    launch = Path(args.run) / "finetune_launch.toml"
    if not launch.is_file():
        raise SystemExit(f"{launch} not found: pass the run folder of a `robolearn finetune` session")
    cfg = load_launch(launch)
    if not cfg.finetune or not cfg.finetune.reality:
        raise ConfigError(f"{launch}: no [finetune] reality: this script runs on an emulated robot only")
    emulator = F.start_emulator(cfg, Path(args.run) / "logs" / "eval_emulator.log")
    try:
        cfg.env_kwargs.update(emulator.env_kwargs())
        cfg.finetune.truth_url = emulator.truth_url
        if args.estimate_shift_mm:   # evaluate_checkpoint builds its env through this function
            make_shifted = F.make_robot_env
            F.make_robot_env = lambda c: ShiftedEstimate(make_shifted(c), args.estimate_shift_mm, emulator.truth_url)
        if args.trace:
            make_env = F.make_robot_env
            F.make_robot_env = lambda c: TruthTrace(make_env(c), emulator.truth_url)
        if args.scripted:
            made = []

            def make():
                made.append(ScriptedLift(F.make_robot_env(cfg), args.scripted, emulator.truth_url))
                return made[-1]

            res = F.evaluate_on_robot(make, lambda o: made[-1].act(o), args.episodes, seed=cfg.seed + 7_000)
            res["scripted"] = args.scripted
        else:
            res = F.evaluate_checkpoint(cfg, args.checkpoint, args.episodes)
        print(json.dumps(res), flush=True)
    finally:
        emulator.stop()


if __name__ == "__main__":
    main()
