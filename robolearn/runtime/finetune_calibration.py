"""A fine-tuning session's calibration steps on the robot (arm stops, cameras), apart from its orchestration."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from robolearn.errors import ConfigError


def calibrate_robot_arm(cfg, run_dir: Path) -> dict:
    """Stop calibration (drivers/stop_calibration.py) on the session's arm, through the port the
    actor will use: writes RUN/arm_calibration.json and points env_kwargs.calibration at it, so
    the zero-shot evaluation, the actor and the final evaluation all read it. An existing
    env_kwargs.calibration is the starting point (IDs, directions, rough offsets)."""
    from robolearn.drivers.calibration import Calibration
    from robolearn.drivers.real import bus_protocol, default_arm_spec
    from robolearn.drivers.servo_bus import ServoBus
    from robolearn.drivers.stop_calibration import calibrate_against_stops, joint_names

    kw = cfg.env_kwargs
    if kw.get("backend") != "real" or not kw.get("port"):
        raise ConfigError("finetune.calibrate_arm needs the robot: set [env_kwargs] backend = \"real\" "
                          "and port, or finetune.reality for the emulated arm")
    spec = default_arm_spec()
    initial = kw.get("calibration")
    if isinstance(initial, (str, Path)):
        initial = Calibration.load(initial, required=joint_names(spec))
    elif initial is not None:
        raise ConfigError(f"env_kwargs.calibration = {initial!r}: give a calibration JSON path")
    with ServoBus(kw["port"], baudrate=int(kw.get("baudrate", 1_000_000)),
                  timeout=float(kw.get("timeout", 0.05)),
                  protocol=bus_protocol(kw.get("protocol", "feetech"))) as bus:
        res = calibrate_against_stops(bus, spec, initial, log=lambda line: print(f"calibrate-arm: {line}",
                                                                                 flush=True))
    path = Path(run_dir) / "arm_calibration.json"
    res.calibration.save(path)
    kw["calibration"] = str(path)
    return {"file": str(path), **res.summary()}


def calibrate_robot_perception(cfg, run_dir: Path, log=print) -> dict:
    """Camera calibration on the robot (robolearn/runtime/perception_calibration.py): the arm moves the
    cube and labels camera frames from its kinematics; the cube finder for camera resets is
    fitted on them and the policy localiser (env_kwargs perception) fine-tuned, both saved to
    RUN/perception_calibration/, which every robot env of the session then reads (the sim
    twin keeps the sim-trained localiser).
    The operator is asked (the env's reset prompt) to put the cube on the start mark."""
    import gymnasium as gym

    from robolearn.registry import register_all
    from robolearn.runtime.perception_calibration import (PerceptionCalibrationConfig, calibrate_localisers,
                                                          collect_robot_frames, save_frames,
                                                          train_success_classifier)
    from robolearn.teleop.recorder import HumanLabelsOnly

    kw = dict(cfg.env_kwargs)
    if kw.get("backend") != "real":
        raise ConfigError("finetune.calibrate_perception needs the robot: set [env_kwargs] backend = "
                          "\"real\" and port (and camera), or finetune.reality for the emulated robot")
    perception = kw.pop("perception", None)
    kw.pop("cube_finder", None)                  # made here
    camera = kw.get("camera")
    from robolearn.policies.finder_estimate import is_finder_dir
    from robolearn.policies.perception import Localiser, camera_names

    # the policy's estimate is the cube finder itself (push): the one fitted here replaces the sim's
    finder_policy = bool(perception) and is_finder_dir(perception)
    loc = Localiser.load(perception) if perception and not finder_policy else None
    # the cube finder and the success classifier look through the fixed front camera (a
    # homography of the table needs a camera that does not move); the policy's localiser
    # through its own camera (the wrist's: its frames are kept beside the front's, with the
    # measured joints that place it)
    cam_name = "front"
    names = camera_names(kw)
    for need, why in ((cam_name, "the reset's cube finder"),
                      (loc.camera if loc else cam_name, f"the policy localiser {perception}")):
        if names is not None and need not in names:
            raise ConfigError(f"camera calibration needs camera {need!r} for {why}; env_kwargs camera = "
                              f"{camera!r} lacks it: add {need!r} (e.g. camera = ['front', 'wrist'])")
    register_all()
    env = gym.make(cfg.env, obs="both", reward_source=HumanLabelsOnly(), **kw)
    try:
        task = env.unwrapped.task
        cams = task.backend.cameras
        extra = None
        if loc is not None and loc.camera != cam_name:
            other = cams[loc.camera]

            def extra():  # beside each front frame: the localiser camera's, and the joints that place it
                return {loc.camera: other.read().image.copy(), "q": np.asarray(task.arm.read().q, np.float32)}
        prompt = env.unwrapped.resets.prompt

        def put_cube(xy, why):
            if hasattr(prompt, "put_cube"):
                prompt.put_cube(xy, why)
            elif prompt is not None:
                prompt.ask(f"{why}: put the cube on the table at x={xy[0]:.3f} m, y={xy[1]:.3f} m "
                           "(in front of the arm's base, x forward, y to its left)")
            else:
                raise ConfigError("camera calibration asks the operator to place the cube: run it in "
                                  "a terminal (reset_on_failure = \"prompt\")")

        pc = PerceptionCalibrationConfig(cycles=cfg.finetune.perception_cycles, seed=cfg.seed)
        frames, stats = collect_robot_frames(
            task, cams[cam_name], pc, put_cube, extra=extra,
            progress=lambda c, n, m: log(f"camera calibration: cycle {c}/{pc.cycles}, {n} + {m} frames"))
    finally:
        env.close()
    out = Path(run_dir) / "perception_calibration"
    out.mkdir(parents=True, exist_ok=True)
    save_frames(frames, out / "frames.npz")
    report = calibrate_localisers(frames, None if finder_policy else perception, out, cfg.env, pc,
                                  camera=cam_name, log=log)
    if cfg.finetune.calibrate_reward and "ArmLift" in cfg.env:
        report["success_classifier"] = train_success_classifier(frames, out / "success_classifier", cfg.env,
                                                                pc, camera=cam_name, log=log)
    report.update(use_calibration(cfg, out, perception))
    return {"out": str(out), **stats, **report}


def use_calibration(cfg, out: Path, perception) -> dict:
    """Point the session at the camera calibration's files in `out`: the resets' cube finder; the
    policy's estimate (a localiser: the one tuned on robot frames; the sim's cube finder: the one
    fitted on the robot); the reward with calibrate_reward (lift: the success classifier trained
    there; push: the task's reward at the cube finder's position, rewards/push_camera.py)."""
    from robolearn.policies.finder_estimate import is_finder_dir

    report = {}
    finder = str(Path(out) / "cube_finder")
    if cfg.finetune.calibrate_reward and "ArmPush" in cfg.env:
        # the launch file's other [reward] options (hidden) stay
        cfg.reward = {**cfg.reward, "kind": "cube_finder", "model": finder, "where": "env"}
        report["push_reward"] = {"kind": "cube_finder", "model": finder}
    elif cfg.finetune.calibrate_reward:
        # the launch file's other [reward] options (require_grasp, threshold) stay
        cfg.reward = {**cfg.reward, "model": str(Path(out) / "success_classifier"), "where": "env"}
    if perception and is_finder_dir(perception):
        cfg.env_kwargs["perception"] = finder
    elif perception:
        cfg.env_kwargs["perception"] = str(Path(out) / "perception")
    cfg.env_kwargs["cube_finder"] = finder
    return report
