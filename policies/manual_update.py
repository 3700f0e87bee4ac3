"""The SAC-family update of MLP networks with its gradients written out by hand (CPU).

Why: at batch 256 and 256-wide layers the products are only part of a CPU update; the rest is
per-op work that autograd adds (recording the graph, saving tensors, the backward engine's
bookkeeping, separate ReLU and bias passes, Optimizer.step's Python). This writes the same
update, same equations and same random draws in the same order, as direct tensor calls under
`no_grad`: forward products with the bias (and ReLU) fused, the backward as the explicit chain
rule, each ensemble member as its own product (no stacked activations), only the input
gradient that the actor loss needs from the critics, the BC anchor on the sample's own mean
(no second actor forward), and Adam's fused kernel called directly (`adam_step`).

`cpu_update="manual"` selects it; it covers sac, redq, droq and rlpd (MLP critics with
LayerNorm and dropout, target network, BC anchor, entropy dims, asymmetric critic);
`unsupported_reason` names what it does not (pixels, SimBa, batch renorm, CrossQ, flow actor,
bf16). The optimisers, target update, metrics and checkpoints are the Agent's own, so the two
paths are interchangeable mid-run; tests/test_manual_update.py checks losses, every gradient
and the random draws against the autograd update.

Notation: a layer maps x (B, in) -> x @ M + b with M (in, out). An actor layer stores
W = M^T (nn.Linear, (out, in)); a critic member stores M itself (EnsembleLinear, (E, in, out)).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from robolearn.policies import onednn
from robolearn.policies.networks import (LOG_STD_MAX, LOG_STD_MIN, Actor, Dropout, EnsembleLayerNorm,
                                         EnsembleLinear, EnsembleMLP)

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_LOG2 = math.log(2.0)
_STD_SCALE = 0.5 * (LOG_STD_MAX - LOG_STD_MIN)


def unsupported_reason(agent) -> str | None:
    """Why the hand-written update cannot run this agent (None: it can)."""
    cfg = agent.config
    checks = [
        (agent.device.type == "cpu", "it is a CPU path"),
        (cfg.cpu_matmul in ("torch", "onednn"), f"cpu_matmul={cfg.cpu_matmul!r} (fp32 paths only)"),
        (agent.encoder is None, "pixel encoders train through autograd"),
        (cfg.actor == "gaussian", f"actor={cfg.actor!r}"),
        (cfg.network == "mlp", f"network={cfg.network!r}"),
        (not (cfg.critic_batch_renorm or cfg.actor_batch_renorm), "batch renorm trains through autograd"),
        (cfg.target_network, "target_network=False (CrossQ)"),
    ]
    for ok, why in checks:
        if not ok:
            return why
    return None


@dataclass
class _Hidden:
    """One hidden critic layer, per member: Linear -> [Dropout] -> [LayerNorm] -> ReLU."""
    weight: list[torch.Tensor]  # M (in, out) per member
    bias: list[torch.Tensor]
    dropout: float
    ln_weight: list[torch.Tensor] | None
    ln_bias: list[torch.Tensor] | None
    ln_eps: float


def _critic_structure(mlp: EnsembleMLP) -> tuple[list[_Hidden], tuple[list, list]]:
    """Per-member views of the stacked weights, made once (optimiser steps and load_state_dict
    write into the same storage, so the views stay current)."""
    def members(t: torch.Tensor, squeeze: bool) -> list[torch.Tensor]:
        t = t.detach()
        return list((t[:, 0] if squeeze else t).unbind(0))

    hidden: list[_Hidden] = []
    last = None
    for m in mlp.net:
        if isinstance(m, EnsembleLinear):
            last = (members(m.weight, False), members(m.bias, True))
            hidden.append(_Hidden(last[0], last[1], 0.0, None, None, 0.0))
        elif isinstance(m, Dropout):
            hidden[-1].dropout = m.p
        elif isinstance(m, EnsembleLayerNorm):
            hidden[-1].ln_weight, hidden[-1].ln_bias = members(m.weight, True), members(m.bias, True)
            hidden[-1].ln_eps = m.eps
        elif not isinstance(m, (nn.ReLU, nn.Identity)):
            raise TypeError(f"unexpected layer {type(m).__name__} in an MLP critic")
    head = hidden.pop()
    return hidden, (head.weight, head.bias)


class ManualUpdate:
    """`Agent._learn` for MLP SAC-family agents on CPU, gradients by hand (module docstring)."""

    def __init__(self, agent):
        why = unsupported_reason(agent)
        if why is not None:
            raise ValueError(f"the manual update does not apply: {why}")
        assert isinstance(agent.actor, Actor) and isinstance(agent.critic.mlp, EnsembleMLP)
        self.agent = agent
        self.fast = agent.config.cpu_matmul == "onednn" and onednn.available()
        self.actor_layers = [m for m in agent.actor.net if isinstance(m, nn.Linear)]
        self.hidden, self.head = _critic_structure(agent.critic.mlp)
        self.target_hidden, self.target_head = _critic_structure(agent.critic_target.mlp)
        self.entropy_dims = agent.config.entropy_dims or agent.action_dim

    # ------------------------------------------------------------------ products
    def _prod(self, x: torch.Tensor, m: torch.Tensor, b: torch.Tensor | None, relu: bool) -> torch.Tensor:
        """x @ m + b (then ReLU): oneDNN with the bias and ReLU fused, or MKL's addmm."""
        if self.fast and m.shape[1] >= onednn.MIN_OUT:
            return onednn._OP(x, m.t(), b, "relu" if relu else "none", [], "")
        y = torch.mm(x, m) if b is None else torch.addmm(b, x, m)
        return y.relu_() if relu else y

    def _prod_t(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """a^T @ b (a weight gradient: a (B, in), b (B, out) -> (in, out))."""
        if self.fast and b.shape[1] >= onednn.MIN_OUT:
            return onednn._OP(a.t(), b.t(), None, "none", [], "")
        return torch.mm(a.t(), b)

    def _grad_in(self, g: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        """g @ m^T: the gradient at a layer's input (a Q head's (B, 1) gradient: a broadcast)."""
        return g * m.t() if m.shape[1] == 1 else self._prod(g, m.t(), None, False)

    # ------------------------------------------------------------------ actor
    def _actor_forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Activations of the actor MLP: [input, hidden..., head output]."""
        acts = [x]
        last = len(self.actor_layers) - 1
        for i, lin in enumerate(self.actor_layers):
            acts.append(self._prod(acts[-1], lin.weight.t(), lin.bias, relu=i < last))
        return acts

    def _sample(self, head: torch.Tensor):
        """Actor.sample from the head output: action, log-prob and what its backward needs."""
        a_dim = head.shape[1] // 2
        mean, raw = head[:, :a_dim], head[:, a_dim:]
        t = torch.tanh(raw)
        log_std = t.add(1.0).mul_(_STD_SCALE).add_(LOG_STD_MIN)
        cap = self.agent.actor.max_log_std
        capped = None
        if cap is not None:              # Actor.forward's clamp: no gradient above the cap
            capped = log_std > cap
            log_std.clamp_(max=cap)
        std = log_std.exp()
        eps = torch.randn(mean.shape, generator=self.agent.generator, dtype=mean.dtype)
        u = torch.addcmul(mean, std, eps)
        action = torch.tanh(u)
        # log N(u) - log|d tanh(u)/du|, the overflow-safe softplus form (as Actor.sample)
        squash = torch.nn.functional.softplus(u * -2.0).add_(u).neg_().add_(_LOG2).mul_(2.0)
        per_dim = eps.square().mul_(-0.5).sub_(log_std).sub_(_HALF_LOG_2PI).sub_(squash)
        logp = per_dim[:, : self.entropy_dims].sum(-1)
        return action, logp, (mean, t, std, eps, capped)

    def _actor_grads(self, acts, action, saved, g_action, g_logp: float, g_mean_extra) -> list[torch.Tensor]:
        """d actor loss / d actor parameters (weight, bias per layer, `actor.parameters()`
        order). g_action (B, A): d loss / d action; g_logp: d loss / d log-prob (per row);
        g_mean_extra: a gradient reaching the mean directly (the BC anchor), or None."""
        _, t, std, eps, capped = saved
        d = self.entropy_dims
        # u -> action = tanh(u); log-prob: +2 tanh(u) per entropy dim (the squash correction)
        g_u = g_action * (1.0 - action.square())
        g_u[:, :d].add_(action[:, :d], alpha=2.0 * g_logp)
        g_log_std = g_u * std * eps
        g_log_std[:, :d].sub_(g_logp)
        g_raw = g_log_std.mul_(t.square().neg_().add_(1.0)).mul_(_STD_SCALE)
        if capped is not None:
            g_raw.masked_fill_(capped, 0.0)
        g_mean = g_u if g_mean_extra is None else g_u + g_mean_extra
        g = torch.cat([g_mean, g_raw], 1)
        grads: list[torch.Tensor] = []
        for i in range(len(self.actor_layers) - 1, -1, -1):
            inp = acts[i]
            grads[:0] = [self._prod_t(g, inp), g.sum(0)]  # (out, in) = g^T inp
            if i:
                g_in = self._prod(g, self.actor_layers[i].weight, None, False)
                g = torch.ops.aten.threshold_backward(g_in, inp, 0)
        return grads

    # ------------------------------------------------------------------ critics
    def _critic_forward(self, hidden: list[_Hidden], head, x: torch.Tensor, members: list[int]):
        """Q (E, B) of `members` and, per hidden layer, what the backward needs. Dropout masks
        are drawn per layer for all members at once, as EnsembleMLP draws them."""
        hs = [x] * len(members)
        cache = []
        for layer in hidden:
            plain = not layer.dropout and layer.ln_weight is None
            zs = [self._prod(h, layer.weight[e], layer.bias[e], relu=plain) for h, e in zip(hs, members)]
            keep = None
            if layer.dropout:
                keep = torch.rand((len(members),) + zs[0].shape, generator=self.agent.generator,
                                  dtype=zs[0].dtype) >= layer.dropout
                scale = 1.0 / (1.0 - layer.dropout)
                zs = [z * k * scale for z, k in zip(zs, keep.unbind(0))]
            stats = None
            if layer.ln_weight is not None:
                outs = [torch.native_layer_norm(z, z.shape[-1:], layer.ln_weight[e], layer.ln_bias[e],
                                                layer.ln_eps) for z, e in zip(zs, members)]
                stats = [(o[1], o[2]) for o in outs]
                ys = [o[0].relu_() for o in outs]
            else:
                ys = zs if plain else [z.relu() for z in zs]
            cache.append((hs, zs, keep, stats, ys))
            hs = ys
        q = torch.stack([self._prod(h, head[0][e], head[1][e], False).squeeze(1) for h, e in zip(hs, members)])
        return q, cache

    def _critic_backward(self, x, cache, g_q: torch.Tensor, weights: bool):
        """From d loss / d Q (E, B): with `weights`, every critic parameter's gradient in
        `critic.parameters()` order; else d loss / d x summed over the members."""
        members = range(g_q.shape[0])
        gs = [g_q[e].unsqueeze(1) for e in members]
        hs = cache[-1][4] if cache else [x] * len(gs)
        grads: list[torch.Tensor] = []
        if weights:
            grads = [torch.stack([self._prod_t(h, g) for h, g in zip(hs, gs)]),
                     torch.stack([g.sum(0, keepdim=True) for g in gs])]
        gs = [self._grad_in(g, self.head[0][e]) for g, e in zip(gs, members)]
        for i in range(len(self.hidden) - 1, -1, -1):
            layer = self.hidden[i]
            inputs, zs, keep, stats, ys = cache[i]
            gs = [torch.ops.aten.threshold_backward(g, y, 0) for g, y in zip(gs, ys)]
            ln_grads = None
            if layer.ln_weight is not None:
                outs = [torch.ops.aten.native_layer_norm_backward(
                    g, z, z.shape[-1:], mean, rstd, layer.ln_weight[e], layer.ln_bias[e],
                    [True, weights, weights]) for g, z, (mean, rstd), e in zip(gs, zs, stats, members)]
                gs = [o[0] for o in outs]
                if weights:
                    ln_grads = [torch.stack([o[1] for o in outs]).unsqueeze(1),
                                torch.stack([o[2] for o in outs]).unsqueeze(1)]
            if keep is not None:
                scale = 1.0 / (1.0 - layer.dropout)
                gs = [g * k * scale for g, k in zip(gs, keep.unbind(0))]
            if weights:
                grads[:0] = [torch.stack([self._prod_t(h, g) for h, g in zip(inputs, gs)]),
                             torch.stack([g.sum(0, keepdim=True) for g in gs])] + (ln_grads or [])
            if i:
                gs = [self._grad_in(g, layer.weight[e]) for g, e in zip(gs, members)]
        if weights:
            return grads
        total = None
        for g, e in zip(gs, members):
            part = self._grad_in(g, self.hidden[0].weight[e]) if self.hidden else g
            total = part if total is None else total.add_(part)
        return total

    # ------------------------------------------------------------------ the update
    @torch.no_grad()
    def run(self, inputs: dict, do_actor: bool) -> tuple[list[str], torch.Tensor]:
        ag, cfg = self.agent, self.agent.config
        obs, next_obs, action, reward, discount = ag.learn_inputs(inputs)
        alpha = ag.log_alpha.detach().exp()
        ag.critic.train()
        feat = ag._features(obs)
        next_feat = ag._features(next_obs)
        next_critic_feat = ag._with_privileged(next_feat, next_obs)
        next_actor_feat = next_critic_feat if ag.actor_privileged else next_feat
        next_action, next_logp, _ = self._sample(self._actor_forward(next_actor_feat)[-1])
        critic_feat = ag._with_privileged(feat, obs)
        actor_feat = critic_feat if ag.actor_privileged else feat
        n_critics = cfg.num_critics
        members = list(range(n_critics))
        subset = None
        if cfg.num_target_min < n_critics:  # REDQ: random subset, same for the batch
            subset = torch.rand(n_critics, generator=ag.generator).argsort()[: cfg.num_target_min]
        ag.last_target_members = subset
        target_members = members if subset is None else subset.tolist()

        # ---- critic: loss and TD target (in this order: dropout draws), gradients by hand
        x = torch.cat([critic_feat, action], 1)
        q, cache = self._critic_forward(self.hidden, self.head, x, members)
        q_next, _ = self._critic_forward(self.target_hidden, self.target_head,
                                         torch.cat([next_critic_feat, next_action], 1), target_members)
        v_next = q_next.min(dim=0).values
        if cfg.backup_entropy:
            v_next = v_next - alpha * next_logp
        target = reward + discount * v_next
        diff = q - target
        critic_loss = 0.5 * diff.square().mean(dim=1).sum()
        grads = self._critic_backward(x, cache, diff * (1.0 / x.shape[0]), weights=True)
        for p, g in zip(ag._critic_params, grads):
            p.grad = g
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(ag._grad_params, cfg.grad_clip)
        adam_step(ag.critic_opt)
        if ag._target_params:
            torch._foreach_lerp_(ag._target_params, ag._critic_params, cfg.tau)
        metrics = {"critic_loss": critic_loss, "q": q.mean()}

        # ---- actor and temperature (the critics as updated above, weights held fixed)
        if do_actor:
            actor_acts = self._actor_forward(actor_feat)
            pi_action, logp, saved = self._sample(actor_acts[-1])
            x_pi = torch.cat([critic_feat, pi_action], 1)
            q_pi_all, pi_cache = self._critic_forward(self.hidden, self.head, x_pi, members)
            batch = x_pi.shape[0]
            if cfg.actor_q == "min":
                q_pi, idx = q_pi_all.min(dim=0)
                g_q = (idx.unsqueeze(0) == torch.arange(n_critics).unsqueeze(1)).to(q_pi.dtype)
                g_q.mul_(-1.0 / batch)
            else:
                q_pi = q_pi_all.mean(dim=0)
                g_q = torch.full_like(q_pi_all, -1.0 / (batch * n_critics))
            actor_loss = (alpha * logp - q_pi).mean()
            g_action = self._critic_backward(x_pi, pi_cache, g_q, weights=False)[:, critic_feat.shape[1]:]
            g_mean_extra = None
            if cfg.bc_weight:  # TD3+BC anchor on the deterministic action tanh(mean)
                prior = torch.as_tensor(inputs["prior"])
                mode = torch.tanh(saved[0])
                err = mode - action
                bc_loss = (err.square().sum(-1) * prior).sum() / prior.sum().clamp(min=1.0)
                bc_weight = float(inputs["bc_weight"])
                actor_loss = actor_loss + bc_weight * bc_loss
                coef = (2.0 * bc_weight) / prior.sum().clamp(min=1.0)
                g_mean_extra = err.mul_(mode.square().neg_().add_(1.0)).mul_((prior * coef).unsqueeze(1))
                metrics["bc_loss"] = bc_loss
                metrics["bc_weight"] = torch.tensor(bc_weight)
            actor_grads = self._actor_grads(actor_acts, pi_action, saved, g_action, float(alpha) / batch,
                                            g_mean_extra)
            temp_loss = -(ag.log_alpha.detach() * (logp + ag.target_entropy)).mean()
            params = list(ag.actor.parameters())
            for p, g in zip(params, actor_grads):
                p.grad = g
            ag.log_alpha.grad = -(logp.mean() + ag.target_entropy).reshape(())
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            adam_step(ag.actor_opt)
            metrics.update(actor_loss=actor_loss, temperature_loss=temp_loss, entropy=-logp.mean())
        metrics["alpha"] = alpha
        return list(metrics), torch.stack(list(metrics.values()))


def adam_step(opt: torch.optim.Adam) -> None:
    """`opt.step()` for a fused CPU Adam without its per-call Python (hooks, state checks,
    grouping): the same step counter increment and the same fused kernel, so parameters and
    state match `opt.step()` bit for bit. The first step, and any option this does not cover,
    goes through `opt.step()` itself."""
    groups = []
    for group in opt.param_groups:
        if (group["amsgrad"] or group["maximize"] or group.get("decoupled_weight_decay")
                or not group["fused"] or group["capturable"] or group["differentiable"]):
            opt.step()
            return
        states = [opt.state.get(p) for p in group["params"]]
        if not all(states) or any(p.grad is None for p in group["params"]):
            opt.step()
            return
        groups.append((group, states))
    for group, states in groups:
        steps = [st["step"] for st in states]
        torch._foreach_add_(steps, 1)
        beta1, beta2 = group["betas"]
        torch._fused_adam_(
            group["params"], [p.grad for p in group["params"]], [st["exp_avg"] for st in states],
            [st["exp_avg_sq"] for st in states], [], steps, amsgrad=False, lr=group["lr"],
            beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"], eps=group["eps"],
            maximize=False, grad_scale=None, found_inf=None)
