"""Launch configuration for the actor/learner runtime: dataclasses read from a TOML file.

One place defines each default (here). A launch TOML looks like:

    env = "robolearn/ArmReach-v0"     # top level: LaunchConfig fields
    algo = "sac"
    actors = 1
    [env_kwargs]                      # passed to gymnasium.make
    [learner]                         # LearnerConfig fields
    [learner.agent]                   # overrides passed to make_agent (utd, batch_size, ...)
    [actor]                           # ActorConfig fields
    [reward]                          # a learned reward (robolearn.rewards.serving.RewardConfig)
    [cluster]                         # ClusterConfig: engine = "local" | "ray" (docs/runtime.md)

Unknown keys anywhere raise `ConfigError` naming them (a typo must never be ignored).
"""
from __future__ import annotations

import math

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robolearn.configs import check_keys, read_toml
from robolearn.errors import ConfigError

LOST_POLICIES = ("continue", "pause", "stop")
PACES = ("utd", "free")


@dataclass
class LearnerConfig:
    host: str = "127.0.0.1"          # bind address; 0.0.0.0 only with `keys` (Curve) set
    port: int = 5555                 # data (ROUTER); 0 = pick a free one (launch only)
    weights_port: int = 5556         # weights (PUB); 0 = pick a free one (launch only)
    total_env_steps: int = 10_000    # stop after this many transitions received (0: never)
    publish_every: int = 25          # updates between weight broadcasts
    checkpoint_every: int = 0        # updates between checkpoints (0: only at the end)
    policy_snapshot_every: int = 0   # env steps between policy snapshots kept beside the checkpoints
                                     # (RUN/policy_snapshots; finetune's final_policy = "reward")
    eval_episodes: int = 20          # deterministic episodes at the end (0: skip)
    eval_every: int = 0              # also evaluate every this many env steps (0: only at the end)
    buffer_size: int = 0             # replay capacity (0: total_env_steps or 100k)
    pace: str = "utd"                # "utd": utd updates per received step; "free": as fast as possible
    utd: int | None = None           # shortcut for agent.utd
    learning_starts: int | None = None  # shortcut for agent.learning_starts
    demos: str | None = None         # prior data (dataset dir, .npz, scripted:N) as in `train`
    nice: int = 0                    # raise the learner's nice value (keeps the actor on time)
    threads: int = 1                 # torch threads of the learner
    actor_timeout_s: float = 5.0     # an actor silent this long is reported dead
    metrics_every_s: float = 2.0
    max_message_bytes: int = 64 << 20
    agent: dict = field(default_factory=dict)


@dataclass
class ActorConfig:
    loop_hz: float | None = None     # control-loop rate; None: the env's control_hz; 0: unpaced
    send_batch: int = 32             # transitions per message (also flushed every flush_s)
    flush_s: float = 0.1
    outbox: int = 20_000             # bounded buffer while the learner is away (drops oldest)
    heartbeat_s: float = 0.25
    learner_timeout_s: float = 2.0   # no word from the learner this long -> learner lost
    on_learner_lost: str = "continue"  # continue | pause | stop
    max_steps: int = 0               # stop after this many env steps (0: until the learner says)
    random_until_weights: bool = True  # uniform random actions until the first weights arrive
    act_without_learner: bool = False  # act (random until weights) with no learner answering;
                                       # default: hold still until a learner welcomes this actor
    realtime: bool = True            # raise the loop thread's priority, freeze the GC
    threads: int = 1                 # torch threads of the actor
    max_message_bytes: int = 64 << 20
    intervene: str | None = None     # teleop device a human may take over with (robolearn.teleop)
    record: str = ""                 # dataset folder: every episode recorded, crash-safe ("": off)
    camera_outage_s: float = 120.0   # a camera gives no frame: hold the robot, discard the episode,
                                     # wait this long for it to come back, then stop (camera_outage.py)


ENGINES = ("local", "ray")


