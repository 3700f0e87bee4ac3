"""One SAC-family learner whose options reproduce SAC, REDQ, DroQ, CrossQ, RLPD and DrQ.

Why one class: the papers differ in a handful of knobs (ensemble size and target subset,
dropout/LayerNorm/batch-renorm in the critic, target networks or not, UTD and policy delay,
prior-data mixing, a conv encoder with augmentation), and the SERL lesson is that these
details, not the algorithm's name, decide whether it works. `registry.py` names the presets.

Contract (used by the training loop, the runtime and teleop):
- `act(obs, deterministic)`: one unbatched dict obs -> float32 action in [-1, 1];
- `update(batch)`: ONE critic gradient step (+ actor and temperature every `policy_delay`
  updates, or once per env step = every `utd` updates when policy_delay is 0); the caller runs it `config.utd` times per env step; NaN/inf -> TrainingError
  naming the update number;
- `state_dict()/load_state_dict()`: everything for an exact resume (nets, targets, optimisers,
  counters, RNG); `policy_state()/load_policy_state()`: flat tensors `act` needs.

Asymmetric actor-critic (`privileged`): with "critic" the critics also read the env's
`privileged` observation (simulator truth such as the cube pose, present only in sim with
`privileged_obs=True`) while the actor reads state/pixels only, so the trained policy acts
where `privileged` does not exist (hardware): an Agent built for a space without it can act
and load weights but not learn. "actor_and_critic" feeds it to the actor too: a sim-only study
mode whose policies cannot run on hardware.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import math

import gymnasium as gym
import numpy as np
import torch

from robolearn.data.replay import Batch
from robolearn.env import PRIVILEGED_KEY
from robolearn.errors import ConfigError, DatasetError, TrainingError
from robolearn.policies import manual_update
from robolearn.policies.agent_config import AgentConfig, _check_spaces
from robolearn.policies.cpu import keep_freed_memory
from robolearn.policies.encoders import PixelEncoder, random_shift
from robolearn.policies.cuda_graph import GraphedUpdate
from robolearn.policies.device_sampling import check_device
from robolearn.policies.networks import Actor, Critic, FlowActor, RunningNorm, detached_alias
from robolearn.policies.onednn import bf16_region, use_onednn


class Agent:
    """The SAC-family learner (see module docstring for the contract)."""

    def __init__(self, observation_space: gym.spaces.Dict, action_space: gym.spaces.Box,
                 config: AgentConfig | None = None, seed: int = 0):
        self.config = cfg = (config or AgentConfig()).validate()
        self.seed = int(seed)
        self.device = check_device(cfg.device)  # `cuda` without a GPU: one clear line
        if self.device.type == "cpu":
            keep_freed_memory()  # big ensemble activations: reuse heap blocks, no page faults
        self.state_key, self.image_keys = _check_spaces(observation_space, action_space, cfg)
        priv_space = observation_space.spaces.get(PRIVILEGED_KEY)
        if cfg.privileged == "actor_and_critic" and priv_space is None:
            raise ConfigError(
                "privileged='actor_and_critic' is a sim-only study mode: its actor reads "
                f"obs[{PRIVILEGED_KEY!r}], which this env does not have (only backend='sim' with "
                "privileged_obs=True does). Such a policy cannot run on hardware; train with "
                "privileged='critic' for one that can")
        # width of the privileged input (0: none used); "critic" without it: act-only agent
        self.privileged_dim = int(priv_space.shape[0]) if (cfg.privileged != "none" and priv_space) else 0
        self.can_learn = not (cfg.privileged == "critic" and priv_space is None)
        self.actor_privileged = cfg.privileged == "actor_and_critic"
        self.action_dim = int(action_space.shape[0])
        if cfg.entropy_dims > self.action_dim:
            raise ConfigError(f"entropy_dims={cfg.entropy_dims}: the action has only {self.action_dim} dims")
        self.target_entropy = -cfg.target_entropy_scale * (cfg.entropy_dims or self.action_dim)
        self.num_updates = 0
        self.last_target_members: torch.Tensor | None = None
        # separate streams: acting never perturbs the update randomness (and vice versa)
        self.generator = torch.Generator(self.device).manual_seed(self.seed)
        self.act_generator = torch.Generator(self.device).manual_seed(self.seed + 1_000_003)

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            feat_dim = 0
            self.obs_norm = None
            if self.state_key:
                feat_dim += int(observation_space[self.state_key].shape[0])
                if cfg.normalize_obs:
                    self.obs_norm = RunningNorm(feat_dim).to(self.device)
            self.priv_norm = None
            if self.privileged_dim and cfg.normalize_obs:
                self.priv_norm = RunningNorm(self.privileged_dim).to(self.device)
            self.encoder = None
            if self.image_keys:
                shapes = {k: tuple(observation_space[k].shape) for k in self.image_keys}
                self.encoder = PixelEncoder(shapes, cfg.feature_dim, cfg.encoder_filters,
                                            cfg.encoder_layers).to(self.device)
                if cfg.encoder_checkpoint:
                    self.encoder.load_pretrained(cfg.encoder_checkpoint)
                # NHWC is the fast conv layout for oneDNN/cuDNN (~13% per update on CPU)
                self.encoder.to(memory_format=torch.channels_last)
                feat_dim += self.encoder.feature_dim
            actor_dim = feat_dim + (self.privileged_dim if self.actor_privileged else 0)
            brn = dict(momentum=cfg.renorm_momentum, warmup_steps=cfg.renorm_warmup)
            simba = cfg.network == "simba"
            if cfg.actor == "flow":  # SAC Flow (same sample/mode contract as the Gaussian)
                self.actor = FlowActor(actor_dim, self.action_dim, tuple(cfg.actor_hidden),
                                       steps=cfg.flow_steps, variant=cfg.flow_variant).to(self.device)
            else:
                self.actor = Actor(actor_dim, self.action_dim, tuple(cfg.actor_hidden),
                                   batch_renorm=brn if cfg.actor_batch_renorm else None,
                                   simba=(cfg.simba_actor_width, cfg.simba_actor_blocks) if simba else None,
                                   entropy_dims=cfg.entropy_dims,
                                   max_log_std=None if cfg.max_std is None else math.log(cfg.max_std)
                                   ).to(self.device)
            # eval mode except in the actor loss: acting and the TD target's next action read
            # running statistics (matters with actor_batch_renorm only)
            self.actor.train(False)
            self.critic = Critic(
                feat_dim + self.privileged_dim, self.action_dim, cfg.num_critics, tuple(cfg.critic_hidden),
                simba=(cfg.simba_critic_width, cfg.simba_critic_blocks) if simba else None,
                dropout=cfg.critic_dropout, layer_norm=cfg.critic_layer_norm,
                batch_renorm=cfg.critic_batch_renorm, renorm_momentum=cfg.renorm_momentum,
                renorm_warmup=cfg.renorm_warmup).to(self.device)
        # bf16: the update's products only (inside bf16_region in _learn); acting stays fp32
        self._bf16 = self.device.type == "cpu" and cfg.cpu_matmul == "bf16"
        if self.device.type == "cpu" and cfg.cpu_matmul in ("onednn", "bf16"):
            # before the alias and the target copy below, so they are on the same path
            use_onednn(self.actor, bf16=self._bf16)
            use_onednn(self.critic, bf16=self._bf16)
        self.critic.mlp.set_generator(self.generator)
        self._critic_frozen = detached_alias(self.critic)  # the actor loss's view of the critic
        self._critic_frozen.train(not cfg.critic_batch_renorm)
        self.critic_target = None
        if cfg.target_network:
            self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
            self.critic_target.mlp.set_generator(self.generator)
        self.log_alpha = torch.tensor(math.log(cfg.init_temperature), device=self.device,
                                      requires_grad=True)

        adam = dict(betas=(cfg.adam_beta1, 0.999), **_adam_impl(self.device))
        critic_params = list(self.critic.parameters())
        if self.encoder is not None and not cfg.freeze_encoder:
            critic_params += list(self.encoder.parameters())
        if self.encoder is not None and cfg.freeze_encoder:
            self.encoder.requires_grad_(False)
        # actor and temperature step together: one optimiser, one fused kernel call
        self.actor_opt = torch.optim.Adam(
            [{"params": list(self.actor.parameters()), "lr": cfg.actor_lr},
             {"params": [self.log_alpha], "lr": cfg.temperature_lr}], **adam)
        self.critic_opt = torch.optim.Adam(critic_params, lr=cfg.critic_lr, **adam)
        self._critic_params = list(self.critic.parameters())
        self._target_params = list(self.critic_target.parameters()) if self.critic_target else []
        self._grad_params = critic_params
        self._check_every = cfg.check_every or (1 if self.device.type == "cpu" else 100)
        self._graphs = (GraphedUpdate(self) if cfg.cuda_graph and self.device.type == "cuda"
                        and GraphedUpdate.supported() else None)
        self._manual = None
        if cfg.cpu_update == "manual":
            why = manual_update.unsupported_reason(self)
            if why is not None:
                raise ConfigError(
                    f"cpu_update='manual' writes out the gradients of MLP SAC-family agents on the "
                    f"CPU (sac, redq, droq, rlpd: fp32, target network); here {why}: set "
                    "cpu_update='autograd'")
            self._manual = manual_update.ManualUpdate(self)

    # -------------------------------------------------------------------------------- acting
    @property
    def alpha(self) -> float:
        return float(self.log_alpha.detach().exp())

    def _features(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = []
        if self.state_key:
            state = obs[self.state_key]
            parts.append(self.obs_norm(state) if self.obs_norm is not None else state)
        if self.encoder is not None:
            parts.append(self.encoder({k: obs[k] for k in self.image_keys}))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    def features(self, obs: dict[str, np.ndarray]) -> torch.Tensor:
        """The actor's input for a batch of numpy observations (normalised state, encoded images, no
        augmentation): for diagnostics that ask the actor or the critic about recorded states."""
        return self._features(self._obs_to_torch(obs, augment=False))

    def _with_privileged(self, feat: torch.Tensor, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Features + the (normalised) privileged vector: the critic's input, and with
        "actor_and_critic" the actor's."""
        if not self.privileged_dim:
            return feat
        p = obs[PRIVILEGED_KEY]
        return torch.cat([feat, self.priv_norm(p) if self.priv_norm is not None else p], dim=-1)

    def _obs_to_torch(self, obs: dict[str, np.ndarray], augment: bool) -> dict[str, torch.Tensor]:
        out = {}
        if self.state_key:
            out[self.state_key] = torch.as_tensor(obs[self.state_key], dtype=torch.float32).to(
                self.device, non_blocking=True)
        if self.privileged_dim and PRIVILEGED_KEY in obs:
            out[PRIVILEGED_KEY] = torch.as_tensor(obs[PRIVILEGED_KEY], dtype=torch.float32).to(
                self.device, non_blocking=True)
        for k in self.image_keys:
            img = torch.as_tensor(obs[k]).to(self.device, non_blocking=True)  # uint8 (B,H,W,C)
            img = img.permute(0, 3, 1, 2).float()
            if augment and self.config.augment_pad > 0:
                img = random_shift(img, self.config.augment_pad, self.generator)
            out[k] = img.contiguous(memory_format=torch.channels_last)
        return out

    @torch.inference_mode()
    def act(self, obs: dict[str, np.ndarray], deterministic: bool = False) -> np.ndarray:
        """One unbatched observation -> float32 action in [-1, 1]."""
        keys = ([self.state_key] if self.state_key else []) + self.image_keys
        if self.actor_privileged:
            keys.append(PRIVILEGED_KEY)
        missing = [k for k in keys if k not in obs]
        if missing:
            hint = (" (privileged='actor_and_critic' is a sim-only study mode: its actor needs "
                    "the privileged key, which hardware does not have)" if PRIVILEGED_KEY in missing else "")
            raise ConfigError(f"observation lacks {missing} (has {sorted(obs)}); the agent was built "
                              f"for keys {keys}: use the same env/obs mode as in training{hint}")
        batched = {k: np.asarray(obs[k])[None] for k in keys}
        tobs = self._obs_to_torch(batched, augment=False)
        feat = self._features(tobs)
        if self.actor_privileged:
            feat = self._with_privileged(feat, tobs)
        if deterministic:
            action = self.actor.mode(feat)
        else:
            action = self.actor.sample(feat, self.act_generator)[0]
        return action[0].cpu().numpy().astype(np.float32)

    # ------------------------------------------------------------------------------ learning
    def require_learning(self) -> None:
        """ConfigError unless this agent can train (an asymmetric critic needs `privileged`).
        Training loops call it before collecting data, so the mistake surfaces at once."""
        if not self.can_learn:
            raise ConfigError(
                f"privileged='critic': the critics read obs[{PRIVILEGED_KEY!r}], which this env does "
                "not have; train in sim with the env option privileged_obs=True (`robolearn train "
                "--privileged-obs`, or privileged_obs = true under [env_kwargs] in a launch file); "
                "without it this agent can only act")

    def update(self, batch: Batch) -> dict[str, float]:
        """One critic gradient step (+ actor/temperature per policy delay); returns metrics.

        Metrics are read back (one host sync) and checked for NaN/inf every `check_every`
        updates: every update on CPU, where a read-back is free; on CUDA every 100, so the
        host never waits for the GPU in between (the other updates return {}). A batch of
        numpy arrays is checked on the host every update; a batch already on the device
        (`DeviceReplay`) is checked through the losses it produces.
        """
        cfg = self.config
        self.require_learning()
        self.num_updates += 1
        n = self.num_updates
        if isinstance(batch.action, np.ndarray):
            _check_batch(batch, n)
        inputs = {"obs": dict(batch.obs), "next_obs": dict(batch.next_obs), "action": batch.action,
                  "reward": batch.reward, "discount": batch.discount}
        if cfg.flow_bc_weight or cfg.bc_weight:
            # BC terms read the prior rows: with a prior buffer, the rows drawn from it (demos,
            # sim prior data, the takeovers `prior_takeovers` let in), never a driven row of the
            # online replay, which keeps every takeover, the failed ones too (lift sessions
            # 33-39: 2-4x as many rows over the cube as the lifted takeovers, most with the hand
            # still); without one, the driven rows of the replay
            src = batch.intervention if batch.prior is None else batch.prior
            inputs["prior"] = torch.as_tensor(src).to(self.device).float()
        if cfg.bc_weight:  # an input, not a constant: it may ease off (bc_weight_final) and a
            # captured CUDA graph reads its inputs from static buffers
            inputs["bc_weight"] = torch.tensor(cfg.bc_weight_at(n), dtype=torch.float32, device=self.device)
        do_actor = n % cfg.actor_every == 0 and n > cfg.actor_frozen_updates
        if self._manual is not None:
            keys, values = self._manual.run(inputs, do_actor)
        elif self._graphs is None:
            with bf16_region(self._bf16):
                keys, values = self._learn(inputs, do_actor)
        else:
            keys, values = self._graphs.run(inputs, do_actor)
        if n % self._check_every:
            return {}
        out = dict(zip(keys, values.tolist()))  # one device->host transfer
        bad = [k for k, v in out.items() if not math.isfinite(v)]
        if bad:
            since = "" if self._check_every == 1 else (
                f" (checked every {self._check_every} updates: it went bad after update "
                f"{n - self._check_every})")
            raise TrainingError(
                f"update {n}: non-finite {', '.join(bad)} ({', '.join(f'{k}={out[k]}' for k in bad)})"
                f"{since}; a parameter or the data went NaN/inf. Lower the learning rates, set "
                "grad_clip, or check rewards/observations; resume from the last checkpoint")
        return out

    def learn_inputs(self, inputs: dict) -> tuple:
        """The update's tensors from a batch dict (obs and next obs augmented, on the device),
        after the running normalisers took in this batch: the first step of both update paths
        (`_learn` and `manual_update.ManualUpdate.run`)."""
        obs = self._obs_to_torch(inputs["obs"], augment=True)
        next_obs = self._obs_to_torch(inputs["next_obs"], augment=True)
        action, reward, discount = (torch.as_tensor(inputs[k]).to(self.device, non_blocking=True)
                                    for k in ("action", "reward", "discount"))
        if self.obs_norm is not None:
            self.obs_norm.update(obs[self.state_key])
        if self.priv_norm is not None:
            self.priv_norm.update(obs[PRIVILEGED_KEY])
        return obs, next_obs, action, reward, discount

    def _learn(self, inputs: dict, do_actor: bool) -> tuple[list[str], torch.Tensor]:
        """The update's tensor work (no host sync, no Python state that changes per call, so
        CUDA graphs can capture it): returns metric names and one stacked metric tensor."""
        cfg = self.config
        obs, next_obs, action, reward, discount = self.learn_inputs(inputs)
        alpha = self.log_alpha.detach().exp()

        # ---- critic (asymmetric: critic inputs may hold privileged entries the actor never sees)
        self.critic.train()
        feat = self._features(obs)
        with torch.no_grad():
            next_feat = self._features(next_obs)
            next_critic_feat = self._with_privileged(next_feat, next_obs)
            next_actor_feat = next_critic_feat if self.actor_privileged else next_feat
            next_action, next_logp = self.actor.sample(next_actor_feat, self.generator)
        critic_feat = self._with_privileged(feat, obs)
        actor_feat = critic_feat if self.actor_privileged else feat
        subset = None
        if cfg.num_target_min < cfg.num_critics:  # REDQ: random subset, same for the batch
            subset = torch.rand(cfg.num_critics, generator=self.generator,
                                device=self.device).argsort()[: cfg.num_target_min]
        self.last_target_members = subset  # for diagnostics/tests (None: all members)
        if self.critic_target is None:
            # CrossQ: current and next (s, a) in ONE batch so batch statistics are shared
            bsz = action.shape[0]
            q_all = self.critic(torch.cat([critic_feat, next_critic_feat]),
                                torch.cat([action, next_action]))
            q, q_next = q_all[:, :bsz], q_all[:, bsz:].detach()
            if subset is not None:
                q_next = q_next.index_select(0, subset)
        else:
            q = self.critic(critic_feat, action)
            with torch.no_grad():  # only the subset's target members are evaluated
                q_next = self.critic_target(next_critic_feat, next_action, subset)
        with torch.no_grad():
            v_next = q_next.min(dim=0).values
            if cfg.backup_entropy:
                v_next = v_next - alpha * next_logp
            target = reward + discount * v_next
        critic_loss = 0.5 * (q - target).pow(2).mean(dim=1).sum()
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self._grad_params, cfg.grad_clip)
        self.critic_opt.step()
        if self._target_params:
            torch._foreach_lerp_(self._target_params, self._critic_params, cfg.tau)

        metrics = {"critic_loss": critic_loss.detach(), "q": q.detach().mean()}
        # ---- actor and temperature
        if do_actor:
            feat_d = actor_feat.detach()
            self.actor.train(True)  # batch statistics (CrossQ's actor) in its own loss only
            pi_action, logp = self.actor.sample(feat_d, self.generator)
            self.actor.train(False)
            # detached-weight alias: gradients reach the action only (no critic weight grads);
            # in eval mode for CrossQ (running statistics for the policy objective)
            q_pi = self._critic_frozen(critic_feat.detach(), pi_action)
            q_pi = q_pi.min(dim=0).values if cfg.actor_q == "min" else q_pi.mean(dim=0)
            actor_loss = (alpha * logp - q_pi).mean()
            if cfg.flow_bc_weight:
                weight = torch.as_tensor(inputs["prior"]).to(self.device, non_blocking=True)
                bc_loss = self.actor.flow_matching_loss(feat_d, action, weight, self.generator)
                actor_loss = actor_loss + cfg.flow_bc_weight * bc_loss
                metrics["flow_bc_loss"] = bc_loss.detach()
            if cfg.bc_weight:
                weight = torch.as_tensor(inputs["prior"]).to(self.device, non_blocking=True)
                bc_loss = self.actor.bc_loss(feat_d, action, weight)
                actor_loss = actor_loss + inputs["bc_weight"] * bc_loss
                metrics["bc_loss"] = bc_loss.detach()
                metrics["bc_weight"] = inputs["bc_weight"]
            temp_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
            self.actor_opt.zero_grad(set_to_none=True)
            (actor_loss + temp_loss).backward()  # disjoint graphs: one backward pass
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.grad_clip)
            self.actor_opt.step()
            metrics.update(actor_loss=actor_loss.detach(), temperature_loss=temp_loss.detach(),
                           entropy=-logp.detach().mean())
        metrics["alpha"] = alpha
        return list(metrics), torch.stack(list(metrics.values()))

    # ----------------------------------------------------------------------------- state I/O
    def state_dict(self) -> dict:
        """Everything for an exact resume: nets, target nets, optimisers, counters, RNG."""
        d = {
            "config": dataclasses.asdict(self.config),
            "seed": self.seed,
            "num_updates": self.num_updates,
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "rng": self.generator.get_state(),
            "act_rng": self.act_generator.get_state(),
        }
        if self.critic_target is not None:
            d["critic_target"] = self.critic_target.state_dict()
        if self.encoder is not None:
            d["encoder"] = self.encoder.state_dict()
        if self.obs_norm is not None:
            d["obs_norm"] = self.obs_norm.state_dict()
        if self.priv_norm is not None:
            d["priv_norm"] = self.priv_norm.state_dict()
        return copy.deepcopy(d)

    def load_state_dict(self, d: dict) -> None:
        for key in ("actor", "critic", "actor_opt", "critic_opt", "rng"):
            if key not in d:
                raise DatasetError(f"agent state has no {key!r}: not a state_dict() of this Agent")
        with _mismatch_as_dataset_error("agent state"):
            self._load_state_dict(d)

    def _load_state_dict(self, d: dict) -> None:
        self.actor.load_state_dict(d["actor"])
        self.critic.load_state_dict(d["critic"])
        if self.critic_target is not None:
            self.critic_target.load_state_dict(d["critic_target"])
        if self.encoder is not None:
            self.encoder.load_state_dict(d["encoder"])
        if self.obs_norm is not None:
            self.obs_norm.load_state_dict(d["obs_norm"])
        if self.priv_norm is not None:
            self.priv_norm.load_state_dict(d["priv_norm"])
        with torch.no_grad():
            self.log_alpha.copy_(torch.as_tensor(d["log_alpha"]))
        # copies: Optimizer.load_state_dict keeps the given tensors when device and dtype
        # already match, so two agents loaded from one dict would share (and corrupt) moments
        self.actor_opt.load_state_dict(copy.deepcopy(d["actor_opt"]))
        self.critic_opt.load_state_dict(copy.deepcopy(d["critic_opt"]))
        # an optimiser's state dict carries its learning rates and betas: this agent's options
        # decide them (a fine-tuning launch's actor_lr over the pretrained run's), as for a
        # fresh agent; a resume has the same options, so nothing changes there
        cfg = self.config
        betas = (cfg.adam_beta1, 0.999)
        for group, lr in zip(self.actor_opt.param_groups, (cfg.actor_lr, cfg.temperature_lr)):
            group["lr"], group["betas"] = lr, betas
        for group in self.critic_opt.param_groups:
            group["lr"], group["betas"] = cfg.critic_lr, betas
        self.num_updates = int(d["num_updates"])
        if self._graphs is not None:
            # the graphs are captured again below: give them a generator no old graph holds
            self.generator = torch.Generator(self.device)
            for net in (self.critic, self.critic_target, self._critic_frozen):
                if net is not None:
                    net.mlp.set_generator(self.generator)
        self.generator.set_state(torch.as_tensor(d["rng"], dtype=torch.uint8).cpu())
        self.act_generator.set_state(torch.as_tensor(d["act_rng"], dtype=torch.uint8).cpu())
        if self._graphs is not None:  # new optimiser state tensors: capture again
            self._graphs.reset()

    def policy_state(self) -> dict[str, torch.Tensor]:
        """Flat CPU tensors `act` needs (actor + encoder + obs normalisation): what the learner
        broadcasts to actors."""
        out = {f"actor.{k}": v for k, v in self.actor.state_dict().items()}
        if self.encoder is not None:
            out.update({f"encoder.{k}": v for k, v in self.encoder.state_dict().items()})
        if self.obs_norm is not None:
            out.update({f"obs_norm.{k}": v for k, v in self.obs_norm.state_dict().items()})
        if self.priv_norm is not None and self.actor_privileged:
            out.update({f"priv_norm.{k}": v for k, v in self.priv_norm.state_dict().items()})
        return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in out.items()}

    def load_policy_state(self, d: dict[str, torch.Tensor]) -> None:
        with _mismatch_as_dataset_error("policy state"):
            self.actor.load_state_dict({k[6:]: v for k, v in d.items() if k.startswith("actor.")})
            if self.encoder is not None:
                self.encoder.load_state_dict(
                    {k[8:]: v for k, v in d.items() if k.startswith("encoder.")})
            if self.obs_norm is not None:
                self.obs_norm.load_state_dict(
                    {k[9:]: v for k, v in d.items() if k.startswith("obs_norm.")})
            if self.priv_norm is not None and self.actor_privileged:
                self.priv_norm.load_state_dict(
                    {k[10:]: v for k, v in d.items() if k.startswith("priv_norm.")})


