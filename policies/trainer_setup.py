"""Setting up a training run: the env (with the composition layer's wrappers and the hooks'),
the agent, the replay and the prior buffer (demos, earlier runs' data: RaE), the counters.

Why apart from the loop (policies/trainer.py): what a run is made of and in what order (the
RNG streams depend on it) is one concern; the order of events in the loop is another.
"""
from __future__ import annotations

import numpy as np
import torch

from robolearn.data.replay import slots_needed
from robolearn.errors import ConfigError
from robolearn.policies.demos import load_demos
from robolearn.policies.env_building import evaluation_env_kwargs, make_env
from robolearn.policies.prior_runs import load_prior_runs
from robolearn.policies.registry import ALGOS, make_agent, profile_overrides
from robolearn.policies.replay_setup import batch_shares, build_replays
from robolearn.policies.train_config import TrainConfig, replay_options
from robolearn.reset_report import ResetStats


def build_run(trainer, cfg: TrainConfig, wrap_env, _resumed_state: dict | None,
              relabel_prior=None) -> None:
    """Give a new `Trainer` its env (wrapped), agent, replay and prior buffer (demos, earlier
    runs), counters and loop state; a resumed one gets the capacities its checkpoint had."""
    if cfg.algo not in ALGOS:  # before building an env: a typo should fail fast
        raise ConfigError(f"unknown algo {cfg.algo!r}; choose one of: {', '.join(ALGOS)} "
                          "(see `robolearn algos`)")
    torch.set_num_threads(cfg.threads)
    trainer.dir = cfg.run_dir()
    trainer.env_kwargs = trainer.hooks.env_kwargs(cfg)
    trainer._eval_kwargs = evaluation_env_kwargs(trainer.env_kwargs)
    # [reward]: the training env's reward and termination come from the reward model; the
    # eval env keeps the task's own (in sim: the ground truth the model is judged by)
    human = cfg.reward.get("kind") == "human"
    train_kwargs = ({**trainer.env_kwargs, "reward_source": dict(cfg.reward)} if cfg.reward and not human
                    else trainer.env_kwargs)
    trainer.env = make_env(cfg.env, cfg.obs, None, cfg.max_episode_steps, train_kwargs, cfg.reality_gap,
                        cfg.sim_params)
    if wrap_env is not None:  # human labels / interventions (robolearn/compose/training.py)
        trainer.env = wrap_env(trainer.env)
    trainer.env = trainer.hooks.wrap_env(trainer.env)
    trainer.profile = profile_overrides(cfg.profile, cfg.algo)  # under the user's own options
    overrides = {**trainer.profile, **cfg.agent}
    if cfg.obs != "state":  # camera observations: the DrQ conv encoder composes with any preset
        overrides.setdefault("pixels", True)
    if cfg.utd is not None:
        overrides["utd"] = cfg.utd
    if cfg.learning_starts is not None:
        overrides["learning_starts"] = cfg.learning_starts
    if cfg.device is not None:
        overrides["device"] = cfg.device
    if cfg.metrics_every is not None:
        overrides["check_every"] = cfg.metrics_every
    trainer.agent = make_agent(cfg.algo, trainer.env.observation_space, trainer.env.action_space,
                            seed=cfg.seed, **overrides)
    trainer.agent.require_learning()
    trainer.agent_overrides = overrides
    if cfg.profile:  # said at start and kept in summary.json: never a silent change of preset
        used = {k: getattr(trainer.agent.config, k) for k in trainer.profile}
        print(f"profile {cfg.profile}: {cfg.algo} runs with {used or 'its preset unchanged'} "
              "(lighter than the paper's settings to fit this machine; docs/learners.md)", flush=True)
    ac = trainer.agent.config
    # RaE: earlier runs' data fill the prior buffer, or beside rlpd's demos get a buffer and a
    # batch share of their own (policies/replay_setup.batch_shares)
    prior_runs, rae_fraction = replay_options(cfg.replay)
    agent_fraction = float(getattr(ac, "prior_fraction", 0.0) or 0.0)
    demos, prior_data = None, None
    earlier_capacity = None
    if _resumed_state is None:
        if cfg.demos:
            demos = load_demos(cfg.demos, trainer.env, seed=cfg.seed)
        trainer.demo_count = len(demos["action"]) if demos is not None else 0
        demos_in_prior = bool(demos is not None and agent_fraction)
        prior_fraction, earlier_fraction = batch_shares(agent_fraction, rae_fraction,
                                                        bool(prior_runs), demos_in_prior)
        trainer.prior_runs_report: list[dict] = []
        if prior_runs:  # only for a new run: a resumed one restores its prior buffer
            prior_data, trainer.prior_runs_report = load_prior_runs(
                prior_runs, trainer.env, cfg.env, cfg.obs, cfg.reward, trainer.env_kwargs,
                run_dir=trainer.dir, relabel=relabel_prior)
        # RLPD: demos (+ interventions) are the prior half of every batch. Other algos: the
        # demos simply seed the online replay, which is sized to hold them too.
        # --buffer-size, else the run's steps up to the preset's replay_capacity (drq: 100k)
        capacity = trainer.hooks.replay_capacity(cfg) or min(cfg.steps, int(ac.replay_capacity))
        trainer.replay_capacity = capacity + (0 if demos_in_prior else trainer.demo_count)
        trainer.prior_capacity = trainer.demo_count + cfg.steps if demos_in_prior else 0
        if prior_data and earlier_fraction is None:  # room for every prior transition (and its
            trainer.prior_capacity += sum(slots_needed(d) for d in prior_data)  # pad slots)
            if not demos_in_prior and cfg.intervene:  # interventions join the prior data
                trainer.prior_capacity += cfg.steps
            trainer.prior_capacity = max(trainer.prior_capacity, 2)
    else:
        demos_in_prior = True
        trainer.demo_count = int(_resumed_state["demo_count"])
        trainer.replay_capacity = int(_resumed_state["replay_capacity"])
        trainer.prior_capacity = int(_resumed_state["prior_capacity"])
        trainer.prior_runs_report = list(_resumed_state.get("prior_runs", []))
        earlier_capacity = int(_resumed_state.get("earlier_capacity", 0)) or None
        prior_fraction, earlier_fraction = batch_shares(agent_fraction, rae_fraction,
                                                        bool(prior_runs), earlier_capacity is not None)
    trainer.prior_fraction = prior_fraction if trainer.prior_capacity else None
    trainer.replay, trainer.prior, trainer.earlier, trainer.sampler = build_replays(
        trainer.env.observation_space, trainer.env.action_space, ac, trainer.replay_capacity, cfg.seed,
        demos=demos, prior_capacity=trainer.prior_capacity, prior_fraction=prior_fraction,
        prior_data=prior_data, demos_in_prior=demos_in_prior, earlier_fraction=earlier_fraction,
        earlier_capacity=earlier_capacity)
    trainer.earlier_fraction = earlier_fraction if trainer.earlier is not None else None
    # counters and loop state
    trainer.env_steps = 0
    trainer.episodes = 0
    # steps whose reward model had no answer (not stored), demos labelled by it included
    trainer.rejected_missing_reward = int(np.isnan(demos["reward"]).sum()) if demos is not None else 0
    trainer.wall_before = 0.0
    trainer.update_time = 0.0  # seconds spent in agent.update (for gradient updates/s)
    trainer.rng = np.random.default_rng(cfg.seed)
    trainer.last_eval: dict | None = None
    trainer.reset_stats = ResetStats()  # this session's resets (not resumed ones)
    trainer.ep_len = 0
    trainer._obs = None
    trainer._last_reset: dict | None = None
    trainer._loss_acc: dict[str, list] = {}  # metric -> [sum, count] since the last log record
    trainer._ep_info: tuple[float, bool] | None = None  # last training episode (return, success)
    trainer._log_file = None  # MetricsLog while run() runs
    # what run() draws batches from: the host sampler, or on CUDA a DeviceSampler built at the
    # start of run() (after a resume has loaded the host buffers it mirrors)
    trainer.batches = None
    trainer._batches_state: dict | None = None  # a checkpoint's DeviceSampler generators
