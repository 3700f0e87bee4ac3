"""Does a fine-tuning recipe's update, by itself, damage the pretrained actor? Checked in the sim twin.

A robot session's final evaluation mixes three things: the update recipe, the robot's data and
20 noisy episodes. This script takes the update alone: it loads the pretrained agent as a session
does (`load = "agent"`), replays a finished session's robot transitions (its last checkpoint's
replay) through the session's update with the rlpd prior (20 sampled sim episodes of the
pretrained policy, BC rows) and, with `--earlier F`, the pretraining run's own replay at share F,
and evaluates the deterministic actor in the launch file's sim twin every `--every` updates.
`--sim-online N` replaces the robot's data by N sampled sim episodes (no reality gap at all).

`--eval-gap TOML` evaluates in the sim twin with a fixed [reality_gap] (docs/bench/finetune/
hard_arm_leftover_gap.toml: the hard arm's masses, friction and encoder noise, which the fitted
servo physics leaves out); `--online-steps N` replaces the replay by a simulated session: N steps
collected by the learning policy in that env, interleaved with the session's updates.
`--cube-offset-mm MM` (with --eval-only) adds a fixed MM error per episode to the policy's cube
estimate, as the camera finder's ~9 mm on robot frames.

Usage (docs/bench/finetune/README.md, "Push sessions 9-12" and "13-14"):
  python scripts/finetune_replay_check.py runs/finetune-push-hard [--earlier 0.25] [--set actor_lr=1e-4]
  python scripts/finetune_replay_check.py --eval-only runs/push-hard runs/finetune-push-hard
  python scripts/finetune_replay_check.py runs/finetune-push-hard --earlier 0.25 \
      --eval-gap docs/bench/finetune/hard_arm_leftover_gap.toml --online-steps 3000 --every 1000
(the measured runs here were `--pretrained runs/push-hard-50k` with sessions runs/push-camera-N)
Offline and one-sided (the robot data stay those the session's own policy collected), so it
ranks recipes; it does not replace a session.
"""
from __future__ import annotations

import argparse
import ast
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import robolearn  # noqa: F401  (registers the envs)
from robolearn.data.replay import MixedSampler, transitions_to_buffer
from robolearn.policies.checkpoints import find_checkpoint, read_json_file
from robolearn.policies.demos import collect_rollouts
from robolearn.policies.registry import make_agent
from robolearn.policies.replay_setup import make_buffer
from robolearn.runtime.config import load_launch
from robolearn.runtime.finetune import SESSION_PRIOR_FRACTION, load_pretrained, make_sim_twin


def success_rate(env, act, episodes: int, seed: int = 1000) -> float:
    """Deterministic episodes in the sim twin (fixed seeds: every recipe meets the same starts)."""
    ok = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        hit = False
        while True:
            obs, _, term, trunc, info = env.step(act(obs))
            hit = hit or bool(info.get("success"))
            if term or trunc:
                break
        ok.append(hit)
    return float(np.mean(ok))


