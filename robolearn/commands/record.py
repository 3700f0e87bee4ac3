"""`robolearn record ENV_ID --device D --episodes N --out DATASET`: record demonstrations.

Each finished episode is committed atomically (see robolearn/data/dataset.py), so stopping
the recorder any way (Esc, Ctrl-C, a crash, kill -9) keeps every episode saved before it.
"""
from __future__ import annotations

HELP = ("Record teleoperated (or scripted) demonstration episodes to a crash-safe dataset "
        "directory (data.npz + MP4 per camera + JSON metadata per episode).")


def add_arguments(parser) -> None:
    from robolearn.commands.env_kwargs import add_env_kw_argument
    from robolearn.teleop.session import add_device_arguments

    parser.add_argument("env_id", help="env to record in, e.g. robolearn/ArmReach-v0 (see `robolearn envs`)")
    add_device_arguments(parser)
    parser.add_argument("--episodes", type=int, default=10, help="episodes to save (discarded ones do not count)")
    parser.add_argument("--out", required=True, help="dataset directory (created, or appended to)")
    parser.add_argument("--seed", type=int, default=None,
                        help="reset seed of the first episode, then +1 each (default: 0 for a new "
                             "dataset, after the last recorded seed when appending)")
    parser.add_argument("--obs", choices=("state", "pixels", "both"), default="both",
                        help="what to record: state vector, camera videos, or both (default)")
    parser.add_argument("--max-steps", type=int, default=None,
                        help="end an episode after this many steps (default: the env's time limit)")
    parser.add_argument("--rate", type=float, default=None,
                        help="pacing in Hz (default: the env's control rate for human devices, "
                             "unpaced for --device scripted); 0 = as fast as possible")
    parser.add_argument("--end-on-success", action="store_true",
                        help="end an episode (labelled success) as soon as the env reports success")
    parser.add_argument("--noise", type=float, default=0.0,
                        help="scripted device only: Gaussian action noise for more diverse demos")
    add_env_kw_argument(parser, note="perception=DIR appends a localiser's estimate to state; on "
                                     "backend=real ArmLift/ArmPush are recorded with the device's "
                                     "labels (no reward model)")


def run(args) -> int:
    from robolearn.commands.env_kwargs import parse_env_kwargs
    from robolearn.data.dataset_writer import DatasetWriter
    from robolearn.env import env_control_hz
    from robolearn.errors import ConfigError
    from robolearn.teleop import make_device
    from robolearn.teleop.recorder import record
    from robolearn.teleop.session import Readout, device_config, open_env

    if args.episodes < 1:
        raise ConfigError(f"--episodes {args.episodes}: record at least 1 episode")
    if args.max_steps is not None and args.max_steps < 1:
        raise ConfigError(f"--max-steps {args.max_steps}: must be >= 1")
    from robolearn.teleop.recorder import HumanLabelsOnly, needs_human_labels

    from robolearn.run_lock import check_writable_dir

    check_writable_dir(args.out, "dataset")  # before a device or robot is opened
    env_kwargs = parse_env_kwargs(args.env_kw)
    labels_only = needs_human_labels(args.env_id, env_kwargs)
    if labels_only:  # a robot with no reward model yet: the recording device's labels only
        env_kwargs["reward_source"] = HumanLabelsOnly()
    env = open_env(args.env_id, args.obs, **env_kwargs)
    device = None
    writer = None
    try:
        hz = env_control_hz(env, 10.0)
        writer = DatasetWriter(args.out, env_id=args.env_id, control_hz=hz,
                               observation_space=env.observation_space, action_space=env.action_space,
                               obs_mode=args.obs)
        readout = Readout()
        seed = writer.next_seed() if args.seed is None else args.seed
        repeated = sorted(set(writer.recorded_seeds()) & set(range(seed, seed + args.episodes)))
        if repeated:
            readout.line(f"warning: --seed {seed} repeats seed(s) already recorded in {args.out} "
                         f"({repeated[:5]}{' ...' if len(repeated) > 5 else ''}); drop --seed to "
                         f"continue after them (next free: {writer.next_seed()})")
        config = {"noise": args.noise, "seed": seed} if args.device == "scripted" else device_config(args)
        device = make_device(args.device, env, **config)
        rate = args.rate if args.rate is not None else (0.0 if args.device == "scripted" else hz)
        readout.line(f"recording {args.episodes} episode(s) of {args.env_id} into {args.out} "
                     f"({writer.num_episodes} already there, seeds from {seed}) at "
                     f"{'max speed' if rate == 0 else f'{rate:g} Hz'}")
        readout.line(device.help())
        if labels_only:
            readout.line("no reward model on this robot: mark the frames that show success with the "
                         "device's mark (key g), end an episode with success (Enter) or failure (x); "
                         "rewards are stored as missing (NaN) until a reward model labels them")
        res = record(env, device, writer, args.episodes, seed=seed, max_steps=args.max_steps,
                     rate_hz=rate, end_on_success=args.end_on_success, readout=readout)
        n = len(res.saved)
        readout.line(f"done: {n} episode(s) saved, {res.successes} successful, {res.discarded} discarded, "
                     f"{res.steps} steps; dataset now has {writer.num_episodes} episode(s)")
        return 0
    finally:
        if device is not None:
            device.close()
        if writer is not None:
            writer.close()
        env.close()
