"""`robolearn bench perception_transfer`: which camera perception transfers to the emulated hard robot.

Why: the sim-trained front-camera localiser was 25-38 mm off on the hard robot's frames after
the session's camera calibration (docs/bench/finetune/), against labels that are themselves
~10 mm off. This bench records one set of robot frames through the session's own procedure
(`collect_robot_frames`: stop-calibrated arm, the arm moves the cube and labels frames from
its kinematics) and keeps beside every frame the wrist camera's frame, the measured joints
and the emulator's true cube position (`/truth.json`, read by this bench only, as a
motion-capture system would be in a lab). Every candidate is then scored on the same
held-out cycles against the truth:

- `front_zero_shot`: the sim localiser as trained;
- `front_calibrated_arm_labels`: fine-tuned on the arm's labels (today's calibration,
  `adapt_localiser` with the session's settings);
- `front_calibrated_more_cycles`: the same with more calibration cycles;
- `front_head_only_arm_labels`: frozen sim backbone, only the head trained on the arm's labels
  (does the frozen feature carry the cube's position on robot frames?);
- `front_calibrated_true_labels`: fine-tuned on the truth (not deployable: the ceiling of any
  better self-collected label);
- `wrist_*`: a wrist-camera localiser (sim-trained to give the cube in the camera's frame,
  turned into the world frame by the arm's kinematics at the measured joints), zero-shot and
  fine-tuned on the arm's labels.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

LIFT = "robolearn/ArmLift-v0"


def _log(msg: str) -> None:
    print(f"[bench perception_transfer] {msg}", file=sys.stderr, flush=True)


def record(work: Path, cycles: int, seed: int) -> Path:
    """Robot frames of `cycles` calibration cycles on the emulated hard arm, with truth."""
    import gymnasium as gym

    from robolearn.drivers.emulation import start_emulator
    from robolearn.drivers.truth import fetch_truth
    from robolearn.registry import register_all
    from robolearn.runtime.finetune_calibration import calibrate_robot_arm
    from robolearn.runtime.perception_calibration import (PerceptionCalibrationConfig, collect_robot_frames,
                                                          save_frames)
    from robolearn.teleop.recorder import HumanLabelsOnly

    register_all()
    work.mkdir(parents=True, exist_ok=True)
    robot = start_emulator("arm", reality="hard", cameras=True, seed=seed, subprocess=True)
    try:
        kw = {"backend": "real", "port": robot.port, "timeout": 0.5,  # a loaded shared CPU
              "reset_prompt": f"operator:{robot.hand_url}", "reset_on_failure": "prompt"}
        t0 = time.monotonic()
        arm = calibrate_robot_arm(SimpleNamespace(env_kwargs=kw), work)
        _log(f"arm calibrated in {time.monotonic() - t0:.0f} s wall")
        cams = {n: robot.camera_urls[n] for n in ("front", "wrist")}
        env = gym.make(LIFT, obs="both", reward_source=HumanLabelsOnly(), camera=cams, image_size=[84, 84], **kw)
        try:
            task = env.unwrapped.task
            wrist = task.backend.cameras["wrist"]

            def extra():  # beside each front frame: the wrist's, the measured joints, the truth
                truth = fetch_truth(robot.truth_url)
                return {"wrist": wrist.read().image.copy(), "q": np.asarray(task.arm.read().q, np.float32),
                        "truth": np.asarray(truth["bodies"]["cube"][:3], np.float32)}

            pc = PerceptionCalibrationConfig(cycles=cycles, seed=seed)
            prompt = env.unwrapped.resets.prompt
            t0 = time.monotonic()
            frames, stats = collect_robot_frames(
                task, task.backend.cameras["front"], pc, lambda xy, why: prompt.put_cube(xy, why),
                progress=lambda c, n, m: _log(f"cycle {c}/{cycles}: {n} + {m} frames"), extra=extra)
            stats["wall_s"] = round(time.monotonic() - t0, 1)
        finally:
            env.close()
    finally:
        robot.close()
    path = save_frames(frames, work / "frames.npz")
    (work / "record.json").write_text(json.dumps({"cycles": cycles, "seed": seed, "arm_calibration": arm,
                                                  **stats}, indent=1, default=str))
    return path


def _dist(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b), axis=1).mean())


def _adapt(loc, images, labels, sim_x, sim_y, seed, head_only=False):
    """The session's fine-tuning (PerceptionCalibrationConfig's epochs, lr)."""
    from robolearn.runtime.perception_calibration import PerceptionCalibrationConfig, adapt_localiser

    pc = PerceptionCalibrationConfig(seed=seed)
    return adapt_localiser(loc, images, labels, sim_x, sim_y, pc.epochs, pc.lr, pc.seed, head_only=head_only)


def evaluate(frames_path: Path, front_dir: str, wrist_dir: str | None, seed: int,
             train_cycles: int | None, sim_frames: int = 1500) -> dict:
    """Score every candidate on the last 20 % of the recorded cycles against the truth."""
    import torch

    from robolearn.policies.perception import Localiser, collect_frames, to_camera, to_world
    from robolearn.sim.kinematics import ArmKinematics

    torch.set_num_threads(2)
    z = np.load(frames_path)
    x, lab, truth = z["episode_images"], z["episode_labels"], z["episode_truth"]
    wx, q, cyc, kind = z["episode_wrist"], z["episode_q"], z["episode_cycle"], z["episode_kind"]
    cycles = np.unique(cyc)
    n_val = max(1, int(round(0.2 * len(cycles))))
    val = np.isin(cyc, cycles[-n_val:])
    pool = cycles[:-n_val]
    few = pool[:train_cycles] if train_cycles else pool
    tr_few, tr_all = np.isin(cyc, few), np.isin(cyc, pool)
    label_err = np.linalg.norm(lab - truth, axis=1)
    on_table = np.isin(kind, (0, 3))          # moving about it, or held still over it (collect_robot_frames)
    res = {"frames": int(len(x)), "cycles": int(len(cycles)), "heldout_cycles": int(n_val),
           "heldout_frames": int(val.sum()), "heldout_on_table": int((val & on_table).sum()),
           "heldout_in_hand": int((val & (kind == 1)).sum()),
           "train_cycles_session": int(len(few)), "train_cycles_more": int(len(pool)),
           "arm_label_error_m": {"all": float(label_err.mean()), "on_table": float(label_err[on_table].mean()),
                                 "in_hand": float(label_err[kind == 1].mean()),
                                 "p90": float(np.quantile(label_err, 0.9))},
           "candidates": {}}

    def score(name, pred, t0=None):
        err = np.linalg.norm(pred[val] - truth[val], axis=1)
        row = {"heldout_true_error_m": float(err.mean()),
               "on_table_m": float(err[on_table[val]].mean()), "in_hand_m": float(err[kind[val] == 1].mean()),
               "p90_m": float(np.quantile(err, 0.9)),
               "heldout_error_vs_arm_labels_m": _dist(pred[val], lab[val])}
        if t0 is not None:
            row["train_s"] = round(time.process_time() - t0, 1)
        res["candidates"][name] = row
        _log(f"{name}: {row['heldout_true_error_m'] * 1000:.1f} mm against the truth")

    front = Localiser.load(front_dir)
    sx, sy = collect_frames(LIFT, sim_frames, "front", seed=seed + 17)
    score("front_zero_shot", front.predict(x))
    t0 = time.process_time()
    front_cal = _adapt(front, x[tr_few], lab[tr_few], sx, sy, seed).predict(x)
    score("front_calibrated_arm_labels", front_cal, t0)
    if train_cycles and len(pool) > len(few):
        t0 = time.process_time()
        score("front_calibrated_more_cycles", _adapt(front, x[tr_all], lab[tr_all], sx, sy, seed).predict(x), t0)
    t0 = time.process_time()
    score("front_head_only_arm_labels",
          _adapt(front, x[tr_few], lab[tr_few], sx, sy, seed, head_only=True).predict(x), t0)
    t0 = time.process_time()
    score("front_calibrated_true_labels", _adapt(front, x[tr_few], truth[tr_few], sx, sy, seed).predict(x), t0)
    if wrist_dir:
        wrist = Localiser.load(wrist_dir)
        kin = ArmKinematics()
        poses = [kin.camera_pose(qi, "wrist") for qi in q]
        world = lambda pc: np.stack([to_world(p, *pose) for p, pose in zip(pc, poses)])  # noqa: E731
        cam_lab = np.stack([to_camera(p, *pose) for p, pose in zip(lab, poses)])
        wsx, wsy = collect_frames(LIFT, sim_frames, "wrist", seed=seed + 17, in_camera_frame=True)
        score("wrist_zero_shot", world(wrist.predict(wx)))
        t0 = time.process_time()
        wrist_cal = world(_adapt(wrist, wx[tr_few], cam_lab[tr_few], wsx, wsy, seed).predict(wx))
        score("wrist_calibrated_arm_labels", wrist_cal, t0)
        score("front_and_wrist_mean_arm_labels", 0.5 * (wrist_cal + front_cal))
    return res


def train_wrist(out: Path, frames: int, epochs: int, seed: int) -> Path:
    """A wrist localiser in sim (targets: the cube in the wrist camera's frame)."""
    import torch

    from robolearn.policies.perception import collect_frames, train_localiser

    torch.set_num_threads(2)
    x, y = collect_frames(LIFT, frames, "wrist", seed=seed, in_camera_frame=True)
    loc, report = train_localiser(x, y, env_id=LIFT, camera="wrist", epochs=epochs, seed=seed, frame="camera")
    loc.save(out)
    _log(f"wrist localiser (sim, camera frame): {json.dumps(report)}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="robolearn bench perception_transfer", description=__doc__.split("\n")[0])
    p.add_argument("--localiser", required=True, help="the sim-trained front localiser (robolearn perception train)")
    p.add_argument("--wrist-localiser", help="a wrist localiser made by this bench (--train-wrist)")
    p.add_argument("--train-wrist", action="store_true", help="train the wrist localiser first, into WORK/wrist")
    p.add_argument("--wrist-frames", type=int, default=4000)
    p.add_argument("--wrist-epochs", type=int, default=20)
    p.add_argument("--cycles", type=int, default=45, help="calibration cycles recorded (default 45)")
    p.add_argument("--session-cycles", type=int, default=24,
                   help="cycles a session's calibration trains on (30 cycles less the 20 %% it holds out)")
    p.add_argument("--work", default="/tmp/perception-transfer", help="frames.npz and models go here")
    p.add_argument("--reuse-frames", action="store_true", help="score the frames already in WORK")
    p.add_argument("--sim-frames", type=int, default=1500, help="sim frames mixed into each fine-tuning (the session's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="docs/bench/perception/transfer.json")
    a = p.parse_args(argv)
    import os

    os.environ.setdefault("MUJOCO_GL", "egl")
    import robolearn  # noqa: F401

    work = Path(a.work)
    t0 = time.process_time()
    wrist = a.wrist_localiser
    if a.train_wrist:
        wrist = str(train_wrist(work / "wrist", a.wrist_frames, a.wrist_epochs, a.seed))
    frames = work / "frames.npz"
    if not a.reuse_frames:
        frames = record(work, a.cycles, a.seed)
    res = evaluate(frames, a.localiser, wrist, a.seed, a.session_cycles, a.sim_frames)
    rec = work / "record.json"
    res = {"command": "robolearn bench perception_transfer " + " ".join(argv or sys.argv[1:]),
           "reality": "hard", "record": json.loads(rec.read_text()) if rec.exists() else None,
           "localiser": a.localiser, "wrist_localiser": wrist, **res,
           "bench_cpu_s": round(time.process_time() - t0, 1)}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res["candidates"], indent=1))
    return 0
