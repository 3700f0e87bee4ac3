"""How far does the lift policy's cube estimate jump from one step to the next while its hand
hovers over it, on the robot and in the sim twin, and does the policy hold back its descent when
it jumps? (docs/bench/finetune/README.md, "Lift: the estimate's jitter over the cube (stop 60)").

    python scripts/estimate_jitter.py runs/lift-camera-41 runs/lift-camera-42 \
        --sim runs/lift-wrist-perception --episodes 12

Why: the policy stalls over the cube in the takeovers (stop 59), and the estimate comes from one
wrist frame at a time with no filter. If it jumped more on the robot than in the sim the policy
was trained in, the stall would be a sim-to-real gap of the estimate rather than of its mean
error. Robot figures come from the session's recorded training episodes (the policy's steps
before any takeover); sim figures from the pretrained policy (sampled actions) in the sim twin,
where the truth gives the estimate's error too. The robot's figures are also given by window of
the session's episodes, to see what fine-tuning does to the hover, and by who acted over the cube
(the rows the actor's anchor and the critic learn from). "Hovering": the hand within 2 cm across
of its estimate and 2-8 cm above it; "still": |descent command| < 0.1.
"""
from __future__ import annotations

import argparse
import glob
import json

import numpy as np

from takeover_estimate_offset import EE, ESTIMATE   # the ArmLift state's hand and estimate (run from scripts/)

JUMP_BINS_MM = (0, 3, 6, 10, 20, 1000)
EPISODE_WINDOWS = ((0, 10), (10, 20), (20, 40), (40, 80), (80, 1000))


def hovering(state: np.ndarray) -> np.ndarray:
    rel = state[:, EE] - state[:, ESTIMATE]
    return (np.linalg.norm(rel[:, :2], axis=1) < 0.02) & (rel[:, 2] > 0.02) & (rel[:, 2] < 0.08)


def robot_steps(run: str) -> dict:
    """Per hovering policy step: the estimate's jump from the previous step (mm), the descent
    command, and whether the episode was taken over later."""
    jump, az, taken, episode = [], [], [], []
    for d in sorted(glob.glob(f"{run}/episodes/episode_*")):
        z = np.load(f"{d}/data.npz")
        driven = z["intervention"].astype(bool)
        end = int(np.argmax(driven)) if driven.any() else len(z["action"])
        s = z["obs.state"][:end]
        if end < 2:
            episode.append((0, 0.0))
            continue
        h = hovering(s)
        h[0] = False
        j = np.r_[0.0, np.linalg.norm(np.diff(s[:, ESTIMATE], axis=0), axis=1)] * 1000
        jump += list(j[h]); az += list(z["action"][:end][h, 2]); taken += [bool(driven.any())] * int(h.sum())
        episode.append((int(h.sum()), float(z["action"][:end][h, 2].sum())))
    return {"jump": np.array(jump), "az": np.array(az), "taken": np.array(taken, bool), "episode": episode}


def rows_over_cube(run: str) -> dict:
    """The descent command over the cube by who acted and how the episode ended: the robot demos,
    the operator's rows of lifted and failed takeovers (the prior buffer keeps only the lifted
    ones: `prior_takeovers = "successful"`), the policy's own rows."""
    rows: dict[str, list] = {}
    for source in ("robot_demos", "episodes"):
        for d in sorted(glob.glob(f"{run}/{source}/episode_*")):
            z = np.load(f"{d}/data.npz")
            s, az = z["obs.state"][:-1], z["action"][:, 2]
            lifted = bool(json.load(open(f"{d}/episode.json")).get("true_success"))
            h = hovering(s)
            if source == "robot_demos":
                rows.setdefault("robot demos", []).extend(az[h])
                continue
            driven = z["intervention"].astype(bool)
            if driven.any():
                rows.setdefault("operator, lifted takeovers" if lifted else "operator, failed takeovers", []).extend(az[h & driven])
                rows.setdefault("policy, before a takeover", []).extend(az[h & ~driven])
            else:
                rows.setdefault("policy, lifted alone" if lifted else "policy, failed alone", []).extend(az[h])
    return {k: {"rows": len(v), "mean_descent_cmd": round(float(np.mean(v)), 3) if v else None,
                "share_still": round(float((np.abs(v) < 0.1).mean()), 3) if v else None}
            for k, v in rows.items()}


def sim_steps(checkpoint: str, episodes: int, seed: int) -> dict:
    """The same figures for the pretrained policy in the sim twin, plus the estimate's error."""
    import torch

    from robolearn.policies.checkpoints import load_agent

    torch.set_num_threads(1)
    agent, env, _ = load_agent(checkpoint, env_kwargs={"privileged_obs": True})
    jump, az, err = [], [], []
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep)
            prev, done = None, False
            while not done:
                s = obs["state"]
                a = agent.act(obs, deterministic=False)
                if prev is not None and hovering(s[None])[0]:
                    jump.append(np.linalg.norm(s[ESTIMATE] - prev) * 1000)
                    az.append(float(a[2]))
                    err.append(np.linalg.norm(s[ESTIMATE] - obs["privileged"][3:6]) * 1000)  # cube pos
                prev = s[ESTIMATE].copy()
                obs, _, term, trunc, _ = env.step(a)
                done = term or trunc
    finally:
        env.close()
    return {"jump": np.array(jump), "az": np.array(az), "err": np.array(err), "episodes": episodes}


def summary(steps: dict) -> dict:
    j, az = steps["jump"], steps["az"]
    out = {"hover_steps": int(len(j)), "median_jump_mm": round(float(np.median(j)), 2),
           "share_over_10mm": round(float((j > 10).mean()), 3), "by_jump": []}
    for lo, hi in zip(JUMP_BINS_MM, JUMP_BINS_MM[1:]):
        m = (j >= lo) & (j < hi)
        row = {"jump_mm": f"{lo}-{hi}", "steps": int(m.sum()),
               "mean_descent_cmd": round(float(az[m].mean()), 3) if m.any() else None}
        if "taken" in steps and m.any():
            row["share_in_taken_over_episodes"] = round(float(steps["taken"][m].mean()), 3)
        out["by_jump"].append(row)
    if "episode" in steps:   # does fine-tuning change how the policy hovers? by session episode
        out["by_episode"] = []
        for lo, hi in EPISODE_WINDOWS:
            w = steps["episode"][lo:hi]
            n = sum(e[0] for e in w)
            if w:
                out["by_episode"].append({"episodes": f"{lo}-{lo + len(w) - 1}",
                                          "hover_steps_per_episode": round(n / len(w), 1),
                                          "mean_descent_cmd": round(sum(e[1] for e in w) / n, 3) if n else None})
    else:
        out["hover_steps_per_episode"] = round(len(j) / steps["episodes"], 1)
    if "err" in steps and len(steps["err"]):
        out["median_error_to_truth_mm"] = round(float(np.median(steps["err"])), 1)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="*", help="finetune session folders (their episodes/)")
    p.add_argument("--sim", help="the pretrained run folder, to measure the same in the sim twin")
    p.add_argument("--episodes", type=int, default=12)
    p.add_argument("--seed", type=int, default=100)
    args = p.parse_args()
    for run in args.runs:
        print(json.dumps({"run": run, **summary(robot_steps(run)), "rows_over_cube": rows_over_cube(run)}))
    if args.sim:
        print(json.dumps({"sim": args.sim, "episodes": args.episodes,
                          **summary(sim_steps(args.sim, args.episodes, args.seed))}))


if __name__ == "__main__":
    main()