@dataclass
class ClusterConfig:
    """[cluster]: where the learner and actors run (`robolearn launch`). "local": child processes
    of `launch`; "ray": Ray actors on a Ray cluster (placement, restarts, resources; docs/runtime.md)."""

    engine: str = "local"            # local | ray (needs the extra: pip install 'robolearn[ray]')
    address: str = ""                # ray: cluster to join ("auto", "HOST:6379"); "": a local one
    max_restarts: int = 3            # ray: restarts of a dead sim actor (robot actors: never)
    envs_per_actor: int = 1          # ray: sim envs per actor (a Gymnasium vector env, one seed each)
    robot: str | list = ""           # ray: robot id (a list: one per actor); a hardware actor runs
                                     # on the node with custom resource robot:<id>
    actor_cpus: float = 1.0          # ray: CPUs reserved per actor (resource accounting only)
    learner_cpus: float = 1.0        # ray: CPUs reserved for the learner
    learner_gpu: str = "auto"        # ray: auto (one GPU when the cluster has one) | always | never


WARM_STARTS = ("wsrl", "rlpd", "none")
# [reward] keys a launch file may set beside calibrate_reward (which makes the classifier itself)
CALIBRATED_REWARD_OPTIONS = frozenset({"require_grasp", "threshold", "device"})
CALIBRATED_PUSH_REWARD_OPTIONS = frozenset({"hidden"})   # ArmPush: the cube finder reward's one option
CALIBRATED_REWARD_ENVS = ("ArmLift", "ArmPush")
EVAL_ACTIONS = ("mean", "sampled")  # finetune.eval_actions
FINAL_POLICIES = ("last", "reward")  # finetune.final_policy
LOADS = ("agent", "policy", "none")  # none: same networks and options, fresh weights (scratch)


