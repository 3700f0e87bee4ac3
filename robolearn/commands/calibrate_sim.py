"""`robolearn calibrate-sim DATASET --out sim_params.toml`: fit sim physics to hardware episodes.

Replays the recorded actions of each episode in the simulator from the recorded start state
and minimises the trajectory error (arm: joint angles; car: speed and yaw rate) over a few
physical parameters with CMA-ES (see robolearn/sim/sysid.py). The result is a `[sim_params]`
TOML table that `robolearn train --sim-params FILE` (or `sim_params = "FILE"` in a launch
file) applies to the sim backend.
"""
from __future__ import annotations

import json
import sys

HELP = ("Fit simulator parameters (arm: servo gain/speed, damping, friction, latency; car: motor "
        "gain, tyre friction, steering offset, latency) to episodes recorded on hardware, by "
        "replaying their actions in sim (CMA-ES); writes a [sim_params] TOML for train/launch.")


def add_arguments(parser) -> None:
    parser.add_argument("dataset", help="dataset folder recorded on the hardware (`robolearn record`), "
                                        "with the state observation")
    parser.add_argument("--out", required=True, help="where to write the fitted sim_params TOML")
    parser.add_argument("--params", default=None,
                        help="comma-separated parameters to fit (default arm: servo_gain_scale,"
                             "max_speed_scale,damping_scale,latency_ms; car: motor_gain,"
                             "steering_offset_rad,latency_ms)")
    parser.add_argument("--budget", type=int, default=None,
                        help="max trajectory-error evaluations (default 150 per fitted parameter)")
    parser.add_argument("--episodes", type=int, default=None, help="use only the first N episodes")
    parser.add_argument("--seed", type=int, default=0, help="CMA-ES seed")
    from robolearn.commands.env_kwargs import add_env_kw_argument

    add_env_kw_argument(parser, note="give the sim env options the recording used, e.g. "
                                     "--env-kw model_path=my_arm.xml")


def run(args) -> int:
    from robolearn.commands.env_kwargs import parse_env_kwargs
    from robolearn.errors import ConfigError
    from robolearn.sim.sysid import PARAMS, save_sim_params
    from robolearn.runtime.sim_fit import fit_dataset, fit_summary

    if args.budget is not None and args.budget < 2:
        raise ConfigError(f"--budget {args.budget}: give at least 2 evaluations")
    if args.episodes is not None and args.episodes < 1:
        raise ConfigError(f"--episodes {args.episodes}: must be >= 1")
    names = None
    if args.params:
        names = [n.strip() for n in args.params.split(",") if n.strip()]
        known = set().union(*(p.keys() for p in PARAMS.values()))
        bad = [n for n in names if n not in known]
        if bad:
            raise ConfigError(f"--params: unknown parameter(s) {bad}; arm: {', '.join(PARAMS['arm'])}; "
                              f"car: {', '.join(PARAMS['car'])}")
    res = fit_dataset(args.dataset, names=names, budget=args.budget, seed=args.seed,
                      max_episodes=args.episodes, env_kwargs=parse_env_kwargs(args.env_kw),
                      log=lambda line: print(line, file=sys.stderr, flush=True))
    summary = fit_summary(res)
    save_sim_params(args.out, res.robot, res.values,
                    fit={"dataset": str(args.dataset), "error_before": res.error_before,
                         "error_after": res.error_after, "evaluations": res.evaluations})
    print(json.dumps(summary, indent=2))
    print(f"trajectory error {res.error_before:.4g} -> {res.error_after:.4g} "
          f"({summary['error_ratio']:.1f}x lower); wrote {args.out}", file=sys.stderr)
    return 0
