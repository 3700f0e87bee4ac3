"""`robolearn export CHECKPOINT --format onnx|torchscript --out FILE`: the policy for the robot computer."""
from __future__ import annotations

HELP = ("Export a trained policy (deterministic actor, observation normalisation and pixel encoder "
        "folded in) to ONNX or TorchScript, check parity against torch on 1000 observations, and "
        "write FILE.json beside it. Run it with `robolearn actor LAUNCH --policy FILE`.")


def add_arguments(parser) -> None:
    parser.add_argument("checkpoint", metavar="CHECKPOINT",
                        help="a run folder written by `robolearn train` (or a checkpoints/step_* folder)")
    parser.add_argument("--format", required=True, choices=["onnx", "torchscript"],
                        help="onnx (runs on onnxruntime) or torchscript (runs on libtorch / torch.jit)")
    parser.add_argument("--out", required=True, metavar="FILE", help="output file, e.g. policy.onnx")
    parser.add_argument("--parity-samples", type=int, default=1000,
                        help="observations for the parity check (default 1000)")


def run(args) -> int:
    import json
    from pathlib import Path

    from robolearn.errors import ConfigError
    from robolearn.policies.export import ExportedPolicy, export_policy, latency_per_action, load_agent

    if args.parity_samples < 1:
        raise ConfigError("--parity-samples must be >= 1")
    agent, cfg = load_agent(args.checkpoint)
    spec = export_policy(agent, args.format, args.out, env_id=cfg.env, obs_mode=cfg.obs,
                         parity_samples=args.parity_samples, seed=cfg.seed)
    policy = ExportedPolicy(Path(args.out))
    from robolearn.policies.export import sample_observations

    one = {k: v[0] for k, v in sample_observations(agent, 1, seed=1).items()}
    lat = latency_per_action(policy, one)
    print(json.dumps({"out": str(args.out), "sidecar": f"{args.out}.json", "format": args.format,
                      "env": cfg.env, "inputs": spec["inputs"],
                      "parity_max_abs_error": spec["parity_max_abs_error"],
                      "parity_samples": spec["parity_samples"], "latency": lat}, indent=1))
    return 0
