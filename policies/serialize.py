"""Save nested state (agent.state_dict(): tensors, optimiser dicts, counters) without pickle.

Why: checkpoints and weights get copied between machines and handed to people; unpickling
them would run arbitrary code. Tensors go into a safetensors file; the nesting and the plain
Python leaves (ints, floats, bools, strings, None, tuples, int dict keys of optimiser states)
go into its JSON metadata.
"""
from __future__ import annotations

import json
import os
from typing import Any

import torch

from robolearn.errors import DatasetError

_META_KEY = "robolearn.tree"


def flatten_state(tree: Any) -> tuple[dict[str, torch.Tensor], Any]:
    """(tensors by path, JSON-able skeleton with {"__tensor__": path} placeholders)."""
    tensors: dict[str, torch.Tensor] = {}

    def walk(node, path):
        if isinstance(node, torch.Tensor):
            tensors[path] = node.detach().to("cpu", copy=True).contiguous()
            return {"__tensor__": path}
        if isinstance(node, dict):
            return {"__dict__": [[k, walk(v, f"{path}/{k}")] for k, v in node.items()]}
        if isinstance(node, (list, tuple)):
            items = [walk(v, f"{path}/{i}") for i, v in enumerate(node)]
            return {"__tuple__": items} if isinstance(node, tuple) else items
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        raise TypeError(f"cannot serialise {type(node).__name__} at {path or '/'}")

    return tensors, walk(tree, "")


def unflatten_state(tensors: dict[str, torch.Tensor], skeleton: Any) -> Any:
    def build(node):
        if isinstance(node, dict):
            if "__tensor__" in node:
                return tensors[node["__tensor__"]]
            if "__tuple__" in node:
                return tuple(build(v) for v in node["__tuple__"])
            return {k: build(v) for k, v in node["__dict__"]}
        if isinstance(node, list):
            return [build(v) for v in node]
        return node

    return build(skeleton)


def save_state(path: str | os.PathLike, tree: Any) -> None:
    """Write `tree` to one safetensors file (atomically: temp file, then rename)."""
    from safetensors.torch import save_file

    tensors, skeleton = flatten_state(tree)
    tmp = f"{path}.tmp"
    try:
        save_file(tensors, tmp, metadata={_META_KEY: json.dumps(skeleton)})
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_state(path: str | os.PathLike) -> Any:
    """Read a file written by `save_state` (raises DatasetError if missing or foreign)."""
    from safetensors import safe_open

    if not os.path.isfile(path):
        raise DatasetError(f"{path} not found: expected a state file written by save_state")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as exc:  # safetensors has its own error types
        raise DatasetError(f"cannot read {path}: {exc} (truncated or not a safetensors file)") from None
    if _META_KEY not in meta:
        raise DatasetError(f"{path} is a safetensors file without robolearn state metadata "
                           "(a plain weights file? load it with safetensors.torch.load_file)")
    return unflatten_state(tensors, json.loads(meta[_META_KEY]))
