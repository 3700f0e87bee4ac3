"""Offline: how much of a fine-tuned actor is the critic and how much the behaviour-cloning anchor?

Why: the lift sessions' actor loss is SAC's (-Q) plus `bc_weight` x the squared error of the
deterministic action to the prior rows' actions (TD3+BC's anchor: robot demos and the operator's
driven steps). Which term steers the actor decides what the session's data must teach: if the
anchor dominates, the final policy is a clone of the operator and the demos, and the critic's
reward barely moves it. At a checkpoint this prints, per kind of recorded row, the size of each
term's pull on the deterministic action (the critic's dQ/da, and the anchor's gradient as the
actor loss weighs it against the critic's per row, i.e. bc_weight x 2 x error x 2 with half the batch
prior rows) and how far the action is from the recorded one.

    python scripts/actor_anchor_share.py runs/lift-camera-22 runs/lift-camera-22/checkpoints/step_000006000

The session folder gives the rows (episodes/: online, with `intervention` marking the operator's
steps; robot_demos/); the checkpoint gives the actor, the critic and the agent options. The
session's sim prior rows (`prior_data = "sim:N"`) are not saved, so they are not shown.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from offline_actor_noise import load_rows  # noqa: E402


def pulls(agent, rows: dict, bc_weight: float, n: int = 2000, seed: int = 0) -> dict:
    """Mean |dQ/da| and |anchor gradient| per row (the actor loss's own weighting), at the actor's
    deterministic action, over up to `n` rows; and the mean |action - recorded action| per dim."""
    i = np.random.default_rng(seed).integers(0, len(rows["obs"]), min(n, len(rows["obs"])))
    obs = agent._obs_to_torch({"state": rows["obs"][i]}, augment=False)   # the critic reads it too
    feat = agent.features({"state": rows["obs"][i]}).detach()
    action = agent.actor.mode(feat).detach().requires_grad_(True)
    q = agent._critic_frozen(agent._with_privileged(feat, obs), action)
    q = q.min(dim=0).values if agent.config.actor_q == "min" else q.mean(dim=0)
    dq, = torch.autograd.grad(q.sum(), action)
    q = q.detach()
    err = action.detach().numpy() - rows["action"][i]
    # per row the loss weighs -Q by 1/B and the anchor by bc_weight/(B/2) (half the batch is prior)
    anchor = 2.0 * bc_weight * 2.0 * err
    return {"rows": len(rows["obs"]), "q_mean": float(q.mean()),
            "critic_pull": float(np.linalg.norm(dq.numpy(), axis=1).mean()),
            "anchor_pull": float(np.linalg.norm(anchor, axis=1).mean()),
            "action_error_per_dim": [round(float(x), 3) for x in np.abs(err).mean(0)]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("session", help="a finetune run folder (episodes/, robot_demos/)")
    p.add_argument("checkpoint", help="one of its checkpoints (agent.safetensors, trainer.json)")
    a = p.parse_args()
    from robolearn.policies.checkpoints import find_checkpoint, read_json_file
    from robolearn.policies.registry import make_agent
    from robolearn.policies.serialize import load_state

    torch.set_num_threads(1)
    ckpt = Path(a.checkpoint)
    state = read_json_file(find_checkpoint(ckpt) / "trainer.json")
    over = {**state["agent_overrides"], "device": "cpu"}
    online = load_rows(f"{a.session}/episodes/episode_*", float(over.get("gamma", 0.99)))
    demos = load_rows(f"{a.session}/robot_demos/episode_*", float(over.get("gamma", 0.99)))
    obs_space = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, online["obs"].shape[1:], np.float32)})
    act_space = gym.spaces.Box(-1, 1, online["action"].shape[1:], np.float32)
    agent = make_agent(state["train"]["algo"], obs_space, act_space, seed=0, **over)
    agent.load_state_dict(load_state(ckpt / "agent.safetensors"))
    bc_weight = agent.config.bc_weight_at(agent.num_updates)  # eased (bc_weight_final) by this update
    kinds = {"operator's steps (prior)": {k: v[online["intervention"]] for k, v in online.items()},
             "robot demos (prior)": demos,
             "policy's own steps (online)": {k: v[~online["intervention"]] for k, v in online.items()}}
    print(f"{a.checkpoint}: bc_weight {bc_weight:g} at update {agent.num_updates}")
    for name, rows in kinds.items():
        if len(rows["obs"]):
            r = pulls(agent, rows, bc_weight)
            anchor = f"{r['anchor_pull']:.2f}" if "prior" in name else "- (no anchor)"
            print(f"  {name:28s} {r['rows']:5d} rows  Q {r['q_mean']:.3f}  critic pull {r['critic_pull']:.3f}  "
                  f"anchor pull {anchor}  |action - recorded| {r['action_error_per_dim']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
