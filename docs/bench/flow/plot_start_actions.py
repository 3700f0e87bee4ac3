"""Scatter the policies' stochastic actions at one ArmLift start state (issue 26 item 2).

For each run folder: reset the eval env (seed 0, the first eval episode's start state), draw
2000 actions with `actor.sample` (the policy's own noise), and plot the (dx, dy) components
of the end-effector delta beside the demos' first actions; also prints the fraction of
samples with dy < 0 and dy > 0 (the two sides) and the deterministic action. For a flow actor
also the chain without its per-step noise from a_0 ~ N(0, I) (green): the map flow matching
trains, where modes learnt from demos show before SAC's noise widens them.

    python docs/bench/flow/plot_start_actions.py runs/flow/gauss runs/flow/flow \
        --demos runs/flow/bimodal20.npz --out docs/bench/flow/start_actions.png
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import torch


def main() -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from robolearn.policies.checkpoints import load_agent

    p = argparse.ArgumentParser()
    p.add_argument("runs", nargs="+")
    p.add_argument("--demos", default="")
    p.add_argument("--out", required=True)
    p.add_argument("--samples", type=int, default=2000)
    args = p.parse_args()
    fig, axes = plt.subplots(1, len(args.runs), figsize=(5 * len(args.runs), 4.5), squeeze=False)
    report = {}
    for ax, run in zip(axes[0], args.runs):
        agent, env, _ = load_agent(run)
        try:
            obs, _ = env.reset(seed=0)
        finally:
            env.close()
        keys = [agent.state_key] + (["privileged"] if agent.actor_privileged else [])
        tobs = agent._obs_to_torch({k: np.repeat(obs[k][None], args.samples, 0) for k in keys}, augment=False)
        with torch.no_grad():
            feat = agent._features(tobs)
            if agent.actor_privileged:
                feat = agent._with_privileged(feat, tobs)
            a = agent.actor.sample(feat, torch.Generator().manual_seed(0))[0].numpy()
            mode = agent.actor.mode(feat[:1])[0].numpy()
            transport = None
            if hasattr(agent.actor, "velocity"):  # the flow's noise-free map of a_0 ~ N(0, I)
                u = torch.randn(args.samples, agent.actor.action_dim, generator=torch.Generator().manual_seed(1))
                for k in range(agent.actor.steps):
                    u = u + agent.actor.velocity(feat, u, k / agent.actor.steps) / agent.actor.steps
                transport = torch.tanh(u).numpy()
        kind = agent.config.actor
        ax.scatter(a[:, 0], a[:, 1], s=3, alpha=0.3, label=f"{kind} policy samples")
        if transport is not None:
            ax.scatter(transport[:, 0], transport[:, 1], s=3, alpha=0.3, c="tab:green",
                       label="flow without per-step noise (a_0 ~ N(0, I))")
        ax.scatter([mode[0]], [mode[1]], marker="x", c="k", s=60, label="deterministic action")
        if args.demos:
            d = np.load(args.demos)
            ends = np.flatnonzero(d["terminated"] | d["truncated"])
            starts = np.r_[0, ends[:-1] + 1]
            ax.scatter(d["action"][starts, 0], d["action"][starts, 1], marker="^", c="r", s=30,
                       label="demos' first actions (other starts)")
        ax.set(xlim=(-1.05, 1.05), ylim=(-1.05, 1.05), xlabel="action dx", ylabel="action dy",
               title=f"{run}: actor={kind}")
        ax.legend(fontsize=7, loc="lower left")
        report[run] = {"actor": kind, "frac_dy_neg": float((a[:, 1] < 0).mean()),
                       "frac_dy_pos": float((a[:, 1] > 0).mean()), "mean": a.mean(0).round(3).tolist(),
                       "std": a.std(0).round(3).tolist(), "mode": mode.round(3).tolist()}
        if transport is not None:
            report[run]["noise_free"] = {"frac_dy_neg": float((transport[:, 1] < 0).mean()),
                                         "frac_dy_pos": float((transport[:, 1] > 0).mean()),
                                         "std": transport.std(0).round(3).tolist()}
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
