"""The SAC-family learner's options (`AgentConfig`) and the check of spaces against them."""
from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from robolearn.env import PRIVILEGED_KEY
from robolearn.errors import ConfigError

PRIVILEGED_MODES = ("none", "critic", "actor_and_critic")
NETWORKS = ("mlp", "simba")
ACTORS = ("gaussian", "flow")
CPU_MATMULS = ("onednn", "bf16", "torch")
CPU_UPDATES = ("autograd", "manual")
FLOW_VARIANTS = ("gated",)  # Flow-G; Flow-T (a Transformer decoder over the K steps) is not built yet


@dataclass
class AgentConfig:
    """Every learner option, with SAC's defaults. Presets in `registry.py` override a few."""

    algo: str = "sac"
    # --- networks
    actor_hidden: tuple[int, ...] = (256, 256)
    critic_hidden: tuple[int, ...] = (256, 256)  # CrossQ: wide (2048, 2048)
    #: "mlp" (the hidden sizes above) or "simba": residual pre-LayerNorm blocks with a running
    #: observation normaliser (Lee et al. 2024); width/blocks below are the paper's defaults
    network: str = "mlp"
    simba_actor_width: int = 128
    simba_actor_blocks: int = 1
    simba_critic_width: int = 512
    simba_critic_blocks: int = 2
    #: the policy: "gaussian" (tanh-squashed Gaussian) or "flow" (SAC Flow, Zhang et al. 2025:
    #: a K-step gated flow with a noise-augmented rollout, its MLPs sized by actor_hidden)
    actor: str = "gaussian"
    flow_steps: int = 4  # K, the flow's steps (the paper's from-scratch setting)
    flow_variant: str = "gated"  # Flow-G (GRU-style gated velocity)
    #: offline-to-online: weight of a flow-matching behaviour-cloning term on the prior-data part
    #: of every batch (demos, interventions, earlier runs), added to the flow actor's SAC loss;
    #: 0 = pure SAC Flow (from scratch). Multimodal demos give a multimodal flow only through it.
    flow_bc_weight: float = 0.0
    #: the Gaussian actor's behaviour-cloning anchor (TD3+BC-style): weight of the squared error
    #: between its deterministic action and the action of each row drawn from the prior buffer
    #: (demos, sim prior data, the takeovers `prior_takeovers` let in; with no prior buffer, the
    #: replay's driven rows), added to the SAC actor loss. Fine-tuning a
    #: loaded actor beside a fresh critic: without it the new critic's early Q gradients unlearn
    #: the actor (docs/finetune.md, "Keeping the pretrained actor"). 0 = off.
    bc_weight: float = 0.0
    #: the anchor eased off once the critic has learned: bc_weight until update
    #: bc_decay_updates[0], then linearly to bc_weight_final at bc_decay_updates[1], held after.
    #: None = bc_weight all run. Why: at 10 the anchor pulls the actor ~30x harder than the
    #: critic, so a fine-tuned actor stays a clone of the operator and stops improving once it
    #: has cloned them (lift sessions 48-55: flat after ~1000 env steps; stop 67).
    bc_weight_final: float | None = None
    bc_decay_updates: tuple[int, ...] = (0, 0)
    num_critics: int = 2  # ensemble size N
    num_target_min: int = 2  # REDQ's M: target = min over a random subset of M critics
    actor_q: str = "min"  # reduce the ensemble for the actor loss: "min" (SAC) or "mean" (REDQ)
    critic_layer_norm: bool = False  # DroQ, RLPD
    critic_dropout: float = 0.0  # DroQ: 0.01
    critic_batch_renorm: bool = False  # CrossQ
    actor_batch_renorm: bool = False  # CrossQ (sbx): BatchRenorm before every actor layer
    renorm_momentum: float = 0.01
    renorm_warmup: int = 100_000  # updates of plain BatchNorm before renorm corrections
    target_network: bool = True  # CrossQ: False (current+next (s,a) in one critic batch)
    tau: float = 0.005
    # --- optimisation
    gamma: float = 0.99
    n_step: int = 1
    batch_size: int = 256
    utd: int = 1  # gradient updates per env step (the caller loops)
    policy_delay: int = 1  # actor/temperature step every this many critic steps; 0 = utd
    actor_frozen_updates: int = 0  # the first N updates train the critic only (fine-tuning a loaded
    # actor beside a fresh critic: its first Q gradients are noise that unlearns the actor)
    learning_starts: int = 1000  # env steps of uniform-random actions before updates begin
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    temperature_lr: float = 3e-4
    adam_beta1: float = 0.9  # CrossQ: 0.5
    init_temperature: float = 0.1  # pytorch_sac/DrQ's value; 1.0 drowns O(1) rewards for ~10k updates
    target_entropy_scale: float = 1.0  # target entropy = -scale * |A|
    #: the first N action dims carry SAC's entropy (the bonus and the temperature's target,
    #: -scale * N); 0 = all. Why: a saturated tanh dim (an arm's gripper, a button held at +-1)
    #: has an entropy that falls without bound, so it pays the whole target while the other dims
    #: stay as noisy as they like. HIL-SERL keeps its gripper out of the entropy the same way (a
    #: separate discrete critic). docs/finetune.md, "The sampled policy's noise".
    entropy_dims: int = 0
    #: cap on the Gaussian actor's std (before the tanh), None = the network's own bound (e^2).
    #: Why: the BC anchor holds only the mean, and a fresh critic's Q can pay a wider spread, so
    #: fine-tuning can blow the spread up to random +-1 actions: lift session 27's actor went from
    #: std 0.4-0.5 near the cube to 1.2-3.5 within 600 env steps and kept y at 0.7-1.7 all session,
    #: the operator taking over 28 of every 32 episodes (docs/finetune.md, "The sampled policy's noise")
    max_std: float | None = None
    backup_entropy: bool = True  # include -alpha*log pi in the TD target
    grad_clip: float = 0.0  # max global grad norm; 0 = off
    normalize_obs: bool = False  # running mean/std of the state vector (travels with the policy)
    # --- data
    prior_fraction: float = 0.0  # RLPD: 0.5 of every batch from prior data/demos
    replay_capacity: int = 1_000_000
    # --- pixels (DrQ)
    pixels: bool = False  # use camera keys through a conv encoder
    encoder: str = "conv"  # DrQ-style conv net (only choice for now)
    encoder_checkpoint: str = ""  # local .safetensors to initialise the encoder from
    freeze_encoder: bool = False  # keep a pretrained encoder fixed
    feature_dim: int = 50
    encoder_filters: int = 32
    encoder_layers: int = 4
    augment_pad: int = 4  # random shift in pixels; 0 = no augmentation
    # --- asymmetric actor-critic (see sac.py's module docstring)
    privileged: str = "none"  # "none" | "critic" | "actor_and_critic" (sim-only, not deployable)
    # --- placement
    device: str = "cpu"
    cuda_graph: bool = True  # on CUDA: replay each update as one captured CUDA graph
    check_every: int = 0  # read metrics + NaN check every this many updates; 0 = auto (CPU 1, GPU 100)
    # CPU fp32 linear layers: "onednn" (oneDNN inner product, forward and backward, ReLU fused;
    # ~2x F.linear/bmm here, see policies/onednn.py) or "torch" (F.linear / baddbmm). Default
    # "torch" until every published learning table is re-measured on oneDNN (same learning
    # within noise on 8 ArmReach seeds, but not the same numbers: docs/learners.md).
    # "bf16": the oneDNN path with the update's products in bf16 (fp32 master weights, Adam
    # state, heads, log-probs and TD targets; acting stays fp32); an option until learning
    # curves on ArmReach, ArmPush and dmc cheetah-run match fp32 (docs/learners.md)
    cpu_matmul: str = "torch"
    # CPU update: "autograd" (the losses' backward), or "manual": the same update with its
    # gradients written out by hand (policies/manual_update.py: no autograd graph, fused bias
    # and ReLU, Adam's kernel called directly); MLP nets with a target network (sac, redq,
    # droq, rlpd; not pixels, SimBa, batch renorm, flow), fp32 (cpu_matmul "torch" or
    # "onednn"). Same equations and random draws; fp32 summation order differs (docs/learners.md)
    cpu_update: str = "autograd"

    def bc_weight_at(self, update: int) -> float:
        """The anchor's weight at gradient update `update` (1-based): `bc_weight`, eased linearly
        to `bc_weight_final` over `bc_decay_updates` when that is set."""
        if self.bc_weight_final is None:
            return float(self.bc_weight)
        start, end = self.bc_decay_updates
        if update <= start:
            return float(self.bc_weight)
        if update >= end:
            return float(self.bc_weight_final)
        frac = (update - start) / (end - start)
        return float(self.bc_weight + frac * (self.bc_weight_final - self.bc_weight))

    def validate(self) -> "AgentConfig":
        def need(cond, msg):
            if not cond:
                raise ConfigError(f"{self.algo}: {msg}")

        need(self.num_critics >= 1, f"num_critics={self.num_critics} must be >= 1")
        need(1 <= self.num_target_min <= self.num_critics,
             f"num_target_min={self.num_target_min} must be in [1, num_critics={self.num_critics}]")
        need(self.actor_q in ("min", "mean"), f"actor_q={self.actor_q!r}: choose 'min' or 'mean'")
        need(0.0 <= self.critic_dropout < 1.0, f"critic_dropout={self.critic_dropout} must be in [0, 1)")
        need(0.0 < self.tau <= 1.0, f"tau={self.tau} must be in (0, 1]")
        need(0.0 <= self.gamma <= 1.0, f"gamma={self.gamma} must be in [0, 1]")
        need(self.policy_delay >= 0, f"policy_delay={self.policy_delay} must be >= 0 (0 = every utd)")
        need(int(self.actor_frozen_updates) >= 0, f"actor_frozen_updates={self.actor_frozen_updates} must be >= 0")
        for k in ("n_step", "batch_size", "utd", "replay_capacity", "feature_dim",
                  "encoder_filters", "encoder_layers"):
            need(int(getattr(self, k)) >= 1, f"{k}={getattr(self, k)} must be >= 1")
        need(self.cpu_matmul in CPU_MATMULS,
             f"cpu_matmul={self.cpu_matmul!r}: choose one of {', '.join(map(repr, CPU_MATMULS))}")
        need(self.cpu_update in CPU_UPDATES,
             f"cpu_update={self.cpu_update!r}: choose one of {', '.join(map(repr, CPU_UPDATES))}")
        need(self.check_every >= 0, f"check_every={self.check_every} must be >= 0 (0 = auto)")
        need(self.learning_starts >= 0, f"learning_starts={self.learning_starts} must be >= 0")
        for k in ("actor_lr", "critic_lr", "temperature_lr", "init_temperature"):
            need(getattr(self, k) > 0, f"{k}={getattr(self, k)} must be > 0")
        need(0.0 <= self.adam_beta1 < 1.0, f"adam_beta1={self.adam_beta1} must be in [0, 1)")
        need(0.0 <= self.prior_fraction <= 1.0, f"prior_fraction={self.prior_fraction} must be in [0, 1]")
        need(self.encoder in ("conv",), f"encoder={self.encoder!r}: choose 'conv'")
        need(self.network in NETWORKS, f"network={self.network!r}: choose one of {', '.join(map(repr, NETWORKS))}")
        if self.network == "simba":
            for k in ("simba_actor_width", "simba_actor_blocks", "simba_critic_width", "simba_critic_blocks"):
                need(int(getattr(self, k)) >= 1, f"{k}={getattr(self, k)} must be >= 1")
        need(self.actor in ACTORS, f"actor={self.actor!r}: choose one of {', '.join(map(repr, ACTORS))}")
        if self.actor == "flow":
            need(self.flow_steps >= 1, f"flow_steps={self.flow_steps} must be >= 1")
            need(self.flow_variant in FLOW_VARIANTS,
                 f"flow_variant={self.flow_variant!r}: choose one of {', '.join(map(repr, FLOW_VARIANTS))} "
                 "(Flow-T, the Transformer variant, is not implemented)")
            need(not self.actor_batch_renorm,
                 "actor='flow' has no batch renormalisation, and this preset puts BatchRenorm in its "
                 "actor (actor_batch_renorm=True, crossq): set actor='gaussian', or "
                 "actor_batch_renorm=false to run crossq's critic with a flow actor")
            need(self.flow_bc_weight >= 0, f"flow_bc_weight={self.flow_bc_weight} must be >= 0")
            need(self.network == "mlp",
                 f"actor='flow' builds its velocity and noise networks as MLPs (actor_hidden); "
                 f"network={self.network!r} has no flow actor: set actor='gaussian' or network='mlp'")
        need(self.actor == "flow" or not self.flow_bc_weight,
             f"flow_bc_weight={self.flow_bc_weight} is the flow actor's behaviour-cloning term: set "
             "actor='flow', or flow_bc_weight=0 for the Gaussian actor")
        need(self.bc_weight >= 0, f"bc_weight={self.bc_weight} must be >= 0")
        need(self.bc_weight_final is None or (isinstance(self.bc_weight_final, (int, float))
                                              and not isinstance(self.bc_weight_final, bool)
                                              and self.bc_weight_final >= 0),
             f"bc_weight_final={self.bc_weight_final!r} must be a number >= 0 (or unset: bc_weight all run)")
        need(self.bc_weight_final is None or self.bc_weight > 0,
             f"bc_weight_final={self.bc_weight_final} eases the anchor off bc_weight, which is 0: set bc_weight")
        decay = tuple(self.bc_decay_updates)
        need(len(decay) == 2 and all(isinstance(u, int) and not isinstance(u, bool) for u in decay)
             and 0 <= decay[0] <= decay[1],
             f"bc_decay_updates={list(decay)} must be [start, end] gradient updates, 0 <= start <= end")
        need(isinstance(self.entropy_dims, int) and not isinstance(self.entropy_dims, bool)
             and self.entropy_dims >= 0, f"entropy_dims={self.entropy_dims!r} must be an integer >= 0 (0: all dims)")
        need(self.max_std is None or (isinstance(self.max_std, (int, float)) and not isinstance(self.max_std, bool)
                                      and 0 < self.max_std < float("inf")),
             f"max_std={self.max_std!r} must be a number > 0 or unset")
        need(self.actor == "gaussian" or self.max_std is None,
             f"max_std={self.max_std} caps the Gaussian actor's std; the flow actor has none: unset it")
        need(self.actor == "gaussian" or not self.entropy_dims,
             f"entropy_dims={self.entropy_dims} selects dims of the Gaussian actor's entropy; the flow "
             "actor's log-density does not split by dim: set entropy_dims=0")
        need(self.actor == "gaussian" or not self.bc_weight,
             f"bc_weight={self.bc_weight} anchors the Gaussian actor's mean; the flow actor's "
             "behaviour-cloning term is flow_bc_weight")
        need(self.augment_pad >= 0, f"augment_pad={self.augment_pad} must be >= 0")
        need(self.privileged in PRIVILEGED_MODES,
             f"privileged={self.privileged!r}: choose one of {', '.join(map(repr, PRIVILEGED_MODES))}")
        need(self.critic_batch_renorm or self.target_network,
             "target_network=False needs critic_batch_renorm=True (CrossQ); plain critics "
             "without target networks diverge")
        if not str(self.device).startswith(("cpu", "cuda", "mps")):
            raise ConfigError(f"device={self.device!r}: use 'cpu', 'cuda', 'cuda:N' or 'mps'")
        return self

    @property
    def actor_every(self) -> int:
        """Critic updates per actor/temperature update (policy_delay, or utd when 0)."""
        return int(self.policy_delay or self.utd)


