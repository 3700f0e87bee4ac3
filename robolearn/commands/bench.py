"""`robolearn bench NAME`: each benchmark lives in `robolearn/bench/<name>.py` with `main(argv)`.

Benchmarks report ratios against a baseline measured in the same run (never a stored figure).
"""
import importlib

BENCHES = {
    "sim": "env steps/s per task vs raw mujoco.mj_step on the same model",
    "learners": "our learners vs Stable-Baselines3 SAC: return, success, updates/s (needs .[bench])",
    "loop": "actor control-loop latency/jitter with the learner idle vs training; transport throughput",
    "drivers": "servo-bus sync-read round trip against the emulator; achievable control rate",
    "export": "latency per action of ONNX / TorchScript exports vs the torch agent; export parity",
    "sim2real": "scripted control on sim vs emulated mild/hard reality; HTTP camera fps/latency; calibrate-sim recovery",
    "resets": "physical resets in sim: ArmPush scripted cube reset (200 episodes), CarLap autonomous practice; --only learned / car-learned train (reset-free ArmPush, CarLap practice)",
    "rewards": "reward models vs the sim's ground truth: classifier P/R, progress rank correlation, RL",
    "simba": "SimBa networks vs the plain MLP (sac): update time ratio, returns at equal env steps",
    "fleet": "env steps/s into the learner with 1, 2, 4 sim actors on Ray vs launch; data plane cost per transition (ZeroMQ vs Ray)",
    "soak": "a fine-tuning session under scheduled faults (bus noise, camera stall, kills, disk full); checks nothing is lost",
    "perception_transfer": "camera localisers on the emulated hard robot's frames against its truth: sim zero-shot, calibrated (arm labels, more cycles, true labels), frozen backbone, wrist camera",
}
HELP = "Run a benchmark: " + "; ".join(f"{k}: {v}" for k, v in BENCHES.items())


def add_arguments(parser) -> None:
    parser.add_argument("name", choices=sorted(BENCHES), help="which benchmark")
    parser.add_argument("rest", nargs="...", help="options of that benchmark (see robolearn bench NAME --help)")


def run(args) -> int:
    module = importlib.import_module(f"robolearn.bench.{args.name}")
    return int(module.main(args.rest) or 0)
