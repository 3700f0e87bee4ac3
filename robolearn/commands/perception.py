"""`robolearn perception train --env ID --out DIR`: a frozen object localiser from randomised renders;
`robolearn perception fit-finder --env ID --out DIR`: the cube finder's table homography on sim renders."""
from __future__ import annotations

HELP = ("Pretrain perception in simulation: render domain-randomised frames, train a small conv "
        "localiser to predict the cube position (privileged sim truth), save it to DIR. Use it "
        "with env_kwargs perception = \"DIR\": the localiser's 3-number cube estimate is appended "
        "to the state vector instead of an image. `fit-finder`: a cube finder (red blob -> table "
        "homography) fitted on sim renders, the same env option (push: docs/perception.md, \"Push "
        "from the camera\"). See docs/perception.md.")


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    t = sub.add_parser("train", help="render frames and train a localiser")
    t.add_argument("--env", required=True, help="robolearn/ArmLift-v0 or robolearn/ArmPush-v0")
    t.add_argument("--out", required=True, metavar="DIR", help="output folder")
    t.add_argument("--camera", default="front", help="camera to localise from (default front)")
    t.add_argument("--frame", choices=("auto", "world", "camera"), default="auto",
                   help="targets in the world frame or the camera's own (auto: camera for a camera on "
                        "the arm, wrist; world for a fixed one, front); the env converts to the world")
    t.add_argument("--frames", type=int, default=4000, help="rendered frames (default 4000; ~45 renders/s on a CPU core)")
    t.add_argument("--epochs", type=int, default=20, help="training epochs (default 20)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--no-randomize", action="store_true", help="plain renders (no domain randomisation)")
    t.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    f = sub.add_parser("fit-finder", help="fit the cube finder's table homography on sim renders (the "
                                          "policy's estimate for push: perception = DIR)")
    f.add_argument("--env", required=True, help="robolearn/ArmPush-v0 (or ArmLift-v0)")
    f.add_argument("--out", required=True, metavar="DIR", help="output folder")
    f.add_argument("--camera", default="front", help="a camera fixed to the world (default front)")
    f.add_argument("--frames", type=int, default=80,
                   help="look-pose frames with the cube at random reachable points (default 80; a quarter held out)")
    f.add_argument("--image-size", type=int, nargs=2, default=(84, 84), metavar=("H", "W"))
    f.add_argument("--seed", type=int, default=0)


def fit_finder(args) -> int:
    """A cube finder fitted on plain sim renders at the look pose (policies/cube_finder.py), as the
    robot's camera calibration fits one on the robot's frames."""
    import json
    from pathlib import Path

    import gymnasium as gym
    import numpy as np

    import robolearn  # noqa: F401  (registers the envs)
    from robolearn.errors import ConfigError
    from robolearn.policies.cube_finder import FILE, CubeFinder, render_look_frames
    from robolearn.sim.kinematics import ArmKinematics

    if args.frames < 12:
        raise ConfigError("--frames must be >= 12 (at least 6 fitted and some held out)")
    if args.env not in ("robolearn/ArmPush-v0", "robolearn/ArmLift-v0"):
        raise ConfigError(f"--env {args.env}: the cube finder is for the cube tasks (ArmPush-v0, ArmLift-v0)")
    if ArmKinematics().camera_on_arm(args.camera):
        raise ConfigError(f"--camera {args.camera}: a table homography needs a camera fixed to the world (front)")
    out = Path(args.out)
    if (out / FILE).exists():
        raise ConfigError(f"{out} already holds a cube finder; choose another --out (nothing was overwritten)")
    env = gym.make(args.env, obs="both", camera=args.camera, image_size=tuple(args.image_size))
    try:
        images, xy = render_look_frames(env, args.frames, np.random.default_rng(args.seed), camera=args.camera)
    finally:
        env.close()
    finder = CubeFinder.fit(images, xy, camera=args.camera,
                            heldout=np.arange(args.frames) >= int(0.75 * args.frames))
    finder.report["source"] = f"sim renders of {args.env} at the look pose (seed {args.seed})"
    finder.save(out)
    print(json.dumps({"out": str(out), "env": args.env, "camera": args.camera, **finder.report}, indent=1))
    return 0


def run(args) -> int:
    if args.action == "fit-finder":
        return fit_finder(args)
    return train(args)


def train(args) -> int:
    import json
    from pathlib import Path

    import torch
    from tqdm import tqdm

    import robolearn  # noqa: F401  (registers the envs)
    from robolearn.errors import ConfigError
    from robolearn.policies.perception import collect_frames, default_frame, train_localiser

    if args.frames < 100:
        raise ConfigError("--frames must be >= 100")
    out = Path(args.out)
    if (out / "perception.json").exists():
        raise ConfigError(f"{out} already holds a perception model; choose another --out "
                          "(nothing was overwritten)")
    frame = default_frame(args.camera) if args.frame == "auto" else args.frame
    torch.set_num_threads(args.threads)
    with tqdm(total=args.frames, desc="rendering", unit="frame") as bar:
        images, targets = collect_frames(args.env, args.frames, args.camera, seed=args.seed,
                                         randomize=not args.no_randomize, progress=bar.update,
                                         in_camera_frame=frame == "camera")
    steps = args.epochs * max(1, int(len(images) * 0.85) // 128)
    with tqdm(total=steps, desc="training", unit="batch") as bar:
        loc, report = train_localiser(images, targets, env_id=args.env, camera=args.camera,
                                      epochs=args.epochs, seed=args.seed, progress=bar.update, frame=frame)
    loc.meta["randomized"] = not args.no_randomize
    loc.save(out)
    print(json.dumps({"out": str(out), "env": args.env, "camera": args.camera, "frame": frame, **report},
                     indent=1))
    return 0
