"""`robolearn train`: one training run from flags or a launch TOML (flags override the file)."""
from __future__ import annotations

import json
import sys

HELP = ("Train a policy: `robolearn train --env ID --algo NAME [--steps N] [--seed S] "
        "[--demos PATH] [--out DIR]`, or `robolearn train LAUNCH.toml [--out DIR]`, "
        "or `robolearn train --resume RUN_DIR [--steps N]`.")

# flag -> TrainConfig field (every one defaults to None so only flags actually given override)
FLAGS = {
    "env": (str, "env ID (see `robolearn envs`); non-robolearn Gymnasium IDs also work"),
    "algo": (str, "learning algorithm (see `robolearn algos`)"),
    "steps": (int, "total env steps"),
    "seed": (int, "random seed (env, agent, replay)"),
    "demos": (str, "prior data: a recorded dataset folder, an .npz of transitions, or scripted:N"),
    "out": (str, "run folder (default runs/<env>-<algo>-s<seed>)"),
    "obs": (str, "observation mode for robolearn envs: state | pixels | both"),
    "eval_every": (int, "env steps between evaluations (0: only at the end)"),
    "eval_episodes": (int, "episodes per evaluation"),
    "checkpoint_every": (int, "env steps between checkpoints (taken at the next episode end)"),
    "log_every": (int, "env steps between training-metric records"),
    "utd": (int, "gradient updates per env step (default: the algorithm preset's)"),
    "profile": (str, "named hardware profile: cpu = rlpd with 2 critics at UTD 5 (paper: 10 at 20), "
                     "redq 5 critics at UTD 5, droq UTD 5; printed at start, kept in summary.json"),
    "learning_starts": (int, "random-action env steps before learning (default: the preset's)"),
    "buffer_size": (int, "replay capacity (default: --steps, at most the preset's replay_capacity)"),
    "max_episode_steps": (int, "override the env's episode length"),
    "threads": (int, "torch CPU threads"),
    "device": (str, "cpu (default) | cuda | cuda:N: on CUDA the replay is mirrored on the GPU, batches "
                    "are drawn there and each update replays as one CUDA graph"),
    "metrics_every": (int, "gradient updates between reading the losses back (and the NaN check): "
                           "default every update on CPU, every 100 on CUDA"),
    "sim_params": (str, "fitted sim physics: a TOML written by `robolearn calibrate-sim --out FILE`"),
    "init_from": (str, "start from this run's last checkpoint: its agent and replay, this run's counters "
                       "and options (e.g. continue a training with a [reality_gap] table)"),
    "resets": (str, "env (the env's own resets) | learned (reset-free: forward/backward agents, "
                    "robolearn.resets.learned) | practice (autonomous practice on physical resets, "
                    "e.g. the car recovering from its crashes: robolearn.resets.practice_trainer)"),
    "intervene": (str, "let a human take over with this teleop device (keyboard, gamepad, spacemouse, "
                       "leader, scripted); the steps they drive are flagged intervention=True"),
}


def add_arguments(parser) -> None:
    parser.add_argument("launch", nargs="?", help="launch TOML file (e.g. launch/demo_arm_reach.toml)")
    for name, (typ, help_text) in FLAGS.items():
        parser.add_argument("--" + name.replace("_", "-"), dest=name, type=typ, default=None, help=help_text)
    parser.add_argument("--prior-runs", dest="prior_runs", nargs="+", default=None, metavar="PATH",
                        help="Replay across Experiments: earlier run folders and recorded datasets whose "
                             "transitions are mixed into every batch (launch file: [replay] prior_runs; "
                             "share: [replay] prior_fraction, default 0.5); docs/learners.md")
    parser.add_argument("--resume", metavar="RUN_DIR", default=None,
                        help="continue a run from its latest checkpoint (optionally with a larger --steps)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="agent option override, e.g. --set critic_lr=1e-3 (repeatable; values parsed as TOML)")
    from robolearn.commands.env_kwargs import add_env_kw_argument

    add_env_kw_argument(parser, over="the launch file's [env_kwargs]")
    parser.add_argument("--privileged-obs", dest="privileged_obs", action="store_true", default=None,
                        help="sim only: add the `privileged` observation (env option privileged_obs=true) "
                             "for an asymmetric critic, e.g. with --set privileged=critic")
    parser.add_argument("--overwrite", action="store_true", default=None,
                        help="delete an earlier run in --out and start again (refused without it)")
    parser.add_argument("--device-replay", dest="device_replay", action="store_true", default=None,
                        help="with --device cuda: keep the replay on the GPU and draw batches there "
                             "(one CUDA graph per draw); default: on for camera observations (1.2-1.4x "
                             "on an H200), off for state, where it measured slower (docs/bench/gpu-train/)")
    parser.add_argument("--no-device-replay", dest="device_replay", action="store_false", default=None,
                        help="with --device cuda: host batches even for camera observations")
    parser.add_argument("--no-video", dest="video", action="store_false", default=None,
                        help="skip the evaluation video at the end")
    parser.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                        help="no progress bar (logs only)")


