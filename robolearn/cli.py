"""`robolearn` console script: one verb per user activity.

Each verb lives in `robolearn/commands/<verb>.py` exposing `HELP`, `add_arguments(parser)` and
`run(args) -> int`. Modules are imported only when their verb runs, so `robolearn --help`
stays fast and a verb's heavy imports (torch, mujoco) cost nothing to the others.
"""
from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading

from robolearn.errors import RobolearnError

# verb -> (module, one-line help). The help text lives here so --help needs no imports.
VERBS: dict[str, tuple[str, str]] = {
    "envs": ("robolearn.commands.envs", "list registered env IDs, one per line"),
    "play": ("robolearn.commands.play", "step an env with random/zero/scripted actions; optional video"),
    "algos": ("robolearn.commands.algos", "list registered learning algorithms, one per line"),
    "train": ("robolearn.commands.train", "train a policy: --env ID --algo NAME, or a launch TOML"),
    "eval": ("robolearn.commands.eval", "re-evaluate a checkpoint; optional video"),
    "bench": ("robolearn.commands.bench", "benchmarks: sim | learners | loop | drivers | sim2real"),
    "actor": ("robolearn.commands.actor", "run an actor process (env + fixed-rate loop) from a launch TOML"),
    "learner": ("robolearn.commands.learner", "run a learner process from a launch TOML"),
    "launch": ("robolearn.commands.launch", "start learner + actor(s) from a launch TOML; Ctrl-C stops all"),
    "keygen": ("robolearn.commands.keygen", "generate CurveZMQ key pairs for actor/learner links"),
    "emulate": ("robolearn.commands.emulate", "start an arm or car device emulator on a pseudo-terminal"),
    "teleop": ("robolearn.commands.teleop", "drive an env live from an input device"),
    "record": ("robolearn.commands.record", "record teleoperated demonstration episodes to a dataset"),
    "perception": ("robolearn.commands.perception", "pretrain a frozen object localiser on randomised sim renders"),
    "dataset": ("robolearn.commands.dataset", "inspect, view or export a recorded dataset"),
    "finetune": ("robolearn.commands.finetune", "fine-tune a sim-pretrained policy on the robot: eval, learn, record, report"),
    "export": ("robolearn.commands.export", "export a trained policy to ONNX or TorchScript for the robot"),
    "calibrate-sim": ("robolearn.commands.calibrate_sim",
                      "fit sim physics to episodes recorded on hardware; writes sim_params.toml"),
    "calibrate-arm": ("robolearn.commands.calibrate_arm",
                      "calibrate a servo arm's joint offsets against its mechanical stops; writes arm_calibration.json"),
    "reward": ("robolearn.commands.reward", "reward models: train DATASET --kind classifier|progress; eval --env ID --model DIR"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="robolearn",
        description="Sample-efficient robot learning: train in MuJoCo, record demos, fine-tune on hardware.",
        epilog="Run `robolearn VERB --help` for a verb's options.",
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb, (_, help_text) in VERBS.items():
        sub.add_parser(verb, help=help_text, add_help=False)
    return parser


def build_verb_parser(verb: str):
    """(the parser of `robolearn VERB`'s options, the verb's module)."""
    module_name, help_text = VERBS[verb]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"robolearn {verb}", description=getattr(module, "HELP", help_text))
    module.add_arguments(parser)
    return parser, module


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0
    verb = argv[0]
    if verb not in VERBS:
        parser.error(f"unknown verb {verb!r}; choose from: {', '.join(VERBS)}")
    verb_parser, module = build_verb_parser(verb)
    args = verb_parser.parse_args(argv[1:])
    _ctrl_c_interrupts()
    _offscreen_rendering()
    try:
        return int(module.run(args) or 0)
    except RobolearnError as exc:
        print(f"robolearn {verb}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"robolearn {verb}: interrupted", file=sys.stderr)
        return 130


def _offscreen_rendering() -> None:
    """MuJoCo renders offscreen in every verb (eval videos, perception frames, the emulators'
    cameras) unless the user chose a GL backend: without a display its default (glfw) renders
    nothing, and an emulated camera then serves no frame. No verb opens a window."""
    import os

    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])


def _ctrl_c_interrupts() -> None:
    """SIGINT raises KeyboardInterrupt in every verb, even when the parent started us with
    SIGINT ignored (a non-interactive shell's `cmd &`, nohup, some supervisors): Python keeps
    an inherited SIG_IGN, and `kill -INT` would then be silently ignored by `record` & co. Verbs
    that stop on a flag install their own handler over this one."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


if __name__ == "__main__":
    sys.exit(main())
