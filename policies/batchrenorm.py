"""Batch Renormalization (Ioffe 2017) over an ensemble axis, as CrossQ puts it in its critics.

Why renorm rather than plain BatchNorm: CrossQ evaluates the critic with running statistics
when it trains the actor, so train-time outputs must agree with running-statistics outputs.
Renorm corrects the batch statistics toward the running ones (r, d clipped to r_max, d_max)
once a warm-up of plain BatchNorm steps has filled the running estimates.

Input layout is (E, B, F): every ensemble member normalises its own features over the batch.
`BatchRenorm` is the single-network form (B, F) that CrossQ's actor uses.
"""
from __future__ import annotations

import torch
from torch import nn


class EnsembleBatchRenorm(nn.Module):
    def __init__(self, ensemble_size: int, num_features: int, momentum: float = 0.01,
                 eps: float = 1e-3, r_max: float = 3.0, d_max: float = 5.0,
                 warmup_steps: int = 100_000):
        super().__init__()
        self.momentum, self.eps = float(momentum), float(eps)
        self.r_max, self.d_max, self.warmup_steps = float(r_max), float(d_max), int(warmup_steps)
        shape = (ensemble_size, 1, num_features)
        self.weight = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))
        self.register_buffer("running_mean", torch.zeros(shape))
        self.register_buffer("running_var", torch.ones(shape))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            x_hat = (x - self.running_mean) * torch.rsqrt(self.running_var + self.eps)
            return x_hat * self.weight + self.bias
        var, mean = torch.var_mean(x, dim=1, keepdim=True, unbiased=False)
        std = torch.sqrt(var + self.eps)
        x_hat = (x - mean) / std
        with torch.no_grad():
            running_std = torch.sqrt(self.running_var + self.eps)
            r = (std / running_std).clamp(1.0 / self.r_max, self.r_max)
            d = ((mean - self.running_mean) / running_std).clamp(-self.d_max, self.d_max)
            # plain BatchNorm during warm-up: r = 1, d = 0 (branch-free, no host sync)
            on = (self.steps >= self.warmup_steps).to(x.dtype)
            r = on * r + (1.0 - on)
            d = on * d
            n = x.shape[1]
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var * (n / max(n - 1, 1)), self.momentum)
            self.steps += 1
        return (x_hat * r + d) * self.weight + self.bias


class BatchRenorm(EnsembleBatchRenorm):
    """One network's Batch Renormalization: (B, F) in and out (CrossQ's actor)."""

    def __init__(self, num_features: int, **kwargs):
        super().__init__(1, num_features, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.unsqueeze(0)).squeeze(0)
