"""`robolearn learner LAUNCH.toml`: the learner process of an actor/learner run."""
HELP = ("Run the learner of an actor/learner run: receive transitions, train, publish weights, "
        "checkpoint. Actors connect to --port (data) and --weights-port.")


def add_arguments(parser) -> None:
    parser.add_argument("launch", help="launch TOML (see launch/sim_arm_reach_async.toml)")
    parser.add_argument("--port", type=int, help="data port (overrides learner.port)")
    parser.add_argument("--weights-port", type=int, help="weights port (overrides learner.weights_port)")
    parser.add_argument("--out", help="run folder (overrides out)")
    parser.add_argument("--steps", type=int, help="total env steps (overrides learner.total_env_steps)")
    from robolearn.commands.run_owner import add_owner_arguments

    add_owner_arguments(parser, "delete an earlier run in the run folder and start again (refused "
                                "without it)")


def apply_overrides(cfg, args):
    if getattr(args, "port", None) is not None:
        cfg.learner.port = args.port
    if getattr(args, "weights_port", None) is not None:
        cfg.learner.weights_port = args.weights_port
    if getattr(args, "out", None):
        cfg.out = args.out
    if getattr(args, "steps", None) is not None:
        cfg.learner.total_env_steps = args.steps
    return cfg.validate()


def run(args) -> int:
    import json
    import logging

    from robolearn.runtime.config import load_launch
    from robolearn.runtime.learner import run_learner

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from robolearn.commands.run_owner import take_run_folder

    cfg = apply_overrides(load_launch(args.launch), args)
    lock = take_run_folder(cfg.run_dir(), overwrite=args.overwrite, owned_by=args.owned_by)
    try:
        summary = run_learner(cfg)
    finally:
        if lock is not None:
            lock.release()
    print(json.dumps({k: v for k, v in summary.items() if k != "per_actor"}), flush=True)
    return 0
