"""Learned forward/backward resets (reset-free RL, as in SERL / autonomous RL).

Why: on a robot nobody teleports the cube back, and scripting a reset for every task is as hard
as the task. So two agents alternate on one world that carries over: the *forward* agent
practises the task for an episode, then the *backward* agent, rewarded by a success model of
the start states, brings the world back to where forward episodes begin; then forward again.
The success model is `StartStateClassifier` (robolearn/resets/start_classifier.py, a density
ratio of start states against reference states). In sim its verdict is checked against the ground truth (`start_state_true` from the task) and logged, so a
classifier that is fooled shows up in `metrics.jsonl` rather than as a mysteriously stalled run.

Only the arm is homed by script after the backward phase (`ArmHome`: a robot-only move that
needs no perception and works on any arm); everything about the object is learned.
`ForwardBackwardHooks` are hooks of the one `Trainer` loop for `robolearn train ... --resets
learned`; evaluation stays on teleport resets, so the reported success rate is the true one of
the forward policy.
"""
from __future__ import annotations

import numpy as np

from robolearn.errors import ConfigError
from robolearn.policies.demos import episode_count
from robolearn.policies.env_building import evaluation_env_kwargs, make_env
from robolearn.policies.registry import make_agent
from robolearn.policies.replay_setup import build_replays
from robolearn.policies.serialize import load_state, save_state
from robolearn.policies.trainer_hooks import TrainerHooks
from robolearn.resets.scripted import ArmHome
from robolearn.resets.start_classifier import (StartStateClassifier, fit_start_classifier, sigmoid,
                                               start_state_examples)


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
    from robolearn.sim.arm_workspace import CUBE_REGION_HIGH, CUBE_REGION_LOW, WORKSPACE_HIGH, WORKSPACE_LOW
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
class ForwardBackwardHooks(TrainerHooks):
    """Reset-free training: forward and backward agents alternate on a `reset_mode="physical"`
    env; every env step of either phase counts toward `cfg.steps`. Runs in `Trainer`'s loop:
    the forward agent is the trainer's own; this adds the backward agent, its replay and the
    start-state classifier, and decides at each episode end which phase comes next."""

    kind = "learned"
    #: backward phase ends when p(start) exceeds this (calibrated on the examples in setup)
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

    def __init__(self, cfg):
        if not cfg.env.startswith("robolearn/"):
            raise ConfigError("--resets learned needs a robolearn env (it runs them with reset_mode='physical')")
        self.cfg = cfg
        self.twin_kwargs = evaluation_env_kwargs(cfg.env_kwargs)

    # ----------------------------------------------------------------- construction
    def env_kwargs(self, cfg) -> dict:
        # a failed fallback reset starts the episode where the world is (counted) unless the
        # user asks otherwise (on a robot: reset_on_failure = "prompt", the operator)
        phys = {**self.twin_kwargs, "reset_mode": "physical",
                "reset_on_failure": cfg.env_kwargs.get("reset_on_failure", "continue")}
        if "reset_prompt" in cfg.env_kwargs:   # e.g. "operator:sim": who answers a failed reset
            phys["reset_prompt"] = cfg.env_kwargs["reset_prompt"]
        return phys

    def replay_capacity(self, cfg) -> int:
        # every step goes into both replays and each ended sub-episode costs a slot (the final
        # frame): twice the budget keeps all of it (p(start) ends a backward "episode" at every
        # step the world is already in the start distribution)
        return cfg.buffer_size or 2 * cfg.steps

    def fit_classifier(self) -> dict | None:
        """Fit the start-state classifier on a sim twin's teleported resets (before the trainer
        builds its env); return scripted backward demos when `cfg.demos` is `scripted:N`."""
        cfg = self.cfg
        # the success model of start states, from teleported example resets of a sim twin
        twin = make_env(cfg.env, cfg.obs, None, cfg.max_episode_steps, self.twin_kwargs, cfg.reality_gap,
                        cfg.sim_params)
        key, idx = twin.unwrapped.task.start_state_features()
        if key == "privileged" and not self.twin_kwargs.get("privileged_obs"):
            # the classifier reads the sim's object pose: the envs carry it as obs["privileged"]
            # (the agents read it only if their `privileged` option says so)
            twin.close()
            self.twin_kwargs["privileged_obs"] = True
            twin = make_env(cfg.env, cfg.obs, None, cfg.max_episode_steps, self.twin_kwargs, cfg.reality_gap,
                            cfg.sim_params)
        self.start_key, self.features = key, np.asarray(idx, dtype=int)
        try:
            pos, neg = start_state_examples(twin, self.examples, seed=cfg.seed, key=key, idx=self.features)
            self.classifier, self.threshold, self.classifier_train_acc = fit_start_classifier(
                pos, neg, seed=cfg.seed, steps=self.classifier_steps)
            if cfg.demos and cfg.demos.startswith("scripted:"):   # both agents get demos, as in SERL
                return scripted_backward_demos(twin, episode_count(cfg.demos), self._backward_score,
                                               self.threshold, seed=cfg.seed)
            return None
        finally:
            twin.close()

    def setup(self, trainer, resumed_state) -> None:
        cfg = self.cfg
        env = trainer.env
        self.backward = make_agent(cfg.algo, env.observation_space, env.action_space,
                                   seed=cfg.seed + 7, **dict(trainer.agent_overrides))
        ac = self.backward.config
        cap = self.replay_capacity(cfg)
        back_demos = self.back_demos if resumed_state is None else None
        self.backward_demo_episodes = 0
        prior_capacity, prior_fraction = 0, getattr(ac, "prior_fraction", None)
        if back_demos is not None:
            self.backward_demo_episodes = int(back_demos.pop("episodes"))
            if prior_fraction:   # RLPD: half of every backward batch from its demos, as forward
                prior_capacity = 2 * len(back_demos["action"])
            else:
                cap += 2 * len(back_demos["action"])
        elif resumed_state is not None:
            saved = resumed_state["hooks"]
            cap, prior_capacity = int(saved["backward_capacity"]), int(saved["backward_prior_capacity"])
        self.backward_capacity, self.backward_prior_capacity = cap, prior_capacity
        self.backward_replay, self.backward_prior, _, self.backward_sampler = build_replays(
            env.observation_space, env.action_space, ac, cap, cfg.seed + 7, demos=back_demos,
            prior_capacity=prior_capacity, prior_fraction=prior_fraction)
        self.back_demos = None
        task = env.unwrapped.task
        self.home = ArmHome(lift=self.home_lift) if hasattr(task, "home_q") else None
        self.phase = "forward"
        self.agreement: list[bool] = []     # classifier verdict == ground truth at each backward end
        self.reached: list[bool] = []       # the backward agent got the world back (classifier's verdict)
        self.fallbacks = 0                  # ... and when it did not, the task's physical reset did it
        self.fwd_steps = self.back_steps = 0
        self._escalate = False

    def config_record(self, trainer) -> dict:
        return {"resets": "learned", "classifier_train_accuracy": self.classifier_train_acc}

    # ------------------------------------------------------------------------ loop
    def first_reset_options(self, trainer) -> dict:
        return {"reset_controller": self.home}

    def acting_agent(self, trainer):
        return trainer.agent if self.phase == "forward" else self.backward

    def store(self, trainer, obs, action, reward, nxt, terminated, truncated, info, intervened):
        p, back_reward = self._backward_score(nxt, info)
        back_done = p > self.threshold
        if self.phase == "backward":
            r, done = back_reward, back_done
            self.back_steps += 1
            truncated = truncated or (trainer.ep_len + 1 >= self.backward_max_steps and not back_done)
        else:
            r, done = reward, terminated
            self.fwd_steps += 1
        ends = bool(done or truncated)
        # each agent stores the step with its own reward; for the one not acting, the phase's
        # end is a time limit (the world goes on, its task was not decided)
        if self.phase == "forward" or self.share_experience:
            stored = trainer.add_transition(obs, action, reward, nxt, bool(terminated),
                                            ends and not terminated, intervened)
            if self.phase == "forward" and not stored:
                r = 0.0
        if self.phase == "backward" or self.share_experience:
            self.backward_replay.add(obs, action, back_reward, nxt, bool(back_done), ends and not back_done)
        success = self.phase == "forward" and bool(info.get("success", False))
        return float(r), bool(done), bool(truncated), success

    def update(self, trainer) -> None:
        # both learners keep learning whichever agent acts (SERL runs them apart from the
        # actor): the forward agent gets `utd` updates per env step, as it would with teleport
        # resets, rather than per forward step
        if len(self.backward_replay) >= 1:
            bs = int(self.backward.config.batch_size)
            for _ in range(int(self.backward.config.utd)):
                trainer._update(self.backward_sampler.sample(bs), agent=self.backward)

    def end_episode(self, trainer, rec) -> dict:
        task = trainer.env.unwrapped.task
        rec["phase"] = self.phase
        if self.phase == "backward":
            rec["success"] = rec["terminated"]
            truth = bool(task.start_state_true())
            self.agreement.append(truth == rec["terminated"])
            self.reached.append(rec["terminated"])
            rec["start_state_true"] = truth
            # what the classifier judged (e.g. the cube's x, y): where the world was left
            rec["start_features"] = [round(float(v), 4) for v in trainer._obs[self.start_key][self.features]]
        # next phase, from the world as it is; only the arm is homed by script, unless the
        # backward agent did not get there: then the task's own physical reset
        self.phase = "backward" if self.phase == "forward" else "forward"
        self._escalate = self.phase == "forward" and self.fallback_to_task_reset and not rec["success"]
        return self.resume_reset_options(trainer)

    def counts_as_episode(self, rec) -> bool:
        return rec["phase"] == "forward"

    def note_reset(self, trainer, reset, ended):
        if ended is None:            # the run's first episode (or the first after a resume)
            return dict(reset, kind="learned") if reset else reset
        if self.phase == "forward" and self._escalate:
            self.fallbacks += 1
            trainer.reset_stats.add(reset)         # kind "scripted", ok as it went
        elif self.phase == "forward":  # the backward agent (+ the scripted arm home) reset it
            reset = dict(reset, kind="learned", ok=bool(ended["success"]))
            trainer.reset_stats.add(reset)
        return reset

    def summary(self, trainer) -> dict:
        return dict(resets_mode="learned", forward_env_steps=self.fwd_steps, backward_env_steps=self.back_steps,
                    classifier_train_accuracy=self.classifier_train_acc,
                    classifier_threshold=self.threshold,
                    classifier_agreement_with_ground_truth=(float(np.mean(self.agreement))
                                                            if self.agreement else None),
                    backward_demo_episodes=self.backward_demo_episodes,
                    backward_updates=int(self.backward.num_updates),
                    backward_reached_start=(int(sum(self.reached)), len(self.reached)),
                    fallback_resets=self.fallbacks,
                    resets=trainer.reset_stats.as_dict())

    # --------------------------------------------------------------------- checkpoints
    def checkpoint_state(self, trainer) -> dict:
        return {"phase": self.phase, "escalate": self._escalate, "fwd_steps": self.fwd_steps,
                "back_steps": self.back_steps, "agreement": self.agreement, "reached": self.reached,
                "fallbacks": self.fallbacks, "backward_demo_episodes": self.backward_demo_episodes,
                "backward_capacity": self.backward_capacity,
                "backward_prior_capacity": self.backward_prior_capacity,
                "threshold": self.threshold, "classifier_train_accuracy": self.classifier_train_acc,
                "start_key": self.start_key, "features": self.features.tolist()}

    def checkpoint_buffers(self, trainer) -> dict:
        return {"backward_replay": self.backward_replay, "backward_prior": self.backward_prior}

    def write_checkpoint_files(self, trainer, folder) -> None:
        save_state(folder / "backward_agent.safetensors", self.backward.state_dict())
        self.classifier.save(folder / "start_classifier.safetensors")

    def restore(self, trainer, ckpt, state) -> None:
        s = state["hooks"]
        self.phase, self._escalate = s["phase"], bool(s["escalate"])
        self.fwd_steps, self.back_steps = int(s["fwd_steps"]), int(s["back_steps"])
        self.agreement, self.reached = list(s["agreement"]), list(s["reached"])
        self.fallbacks, self.backward_demo_episodes = int(s["fallbacks"]), int(s["backward_demo_episodes"])
        self.backward.load_state_dict(load_state(ckpt / "backward_agent.safetensors"))
        self.backward_replay.load(ckpt / "backward_replay")
        if self.backward_prior is not None:
            self.backward_prior.load(ckpt / "backward_prior")

    def resume_reset_options(self, trainer) -> dict:
        if self._escalate:
            return {}
        return {"reset_controller": self.home if self.phase == "forward" else None}

    # ------------------------------------------------------------------------ scores
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
            from robolearn.sim.arm_workspace import REWARD_DISTANCE_CAP

            r -= cls.approach_scale * min(distance, REWARD_DISTANCE_CAP)
        return r


def make_forward_backward_hooks(cfg, resumed_state: dict | None = None) -> ForwardBackwardHooks:
    """The hooks of a `--resets learned` run: a new run fits the start-state classifier on a sim
    twin first; a resumed one loads it from the checkpoint."""
    hooks = ForwardBackwardHooks(cfg)
    if resumed_state is None:
        hooks.back_demos = hooks.fit_classifier()
    else:
        s = resumed_state["hooks"]
        ckpt = resumed_state["_checkpoint"]
        hooks.start_key, hooks.features = s["start_key"], np.asarray(s["features"], dtype=int)
        hooks.threshold, hooks.classifier_train_acc = float(s["threshold"]), s["classifier_train_accuracy"]
        hooks.classifier = StartStateClassifier.load(ckpt / "start_classifier.safetensors")
        if hooks.start_key == "privileged":
            hooks.twin_kwargs["privileged_obs"] = True
        hooks.back_demos = None
    return hooks
