"""`robolearn play ENV_ID`: step any registered env with random, zero or scripted actions.

The quickest way to see an env work end to end (and to record what it looks like): prints one
line per episode (return, success, length) and can write an MP4 of `env.render()`.
"""
from __future__ import annotations

import sys

HELP = ("Step a registered env with random / zero / scripted actions, print per-episode return, "
        "success and length, and optionally write an MP4 (--video).")
DRIVERS = ("random", "zero", "scripted", "pure_pursuit", "ik")


def add_arguments(parser) -> None:
    parser.add_argument("env_id", metavar="ENV_ID", help="a registered env ID (see `robolearn envs`)")
    parser.add_argument("--driver", default="random", choices=DRIVERS,
                        help="action source; pure_pursuit and ik are aliases of scripted (the env's own "
                             "scripted controller)")
    parser.add_argument("--episodes", type=int, default=1, help="episodes to run (default 1)")
    parser.add_argument("--steps", type=int, default=None,
                        help="max steps per episode (default: the env's time limit, else 200)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode (then +1 each)")
    parser.add_argument("--video", default=None, metavar="OUT.mp4", help="write an MP4 of all episodes")
    parser.add_argument("--obs", default=None, choices=("state", "pixels", "both"),
                        help="observation mode passed to the env (default: the env's own default)")
    from robolearn.commands.env_kwargs import add_env_kw_argument

    add_env_kw_argument(parser, note="--obs and --video set obs and render_mode over it")


def run(args) -> int:
    import gymnasium as gym
    import numpy as np

    import robolearn  # noqa: F401  (registers env IDs)
    from robolearn.commands.env_kwargs import parse_env_kwargs
    from robolearn.registry import registered_ids, resolve_env_id
    from robolearn.errors import ConfigError
    from robolearn.tasks.scripted import make_scripted

    if args.episodes < 1:
        raise ConfigError(f"--episodes {args.episodes}: must be at least 1")
    if args.steps is not None and args.steps < 1:
        raise ConfigError(f"--steps {args.steps}: must be at least 1")
    ids = registered_ids()
    args.env_id = resolve_env_id(args.env_id)  # gymnasium's module:EnvId-v0
    if args.env_id not in ids and args.env_id not in gym.registry:
        import difflib

        close = difflib.get_close_matches(args.env_id, ids, n=3, cutoff=0.5)
        hint = f" did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"unknown env {args.env_id!r};{hint} `robolearn envs` lists every registered ID")
    kwargs = parse_env_kwargs(args.env_kw)
    if args.obs is not None:
        kwargs["obs"] = args.obs
    if args.video:
        kwargs["render_mode"] = "rgb_array"
    writer = None
    try:
        env = gym.make(args.env_id, **kwargs)
    except TypeError as exc:  # an option the env's constructor does not take
        raise ConfigError(f"env {args.env_id}: bad --env-kw {kwargs}: {exc}") from None
    try:
        limit = args.steps or (env.spec.max_episode_steps if env.spec else None) or 200
        ctrl = None
        if args.driver in ("scripted", "pure_pursuit", "ik"):
            try:
                ctrl = make_scripted(env)
            except NotImplementedError as exc:
                raise ConfigError(f"{args.env_id} has no scripted controller ({exc}); use --driver random") from None
        env.action_space.seed(args.seed)
        if args.video:
            writer = _open_video(args.video, fps=env.unwrapped.metadata.get("render_fps", 10))
        returns, wins = [], 0
        for ep in range(args.episodes):
            obs, info = env.reset(seed=args.seed + ep)
            if ctrl is not None:
                ctrl.reset()
            ret, steps, success = 0.0, 0, bool(info.get("success", False))
            if writer is not None:
                _write(writer, env)
            for _ in range(limit):
                if ctrl is not None:
                    action = ctrl.act(obs)
                elif args.driver == "zero":
                    action = np.clip(np.zeros(env.action_space.shape, dtype=env.action_space.dtype),
                                     env.action_space.low, env.action_space.high)
                else:
                    action = env.action_space.sample()
                obs, reward, term, trunc, info = env.step(action)
                ret += float(reward)
                steps += 1
                success = success or bool(info.get("success", False))
                if writer is not None:
                    _write(writer, env)
                if term or trunc:
                    break
            returns.append(ret)
            wins += success
            print(f"episode {ep}: return {ret:.3f}  success {success}  length {steps}", flush=True)
        print(f"{args.env_id} [{args.driver}]: {args.episodes} episodes, mean return "
              f"{np.mean(returns):.3f}, success rate {wins / args.episodes:.2f}")
    finally:
        if writer is not None:
            try:
                writer.close()
                print(f"video: {args.video}")
            except (BrokenPipeError, OSError) as exc:
                print(f"robolearn play: --video {args.video} is incomplete ({exc})", file=sys.stderr)
        env.close()
    return 0


def _open_video(path: str, fps: float):
    import imageio.v2 as imageio

    from robolearn.errors import ConfigError

    if not path.lower().endswith(".mp4"):
        raise ConfigError(f"--video {path!r}: give a file name ending in .mp4")
    from robolearn.run_lock import check_writable_file

    check_writable_file(path, "video", flag="--video")
    try:
        return imageio.get_writer(path, fps=max(1, int(round(fps))), codec="libx264",
                                  macro_block_size=1, ffmpeg_log_level="error")
    except OSError as exc:
        raise ConfigError(f"--video {path!r}: cannot write there ({exc}); pick a writable path") from None


def _write(writer, env) -> None:
    from robolearn.errors import ConfigError

    frame = env.render()
    if frame is None:
        raise ConfigError("this env cannot render frames (render() returned None); drop --video")
    try:
        writer.append_data(frame)
    except (BrokenPipeError, OSError) as exc:  # ffmpeg could not write the file and exited
        raise ConfigError(f"--video: ffmpeg stopped taking frames ({type(exc).__name__}: {exc}); the "
                          "file could not be written (disk full, unwritable path or codec error)") from None