@dataclass
class FinetuneConfig:
    """[finetune]: carry a sim-pretrained policy to the robot (read by `robolearn finetune`)."""

    checkpoint: str = ""             # run folder of the sim-pretrained policy (robolearn train)
    load: str = "agent"              # agent: actor, critics, temperature | policy: actor + temperature |
                                     # none: from scratch (the baseline a session must beat)
    warm_start: str = "wsrl"         # wsrl | rlpd | none (see docs/finetune.md)
    warmup_episodes: int = 5         # WSRL: pretrained-policy episodes before the first update
    prior_data: str = ""             # RLPD: sim:N (pretrained policy in the sim twin), DIR, .npz, scripted:N
    pretraining_replay: bool = False  # RLPD: also sample the pretraining run's own replay (its 50k sim
                                     # transitions, 0.25 of every batch, no BC on them): the critic
                                     # keeps the broad data it was fitted on (docs/finetune.md)
    robot_minutes: float = 0.0       # the session's whole robot time (calibrations, evaluations, training,
                                     # resets); training ends early so that the final evaluation fits
                                     # (learner.total_env_steps stays the cap). 0: no budget
    final_time_margin: float = 1.4   # robot_minutes: the final evaluation is timed as the zero-shot one x this
                                     # (push measured up to 1.37; lift 0.61-0.89: runtime/finetune.py)
    zero_shot_episodes: int = 10     # deterministic episodes of the pretrained policy, before
    final_episodes: int = 10         # ... and of the fine-tuned policy, after (0: skip)
    eval_actions: str = "mean"       # zero-shot and final: the policy's mean action ("mean", SAC's usual
                                     # evaluation) or actions sampled as in training ("sampled")
    final_policy: str = "last"       # the policy the final evaluation runs: "last" (the learner's last
                                     # checkpoint) or "reward" (the policy snapshot whose training episodes
                                     # the session's reward called lifted without the operator most often;
                                     # never the truth: runtime/policy_selection.py)
    snapshot_every: int = 500        # final_policy = "reward": env steps between kept policy snapshots
    record: bool = True              # every actor episode to RUN/episodes (crash-safe)
    reality: str = ""                # start an emulator with this reality file (tests, benches)
    calibrate_arm: bool = False      # stop calibration (robolearn calibrate-arm) on the robot first;
                                     # the session then uses RUN/arm_calibration.json
    calibrate_perception: bool = False  # camera calibration with frames the arm labels (after
                                     # calibrate_arm): fits the reset's cube finder, tunes the
                                     # policy localiser (env_kwargs perception)
    perception_cycles: int = 30      # calibrate_perception: pick-carry-place cycles (~10 s of robot time each)
    calibrate_reward: bool = False   # with calibrate_perception: the [reward] from the calibration.
                                     # ArmLift: a success classifier trained on its frames (cube height
                                     # from the arm); ArmPush: kind "cube_finder", the task's reward at
                                     # the fitted cube finder's position (rewards/push_camera.py)
    label_successes: bool = False    # the operator confirms/corrects the classifier's successes; the
                                     # classifier is retrained from those labels (docs/rewards.md)
    label_others: float = 0.1        # label_successes: share of the other episodes also asked about
    operator_error_rate: float = 0.02  # emulated robot: the emulated operator's answers flipped this often
    label_confidence: float = 0.9    # a label against a score this sure (or 1 - it) is flagged (kept)
    retrain_every: int = 20          # label_successes: retrain after this many new labels
    retrain_every_s: float = 0.0     # ... or this often (robot-side seconds) with new labels (0: off)
    retrain_epochs: int = 0          # 0: the classifier's own recipe
    label_timeout_s: float = 5.0     # physical robot: seconds to wait for the operator's key
    intervene: str = ""              # "operator": the emulated operator takes over a stuck policy
                                     # (HIL-SERL; emulated robot only; teleop/intervening_operator.py).
                                     # A person at a physical arm: [actor] intervene = DEVICE
    intervene_options: dict = field(default_factory=dict)  # InterveneConfig fields: patience_s,
                                     # progress_m, reaction_s, noise, max_takeover_s, max_per_episode
    prior_takeovers: str = "all"     # the operator's takeovers that join the prior (RLPD, BC-anchored) buffer:
                                     # "all" (HIL-SERL) or "successful" (those the reward called a success
                                     # in; the replay keeps every row: runtime/takeover_prior.py)
    prior_takeover_climbs: bool = True  # false: the rows where the operator raises an open hand stay
                                     # out of the prior (kept in the replay); arm end-effector actions only
    takeover_penalty: float | None = None  # set: the policy's last step before each takeover is stored
                                     # terminal with this taken off its reward (RLIF; unset: off;
                                     # runtime/takeover_penalty.py)
    robot_demos: int = 0             # demos the emulated operator records on the robot at the start
                                     # (teleop path, RUN/robot_demos), RLPD prior data with prior_data
    demo_episodes: int = 0           # CarLap on the emulated car: episodes the emulated operator drives
                                     # through the gamepad before the learner starts (RUN/demos);
                                     # prior_data = "demos" keeps them (runtime/finetune_car.py)
    truth_url: str = ""              # ground-truth poses for reports (set for an emulated robot)
    sim_env_kwargs: dict = field(default_factory=dict)  # the learner's sim twin (spaces, prior data)
    sim_params: str = ""             # the sim twin's fitted physics (`robolearn calibrate-sim --out FILE`):
                                     # its prior data then moves like the robot; the robot env is untouched


