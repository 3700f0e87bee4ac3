"""Learned forward/backward resets (reset-free RL, as in SERL / autonomous RL).

Why: on a robot nobody teleports the cube back, and scripting a reset for every task is as hard
as the task. So two agents alternate on one world that carries over: the *forward* agent
practises the task for an episode, then the *backward* agent, rewarded by a success model of
the start states, brings the world back to where forward episodes begin; then forward again.
The success model here is `StartStateClassifier`, a small MLP trained on example start states
(positives) against states seen while practising (negatives). In sim its verdict is checked
against the ground truth (`info["start_state_true"]` from the task) and logged, so a classifier
that is fooled shows up in `metrics.jsonl` rather than as a mysteriously stalled run.

Only the arm is homed by script after the backward phase (`ArmHome`: a robot-only move that
needs no perception and works on any arm); everything about the object is learned.
`Trainer` drives it for `robolearn train ... --resets learned`; evaluation stays on teleport
resets, so the reported success rate is the true one of the forward policy.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

import time

from robolearn.errors import ConfigError

RESETS = ("env", "learned")


class StartStateClassifier:
    """p(state is a start state). `fit(pos, neg)` then `prob(states)` (numpy in, numpy out)."""

    def __init__(self, dim: int, hidden: int = 64, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))
        for p in self.net.parameters():        # seeded init, independent of the global RNG
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * (0.1 if p.ndim > 1 else 0.0))
        self.mean = np.zeros(dim, np.float32)
        self.std = np.ones(dim, np.float32)
        self._g = g

    def fit(self, pos: np.ndarray, neg: np.ndarray, steps: int = 1500, lr: float = 3e-3) -> float:
        """Balanced logistic regression by Adam; returns the training accuracy."""
        x = np.concatenate([pos, neg]).astype(np.float32)
        y = np.concatenate([np.ones(len(pos)), np.zeros(len(neg))]).astype(np.float32)
        self.mean, self.std = x.mean(0), x.std(0) + 1e-3
        xt = torch.as_tensor((x - self.mean) / self.std)
        yt = torch.as_tensor(y)
        w = torch.as_tensor(np.where(y > 0, len(y) / (2 * len(pos)), len(y) / (2 * len(neg))).astype(np.float32))
        opt = torch.optim.Adam(self.net.parameters(), lr=lr)
        for _ in range(steps):
            idx = torch.randint(0, len(xt), (256,), generator=self._g)
            logit = self.net(xt[idx]).squeeze(-1)
            loss = (nn.functional.binary_cross_entropy_with_logits(logit, yt[idx], reduction="none") * w[idx]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return float(((self.prob(x) > 0.5) == (y > 0.5)).mean())

    @torch.no_grad()
    def prob(self, states: np.ndarray) -> np.ndarray:
        x = torch.as_tensor((np.asarray(states, np.float32) - self.mean) / self.std)
        return torch.sigmoid(self.net(x.reshape(-1, x.shape[-1]))).squeeze(-1).numpy()


def start_state_examples(env, n: int, seed: int = 0, key: str = "state",
                         idx=slice(None)) -> tuple[np.ndarray, np.ndarray]:
    """(positives, negatives) for the classifier from a sim env: start states of `n` teleported
    resets (on hardware: states recorded after resets by hand), and the states the task's
    scripted controller and random actions visit after the first steps of `n` episodes."""
    base = env.unwrapped
    if getattr(base, "reset_mode", None) != "teleport":
        raise ConfigError("collect start-state examples with a teleport-reset sim env")
    ctrl = base.scripted_controller()
    rng = np.random.default_rng(seed)
    pos, neg = [], []
    for ep in range(n):
        obs, _ = env.reset(seed=seed + 50_000 + ep)
        pos.append(obs[key][idx])
        ctrl.reset()
        random_ep = ep % 2 == 1
        for t in range(int(rng.integers(15, 60))):
            a = rng.uniform(-1, 1, env.action_space.shape) if random_ep else ctrl.act(obs)
            obs, _, term, trunc, _ = env.step(np.asarray(a, np.float32))
            if t >= 8:
                neg.append(obs[key][idx])
            if term or trunc:
                break
    return np.asarray(pos), np.asarray(neg)


# ================================================================================ trainer
def make_trainer(cfg, **kwargs):
    """`Trainer` for `resets="env"`, `ForwardBackwardTrainer` for `resets="learned"`."""
    from robolearn.policies.training import Trainer

    if cfg.resets == "learned":
        return ForwardBackwardTrainer(cfg, **kwargs)
    return Trainer(cfg, **kwargs)


def _trainer_base():
    from robolearn.policies.training import Trainer

    return Trainer


class ForwardBackwardTrainer(_trainer_base()):
    """Reset-free training: forward and backward agents alternate on a `reset_mode="physical"`
    env; every env step of either phase counts toward `cfg.steps`."""

    #: backward phase ends when p(start) exceeds this (calibrated on the examples in _build)
    threshold = 0.5
    #: start-state examples (teleport resets) for the classifier, and its Adam steps
    examples = 200
    classifier_steps = 1500

    def _build(self, cfg, _resumed_state):
        if _resumed_state is not None:
            raise ConfigError("--resume is not supported for --resets learned runs yet; start a new run")
        if not cfg.env.startswith("robolearn/"):
            raise ConfigError("--resets learned needs a robolearn env (it runs them with reset_mode='physical')")
        from dataclasses import replace

        from robolearn.data.replay import ReplayBuffer
        from robolearn.policies.training import make_env
        from robolearn.policies.registry import make_agent

        self._eval_kwargs = {k: v for k, v in cfg.env_kwargs.items()
                             if k not in ("reset_mode", "reset_on_failure")}
        # the success model of start states, from teleported example resets of a sim twin
        twin = make_env(cfg.env, cfg.obs, None, cfg.max_episode_steps, self._eval_kwargs, cfg.reality_gap)
        key, idx = twin.unwrapped.task.start_state_features()
        if key == "privileged" and not self._eval_kwargs.get("privileged_obs"):
            # the classifier reads the sim's object pose: the envs carry it as obs["privileged"]
            # (the agents read it only if their `privileged` option says so)
            twin.close()
            self._eval_kwargs["privileged_obs"] = True
            twin = make_env(cfg.env, cfg.obs, None, cfg.max_episode_steps, self._eval_kwargs, cfg.reality_gap)
        self.start_key, self.features = key, np.asarray(idx, dtype=int)
        try:
            pos, neg = start_state_examples(twin, self.examples, seed=cfg.seed, key=key, idx=self.features)
        finally:
            twin.close()
        phys = {**self._eval_kwargs, "reset_mode": "physical", "reset_on_failure": "continue"}
        super()._build(replace(cfg, env_kwargs=phys), None)
        self.classifier = StartStateClassifier(len(self.features), seed=cfg.seed)
        self.classifier_train_acc = self.classifier.fit(pos, neg, steps=self.classifier_steps)
        # Start and visited states overlap (a pushed cube often stays in the start region), so
        # p(start) saturates below 1 there: call "start" what 80% of the true start states reach.
        self.threshold = float(min(0.5, np.quantile(self.classifier.prob(pos), 0.2)))
        self.backward = make_agent(cfg.algo, self.env.observation_space, self.env.action_space,
                                   seed=cfg.seed + 7, **{k: v for k, v in self.agent_overrides.items()})
        ac = self.backward.config
        self.backward_replay = ReplayBuffer(self.env.observation_space, self.env.action_space, cfg.steps,
                                            n_step=int(getattr(ac, "n_step", 1)),
                                            gamma=float(getattr(ac, "gamma", 0.99)), seed=cfg.seed + 7)
        # RLPD's 50/50 prior batches need prior data; the backward agent has none: online only
        self.backward_sampler = self.backward_replay

    @property
    def eval_env(self):
        if self._eval_env is None:
            from robolearn.policies.training import make_env

            c = self.cfg
            self._eval_env = make_env(c.env, c.obs, "rgb_array", c.max_episode_steps, self._eval_kwargs,
                                      c.reality_gap)
        return self._eval_env

    def _start_reward(self, obs: dict) -> float:
        return float(self.classifier.prob(obs[self.start_key][None, self.features])[0])

    def run(self, stop_at=None) -> dict:
        from robolearn.resets.scripted import ArmHome
        from robolearn.resets.stats import ResetStats

        cfg = self.cfg
        self.dir.mkdir(parents=True, exist_ok=True)
        import dataclasses

        self._write_json("config.json", {"train": dataclasses.asdict(cfg), "resets": "learned",
                                         "classifier_train_accuracy": self.classifier_train_acc})
        self._open_logs()
        learning_starts = int(getattr(self.agent.config, "learning_starts", 0))
        target = cfg.steps if stop_at is None else min(stop_at, cfg.steps)
        self.reset_stats = ResetStats()
        agreement = []              # classifier verdict == ground truth at each backward end
        t0 = time.perf_counter()
        task = self.env.unwrapped.task
        home = ArmHome() if hasattr(task, "home_q") else None
        obs, info = self.env.reset(seed=cfg.seed, options={"reset_controller": home})
        phase, ep_ret, ep_len, ep_success = "forward", 0.0, 0, False
        last_reset = dict(info["reset"], kind="learned")
        back_steps = fwd_steps = 0
        a_low, a_high = self.env.action_space.low, self.env.action_space.high
        try:
            while self.env_steps < target:
                agent, replay, sampler = ((self.agent, self.replay, self.sampler) if phase == "forward"
                                          else (self.backward, self.backward_replay, self.backward_sampler))
                if self.env_steps < learning_starts:
                    action = self.rng.uniform(a_low, a_high).astype(np.float32)
                else:
                    action = agent.act(obs)
                nxt, reward, terminated, truncated, info = self.env.step(action)
                if phase == "backward":
                    p = self._start_reward(nxt)
                    reward, terminated = p, p > self.threshold
                    back_steps += 1
                else:
                    fwd_steps += 1
                replay.add(obs, action, reward, nxt, bool(terminated), bool(truncated))
                self.env_steps += 1
                ep_ret += float(reward)
                ep_len += 1
                ep_success = ep_success or (phase == "forward" and bool(info.get("success", False)))
                obs = nxt
                if self.env_steps >= learning_starts:
                    for _ in range(int(agent.config.utd)):
                        self._update_agent(agent, sampler)
                if cfg.eval_every and self.env_steps % cfg.eval_every == 0:
                    self._evaluate()
                if terminated or truncated:
                    rec = {"kind": "episode", "step": self.env_steps, "phase": phase, "return": ep_ret,
                           "length": ep_len, "success": ep_success if phase == "forward" else bool(terminated),
                           "reset": last_reset}
                    if phase == "backward":
                        truth = bool(task.start_state_true())
                        agreement.append(truth == bool(terminated))
                        rec["start_state_true"] = truth
                    self.episodes += phase == "forward"
                    # next phase, from the world as it is; only the arm is homed by script
                    phase = "backward" if phase == "forward" else "forward"
                    obs, info = self.env.reset(options={"reset_controller": home if phase == "forward" else None})
                    last_reset = dict(info["reset"])
                    if phase == "forward":   # the backward agent (+ the scripted arm home) reset it
                        last_reset["kind"] = "learned"
                        last_reset["ok"] = bool(rec["success"])
                        self.reset_stats.add(last_reset)
                    self._log(rec)
                    ep_ret, ep_len, ep_success = 0.0, 0, False
            if self.last_eval is None or self.last_eval["step"] != self.env_steps:
                self._evaluate()
            self.wall_before += time.perf_counter() - t0
            self.save_checkpoint(final=True)
            summary = self._finish()
            summary.update(resets_mode="learned", forward_env_steps=fwd_steps, backward_env_steps=back_steps,
                           classifier_train_accuracy=self.classifier_train_acc,
                           classifier_threshold=self.threshold,
                           classifier_agreement_with_ground_truth=(float(np.mean(agreement)) if agreement else None),
                           resets=self.reset_stats.as_dict())
            self._write_json("summary.json", summary)
            return summary
        finally:
            self._close_logs()

    def _update_agent(self, agent, sampler) -> None:
        bs = int(agent.config.batch_size)
        if agent is self.agent:
            t = time.perf_counter()
            self._update(sampler.sample(bs))
            self.update_time += time.perf_counter() - t
        elif len(self.backward_replay) >= 1:
            self.backward.update(sampler.sample(bs))

    def close(self):
        super().close()
