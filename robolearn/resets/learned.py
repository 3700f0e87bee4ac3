"""Learned forward/backward resets (reset-free RL, as in SERL / autonomous RL).

Why: on a robot nobody teleports the cube back, and scripting a reset for every task is as hard
as the task. So two agents alternate on one world that carries over: the *forward* agent
practises the task for an episode, then the *backward* agent, rewarded by a success model of
the start states, brings the world back to where forward episodes begin; then forward again.
The success model here is `StartStateClassifier`, a small MLP trained on example start states
(positives) against reference states drawn uniformly over the range the examples span (padded):
its p(start) is then a density ratio, high where start states are dense and near 0 elsewhere.
Why not "states seen while practising" as the negatives: most of them ARE start states (on
ArmPush 99 % of the cube positions visited by the scripted push and by random actions lie in the
start region), so that classifier answered ~0.5 everywhere and higher outside the region than
inside (34 % agreement with the ground truth on a grid; the reference version: 98 %). In sim its
verdict is checked against the ground truth (`start_state_true` from the task) and logged, so a
classifier that is fooled shows up in `metrics.jsonl` rather than as a mysteriously stalled run.

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

RESETS = ("env", "learned", "practice")


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
        self.low = np.full(dim, -np.inf, np.float32)     # the box the training data spans
        self.high = np.full(dim, np.inf, np.float32)
        self._g = g

    def fit(self, pos: np.ndarray, neg: np.ndarray, steps: int = 1500, lr: float = 3e-3) -> float:
        """Balanced logistic regression by Adam; returns the training accuracy."""
        x = np.concatenate([pos, neg]).astype(np.float32)
        y = np.concatenate([np.ones(len(pos)), np.zeros(len(neg))]).astype(np.float32)
        self.mean, self.std = x.mean(0), x.std(0) + 1e-3
        self.low, self.high = x.min(0), x.max(0)
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
    def logit(self, states: np.ndarray) -> np.ndarray:
        """log p / (1 - p): of a density ratio, it falls about linearly with the distance from
        the start region (on ArmPush ~ -2.5 per cm of cube), which gives the backward agent a
        direction where p itself is a flat 0."""
        raw = np.asarray(states, np.float32).reshape(-1, len(self.mean))
        # outside the box it was trained on an MLP's answer is an extrapolation that may even say
        # "start" (a cube flung 20 m away): judge the box's nearest point, less the distance out
        inside = np.clip(raw, self.low, self.high)
        out = np.linalg.norm((raw - inside) / self.std, axis=-1)
        x = torch.as_tensor((inside - self.mean) / self.std)
        return self.net(x).squeeze(-1).numpy() - 50.0 * out

    def prob(self, states: np.ndarray) -> np.ndarray:
        return sigmoid(self.logit(states))


def sigmoid(logit):
    """1 / (1 + e^-x) without overflow for large |x|."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(logit)))


def start_state_examples(env, n: int, seed: int = 0, key: str = "state",
                         idx=slice(None)) -> tuple[np.ndarray, np.ndarray]:
    """(start states, visited states) from a sim env: start states of `n` teleported resets (on
    hardware: states recorded after resets by hand), and the states the task's scripted
    controller and random actions visit after the first steps of `n` episodes (they only widen
    the range `reference_states` covers)."""
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


def reference_states(pos: np.ndarray, visited: np.ndarray, n: int, rng: np.random.Generator,
                     pad: float = 0.5) -> np.ndarray:
    """`n` states uniform over the box spanned by the start examples padded by `pad` x their
    range on every side, widened to every visited state: the negatives of the start-state
    classifier (no labels needed, so the same works with start states recorded on a robot)."""
    pos = np.asarray(pos, np.float64)
    span = pos.max(0) - pos.min(0)
    lo, hi = pos.min(0) - pad * span, pos.max(0) + pad * span
    if len(visited):
        lo, hi = np.minimum(lo, np.min(visited, 0)), np.maximum(hi, np.max(visited, 0))
    return rng.uniform(lo, hi, size=(n, pos.shape[1])).astype(np.float32)


