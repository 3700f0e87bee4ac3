"""`robolearn keygen DIR`: CurveZMQ key pairs for an encrypted, authenticated actor/learner link.

Writes `DIR/learner.key` + `DIR/learner.key_secret` and `DIR/actor.key` + `DIR/actor.key_secret`.
Set `keys = "DIR"` in the launch file. On two machines: the learner needs learner.key_secret
and actor.key (every `*.key` in DIR is an authorised client); an actor needs actor.key_secret
and learner.key. Secret files are written with mode 600; never copy them elsewhere.
"""
HELP = "Generate CurveZMQ key pairs (learner + actor) into DIR for encrypted actor/learner links."


def add_arguments(parser) -> None:
    parser.add_argument("dir", help="folder to write the keys into (created if missing)")
    parser.add_argument("--names", nargs="+", default=["learner", "actor"],
                        help="key pairs to create (default: learner actor)")


def run(args) -> int:
    from robolearn.run_lock import check_writable_dir
    from robolearn.runtime.transport import generate_keys

    check_writable_dir(args.dir, "keys folder", flag="DIR")
    for path in generate_keys(args.dir, tuple(args.names)):
        print(path)
    print(f"set keys = \"{args.dir}\" in the launch file to turn on CurveZMQ")
    return 0