@dataclass
class LaunchConfig:
    env: str = "robolearn/ArmReach-v0"
    algo: str = "sac"
    seed: int = 0
    obs: str = "state"
    max_episode_steps: int | None = None
    actors: int = 1                  # how many actor processes `launch` starts
    out: str | None = None           # run folder (default runs/<env>-<algo>-async-s<seed>)
    keys: str | None = None          # CurveZMQ key folder from `robolearn keygen` (None: plain TCP)
    env_kwargs: dict = field(default_factory=dict)
    reality_gap: dict = field(default_factory=dict)  # [reality_gap] table, applied on the actors' envs
    sim_params: str | None = None    # fitted sim physics (`robolearn calibrate-sim --out FILE`)
    reward: dict = field(default_factory=dict)  # [reward] table (robolearn.rewards.serving.RewardConfig)
    replay: dict = field(default_factory=dict)  # [replay] prior_runs / prior_fraction (RaE), as in train
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    finetune: FinetuneConfig | None = None  # [finetune] table: a `robolearn finetune` session
    cluster: ClusterConfig = field(default_factory=ClusterConfig)

    def drives_hardware(self) -> bool:
        """An actor of this launch file drives a robot (a real backend or a serial port): under
        Ray it is pinned to its robot's node and never restarted blindly."""
        kw = self.env_kwargs
        return kw.get("backend") == "real" or bool(kw.get("port"))

    def run_dir(self) -> Path:
        if self.out:
            return Path(self.out)
        return Path("runs") / f"{self.env.split('/')[-1]}-{self.algo}-async-s{self.seed}"

    def validate(self) -> "LaunchConfig":
        lc, ac = self.learner, self.actor
        _int_at_least(self, "actors", 1)
        _int_at_least(self, "seed", 0)
        for name in ("port", "weights_port"):
            v = getattr(lc, name)
            if not isinstance(v, int) or not 0 <= v <= 65535:
                raise ConfigError(f"learner.{name}={v!r}: must be a TCP port (0 = pick a free one)")
        for name in ("total_env_steps", "checkpoint_every", "eval_episodes", "buffer_size",
                     "eval_every", "policy_snapshot_every"):
            _int_at_least(lc, name, 0, "learner.")
        for name in ("publish_every", "threads", "max_message_bytes"):
            _int_at_least(lc, name, 1, "learner.")
        for name in ("send_batch", "outbox", "threads", "max_message_bytes"):
            _int_at_least(ac, name, 1, "actor.")
        _int_at_least(ac, "max_steps", 0, "actor.")
        if lc.pace not in PACES:
            raise ConfigError(f"learner.pace={lc.pace!r}: choose one of {', '.join(PACES)}")
        if ac.on_learner_lost not in LOST_POLICIES:
            raise ConfigError(f"actor.on_learner_lost={ac.on_learner_lost!r}: choose one of "
                              f"{', '.join(LOST_POLICIES)}")
        if ac.loop_hz is not None and (not isinstance(ac.loop_hz, (int, float)) or ac.loop_hz < 0):
            raise ConfigError(f"actor.loop_hz={ac.loop_hz!r}: must be >= 0 (0 = unpaced)")
        for obj, prefix, names in ((ac, "actor.", ("flush_s", "heartbeat_s", "learner_timeout_s",
                                                     "camera_outage_s")),
                                   (lc, "learner.", ("actor_timeout_s", "metrics_every_s"))):
            for name in names:
                v = getattr(obj, name)
                if not isinstance(v, (int, float)) or v <= 0:
                    raise ConfigError(f"{prefix}{name}={v!r}: must be a positive number of seconds")
        if self.replay:
            from robolearn.policies.train_config import replay_options

            replay_options(self.replay)
        cc = self.cluster
        if cc.engine not in ENGINES:
            raise ConfigError(f"cluster.engine={cc.engine!r}: choose one of {', '.join(ENGINES)}")
        _int_at_least(cc, "max_restarts", 0, "cluster.")
        _int_at_least(cc, "envs_per_actor", 1, "cluster.")
        for name in ("actor_cpus", "learner_cpus"):
            _number_in(cc, name, 0.0, math.inf, "cluster.")
        if cc.learner_gpu not in ("auto", "always", "never"):
            raise ConfigError(f"cluster.learner_gpu={cc.learner_gpu!r}: choose auto, always or never")
        if not isinstance(cc.robot, str) and not (
                isinstance(cc.robot, list) and all(isinstance(x, str) and x for x in cc.robot)):
            raise ConfigError(f"cluster.robot={cc.robot!r}: a robot id or a list of ids, one per actor")
        if cc.envs_per_actor > 1 and self.drives_hardware():
            raise ConfigError("cluster.envs_per_actor > 1 is for simulated envs; an actor that drives "
                              "a robot has exactly one env")
        calibrating_reward = self.finetune is not None and self.finetune.calibrate_reward is True
        if self.reward:
            from robolearn.reward_config import reward_config

            # calibrate_reward makes the model: the table may hold only its options until then
            made = {"model": "(calibrate_reward)"}
            if calibrating_reward and "ArmPush" in self.env:
                made["kind"] = "cube_finder"
            reward_config({**made, **self.reward} if calibrating_reward else self.reward, "[reward]")
        if self.finetune is not None:
            ft = self.finetune
            if ft.warm_start not in WARM_STARTS:
                raise ConfigError(f"finetune.warm_start={ft.warm_start!r}: choose one of "
                                  f"{', '.join(WARM_STARTS)}")
            if ft.eval_actions not in EVAL_ACTIONS:
                raise ConfigError(f"finetune.eval_actions={ft.eval_actions!r}: choose one of {', '.join(EVAL_ACTIONS)}")
            if ft.final_policy not in FINAL_POLICIES:
                raise ConfigError(f"finetune.final_policy={ft.final_policy!r}: choose one of "
                                  f"{', '.join(FINAL_POLICIES)}")
            _int_at_least(ft, "snapshot_every", 1, "finetune.")
            from robolearn.runtime.takeover_prior import MODES as TAKEOVER_MODES

            if ft.prior_takeovers not in TAKEOVER_MODES:
                raise ConfigError(f"finetune.prior_takeovers={ft.prior_takeovers!r}: choose one of "
                                  f"{', '.join(TAKEOVER_MODES)}")
            if not isinstance(ft.prior_takeover_climbs, bool):
                raise ConfigError(f"finetune.prior_takeover_climbs={ft.prior_takeover_climbs!r}: true or false")
            if ft.takeover_penalty is not None and (
                    isinstance(ft.takeover_penalty, bool) or not isinstance(ft.takeover_penalty, (int, float))
                    or not math.isfinite(ft.takeover_penalty) or ft.takeover_penalty < 0):
                raise ConfigError(f"finetune.takeover_penalty={ft.takeover_penalty!r}: a number >= 0 (the "
                                  "reward taken off the policy's step into a takeover), or leave it out")
            if ft.final_policy == "reward" and not ft.record:
                raise ConfigError("finetune.final_policy = \"reward\" chooses by the recorded episodes: "
                                  "set record = true")
            if not isinstance(ft.pretraining_replay, bool):
                raise ConfigError(f"finetune.pretraining_replay={ft.pretraining_replay!r}: true or false")
            if ft.pretraining_replay and ft.warm_start != "rlpd":
                raise ConfigError("finetune.pretraining_replay samples the pretraining run's replay beside the "
                                  "rlpd prior data: it needs warm_start = \"rlpd\"")
            if ft.load not in LOADS:
                raise ConfigError(f"finetune.load={ft.load!r}: choose one of {', '.join(LOADS)}")
            for name in ("warmup_episodes", "zero_shot_episodes", "final_episodes"):
                _int_at_least(ft, name, 0, "finetune.")
            if (isinstance(ft.robot_minutes, bool) or not isinstance(ft.robot_minutes, (int, float))
                    or not 0 <= ft.robot_minutes < 1e6):
                raise ConfigError(f"finetune.robot_minutes={ft.robot_minutes!r}: minutes of robot time for the "
                                  "whole session (e.g. 29), or 0 for no budget")
            _number_in(ft, "final_time_margin", 0.5, 5.0, "finetune.")
            if not isinstance(ft.calibrate_arm, bool):
                raise ConfigError(f"finetune.calibrate_arm={ft.calibrate_arm!r}: true or false")
            if not isinstance(ft.calibrate_perception, bool):
                raise ConfigError(f"finetune.calibrate_perception={ft.calibrate_perception!r}: true or false")
            _int_at_least(ft, "perception_cycles", 2, "finetune.")
            if not isinstance(ft.calibrate_reward, bool):
                raise ConfigError(f"finetune.calibrate_reward={ft.calibrate_reward!r}: true or false")
            if ft.calibrate_reward and not (ft.calibrate_perception and any(t in self.env for t in CALIBRATED_REWARD_ENVS)):
                raise ConfigError("finetune.calibrate_reward makes the reward from the camera calibration (ArmLift: "
                                  "a success classifier on its frames; ArmPush: the task's reward at the cube "
                                  "finder's position): it needs env ArmLift or ArmPush and calibrate_perception = true")
            allowed = CALIBRATED_REWARD_OPTIONS if "ArmLift" in self.env else CALIBRATED_PUSH_REWARD_OPTIONS
            if ft.calibrate_reward and set(self.reward) - allowed:
                raise ConfigError("finetune.calibrate_reward makes the [reward] model; the [reward] table may "
                                  f"only set {', '.join(sorted(allowed)) or 'nothing'} beside it (it has "
                                  f"{', '.join(sorted(set(self.reward) - allowed))}), or set "
                                  "calibrate_reward = false to use your own model")
            if ft.calibrate_perception and not any(t in self.env for t in ("ArmLift", "ArmPush")):
                raise ConfigError("finetune.calibrate_perception is for the cube tasks (ArmLift, ArmPush): "
                                  f"the arm moves the cube to calibrate the camera; {self.env} has none")
            if ft.calibrate_arm and not self.env.split("/")[-1].startswith("Arm"):
                raise ConfigError(f"finetune.calibrate_arm is for servo arms; {self.env} is not one")
            if not isinstance(ft.label_successes, bool):
                raise ConfigError(f"finetune.label_successes={ft.label_successes!r}: true or false")
            if ft.label_successes:
                _labelling_options(self)
            _check_operator(self)
            _int_at_least(ft, "demo_episodes", 0, "finetune.")
            if ft.demo_episodes and "CarLap" not in self.env:
                raise ConfigError("finetune.demo_episodes: the emulated gamepad operator drives the car "
                                  f"(CarLap); {self.env} records demonstrations with `finetune --record`")
            if ft.prior_data == "demos" and not ft.demo_episodes:
                raise ConfigError("finetune.prior_data = \"demos\" keeps the session's demonstration laps: "
                                  "set finetune.demo_episodes >= 1")
            if ft.warm_start == "rlpd" and not ft.prior_data:
                raise ConfigError("finetune.warm_start = \"rlpd\" keeps prior data 50/50: set "
                                  "finetune.prior_data (sim:N, a dataset folder, .npz or scripted:N)")
            if not isinstance(ft.sim_params, str):
                raise ConfigError(f"finetune.sim_params={ft.sim_params!r}: a path to a calibrate-sim TOML")
            if ft.sim_params:
                from robolearn.sim.sysid import load_sim_params

                load_sim_params(ft.sim_params)  # missing or bad: a ConfigError naming the file
            if self.sim_params and (ft.reality or self.drives_hardware()):
                raise ConfigError(f"sim_params = {self.sim_params!r} sets the physics of the actors' envs, which "
                                  "in a finetune session are the robot's: put it under [finetune] "
                                  "(finetune.sim_params) for the learner's sim twin")
        if lc.host not in ("127.0.0.1", "localhost") and not self.keys:
            raise ConfigError(f"learner.host={lc.host!r} exposes the learner beyond this machine "
                              "without encryption; set keys = DIR (from `robolearn keygen DIR`) "
                              "or bind 127.0.0.1")
        return self


