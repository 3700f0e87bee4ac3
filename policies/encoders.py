"""Pixel encoders for DrQ-style learning: a small conv net per camera and random-shift
augmentation.

Why this shape (DrQ / DrQ-v2): images from a few-thousand-step run are too few to learn a
conv net without augmentation; shifting each image by up to `pad` pixels (replicate-pad, then
crop back) regularises the critic cheaply. The encoder is trained by the critic loss only; the
actor reads detached features. A pretrained encoder can be loaded from a LOCAL safetensors
file (nothing is downloaded) and optionally frozen.
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

from robolearn.errors import ConfigError, DatasetError


class ConvEncoder(nn.Module):
    """(B, C, H, W) float in [0, 255] -> (B, feature_dim) in (-1, 1).

    conv3x3/2 then (layers-1) conv3x3/1, ReLU; Linear -> LayerNorm -> tanh (DrQ's head).
    """

    def __init__(self, image_shape: tuple[int, int, int], feature_dim: int = 50,
                 filters: int = 32, layers: int = 4):
        super().__init__()
        h, w, c = image_shape
        self.image_shape = (h, w, c)  # (H, W, C) of the uint8 camera frames it reads
        convs: list[nn.Module] = [nn.Conv2d(c, filters, 3, stride=2), nn.ReLU()]
        for _ in range(layers - 1):
            convs += [nn.Conv2d(filters, filters, 3, stride=1), nn.ReLU()]
        self.convs = nn.Sequential(*convs)
        oh, ow = (h - 3) // 2 + 1 - 2 * (layers - 1), (w - 3) // 2 + 1 - 2 * (layers - 1)
        if oh < 1 or ow < 1:
            raise ConfigError(f"camera image {h}x{w} is too small for a {layers}-layer conv "
                              "encoder; use larger images or fewer encoder_layers")
        self.head = nn.Sequential(nn.Linear(filters * oh * ow, feature_dim), nn.LayerNorm(feature_dim),
                                  nn.Tanh())
        self.feature_dim = feature_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x / 255.0 - 0.5
        return self.head(self.convs(x).flatten(1))


def random_shift(x: torch.Tensor, pad: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Shift each image of (B, C, H, W) by an integer in [-pad, pad] per axis (replicate edges)."""
    if pad <= 0:
        return x
    b, c, h, w = x.shape
    x = F.pad(x, (pad, pad, pad, pad), mode="replicate")
    sy = torch.randint(0, 2 * pad + 1, (b, 1), generator=generator, device=x.device)
    sx = torch.randint(0, 2 * pad + 1, (b, 1), generator=generator, device=x.device)
    rows = torch.arange(h, device=x.device) + sy  # (B, H)
    cols = torch.arange(w, device=x.device) + sx  # (B, W)
    x = x.gather(2, rows[:, None, :, None].expand(b, c, h, w + 2 * pad))
    return x.gather(3, cols[:, None, None, :].expand(b, c, h, w))


def colour_jitter(x: torch.Tensor, generator: torch.Generator | None = None, gain: float = 0.25,
                  brightness: float = 25.0, contrast: float = 0.25) -> torch.Tensor:
    """Per-image channel gains (a tint), brightness and contrast on float (B, H, W, 3) in
    [0, 255]: the colour half of domain randomisation, for models that must survive another
    camera's colours and light (perception localiser, success classifier)."""
    b = x.shape[0]
    dev = x.device

    def u(*shape):
        return torch.rand(*shape, generator=generator, device=dev) * 2 - 1

    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    x = ((x - mean) * (1.0 + contrast * u(b, 1, 1, 1)) + mean) * (1.0 + gain * u(b, 1, 1, 3))
    return (x + brightness * u(b, 1, 1, 1)).clamp(0, 255)


class PixelEncoder(nn.Module):
    """One ConvEncoder per camera key; features concatenated in key order."""

    def __init__(self, image_shapes: dict[str, tuple[int, int, int]], feature_dim: int = 50,
                 filters: int = 32, layers: int = 4):
        super().__init__()
        self.keys = list(image_shapes)
        self.encoders = nn.ModuleDict({k: ConvEncoder(s, feature_dim, filters, layers)
                                       for k, s in image_shapes.items()})
        self.feature_dim = feature_dim * len(self.keys)

    def forward(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([self.encoders[k](images[k]) for k in self.keys], dim=-1)

    def load_pretrained(self, path: str) -> None:
        """Initialise from a local safetensors file: either one ConvEncoder's tensors (applied to
        every camera) or this module's own keys (`encoders.<camera>.<...>`)."""
        if not os.path.isfile(path):
            raise DatasetError(f"encoder checkpoint {path!r} not found; pass a local .safetensors "
                               "file (nothing is downloaded)")
        from safetensors.torch import load_file

        try:
            tensors = load_file(path)
        except Exception as exc:  # safetensors raises its own error types
            raise DatasetError(f"cannot read encoder checkpoint {path!r}: {exc}") from None
        own = self.state_dict()
        if set(tensors) == set(own):
            wanted = tensors
        else:
            one = self.encoders[self.keys[0]].state_dict()
            if set(tensors) != set(one):
                raise DatasetError(
                    f"encoder checkpoint {path!r} has keys {sorted(tensors)[:6]}...; expected a "
                    f"ConvEncoder's keys {sorted(one)[:6]}... or {sorted(own)[:6]}...")
            wanted = {f"encoders.{k}.{n}": t for k in self.keys for n, t in tensors.items()}
        for name, t in wanted.items():
            if t.shape != own[name].shape:
                raise DatasetError(f"encoder checkpoint {path!r}: {name} has shape {tuple(t.shape)}, "
                                   f"this encoder needs {tuple(own[name].shape)} (same image size, "
                                   "feature_dim, encoder_filters, encoder_layers?)")
        self.load_state_dict(wanted)
