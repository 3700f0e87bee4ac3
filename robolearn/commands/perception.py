"""`robolearn perception train --env ID --out DIR`: a frozen object localiser from randomised renders."""
from __future__ import annotations

HELP = ("Pretrain perception in simulation: render domain-randomised frames, train a small conv "
        "localiser to predict the cube position (privileged sim truth), save it to DIR. Use it "
        "with env_kwargs perception = \"DIR\": the localiser's 3-number cube estimate is appended "
        "to the state vector instead of an image. See docs/perception.md.")


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


def run(args) -> int:
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