def parse_overrides(items: list[str]) -> dict:
    import tomllib

    from robolearn.errors import ConfigError

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: write KEY=VALUE, e.g. --set critic_lr=3e-4")
        try:
            out[key.strip()] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[key.strip()] = value  # a bare word: keep it as a string
    return out


def run(args) -> int:
    import os

    # headless offscreen rendering for the eval video unless the user chose a GL backend
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
    from robolearn.commands.env_kwargs import parse_env_kwargs
    from robolearn.errors import ConfigError
    from robolearn.compose.training import build_trainer, resume_trainer
    from robolearn.policies.train_config import TrainConfig, config_from_dict, load_launch

    if args.resume:
        if args.launch:
            raise ConfigError("pass either a launch file or --resume RUN_DIR, not both")
        if args.overwrite:
            raise ConfigError("--resume continues the run in RUN_DIR; --overwrite would delete it: pass one")
        given = {k for k in (*FLAGS, "privileged_obs") if getattr(args, k) is not None} - {"steps"}
        extra = (["--set"] if args.set else []) + (["--env-kw"] if args.env_kw else []) + \
            (["--prior-runs"] if args.prior_runs else [])
        if given or extra:
            raise ConfigError(f"--resume continues a run with its saved config; only --steps, "
                              f"--no-video and --no-progress may change (got {sorted(given) + extra})")
        trainer = resume_trainer(args.resume, steps=args.steps, progress=args.progress, video=args.video)
    else:
        import dataclasses

        base = load_launch(args.launch) if args.launch else TrainConfig()
        if not args.launch and args.env is None:
            raise ConfigError("give --env ID (and --algo NAME), or a launch TOML file; "
                              "see `robolearn envs` and `robolearn algos`")
        d = dataclasses.asdict(base)
        for k in FLAGS:
            if getattr(args, k) is not None:
                d[k] = getattr(args, k)
        for k in ("video", "progress", "overwrite", "device_replay"):
            if getattr(args, k) is not None:
                d[k] = getattr(args, k)
        d["env_kwargs"] = {**d["env_kwargs"], **parse_env_kwargs(args.env_kw)}  # CLI wins
        if args.privileged_obs:
            d["env_kwargs"] = {**d["env_kwargs"], "privileged_obs": True}
        d["agent"] = {**d["agent"], **parse_overrides(args.set)}
        if args.prior_runs:  # the CLI's list replaces the launch file's
            d["replay"] = {**d["replay"], "prior_runs": list(args.prior_runs)}
        trainer = build_trainer(config_from_dict(d, source="train options"))
    try:
        summary = trainer.run()
    finally:
        trainer.close()
    print(json.dumps(summary, indent=2))
    print(f"run folder: {trainer.dir}", file=sys.stderr)
    if summary.get("interrupted"):
        print(f"robolearn train: interrupted at env step {summary['env_steps']}; checkpoint saved. "
              f"Continue with `robolearn train --resume {trainer.dir}`", file=sys.stderr)
        return 130
    return 0
