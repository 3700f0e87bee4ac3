"""MLPs, SimBa networks, the critic ensemble and the squashed-Gaussian actor of the SAC family.

Why batched weights: REDQ/RLPD train 10 critics per update. Storing the ensemble as stacked
weights (E, in, out) makes every layer ONE `baddbmm` over the ensemble axis instead of a Python
loop over E networks, so a 10-critic update costs a few times a 2-critic one, not 10x.
Members stay independent: own initialisation, own LayerNorm affine, own dropout masks, own
batch-renorm statistics.
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from robolearn.policies import onednn
from robolearn.policies.agent_config import FLOW_VARIANTS
from robolearn.policies.batchrenorm import BatchRenorm, EnsembleBatchRenorm

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class EnsembleLinear(nn.Module):
    """E independent linear layers applied as one batched matmul: (E, B, in) -> (E, B, out).

    `matmul="onednn"` (set by `onednn.use_onednn`): one oneDNN product per member instead
    (2x faster than the batched matmul on CPU fp32); `relu`: a folded-in ReLU after it;
    `bf16`/`out_bf16`: bf16 products (and output) inside `onednn.bf16_region()`."""

    matmul: str = "torch"
    relu: bool = False
    bf16: bool = False
    out_bf16: bool = False

    def __init__(self, ensemble_size: int, in_features: int, out_features: int):
        super().__init__()
        self.ensemble_size, self.in_features, self.out_features = ensemble_size, in_features, out_features
        self.weight = nn.Parameter(torch.empty(ensemble_size, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(ensemble_size, 1, out_features))
        bound = 1.0 / math.sqrt(in_features)  # nn.Linear's default init, per member
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        w, b = self.weight, self.bias
        if members is not None:  # run only these members (REDQ target subset)
            w, b = w.index_select(0, members), b.index_select(0, members)
        if self.matmul == "onednn":
            y = onednn.ensemble_linear(x, w, b, self.relu, self.bf16, self.out_bf16)
            if y is not None:
                return y
        if x.dtype != w.dtype:  # a bf16 activation reaching the fp32 path (Q head): fp32 product
            x = x.to(w.dtype)
        if x.dim() == 2:  # the same input for every member (first layer)
            x = x.unsqueeze(0).expand(w.shape[0], -1, -1)
        if w.shape[-1] == 1:  # Q head: a dot product per row is ~2x cheaper than an N=1 bmm
            y = (x * w.transpose(1, 2)).sum(-1, keepdim=True) + b
        else:
            y = torch.baddbmm(b, x, w)
        return torch.relu(y) if self.relu else y


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over features with a separate affine per ensemble member."""

    def __init__(self, ensemble_size: int, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(ensemble_size, 1, num_features))
        self.bias = nn.Parameter(torch.zeros(ensemble_size, 1, num_features))

    def forward(self, x: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        w, b = self.weight, self.bias
        if members is not None:
            w, b = w.index_select(0, members), b.index_select(0, members)
        return torch.addcmul(b, F.layer_norm(x, x.shape[-1:], eps=self.eps), w)


class Dropout(nn.Module):
    """Dropout drawing its mask from an explicit torch.Generator (so resumed runs replay the
    same masks; `nn.Dropout` uses the global RNG)."""

    def __init__(self, p: float):
        super().__init__()
        self.p = float(p)
        self.generator: torch.Generator | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = torch.rand(x.shape, generator=self.generator, device=x.device, dtype=x.dtype) >= self.p
        return x * keep * (1.0 / (1.0 - self.p))


class EnsembleMLP(nn.Module):
    """E MLPs in one. Hidden layer: Linear -> [Dropout] -> [LayerNorm] -> ReLU -> [BatchRenorm]
    (DroQ's order for dropout+LN; CrossQ's Dense -> act -> BRN, plus a BRN on the input)."""

    def __init__(self, ensemble_size: int, in_dim: int, hidden: tuple[int, ...], out_dim: int,
                 dropout: float = 0.0, layer_norm: bool = False, batch_renorm: bool = False,
                 renorm_momentum: float = 0.01, renorm_warmup: int = 100_000):
        super().__init__()
        self.ensemble_size = ensemble_size
        brn = dict(momentum=renorm_momentum, warmup_steps=renorm_warmup)
        layers: list[nn.Module] = []
        if batch_renorm:
            layers.append(EnsembleBatchRenorm(ensemble_size, in_dim, **brn))
        d = in_dim
        for h in hidden:
            layers.append(EnsembleLinear(ensemble_size, d, h))
            if dropout > 0:
                layers.append(Dropout(dropout))
            if layer_norm:
                layers.append(EnsembleLayerNorm(ensemble_size, h))
            layers.append(nn.ReLU(inplace=True))
            if batch_renorm:
                layers.append(EnsembleBatchRenorm(ensemble_size, h, **brn))
            d = h
        layers.append(EnsembleLinear(ensemble_size, d, out_dim))
        self.net = nn.Sequential(*layers)

    def set_generator(self, generator: torch.Generator) -> None:
        for m in self.modules():
            if isinstance(m, Dropout):
                m.generator = generator

    def forward(self, x: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        """(B, D) or (E, B, D) -> (E, B, out); with `members`, only those (M, B, out)."""
        if members is None:
            if x.dim() == 2 and isinstance(self.net[0], EnsembleBatchRenorm):
                x = x.unsqueeze(0).expand(self.ensemble_size, -1, -1)
            return self.net(x)
        for layer in self.net:
            if isinstance(layer, EnsembleBatchRenorm):
                raise NotImplementedError("member subsets of batch-renorm critics (CrossQ has no target)")
            x = layer(x, members) if isinstance(layer, (EnsembleLinear, EnsembleLayerNorm)) else layer(x)
        return x


class EnsembleSimba(nn.Module):
    """SimBa (Lee et al., 2024, "Simplicity Bias for Scaling Up Parameters in Deep RL") for E
    members: Linear(in, w) -> N x [x + Linear(4w, w)(ReLU(Linear(w, 4w)(LN(x))))] -> LN -> Linear.

    Why: the residual path keeps an (almost) linear map from input to output, which biases a
    large network toward simple functions; with pre-LayerNorm blocks and a running observation
    normaliser (`RunningNorm`, on with `network="simba"`) a bigger critic learns faster
    instead of worse. `dropout` (DroQ) sits after each block's ReLU.

    With `batch_renorm` (BatchRenorm options; CrossQ, which has no target network and relies on
    batch statistics shared by (s, a) and (s', a') in one forward) every LayerNorm becomes a
    BatchRenorm and one more normalises the input, as CrossQ's MLP critic does."""

    def __init__(self, ensemble_size: int, in_dim: int, width: int, blocks: int, out_dim: int,
                 dropout: float = 0.0, batch_renorm: dict | None = None):
        super().__init__()
        self.ensemble_size = ensemble_size
        e = ensemble_size

        def norm(d):
            return EnsembleLayerNorm(e, d) if batch_renorm is None else EnsembleBatchRenorm(e, d, **batch_renorm)

        self.inp = EnsembleBatchRenorm(e, in_dim, **batch_renorm) if batch_renorm is not None else None
        self.proj = EnsembleLinear(e, in_dim, width)
        self.blocks = nn.ModuleList()
        for _ in range(blocks):
            parts = [norm(width), EnsembleLinear(e, width, 4 * width), nn.ReLU(inplace=True)]
            if dropout > 0:
                parts.append(Dropout(dropout))
            parts.append(EnsembleLinear(e, 4 * width, width))
            self.blocks.append(nn.ModuleList(parts))
        self.norm = norm(width)
        self.head = EnsembleLinear(e, width, out_dim)

    def set_generator(self, generator: torch.Generator) -> None:
        for m in self.modules():
            if isinstance(m, Dropout):
                m.generator = generator

    def forward(self, x: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        """(B, D) or (E, B, D) -> (E, B, out); with `members`, only those (M, B, out)."""
        def layer(m, h):
            return m(h, members) if isinstance(m, (EnsembleLinear, EnsembleLayerNorm)) else m(h)

        if self.inp is not None:  # CrossQ: batch statistics per member
            if members is not None:
                raise NotImplementedError("member subsets of batch-renorm critics (CrossQ has no target)")
            if x.dim() == 2:
                x = x.unsqueeze(0).expand(self.ensemble_size, -1, -1)
            x = self.inp(x)
        h = layer(self.proj, x)
        for block in self.blocks:
            r = h
            for m in block:
                r = layer(m, r)
            h = h + r
        return layer(self.head, layer(self.norm, h))


class Simba(nn.Module):
    """One SimBa network (the actor's): Linear -> N residual pre-LN blocks -> LN -> Linear.
    With `batch_renorm` (CrossQ's actor) BatchRenorm replaces each LayerNorm and normalises the
    input too."""

    def __init__(self, in_dim: int, width: int, blocks: int, out_dim: int, batch_renorm: dict | None = None):
        super().__init__()

        def norm(d):
            return nn.LayerNorm(d) if batch_renorm is None else BatchRenorm(d, **batch_renorm)

        self.inp = BatchRenorm(in_dim, **batch_renorm) if batch_renorm is not None else nn.Identity()
        self.proj = nn.Linear(in_dim, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(norm(width), nn.Linear(width, 4 * width), nn.ReLU(inplace=True),
                          nn.Linear(4 * width, width)) for _ in range(blocks))
        self.norm = norm(width)
        self.head = nn.Linear(width, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(self.inp(x))
        for block in self.blocks:
            h = h + block(h)
        return self.head(self.norm(h))


def detached_alias(module: nn.Module) -> nn.Module:
    """A copy of `module` whose parameters are detached views of the originals (same storage).

    Why: the actor loss backpropagates through the critic into the action only. Toggling
    `requires_grad_` around that forward costs a Python walk over the parameters twice per
    update and is state a CUDA graph cannot hold; the alias needs neither. Buffers (batch-renorm
    statistics) and dropout generators are shared, not copied; in-place optimiser steps and
    `load_state_dict` (both write into the storage) stay visible to the alias.
    """
    memo: dict[int, object] = {}
    for p in module.parameters():
        memo[id(p)] = p.detach()
    for b in module.buffers():
        memo[id(b)] = b
    for m in module.modules():
        gen = getattr(m, "generator", None)
        if gen is not None:
            memo[id(gen)] = gen
    return copy.deepcopy(module, memo)


class Critic(nn.Module):
    """Q ensemble: (features (B, F), action (B, A)) -> Q values (E, B)."""

    def __init__(self, feature_dim: int, action_dim: int, num_critics: int, hidden: tuple[int, ...],
                 simba: tuple[int, int] | None = None, **mlp_options):
        """`simba=(width, blocks)`: a SimBa ensemble instead of the MLP (`hidden` unused; of the
        MLP options `dropout` and `batch_renorm` (+ its momentum / warmup) apply)."""
        super().__init__()
        self.num_critics = num_critics
        if simba is not None:
            brn = (dict(momentum=mlp_options.get("renorm_momentum", 0.01),
                        warmup_steps=mlp_options.get("renorm_warmup", 100_000))
                   if mlp_options.get("batch_renorm") else None)
            self.mlp = EnsembleSimba(num_critics, feature_dim + action_dim, simba[0], simba[1], 1,
                                     dropout=mlp_options.get("dropout", 0.0), batch_renorm=brn)
        else:
            self.mlp = EnsembleMLP(num_critics, feature_dim + action_dim, hidden, 1, **mlp_options)

    def forward(self, feat: torch.Tensor, action: torch.Tensor,
                members: torch.Tensor | None = None) -> torch.Tensor:
        return self.mlp(torch.cat([feat, action], dim=-1), members).squeeze(-1)


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, batch_renorm: dict | None = None
        ) -> nn.Sequential:
    """Linear -> ReLU per hidden layer; with `batch_renorm` (BatchRenorm options), CrossQ's
    actor: a BatchRenorm before every Linear (on the input and after each ReLU)."""
    layers: list[nn.Module] = []
    d = in_dim
    for h in hidden:
        if batch_renorm is not None:
            layers.append(BatchRenorm(d, **batch_renorm))
        layers += [nn.Linear(d, h), nn.ReLU(inplace=True)]
        d = h
    if batch_renorm is not None:
        layers.append(BatchRenorm(d, **batch_renorm))
    layers.append(nn.Linear(d, out_dim))
    return nn.Sequential(*layers)


class Actor(nn.Module):
    """Tanh-squashed Gaussian policy over features.

    With `batch_renorm` (CrossQ) the actor has batch statistics: the learner puts it in
    training mode only for its own loss; acting and the critic target's next action use the
    running statistics (eval mode, the Agent's default for the actor), as sbx's CrossQ does."""

    def __init__(self, feature_dim: int, action_dim: int, hidden: tuple[int, ...],
                 batch_renorm: dict | None = None, simba: tuple[int, int] | None = None,
                 entropy_dims: int = 0, max_log_std: float | None = None):
        """`simba=(width, blocks)`: a SimBa body instead of the MLP (`hidden` unused);
        `entropy_dims`: log-probabilities over the first N dims only (0: all); `max_log_std`:
        the log std clamped to at most this (AgentConfig.max_std)."""
        super().__init__()
        self.in_features = int(feature_dim)
        self.entropy_dims = int(entropy_dims)
        self.max_log_std = None if max_log_std is None else float(max_log_std)
        if simba is not None:
            self.net = Simba(feature_dim, simba[0], simba[1], 2 * action_dim, batch_renorm)
        else:
            self.net = mlp(feature_dim, hidden, 2 * action_dim, batch_renorm)

    def forward(self, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.net(feat).chunk(2, dim=-1)
        # smooth bound of log_std (keeps gradients alive at the limits, unlike a clamp)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1.0)
        if self.max_log_std is not None:
            log_std = log_std.clamp(max=self.max_log_std)
        return mean, log_std

    def sample(self, feat: torch.Tensor, generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised action in (-1, 1) and its log-probability (B,)."""
        mean, log_std = self(feat)
        eps = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        u = mean + log_std.exp() * eps
        action = torch.tanh(u)
        # log N(u) - log|d tanh(u)/du|, the latter in the overflow-safe softplus form
        per_dim = -0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi) \
            - 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
        if self.entropy_dims:    # only these dims carry the entropy (AgentConfig.entropy_dims)
            per_dim = per_dim[..., : self.entropy_dims]
        return action, per_dim.sum(-1)

    def mode(self, feat: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self(feat)[0])

    def bc_loss(self, feat: torch.Tensor, action: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """TD3+BC's anchor, weighted per row: squared error of the deterministic action to the
        row's action, summed over action dims, averaged over the weighted (prior) rows."""
        per_row = (self.mode(feat) - action).pow(2).sum(-1)
        return (per_row * weight).sum() / weight.sum().clamp(min=1.0)


class FlowActor(nn.Module):
    """SAC Flow's policy (Zhang et al. 2025, "SAC Flow: Sample-Efficient Reinforcement Learning
    of Flow-Based Policies via Velocity-Reparameterized Sequential Modeling"), Flow-G variant.

    A K-step flow read as a recurrent net: a_0 ~ N(0, I), then for k = 0..K-1 (t_k = k/K,
    dt = 1/K) the gated, noise-augmented update
        a_{k+1} = a_k + dt * z_k * (h_k - a_k) + sigma(s) * eps_k,   eps_k ~ N(0, I)
    with the gate z_k = sigmoid(G([s, a_k, t_k])) and the candidate h_k = H([s, a_k, t_k])
    (two MLPs, a GRU's update gate and candidate state). The action is tanh(a_K).

    Why the noise: every transition is then a Gaussian, so the log-density of the whole chain,
    log N(a_0; 0, I) + sum_k log N(a_{k+1}; a_k + dt v_k, sigma^2 I), is exact and cheap; with
    the tanh log-determinant it is SAC's log pi. Why the gate: the update is a convex step
    toward the candidate, so gradients through the K steps neither explode nor vanish (the
    paper's fix for the naive flow actor's instability). The chain is reparameterised:
    gradients reach every parameter through all K steps.

    `mode` (evaluation, export): the chain from a_0 = 0 with eps = 0.
    """

    def __init__(self, feature_dim: int, action_dim: int, hidden: tuple[int, ...], steps: int = 4,
                 variant: str = "gated"):
        super().__init__()
        if variant not in FLOW_VARIANTS:
            raise ValueError(f"flow variant {variant!r}: choose one of {FLOW_VARIANTS}")
        self.in_features = int(feature_dim)
        self.action_dim = int(action_dim)
        self.steps = int(steps)
        d = feature_dim + action_dim + 1
        self.gate = mlp(d, hidden, action_dim)
        self.candidate = mlp(d, hidden, action_dim)
        self.noise = mlp(feature_dim, hidden, action_dim)  # state-conditioned log sigma
        # the reference code's gate init: z = sigmoid(5) ~ 0.99, i.e. "take the candidate"
        nn.init.zeros_(self.gate[-1].weight)
        nn.init.constant_(self.gate[-1].bias, 5.0)

    def velocity(self, feat: torch.Tensor, a: torch.Tensor, t: float) -> torch.Tensor:
        """v(t, a, s) = z * (h - a): the gated velocity (Flow-G)."""
        x = torch.cat([feat, a, torch.zeros_like(a[:, :1]) + t], dim=-1)
        return torch.sigmoid(self.gate(x)) * (self.candidate(x) - a)

    def log_sigma(self, feat: torch.Tensor) -> torch.Tensor:
        """Per-dimension log noise scale of every transition, smoothly bounded to
        [LOG_STD_MIN, LOG_STD_MAX] like the Gaussian actor's log std."""
        s = self.noise(feat)
        return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(s) + 1.0)

    def rollout(self, feat: torch.Tensor, generator: torch.Generator | None = None
                ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The noisy chain [a_0, ..., a_K] and its log-density (B,) before the tanh."""
        shape = (feat.shape[0], self.action_dim)
        a = torch.randn(shape, generator=generator, device=feat.device, dtype=feat.dtype)
        half_log_2pi = 0.5 * math.log(2 * math.pi)
        log_prob = (-0.5 * a.pow(2) - half_log_2pi).sum(-1)
        log_sigma = self.log_sigma(feat)
        sigma = log_sigma.exp()
        chain = [a]
        dt = 1.0 / self.steps
        for k in range(self.steps):
            eps = torch.randn(shape, generator=generator, device=feat.device, dtype=feat.dtype)
            a = a + dt * self.velocity(feat, a, k * dt) + sigma * eps
            # log N(a_{k+1}; mean, sigma^2) with a_{k+1} - mean = sigma * eps
            log_prob = log_prob + (-0.5 * eps.pow(2) - log_sigma - half_log_2pi).sum(-1)
            chain.append(a)
        return chain, log_prob

    def sample(self, feat: torch.Tensor, generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised action in (-1, 1) and its log-probability (B,)."""
        chain, log_prob = self.rollout(feat, generator)
        u = chain[-1]
        log_prob = log_prob - (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)
        return torch.tanh(u), log_prob

    def flow_matching_loss(self, feat: torch.Tensor, action: torch.Tensor,
                           weight: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Behaviour cloning by conditional flow matching (Lipman et al.), weighted per row:
        on the straight path x_t = (1 - t) a_0 + t u from a_0 ~ N(0, I) to the demo action's
        pre-tanh value u, the velocity at one of the chain's K times must be u - a_0. Fitted,
        the noise-free chain carries N(0, I) onto the demos' actions, every mode of them."""
        u = torch.atanh(action.clamp(-0.999, 0.999))
        a0 = torch.randn(u.shape, generator=generator, device=u.device, dtype=u.dtype)
        k = torch.randint(0, self.steps, (u.shape[0], 1), generator=generator, device=u.device)
        t = k.to(u.dtype) / self.steps
        x = (1.0 - t) * a0 + t * u
        inp = torch.cat([feat, x, t], dim=-1)
        v = torch.sigmoid(self.gate(inp)) * (self.candidate(inp) - x)
        per_row = (v - (u - a0)).pow(2).sum(-1)
        return (per_row * weight).sum() / weight.sum().clamp(min=1.0)

    def mode(self, feat: torch.Tensor) -> torch.Tensor:
        a = torch.zeros_like(feat[:, :1]).expand(-1, self.action_dim)
        dt = 1.0 / self.steps
        for k in range(self.steps):
            a = a + dt * self.velocity(feat, a, k * dt)
        return torch.tanh(a)


class RunningNorm(nn.Module):
    """Running mean/variance of the state vector (SimBa-style input normalisation).

    Why: joint angles, velocities and metres differ by orders of magnitude; normalised inputs
    let one learning rate fit all. Statistics are merged from every training batch (Chan et
    al.'s parallel update) and travel with the policy weights, so actors normalise alike.
    """

    def __init__(self, dim: int, eps: float = 1e-6, clip: float = 10.0):
        super().__init__()
        self.eps, self.clip = eps, clip
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        n = x.shape[0]
        var, mean = torch.var_mean(x, dim=0, unbiased=False)
        total = self.count + n
        w = (n / total).to(x.dtype)
        delta = mean - self.mean
        self.mean.add_(delta * w)
        self.var.copy_(self.var * (1 - w) + var * w + delta.pow(2) * w * (1 - w))
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean) * torch.rsqrt(self.var + self.eps)).clamp(-self.clip, self.clip)
