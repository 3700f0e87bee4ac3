"""`robolearn eval`: re-evaluate a training checkpoint (deterministic policy), optional video."""
from __future__ import annotations

import json

HELP = "Re-evaluate a checkpoint: robolearn eval --checkpoint RUN_DIR --episodes N [--video out.mp4]"


def add_arguments(parser) -> None:
    parser.add_argument("--checkpoint", required=True, metavar="DIR",
                        help="a run folder written by `robolearn train` (or one of its checkpoints/step_* folders)")
    parser.add_argument("--episodes", type=int, default=10, help="evaluation episodes (default 10)")
    parser.add_argument("--video", default=None, metavar="PATH",
                        help="also record one episode to this MP4 (a PNG strip if video writing fails)")
    parser.add_argument("--seed", type=int, default=None, help="evaluation seed (default: the run's seed)")
    from robolearn.commands.env_kwargs import add_env_kw_argument

    add_env_kw_argument(parser, over="the training run's env options",
                        note="--env-kw backend=real --env-kw port=/dev/ttyACM0 runs a sim-trained "
                             "policy on the robot", aliases=("--env-option",))
    from robolearn.teleop.intervention import add_intervene_argument
    add_intervene_argument(parser)  # --intervene DEVICE: a human may take over during evaluation


def check_writable(path: str, flag: str) -> None:
    """Raise ConfigError naming `flag` unless a file can be created at `path`."""
    from pathlib import Path

    from robolearn.errors import ConfigError

    p = Path(path)
    probe = p.with_name(p.name + ".tmp")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot write there ({exc.strerror or exc}); "
                          "pick a writable path") from None


def run(args) -> int:
    from robolearn.commands.env_kwargs import parse_env_kwargs
    from robolearn.policies import evaluation
    from robolearn.policies.checkpoints import load_policy

    if args.video:  # before minutes of evaluation, not after
        check_writable(args.video, "--video")
    policy, env, cfg = load_policy(args.checkpoint, render_mode="rgb_array" if args.video else None,
                                   env_kwargs=parse_env_kwargs(args.env_kw))
    from robolearn.teleop.intervention import maybe_intervene
    env = maybe_intervene(env, args)
    seed = cfg.seed if args.seed is None else args.seed
    try:
        res = evaluation.evaluate(env, policy, args.episodes, seed=seed)
        out = {"checkpoint": str(args.checkpoint), "env": cfg.env, "algo": cfg.algo, **res.as_dict()}
        if args.video:
            path, _ = evaluation.record(env, policy, args.video, episodes=1, seed=seed)
            out["video"] = str(path)
    finally:
        env.close()
    print(json.dumps(out, indent=2))
    return 0
