"""`robolearn actor LAUNCH.toml`: one actor process (env + fixed-rate loop) of an actor/learner run."""
HELP = ("Run an actor: the env in a fixed-rate control loop, streaming transitions to the learner "
        "and acting with the newest weights it publishes.")


def add_arguments(parser) -> None:
    parser.add_argument("launch", help="launch TOML (see launch/sim_arm_reach_async.toml)")
    parser.add_argument("--id", default="actor0", help="actor id shown in the learner's metrics")
    parser.add_argument("--seed", type=int, help="env/exploration seed (default: launch seed)")
    parser.add_argument("--connect", default=None,
                        help="learner host (default: learner.host from the launch file)")
    parser.add_argument("--port", type=int, help="learner data port (overrides learner.port)")
    parser.add_argument("--weights-port", type=int, help="learner weights port")
    parser.add_argument("--out", help="folder for actor_<id>.json (default: the run folder)")
    parser.add_argument("--max-steps", type=int, help="stop after N env steps (0: until the learner stops)")
    parser.add_argument("--hz", type=float, help="loop rate (overrides actor.loop_hz; 0 = unpaced)")
    parser.add_argument("--policy", metavar="FILE",
                        help="act with an exported policy (ONNX or TorchScript from `robolearn export`) "
                             "and no learner: no connection is made, nothing is trained")
    parser.add_argument("--episodes", type=int, default=0,
                        help="with --policy: stop after N episodes (0: until --max-steps or Ctrl-C)")
    from robolearn.commands.env_kwargs import add_env_kw_argument

    add_env_kw_argument(parser, over="the launch file's [env_kwargs]")
    from robolearn.teleop.intervention import add_intervene_argument
    add_intervene_argument(parser)  # --intervene DEVICE (overrides actor.intervene)


def run(args) -> int:
    import json
    import logging

    from robolearn.commands.env_kwargs import parse_env_kwargs
    from robolearn.commands.learner import apply_overrides
    from robolearn.errors import ConfigError
    from robolearn.runtime.actor import run_actor
    from robolearn.runtime.config import load_launch
    from robolearn.runtime.transport import endpoint

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = load_launch(args.launch)
    cfg.env_kwargs.update(parse_env_kwargs(args.env_kw))  # CLI wins over the launch file
    if args.max_steps is not None:
        cfg.actor.max_steps = args.max_steps
    if args.hz is not None:
        cfg.actor.loop_hz = args.hz
    if args.intervene is not None:
        cfg.actor.intervene = args.intervene
    cfg = apply_overrides(cfg, args)
    if args.policy:
        from robolearn.runtime.deploy import run_exported

        summary = run_exported(cfg, args.policy, max_steps=cfg.actor.max_steps or 0,
                               episodes=args.episodes, seed=args.seed)
        print(json.dumps(summary), flush=True)
        if summary["exit_reason"].startswith("refused"):
            print(f"robolearn actor: error: {summary['exit_reason']}", flush=True)
            return 3
        return 0
    lc = cfg.learner
    if lc.port == 0 or lc.weights_port == 0:
        raise ConfigError("learner.port/weights_port = 0 only works with `robolearn launch`; "
                          "pass --port and --weights-port")
    host = args.connect or lc.host
    d, w = endpoint(host, lc.port), endpoint(host, lc.weights_port)
    print(f"actor {args.id}: learner data {d}  weights {w}", flush=True)
    summary = run_actor(cfg, args.id, d, w, seed=args.seed, out_dir=cfg.run_dir())
    print(json.dumps(summary), flush=True)
    reason = summary["exit_reason"]
    if reason.startswith("refused") or reason.startswith("link failed"):
        print(f"robolearn actor: error: {reason}", flush=True)
        return 3
    if reason.startswith("learner lost"):
        return 4
    return 0
