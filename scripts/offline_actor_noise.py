"""Offline: how an agent option changes the sampled policy's noise while a loaded actor is
fine-tuned beside a fresh critic on a session's robot data (docs/finetune.md, "The sampled
policy's noise").

    python scripts/offline_actor_noise.py runs/lift-camera-5 runs/lift-wrist-perception --updates 10000 \
        --set '{"entropy_dims": 3, "init_temperature": 0.0001}'

The session folder gives the data (its training episodes as online rows; its robot demos and
the operator's driven steps as prior rows, sampled 50/50 as RLPD does) and its agent options
(`trainer.json`, then `--set` on top); the pretrained run gives the actor. Every 5,000 updates
it prints the spread of 16 sampled actions per state over the session's last 1,500 recorded
states (action units), the entropy over all dims and the temperature. No sim data (the session's
`prior_data = "sim:N"` rows are not saved), so it shows a trend, not the session's numbers.
"""
from __future__ import annotations

import argparse
import glob
import json
import time

import gymnasium as gym
import numpy as np
import torch


def load_rows(pattern: str, gamma: float):
    rows = {k: [] for k in ("obs", "action", "reward", "next_obs", "discount", "intervention")}
    for d in sorted(glob.glob(pattern)):
        z = np.load(f"{d}/data.npz")
        s = z["obs.state"].astype(np.float32)
        rows["obs"].append(s[:-1])
        rows["next_obs"].append(s[1:])
        rows["action"].append(z["action"].astype(np.float32))
        rows["reward"].append(z["reward"].astype(np.float32))
        rows["discount"].append((gamma * (1.0 - z["terminated"].astype(np.float32))).astype(np.float32))
        rows["intervention"].append(z["intervention"].astype(bool))
    if not rows["obs"]:
        raise SystemExit(f"no episodes match {pattern}")
    return {k: np.concatenate(v) for k, v in rows.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("session", help="a finetune run folder (episodes/, robot_demos/, checkpoints/)")
    p.add_argument("pretrained", help="the run whose policy the session loaded")
    p.add_argument("--updates", type=int, default=10_000)
    p.add_argument("--set", default="{}", help="agent options on top of the session's, as JSON")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    from robolearn.data.replay import Batch
    from robolearn.policies.checkpoints import find_checkpoint, read_json_file, read_tensors_file
    from robolearn.policies.registry import make_agent

    torch.set_num_threads(1)
    state = read_json_file(find_checkpoint(a.session) / "trainer.json")
    over = {**state["agent_overrides"], **json.loads(a.set), "device": "cpu"}
    gamma = float(over.get("gamma", 0.99))
    online = load_rows(f"{a.session}/episodes/episode_*", gamma)
    demos = load_rows(f"{a.session}/robot_demos/episode_*", gamma)
    prior = {k: np.concatenate([demos[k], online[k][online["intervention"]]]) for k in online}
    obs_space = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, online["obs"].shape[1:], np.float32)})
    act_space = gym.spaces.Box(-1, 1, online["action"].shape[1:], np.float32)
    agent = make_agent(state["train"]["algo"], obs_space, act_space, seed=a.seed, **over)
    agent.load_policy_state(read_tensors_file(find_checkpoint(a.pretrained) / "policy.safetensors"))
    rng = np.random.default_rng(a.seed)
    half = agent.config.batch_size // 2

    def take(src, n, is_prior):
        i = rng.integers(0, len(src["obs"]), n)
        return Batch(obs={"state": src["obs"][i]}, action=src["action"][i], reward=src["reward"][i],
                     next_obs={"state": src["next_obs"][i]}, discount=src["discount"][i],
                     intervention=src["intervention"][i], prior=np.full(n, is_prior))

    states = online["obs"][-1500:]

    def report(u, t0):
        with torch.no_grad():
            feat = agent._features(agent._obs_to_torch({"state": states}, augment=False))
            draws = [agent.actor.sample(feat) for _ in range(16)]
        spread = torch.stack([d[0] for d in draws]).std(0).mean(0)
        print(json.dumps({"updates": u, "sampled_action_std": [round(float(x), 3) for x in spread],
                          "logp_entropy": round(float(-torch.stack([d[1] for d in draws]).mean()), 2),
                          "alpha": float(agent.log_alpha.detach().exp()), "wall_s": round(time.time() - t0)}),
              flush=True)

    t0 = time.time()
    report(0, t0)
    for u in range(1, a.updates + 1):
        agent.update(Batch.concat([take(online, half, False), take(prior, half, True)]))
        if u % 5000 == 0:
            report(u, t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