def fit_start_classifier(pos: np.ndarray, visited: np.ndarray, seed: int = 0, steps: int = 1500,
                         references: int = 4000) -> tuple[StartStateClassifier, float, float]:
    """(classifier, threshold, training accuracy): p(start) from `pos` against
    `reference_states`; the threshold is what 80 % of the true start states reach (at most 0.5:
    start states near the region's edge score lower, as the MLP smooths the boundary)."""
    clf = StartStateClassifier(pos.shape[1], seed=seed)
    ref = reference_states(pos, visited, references, np.random.default_rng(seed + 13))
    acc = clf.fit(pos, ref, steps=steps)
    threshold = float(min(0.5, np.quantile(clf.prob(pos), 0.2)))
    return clf, threshold, acc


class _GoalOverride:
    """The task as a scripted controller sees it, with another `goal` (the obs keep the task's)."""

    def __init__(self, task, goal):
        self._task, self.goal = task, goal

    def __getattr__(self, name):
        return getattr(self._task, name)


def scripted_backward_demos(twin, n: int, score, threshold: float, seed: int = 0,
                            max_steps: int = 120) -> dict | None:
    """Backward demonstrations from a sim twin, as SERL gives both agents demos (on a robot: the
    operator teleoperating resets): the scripted push first drives the cube to a point OUTSIDE
    the start region (where forward episodes leave it), then pushes it back to a point inside;
    the second part is recorded with the backward agent's own reward (`backward_reward` of
    `start_prob(obs)`) and ends when p(start) passes `threshold`. Only episodes that get there
    are kept. None for tasks without a goal-driven scripted controller (push only today)."""
    from robolearn.tasks.arm import CUBE_REGION_HIGH, CUBE_REGION_LOW, WORKSPACE_HIGH, WORKSPACE_LOW
    from robolearn.tasks.arm_scripted import PushController

    base = twin.unwrapped
    task = base.task
    if getattr(task, "name", None) != "push" or base.reset_mode != "teleport":
        return None
    rng = np.random.default_rng(seed + 31)
    keys = list(twin.observation_space.spaces)
    out = {"obs": {k: [] for k in keys}, "next_obs": {k: [] for k in keys}, "action": [], "reward": [],
           "terminated": [], "truncated": []}
    lo, hi = np.array(WORKSPACE_LOW[:2]) + 0.01, np.array(WORKSPACE_HIGH[:2]) - 0.02
    kept = 0
    for ep in range(4 * n):
        if kept >= n:
            break
        obs, _ = twin.reset(seed=seed + 70_000 + ep)
        while True:   # a forward goal out of the start region, in reach of a push
            away = rng.uniform(lo, hi)
            if not np.all((away >= CUBE_REGION_LOW - 0.01) & (away <= CUBE_REGION_HIGH + 0.01)):
                break
        task.goal = np.array([away[0], away[1], task.goal[2]])
        ctrl = PushController(task, twin)
        ctrl.reset()
        for _ in range(max_steps):
            obs, _, term, trunc, _ = twin.step(ctrl.act(obs))
            if term or trunc:
                break
        if score(obs, {})[0] > threshold:
            continue                       # the cube did not leave the start region
        target = rng.uniform(np.asarray(CUBE_REGION_LOW) + 0.03, np.asarray(CUBE_REGION_HIGH) - 0.03)
        back = PushController(_GoalOverride(task, np.array([target[0], target[1], task.goal[2]])), twin)
        back.reset()
        ep_rows = []
        for t in range(max_steps):
            a = back.act(obs)
            nxt, _, _, _, info = twin.unwrapped.step(a)   # no time limit / success end: the twin's own
            p, r = score(nxt, info)
            done = p > threshold
            ep_rows.append((obs, a, r, nxt, done, t == max_steps - 1))
            obs = nxt
            if done:
                break
        if not ep_rows[-1][4]:
            continue
        kept += 1
        for o, a, r, nx, te, tr in ep_rows:
            for k in keys:
                out["obs"][k].append(o[k])
                out["next_obs"][k].append(nx[k])
            out["action"].append(a)
            out["reward"].append(r)
            out["terminated"].append(te)
            out["truncated"].append(tr and not te)
    if not kept:
        return None
    return {"obs": {k: np.stack(v) for k, v in out["obs"].items()},
            "next_obs": {k: np.stack(v) for k, v in out["next_obs"].items()},
            "action": np.asarray(out["action"], np.float32), "reward": np.asarray(out["reward"], np.float32),
            "terminated": np.asarray(out["terminated"], bool), "truncated": np.asarray(out["truncated"], bool),
            "episodes": kept}


def object_distance(info: dict) -> float | None:
    """Grasp point to object (m) from a step's `info` (`ee_pos`, `cube_pos`), None without one."""
    if "cube_pos" not in info or "ee_pos" not in info:
        return None
    return float(np.linalg.norm(np.asarray(info["cube_pos"]) - np.asarray(info["ee_pos"])))


