"""A reward model on disk: `DIR/model.safetensors` (weights) + `DIR/reward.json` (kind,
architecture, cameras, image shape, threshold, training report). No pickle: the weights are
safetensors, everything else is JSON, so a model handed over by someone else runs no code."""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from robolearn.jsonfile import read_json
from robolearn.rewards.base import RewardModelError

WEIGHTS = "model.safetensors"
META = "reward.json"
FORMAT = "robolearn-reward-model"


def existing_model(out: str | os.PathLike) -> list[str]:
    """The model files already in `out` (empty: nothing to overwrite)."""
    out = Path(out)
    return [name for name in (META, WEIGHTS) if (out / name).exists()]


def save_model(out: str | os.PathLike, module: torch.nn.Module, meta: dict) -> Path:
    """Write weights and metadata to temp files first and rename both into place only when
    both are complete, so a crash or a full disk while writing leaves the previous model (or
    none), never a truncated one; temp files are removed on failure."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in module.state_dict().items()}
    tmp_w, tmp_m = out / (WEIGHTS + ".tmp"), out / (META + ".tmp")
    try:
        save_file(tensors, str(tmp_w))
        tmp_m.write_text(json.dumps({"format": FORMAT, **meta}, indent=2))
        os.replace(tmp_w, out / WEIGHTS)
        os.replace(tmp_m, out / META)
    except OSError as exc:
        for tmp in (tmp_w, tmp_m):
            tmp.unlink(missing_ok=True)
        raise RewardModelError(f"cannot write the reward model to {out}: {exc}") from None
    return out


def read_meta(path: str | os.PathLike, kind: str | None = None) -> dict:
    path = Path(path)
    meta_path = path / META
    meta = read_json(meta_path, RewardModelError,
                     f"reward model {path}: no {META} there (train one with "
                     "`robolearn reward train DATASET --kind classifier --out DIR`)")
    if meta.get("format") != FORMAT:
        raise RewardModelError(f"{meta_path}: not a robolearn reward model (format={meta.get('format')!r})")
    if kind is not None and meta.get("kind") != kind:
        raise RewardModelError(f"reward model {path} is a {meta.get('kind')!r} model, expected {kind!r}")
    return meta


def load_weights(path: str | os.PathLike, module: torch.nn.Module) -> None:
    """Load DIR/model.safetensors into `module`; a key/shape mismatch names the difference."""
    from safetensors.torch import load_file

    f = Path(path) / WEIGHTS
    if not f.is_file():
        raise RewardModelError(f"reward model {path}: {WEIGHTS} is missing (copy the whole folder)")
    try:
        tensors = load_file(str(f))
    except Exception as exc:  # safetensors raises its own types for truncated files
        raise RewardModelError(f"{f}: cannot read ({exc}); the file is truncated or corrupt") from None
    own = module.state_dict()
    missing, extra = sorted(set(own) - set(tensors)), sorted(set(tensors) - set(own))
    if missing or extra:
        raise RewardModelError(f"{f}: wrong architecture for {META}'s settings: missing {missing[:4]}, "
                               f"unexpected {extra[:4]} (was {META} edited or copied from another model?)")
    for k, t in tensors.items():
        if t.shape != own[k].shape:
            raise RewardModelError(f"{f}: wrong architecture: {k} has shape {tuple(t.shape)}, "
                                   f"{META} says {tuple(own[k].shape)}")
    module.load_state_dict(tensors)