class CubeEstimateOffset(gym.Wrapper):
    """A fixed error of `mm` in a random direction, drawn per episode, on the policy's cube
    estimate (the finder's (x, y, seen), last in the state): the size of the finder's error on
    robot frames (~9 mm against ~2 mm in sim), which the gap twin leaves out."""

    def __init__(self, env, mm: float, seed: int = 0):
        super().__init__(env)
        self.mm, self.rng, self.offset = mm, np.random.default_rng(seed), np.zeros(2, np.float32)

    def _shifted(self, obs):
        state = obs["state"].copy()
        state[-3:-1] += self.offset
        return {**obs, "state": state}

    def reset(self, **kwargs):
        angle = self.rng.uniform(0, 2 * np.pi)
        self.offset = self.mm / 1000 * np.array([np.cos(angle), np.sin(angle)], np.float32)
        obs, info = self.env.reset(**kwargs)
        return self._shifted(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._shifted(obs), reward, terminated, truncated, info


def policy_of(checkpoint: str, env):
    ckpt = find_checkpoint(checkpoint)
    state = read_json_file(ckpt / "trainer.json")
    from safetensors.torch import load_file

    agent = make_agent(state["train"]["algo"], env.observation_space, env.action_space, seed=0,
                       **{**state["agent_overrides"], "device": "cpu"})
    agent.load_policy_state(load_file(str(ckpt / "policy.safetensors")))
    return agent


def replay_check(args, env, eval_env) -> list[tuple[int, float]]:
    """The session's update from the pretrained agent on its sampler; the deterministic actor's
    success in `eval_env` before and along the way."""
    ckpt = find_checkpoint(args.session)
    state = read_json_file(ckpt / "trainer.json")
    options = {**state["agent_overrides"], **args.set, "device": "cpu"}
    agent = make_agent(state["train"]["algo"], env.observation_space, env.action_space, seed=args.seed, **options)
    load_pretrained(agent, args.pretrained, "agent")
    capacity = read_json_file(ckpt / "replay" / "meta.json")["capacity"]
    online = make_buffer(env.observation_space, env.action_space, agent.config, capacity, args.seed)
    fill_online(args, ckpt, agent, env, online)
    prior = make_buffer(env.observation_space, env.action_space, agent.config, 100_000, args.seed + 1)
    transitions_to_buffer(collect_rollouts(env, lambda o: agent.act(o, deterministic=False), args.prior_episodes,
                                           seed=args.seed), prior)
    earlier = None
    if args.earlier:
        pre = find_checkpoint(args.pretrained) / "replay"
        earlier = make_buffer(env.observation_space, env.action_space, agent.config,
                              read_json_file(pre / "meta.json")["capacity"], args.seed + 2)
        earlier.load(pre)
    sampler = MixedSampler(online, prior, SESSION_PRIOR_FRACTION, earlier, args.earlier)
    print(f"online {len(online)}  prior {len(prior)}  earlier {len(earlier) if earlier else 0}  options {args.set}",
          flush=True)
    act = lambda o: agent.act(o, deterministic=True)  # noqa: E731
    curve = [(0, success_rate(eval_env, act, args.eval))]
    run = simulated_session if args.online_steps else offline_updates
    return curve + run(args, agent, sampler, online, eval_env, act, time.monotonic())


def fill_online(args, ckpt, agent, env, online) -> None:
    """The robot data the updates start from: the session's replay; with --sim-online, N sampled
    sim episodes instead; with --online-steps, none (the simulated session collects its own)."""
    if args.online_steps:
        return
    if args.sim_online:
        transitions_to_buffer(collect_rollouts(env, lambda o: agent.act(o, deterministic=False),
                                               args.sim_online, seed=777), online)
    else:
        online.load(ckpt / "replay")


def offline_updates(args, agent, sampler, online, env, act, t0) -> list[tuple[int, float]]:
    """`--updates` updates on the fixed data, evaluated every `--every`."""
    curve = []
    for u in range(1, args.updates + 1):
        agent.update(sampler.sample(agent.config.batch_size))
        if u % args.every == 0:
            curve.append((u, success_rate(env, act, args.eval)))
            print(f"update {u}: sim success {curve[-1][1]:.3f} ({time.monotonic() - t0:.0f} s)", flush=True)
    return curve


def simulated_session(args, agent, sampler, online, env, act, t0) -> list[tuple[int, float]]:
    """The session's training phase in `env` (with --eval-gap: the gap twin standing in for the
    robot): sampled episodes join the online buffer one at a time, each followed by `utd` updates
    per step it took (none before `learning_starts` online steps), `--online-steps` steps in all."""
    cfg, curve, steps, updates, ep, ok = agent.config, [], 0, 0, 0, []
    next_eval = args.every
    while steps < args.online_steps:
        t = collect_rollouts(env, lambda o: agent.act(o, deterministic=False), 1, seed=5000 + ep)
        ep += 1
        transitions_to_buffer(t, online)
        n = len(t["reward"])
        steps += n
        ok.append(bool(t["terminated"][-1]))
        if len(online) >= cfg.learning_starts:
            for _ in range(cfg.utd * n):
                agent.update(sampler.sample(cfg.batch_size))
                updates += 1
        if updates >= next_eval:
            next_eval += args.every
            curve.append((updates, success_rate(env, act, args.eval)))
            print(f"{steps} steps, {updates} updates: sim success {curve[-1][1]:.3f}, training episodes "
                  f"{np.mean(ok[-10:]):.2f} (last 10), temperature {agent.alpha:.4f} ({time.monotonic() - t0:.0f} s)",
                  flush=True)
    curve.append((updates, success_rate(env, act, args.eval)))
    print(f"{steps} steps, {updates} updates, {ep} episodes ({np.mean(ok):.2f} sampled successes): "
          f"sim success {curve[-1][1]:.3f} ({time.monotonic() - t0:.0f} s)", flush=True)
    return curve


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("session", nargs="?", help="a finished session's run folder (its last checkpoint's replay)")
    p.add_argument("--launch", default="launch/finetune_arm_push_real.toml", help="its launch file (the sim twin)")
    p.add_argument("--pretrained", default=None,
                   help="the pretrained run the session loaded (default: the launch file's [finetune] checkpoint)")
    p.add_argument("--prior-episodes", type=int, default=20,
                   help="sampled sim-twin episodes of the pretrained policy as the rlpd prior (a launch's prior_data = \"sim:N\")")
    p.add_argument("--earlier", type=float, default=0.0, help="the pretraining replay's share of every batch")
    p.add_argument("--sim-online", type=int, default=0, help="N sampled sim episodes instead of the robot's data")
    p.add_argument("--online-steps", type=int, default=0,
                   help="a simulated session instead of replay: N steps collected by the learning policy in the "
                        "evaluation env (with --eval-gap, the gap twin), interleaved with the updates")
    p.add_argument("--set", action="append", default=[], help="agent option KEY=VALUE (repeatable)")
    p.add_argument("--updates", type=int, default=6000)
    p.add_argument("--every", type=int, default=1500)
    p.add_argument("--eval", type=int, default=40, help="sim episodes per evaluation")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-only", nargs="+", metavar="RUN", help="only evaluate these checkpoints in the sim twin")
    p.add_argument("--eval-gap", default=None, metavar="TOML",
                   help="evaluate in the sim twin with this [reality_gap] table (e.g. the hard arm's masses and "
                        "friction, which the fitted servo physics leaves out): a closer stand-in for the robot")
    p.add_argument("--cube-offset-mm", type=float, default=0.0,
                   help="with --eval-only: a fixed error of this size (random direction per episode) on the "
                        "policy's cube estimate, as the finder's ~9 mm on robot frames")
    args = p.parse_args()
    args.set = {k: ast.literal_eval(v) for k, v in (s.split("=", 1) for s in args.set)}
    torch.set_num_threads(1)
    cfg = load_launch(args.launch)
    args.pretrained = args.pretrained or str(cfg.finetune.checkpoint)
    env = make_sim_twin(cfg)
    eval_env = env
    if args.eval_gap:
        from robolearn.policies.env_building import make_env

        from robolearn.sim.randomization import RealityGapConfig

        gap = RealityGapConfig.from_toml(args.eval_gap).to_dict()
        eval_env = make_env(cfg.env, cfg.obs, None, cfg.max_episode_steps, cfg.finetune.sim_env_kwargs,
                            gap, cfg.finetune.sim_params or None)
    try:
        if args.eval_only:
            for run in args.eval_only:
                agent = policy_of(run, env)
                # a fresh draw of offsets per run: every run meets the same ones
                scored = CubeEstimateOffset(eval_env, args.cube_offset_mm) if args.cube_offset_mm else eval_env
                for det in (True, False):
                    rate = success_rate(scored, lambda o: agent.act(o, deterministic=det), args.eval)
                    print(f"{run}: {'deterministic' if det else 'sampled'} sim success {rate:.3f}"
                          f"{' (' + args.eval_gap + ')' if args.eval_gap else ''}"
                          f"{f', cube estimate {args.cube_offset_mm:g} mm off' if args.cube_offset_mm else ''}", flush=True)
            return
        if not args.session:
            p.error("name a session run folder (its agent options and replay size), or --eval-only RUN ...")
        curve = replay_check(args, env, eval_env)
        print(json.dumps({"session": args.session, "earlier": args.earlier, "sim_online": args.sim_online,
                          "eval_gap": args.eval_gap,
                          "set": args.set, "curve": curve}))
    finally:
        env.close()
        if eval_env is not env:
            eval_env.close()


if __name__ == "__main__":
    main()