def _labelling_options(cfg: "LaunchConfig") -> None:
    """Checks of the operator-label options: they need a camera classifier in the loop."""
    ft = cfg.finetune
    if not (cfg.reward.get("model") or ft.calibrate_reward) or cfg.reward.get("kind") not in (None, "classifier"):
        raise ConfigError("finetune.label_successes retrains the success classifier: give a [reward] model "
                          "(a classifier folder) or calibrate_reward = true")
    if cfg.reward.get("where", "env") != "env":
        raise ConfigError("finetune.label_successes asks about the frames the reward judged in the control "
                          "loop: set [reward] where = \"env\"")
    for name, low, high in (("label_others", 0.0, 1.0), ("operator_error_rate", 0.0, 0.49),
                            ("label_confidence", 0.51, 1.0)):
        _number_in(ft, name, low, high, "finetune.")
    _int_at_least(ft, "retrain_every", 1, "finetune.")
    _int_at_least(ft, "retrain_epochs", 0, "finetune.")
    for name in ("retrain_every_s", "label_timeout_s"):
        _number_in(ft, name, 0.0, math.inf, "finetune.")
def _check_operator(cfg: LaunchConfig) -> None:
    """[finetune] intervene / robot_demos: the emulated operator needs an emulated lift robot
    (its eyes are the emulator's truth, its hands drive the scripted lift)."""
    ft = cfg.finetune
    _int_at_least(ft, "robot_demos", 0, "finetune.")
    if ft.intervene not in ("", "operator"):
        raise ConfigError(f"finetune.intervene={ft.intervene!r}: \"operator\" (the emulated operator) or "
                          "\"\"; a person at a physical arm takes over with [actor] intervene = DEVICE")
    if ft.intervene_options and not ft.intervene:
        raise ConfigError("finetune.intervene_options without finetune.intervene = \"operator\"")
    if ft.intervene_options:
        import dataclasses as dc

        from robolearn.configs import check_keys
        from robolearn.teleop.intervening_operator import InterveneConfig

        check_keys(ft.intervene_options, {f.name for f in dc.fields(InterveneConfig)} - {"truth_url", "seed"},
                   "finetune.intervene_options")
        InterveneConfig(**ft.intervene_options).check()
    for name, on in (("intervene", bool(ft.intervene)), ("robot_demos", ft.robot_demos > 0)):
        if not on:
            continue
        if not (ft.reality or ft.truth_url):
            raise ConfigError(f"finetune.{name}: the emulated operator sees the emulator's truth; set "
                              "finetune.reality (an emulated robot); at a physical arm a person "
                              "takes over with [actor] intervene = DEVICE and records demos with "
                              "`robolearn finetune LAUNCH --record DIR`")
        if "ArmLift" not in cfg.env:
            raise ConfigError(f"finetune.{name}: the emulated operator drives the lift (ArmLift); "
                              f"{cfg.env} has no operator")
    if ft.intervene and cfg.actor.intervene:
        raise ConfigError("finetune.intervene and actor.intervene both set: one device takes over")
    if ft.robot_demos:
        if ft.warm_start != "rlpd":
            raise ConfigError("finetune.robot_demos are RLPD prior data: set warm_start = \"rlpd\"")
        if cfg.reward and cfg.reward.get("where") in ("learner", "server"):
            raise ConfigError("finetune.robot_demos need rewards as they are recorded: [reward] "
                              "where = \"env\" (the learner labels only streamed transitions)")