def _check_spaces(observation_space, action_space, cfg: AgentConfig) -> tuple[str | None, list[str]]:
    if not isinstance(observation_space, gym.spaces.Dict):
        raise ConfigError("observation_space must be a gymnasium Dict (robolearn envs are); wrap "
                          f"other envs so obs is {{'state': vector}}; got {type(observation_space).__name__}")
    if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
        raise ConfigError(f"action_space must be a 1-D Box, got {action_space}")
    if not (np.allclose(action_space.low, -1) and np.allclose(action_space.high, 1)):
        raise ConfigError(f"action_space bounds are [{action_space.low}, {action_space.high}]; the "
                          "learner emits [-1, 1]: wrap the env in gymnasium.wrappers.RescaleAction(env, -1, 1)")
    state_key, images = None, []
    for k, s in observation_space.spaces.items():
        if k == PRIVILEGED_KEY:  # read only by the asymmetric critic (cfg.privileged)
            continue
        if not isinstance(s, gym.spaces.Box):
            raise ConfigError(f"observation {k!r} is a {type(s).__name__}; only Box spaces are supported")
        if s.dtype == np.uint8 and len(s.shape) == 3:
            images.append(k)
        elif len(s.shape) == 1 and state_key is None:
            state_key = k
        else:
            raise ConfigError(f"observation {k!r} has shape {s.shape} {s.dtype}: expected one float "
                              "vector ('state') and uint8 HxWxC camera images")
    if images and not cfg.pixels:
        raise ConfigError(f"observations include camera images {images}: use algo 'drq' or pass "
                          "pixels=True (or make the env with obs='state')")
    if cfg.pixels and not images:
        raise ConfigError(f"pixels=True but the observation space {list(observation_space.spaces)} "
                          "has no uint8 HxWxC camera image; make the env with obs='pixels' or 'both'")
    if state_key is None and not images:
        raise ConfigError("observation space has neither a state vector nor camera images")
    return state_key, images