# ================================================================================ trainer
def trainer_class(resets: str):
    """`Trainer` for `resets="env"`, `ForwardBackwardTrainer` for `"learned"`,
    `PracticeTrainer` (robolearn.resets.practice_trainer) for `"practice"`."""
    from robolearn.policies.training import Trainer

    if resets == "learned":
        return ForwardBackwardTrainer
    if resets == "practice":
        from robolearn.resets.practice_trainer import PracticeTrainer

        return PracticeTrainer
    return Trainer


def make_trainer(cfg, **kwargs):
    """The trainer `cfg.resets` asks for (see `trainer_class`)."""
    return trainer_class(cfg.resets)(cfg, **kwargs)


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
    #: when a backward episode ends without reaching the start distribution, run the task's own
    #: physical reset controller (scripted, no teleport; it prompts the operator when it fails
    #: on a robot) instead of starting the next forward episode from a world the backward agent
    #: could not fix. Without it one cube pushed out of the backward agent's competence stalls
    #: the rest of the run (measured: every forward episode after step ~1000 in the bench).
    fallback_to_task_reset = True
    #: every env step goes into both replays, each with its own agent's reward (the env's task
    #: reward for the forward agent, p(start) - 1 for the backward one): off-policy learners can
    #: learn from the other phase's steps, so the forward agent learns from the whole budget and
    #: not only the half it acted in (the env resamples the task goal at every phase start, so
    #: backward steps carry a valid forward goal and reward)
    share_experience = True
    #: a backward episode that has not reached the start distribution after this many steps
    #: hands over to the fallback. With the env's 120-step limit every failed backward episode
    #: ran all 120 steps (measured at 15 000 steps: ~4 300 of the budget for nothing); the
    #: scripted backward pushes (the demos) take 15-113 steps, median 33, 17 of 20 within 80
    backward_max_steps = 80
    #: the arm's home move after a backward phase first raises the grasp point this high (m)
    #: above the table, so it does not sweep the cube the backward agent just put back (the
    #: straight joint-space move moved it > 1 cm in ~1 of 6 homings)
    home_lift = 0.06

    def _build(self, cfg, _resumed_state):
        if _resumed_state is not None:
            raise ConfigError("--resume is not supported for --resets learned runs yet; start a new run")
        if not cfg.env.startswith("robolearn/"):
            raise ConfigError("--resets learned needs a robolearn env (it runs them with reset_mode='physical')")
        from dataclasses import replace

        from robolearn.data.replay import MixedSampler, ReplayBuffer, transitions_to_buffer
        from robolearn.policies.training import evaluation_env_kwargs, make_env
        from robolearn.policies.registry import make_agent

        twin_kwargs = evaluation_env_kwargs(cfg.env_kwargs)
        # the success model of start states, from teleported example resets of a sim twin
        twin = make_env(cfg.env, cfg.obs, None, cfg.max_episode_steps, twin_kwargs, cfg.reality_gap)
        key, idx = twin.unwrapped.task.start_state_features()
        if key == "privileged" and not twin_kwargs.get("privileged_obs"):
            # the classifier reads the sim's object pose: the envs carry it as obs["privileged"]
            # (the agents read it only if their `privileged` option says so)
            twin.close()
            twin_kwargs["privileged_obs"] = True
            twin = make_env(cfg.env, cfg.obs, None, cfg.max_episode_steps, twin_kwargs, cfg.reality_gap)
        self.start_key, self.features = key, np.asarray(idx, dtype=int)
        try:
            pos, neg = start_state_examples(twin, self.examples, seed=cfg.seed, key=key, idx=self.features)
            self.classifier, self.threshold, self.classifier_train_acc = fit_start_classifier(
                pos, neg, seed=cfg.seed, steps=self.classifier_steps)
            back_demos = None
            if cfg.demos and cfg.demos.startswith("scripted:"):   # both agents get demos, as in SERL
                from robolearn.policies.training import episode_count

                back_demos = scripted_backward_demos(twin, episode_count(cfg.demos), self._backward_score,
                                                     self.threshold, seed=cfg.seed)
        finally:
            twin.close()
        # a failed fallback reset starts the episode where the world is (counted) unless the
        # user asks otherwise (on a robot: reset_on_failure = "prompt", the operator)
        phys = {**twin_kwargs, "reset_mode": "physical",
                "reset_on_failure": cfg.env_kwargs.get("reset_on_failure", "continue")}
        if "reset_prompt" in cfg.env_kwargs:   # e.g. "operator:sim": who answers a failed reset
            phys["reset_prompt"] = cfg.env_kwargs["reset_prompt"]
        # every step goes into both replays and each ended sub-episode costs a slot (the final
        # frame): twice the budget keeps all of it (p(start) ends a backward "episode" at every
        # step the world is already in the start distribution)
        cap = cfg.buffer_size or 2 * cfg.steps
        super()._build(replace(cfg, env_kwargs=phys, buffer_size=cap), None)
        self.backward = make_agent(cfg.algo, self.env.observation_space, self.env.action_space,
                                   seed=cfg.seed + 7, **{k: v for k, v in self.agent_overrides.items()})
        ac = self.backward.config
        n_step, gamma = int(getattr(ac, "n_step", 1)), float(getattr(ac, "gamma", 0.99))
        self.backward_replay = ReplayBuffer(self.env.observation_space, self.env.action_space, cap,
                                            n_step=n_step, gamma=gamma, seed=cfg.seed + 7)
        self.backward_sampler = self.backward_replay
        self.backward_demo_episodes = 0
        if back_demos is not None:
            self.backward_demo_episodes = int(back_demos.pop("episodes"))
            prior_fraction = getattr(ac, "prior_fraction", None)
            if prior_fraction:   # RLPD: half of every backward batch from its demos, as forward
                prior = ReplayBuffer(self.env.observation_space, self.env.action_space,
                                     2 * len(back_demos["action"]), n_step=n_step, gamma=gamma,
                                     seed=cfg.seed + 8)
                transitions_to_buffer(back_demos, prior)
                self.backward_sampler = MixedSampler(self.backward_replay, prior, prior_fraction=prior_fraction)
            else:
                self.backward_replay = ReplayBuffer(self.env.observation_space, self.env.action_space,
                                                    cap + 2 * len(back_demos["action"]), n_step=n_step,
                                                    gamma=gamma, seed=cfg.seed + 7)
                transitions_to_buffer(back_demos, self.backward_replay)
                self.backward_sampler = self.backward_replay

    def _backward_score(self, obs: dict, info: dict) -> tuple[float, float]:
        """(p(start), the backward agent's reward) for the world after a step: the success
        model's verdict on `obs`, and the grasp point's distance to the object from `info`
        (the task's own measurements, where it has an object)."""
        logit = float(self.classifier.logit(obs[self.start_key][None, self.features])[0])
        p = float(sigmoid(logit))
        return p, self.backward_reward(p, logit, object_distance(info))

    #: the backward reward's terms (see `backward_reward`)
    logit_floor, logit_scale, approach_scale = -40.0, 20.0, 5.0

    @classmethod
    def backward_reward(cls, p: float, logit: float | None = None, distance: float | None = None) -> float:
        """The backward agent's reward for a step that left p(start) = `p`: every term is <= 0,
        so arriving (the episode ends once p passes the threshold) is the best a trajectory can
        do. With p itself (> 0 every step) staying just outside the start region would be worth
        p / (1 - gamma), more than arriving, and the agent would learn to keep the world away.
        - `p - 1`: the success model's verdict; a flat -1 anywhere outside the start region.
        - `min(logit, 0) / 20` (floored at -40): the model's log-odds, which fall about linearly
          with the distance from the region, so that pushing the object toward it pays before
          it gets there (measured with all three terms at 15 000 steps: still only 14 of 225
          backward episodes brought the cube back by the agent's own pushing; docs/bench/resets).
        - `-5 x distance` (m, grasp point to object, capped at 0.5 m like the task's): the same
          approach term, at the same scale, as the forward task's own dense reward (ArmPush:
          -10 x 0.5 x distance)."""
        r = p - 1.0
        if logit is not None:
            r += min(max(logit, cls.logit_floor), 0.0) / cls.logit_scale
        if distance is not None:
            from robolearn.tasks.arm import REWARD_DISTANCE_CAP

            r -= cls.approach_scale * min(distance, REWARD_DISTANCE_CAP)
        return r

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
        reached = []                # the backward agent got the world back (classifier's verdict)
        fallbacks = 0               # ... and when it did not, the task's physical reset did it
        t0 = time.perf_counter()
        task = self.env.unwrapped.task
        home = ArmHome(lift=self.home_lift) if hasattr(task, "home_q") else None
        obs, info = self.env.reset(seed=cfg.seed, options={"reset_controller": home})
        phase, ep_ret, ep_len, ep_success = "forward", 0.0, 0, False
        last_reset = dict(info["reset"], kind="learned")
        back_steps = fwd_steps = 0
        a_low, a_high = self.env.action_space.low, self.env.action_space.high
        try:
            while self.env_steps < target:
                agent = self.agent if phase == "forward" else self.backward
                if self.env_steps < learning_starts:
                    action = self.rng.uniform(a_low, a_high).astype(np.float32)
                else:
                    action = agent.act(obs)
                nxt, fwd_reward, fwd_done, truncated, info = self.env.step(action)
                p, back_reward = self._backward_score(nxt, info)
                back_done = p > self.threshold
                if phase == "backward":
                    reward, terminated = back_reward, back_done
                    back_steps += 1
                    truncated = truncated or (ep_len + 1 >= self.backward_max_steps and not back_done)
                else:
                    reward, terminated = fwd_reward, fwd_done
                    fwd_steps += 1
                ends = bool(terminated or truncated)
                # each agent stores the step with its own reward; for the one not acting, the
                # phase's end is a time limit (the world goes on, its task was not decided)
                for mine, rep, r, done in ((phase == "forward", self.replay, fwd_reward, fwd_done),
                                           (phase == "backward", self.backward_replay, back_reward, back_done)):
                    if mine or self.share_experience:
                        rep.add(obs, action, r, nxt, bool(done), ends and not done)
                self.env_steps += 1
                ep_ret += float(reward)
                ep_len += 1
                ep_success = ep_success or (phase == "forward" and bool(info.get("success", False)))
                obs = nxt
                if self.env_steps >= learning_starts:
                    # both learners keep learning whichever agent acts (SERL runs them apart from
                    # the actor): the forward agent gets `utd` updates per env step, as it would
                    # with teleport resets, rather than per forward step
                    for _ in range(int(self.agent.config.utd)):
                        self._update_agent(self.agent, self.sampler)
                    for _ in range(int(self.backward.config.utd)):
                        self._update_agent(self.backward, self.backward_sampler)
                if cfg.eval_every and self.env_steps % cfg.eval_every == 0:
                    self._evaluate()
                if terminated or truncated:
                    rec = {"kind": "episode", "step": self.env_steps, "phase": phase, "return": ep_ret,
                           "length": ep_len, "success": ep_success if phase == "forward" else bool(terminated),
                           "reset": last_reset}
                    if phase == "backward":
                        truth = bool(task.start_state_true())
                        agreement.append(truth == bool(terminated))
                        reached.append(bool(terminated))
                        rec["start_state_true"] = truth
                        # what the classifier judged (e.g. the cube's x, y): where the world was left
                        rec["start_features"] = [round(float(v), 4) for v in obs[self.start_key][self.features]]
                    self.episodes += phase == "forward"
                    # next phase, from the world as it is; only the arm is homed by script, unless
                    # the backward agent did not get there: then the task's own physical reset
                    phase = "backward" if phase == "forward" else "forward"
                    escalate = phase == "forward" and self.fallback_to_task_reset and not rec["success"]
                    opts = {} if escalate else {"reset_controller": home if phase == "forward" else None}
                    obs, info = self.env.reset(options=opts)
                    last_reset = dict(info["reset"])
                    if phase == "forward" and escalate:
                        fallbacks += 1
                        self.reset_stats.add(last_reset)      # kind "scripted", ok as it went
                    elif phase == "forward":   # the backward agent (+ the scripted arm home) reset it
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
                           backward_demo_episodes=self.backward_demo_episodes,
                           backward_updates=int(self.backward.num_updates),
                           backward_reached_start=(int(sum(reached)), len(reached)),
                           fallback_resets=fallbacks,
                           resets=self.reset_stats.as_dict())
            self._write_json("summary.json", summary)
            return summary
        finally:
            self._close_logs()

    def _update_agent(self, agent, sampler) -> None:
        bs = int(agent.config.batch_size)
        if agent is self.agent:
            if len(self.replay) >= 1:
                t = time.perf_counter()
                self._update(sampler.sample(bs))
                self.update_time += time.perf_counter() - t
        elif len(self.backward_replay) >= 1:
            self.backward.update(sampler.sample(bs))

    def close(self):
        super().close()