def _number_in(obj, name: str, low: float, high: float, prefix: str = "") -> None:
    """A numeric option within [low, high] (a bool is not a number here)."""
    v = getattr(obj, name)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not low <= v <= high:
        bound = f">= {low:g}" if high == math.inf else f"in [{low:g}, {high:g}]"
        raise ConfigError(f"{prefix}{name}={v!r}: must be a number {bound}")


def _int_at_least(obj, name: str, low: int, prefix: str = "") -> None:
    v = getattr(obj, name)
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
        raise ConfigError(f"{prefix}{name}={v!r}: must be an integer >= {low}")


def _build(cls, data: Any, where: str):
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a table of key = value pairs")
    known = {f.name for f in dataclasses.fields(cls)}
    check_keys(data, known, where)
    kwargs = dict(data)
    for name, sub in (("learner", LearnerConfig), ("actor", ActorConfig),
                      ("finetune", FinetuneConfig), ("cluster", ClusterConfig)):
        if name in known and name in kwargs:
            kwargs[name] = _build(sub, kwargs[name], f"{where} [{name}]")
    for name in ("env_kwargs", "agent", "reality_gap", "reward", "sim_env_kwargs", "intervene_options"):
        if name in kwargs and not isinstance(kwargs[name], dict):
            raise ConfigError(f"{where}: {name} must be a table")
    return cls(**kwargs)


def config_from_dict(data: dict, source: str = "config") -> LaunchConfig:
    return _build(LaunchConfig, data, source).validate()


def load_launch(path: str | Path) -> LaunchConfig:
    """Read a launch TOML into a validated LaunchConfig (ConfigError names the problem)."""
    data = read_toml(path, example="launch/sim_arm_reach_async.toml")
    return config_from_dict(data, source=f"launch file {path}")


def to_dict(cfg: LaunchConfig) -> dict:
    return dataclasses.asdict(cfg)
