"""Evaluate any checkpoint or policy snapshot of a finished fine-tuning session on a fresh emulated
robot, with the session's own calibrations, perception and reward (docs/bench/finetune/README.md,
"Lift: choosing the final policy"): what the final evaluation would have given on another policy.

    python scripts/eval_session_checkpoint.py runs/lift-camera-17 runs/lift-camera-17/checkpoints/step_000006000

Why: a session's final evaluation runs one policy (`final_policy`); comparing the reward's choice
with the last checkpoint needs the other one run the same way. It reads RUN/finetune_launch.toml
(the launch file the session's actor read, calibrations already in it), starts the emulator its
`[finetune] reality` names and runs `runtime.finetune.evaluate_checkpoint` (the same seeds and
mean actions as the final evaluation; true success from the emulator's truth). Prints the result
as JSON. This is extra emulated robot time that a session report does not count.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from robolearn.errors import ConfigError
from robolearn.runtime import finetune as F
from robolearn.runtime.config import load_launch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="the session's run folder (holds finetune_launch.toml)")
    ap.add_argument("checkpoint", help="a checkpoint or RUN/policy_snapshots/step_N folder")
    ap.add_argument("--episodes", type=int, default=20)
    args = ap.parse_args()
    launch = Path(args.run) / "finetune_launch.toml"
    if not launch.is_file():
        raise SystemExit(f"{launch} not found: pass the run folder of a `robolearn finetune` session")
    cfg = load_launch(launch)
    if not cfg.finetune or not cfg.finetune.reality:
        raise ConfigError(f"{launch}: no [finetune] reality: this script runs on an emulated robot only")
    emulator = F.start_emulator(cfg, Path(args.run) / "logs" / "eval_emulator.log")
    try:
        cfg.env_kwargs.update(emulator.env_kwargs())
        cfg.finetune.truth_url = emulator.truth_url
        print(json.dumps(F.evaluate_checkpoint(cfg, args.checkpoint, args.episodes)), flush=True)
    finally:
        emulator.stop()


if __name__ == "__main__":
    main()