@contextlib.contextmanager
def _mismatch_as_dataset_error(what: str):
    try:
        yield
    except (RuntimeError, KeyError, ValueError) as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        raise DatasetError(f"{what} does not fit this agent (built with other spaces or network "
                           f"sizes?): {' '.join(lines[:2])}") from None


# ---------------------------------------------------------------------------------- helpers
def _adam_impl(device: torch.device) -> dict:
    # the fused kernel is ~2.5x faster than the per-parameter loop on CPU and one launch on GPU
    # capturable: Adam's step counters live on the GPU, so a CUDA graph can hold the step
    if device.type == "cuda":
        return {"fused": True, "capturable": True}
    return {"fused": True} if device.type == "cpu" else {"foreach": True}


def _check_batch(batch: Batch, n: int) -> None:
    checks = {"action": batch.action, "reward": batch.reward, "discount": batch.discount}
    for k, v in batch.obs.items():
        if v.dtype.kind == "f":
            checks[f"obs[{k!r}]"] = v
            checks[f"next_obs[{k!r}]"] = batch.next_obs[k]
    for name, arr in checks.items():
        if not np.all(np.isfinite(arr)):
            raise TrainingError(f"update {n}: batch {name} contains NaN/inf; the replay holds "
                                "corrupt data (check the env's observations and rewards)")
