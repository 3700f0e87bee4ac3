"""The emulated operator's rule on a lift policy, in a stand-in for the hard robot: how much would
the operator drive, and how often would the policy lift alone?

Why: a session's intervention rate should fall as the policy improves, and it can only do that if
the rule fires on a policy that is stuck, not on one that is slow. The stand-in is the sim twin
with the hard arm's fitted servo physics (launch/hard_arm_sim_params.toml) and its leftover gap
(docs/bench/finetune/hard_arm_leftover_gap.toml): there the pretrained lift policy succeeds
0.1-0.3 of the time, as on the robot (0.00-0.20 zero-shot). The product's own
`InterveningOperator` watches each episode through the twin's poses (what the emulator's
/truth.json gives) and drives when its rule says so; the policy samples its actions, as in a
session's training episodes.

    python scripts/operator_in_twin.py runs/lift-wrist-perception runs/lift-camera-8 --episodes 30
    python scripts/operator_in_twin.py ... --set grasp_progress=False  # the rule without the grasp (the lift file's)
    python scripts/operator_in_twin.py ... --set landing_m=0.02        # + a finger coming down on the cube (stop 51)
    python scripts/operator_in_twin.py ... --set resume_grasp=True    # takeovers from where the hand is (stop 57)
    python scripts/operator_in_twin.py ... --unattended                # nobody drives: landings seen, lifted or not
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from finetune_replay_check import policy_of  # noqa: E402

from robolearn.policies.env_building import make_env  # noqa: E402
from robolearn.runtime.config import load_launch  # noqa: E402
from robolearn.sim.randomization import RealityGapConfig  # noqa: E402
from robolearn.teleop.intervening_operator import InterveneConfig, InterveningOperator  # noqa: E402


def twin_truth(task):
    """The twin's poses in /truth.json's shape (the parts the operator reads)."""
    def truth() -> dict:
        d, m = task.sim.data, task.sim.model
        cube_pos, cube_quat = task.cube_pose()
        return {"bodies": {"cube": [*cube_pos, *cube_quat],
                           **{f: [*d.xpos[m.body(f).id], *d.xquat[m.body(f).id]]   # pose, as /truth.json
                              for f in ("finger_left", "finger_right")}},
                "sites": {"ee": list(task.ee_pos)}}
    return truth


def finger_landings_unattended(env, agent, options: dict, episodes: int, seed: int) -> dict:
    """The operator only watches (nobody takes over): in how many of the episodes the policy lifts
    alone did it see a finger come down on the cube first (`landing_m`, 0.02 unless set)?"""
    truth = twin_truth(env.unwrapped.task)
    op = InterveningOperator(env, InterveneConfig(**{"landing_m": 0.02, **options}), truth=truth)
    seen_lifted = seen_failed = lifted_n = 0
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        op.reset()
        seen = lifted = False
        while True:
            seen = op.sees_finger_landing(truth()) or seen
            obs, _, term, trunc, info = env.step(agent.act(obs, deterministic=False))
            lifted = lifted or bool(info.get("success"))
            if term or trunc:
                break
        lifted_n += lifted
        seen_lifted += seen and lifted
        seen_failed += seen and not lifted
    return {"lifted": lifted_n, "landing_seen_in_lifted": seen_lifted,
            "landing_seen_in_failed": seen_failed, "failed": episodes - lifted_n, "episodes": episodes}


def with_operator(env, agent, options: dict, episodes: int, seed: int) -> dict:
    # the person's eyes: the twin's poses
    op = InterveningOperator(env, InterveneConfig(**options), truth=twin_truth(env.unwrapped.task))
    driven = steps = alone = helped = taken = 0
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        op.reset()
        lifted = took = False
        while True:
            cmd = op.read(obs)
            action = cmd.action if cmd.engaged else agent.act(obs, deterministic=False)
            driven += cmd.engaged
            took = took or cmd.engaged
            steps += 1
            obs, _, term, trunc, info = env.step(action)
            lifted = lifted or bool(info.get("success"))
            if term or trunc:
                break
        taken += took
        alone += lifted and not took
        helped += lifted and took
    stats = op.stats()
    return {"driven_share": round(driven / steps, 3), "episodes_with_takeover": taken,
            "lifted_alone": alone, "lifted_after_takeover": helped, "episodes": episodes,
            **{k: stats[k] for k in ("takeover_reasons", "takeover_starts", "give_up_phases", "reaims")}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="lift runs (their last checkpoint's actor)")
    p.add_argument("--launch", default="launch/finetune_arm_lift_real.toml", help="the session's launch file")
    p.add_argument("--sim-params", default="launch/hard_arm_sim_params.toml")
    p.add_argument("--gap", default="docs/bench/finetune/hard_arm_leftover_gap.toml")
    p.add_argument("--episodes", type=int, default=30)
    p.add_argument("--seed", type=int, default=7000)
    p.add_argument("--set", action="append", default=[], help="operator option KEY=VALUE (repeatable)")
    p.add_argument("--unattended", action="store_true", help="nobody takes over: count the episodes where "
                   "the operator saw a finger come down on the cube, lifted or not")
    args = p.parse_args()
    options = {k: ast.literal_eval(v) for k, v in (s.split("=", 1) for s in args.set)}
    torch.set_num_threads(1)
    cfg = load_launch(args.launch)
    gap = RealityGapConfig.from_toml(args.gap).to_dict()
    env = make_env(cfg.env, cfg.obs, None, cfg.max_episode_steps, cfg.finetune.sim_env_kwargs, gap,
                   args.sim_params)
    try:
        for run in args.runs:
            if args.unattended:
                print(f"{run} {options or ''}: {finger_landings_unattended(env, policy_of(run, env), options, args.episodes, args.seed)}",
                      flush=True)
                continue
            rep = with_operator(env, policy_of(run, env), options, args.episodes, args.seed)
            print(f"{run} {options or ''}: driven share {rep['driven_share']:.3f}, episodes with a takeover "
                  f"{rep['episodes_with_takeover']}/{args.episodes}, lifted alone {rep['lifted_alone']}, "
                  f"lifted after a takeover {rep['lifted_after_takeover']}, takeovers by reason "
                  f"{rep['takeover_reasons']}, the hands starting {rep['takeover_starts']}, giving up in "
                  f"{rep['give_up_phases']}, re-aimed {rep['reaims']}", flush=True)
    finally:
        env.close()


if __name__ == "__main__":
    main()
