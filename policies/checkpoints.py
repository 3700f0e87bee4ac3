"""Checkpoint folders: one layout for `train`, the async learner, `eval`, `export` and resume.

Why: a checkpoint resumes *exactly* (agent, replay, counters and every RNG the loop touches),
survives a kill at any moment (written in a temp folder, then `latest.json` is swapped in
atomically), and holds nothing that is unpickled: safetensors, .npy (allow_pickle=False), JSON.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robolearn.errors import DatasetError
from robolearn.run_lock import no_space_message
from robolearn.policies.env_building import make_env
from robolearn.policies.serialize import save_state
from robolearn.policies.train_config import config_from_dict

CHECKPOINTS = "checkpoints"
LATEST = "latest.json"


def json_rng(state: Any) -> Any:
    """numpy bit-generator / legacy states -> JSON-able."""
    if isinstance(state, dict):
        return {k: json_rng(v) for k, v in state.items()}
    if isinstance(state, np.ndarray):
        return {"__uint_array__": state.tolist(), "dtype": str(state.dtype)}
    if isinstance(state, np.generic):
        return state.item()
    return state


def unjson_rng(state: Any) -> Any:
    if isinstance(state, dict):
        if "__uint_array__" in state:
            return np.asarray(state["__uint_array__"], dtype=state["dtype"])
        return {k: unjson_rng(v) for k, v in state.items()}
    return state


def py_random_state() -> list:
    version, internal, gauss = random.getstate()
    return [version, list(internal), gauss]


def set_py_random_state(s: list) -> None:
    random.setstate((s[0], tuple(s[1]), s[2]))


def write_checkpoint(root: Path, env_steps: int, agent, buffers: dict, state: dict,
                     write_extra=None) -> Path:
    """Write root/step_<N>/ (agent state, policy weights, each buffer, trainer.json) in a temp
    folder, swap it in, then atomically point root/latest.json at it and remove older ones: a
    kill at any moment leaves the previous checkpoint usable. Shared by `train` and the
    async learner so `robolearn eval` and resume read one layout."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    name = f"step_{env_steps:09d}"
    final, tmp = root / name, root / (name + ".tmp")
    ptr = root / (LATEST + ".tmp")
    try:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        save_state(tmp / "agent.safetensors", agent.state_dict())
        save_file({k: v.detach().cpu().contiguous() for k, v in agent.policy_state().items()},
                  str(tmp / "policy.safetensors"))
        for sub, buffer in buffers.items():
            if buffer is not None:
                buffer.save(tmp / sub)
        if write_extra is not None:
            write_extra(tmp)
        (tmp / "trainer.json").write_text(json.dumps(state, indent=1))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        ptr.write_text(json.dumps({"checkpoint": name, "env_steps": env_steps}))
        os.replace(ptr, root / LATEST)
    except (OSError, SafetensorError) as exc:  # disk full, read-only, quota (safetensors
        # reports a failed write as its own error): keep the previous checkpoint intact
        shutil.rmtree(tmp, ignore_errors=True)
        ptr.unlink(missing_ok=True)
        try:
            prev = str(find_checkpoint(root))
        except DatasetError:
            prev = None
        kept = (f"the previous checkpoint {prev} is kept (continue from it with `robolearn train "
                f"--resume {root.parent}`)" if prev else "there is no earlier checkpoint")
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        need = no_space_message(root if root.is_dir() else root.parent,
                                checkpoint_bytes(agent, buffers))
        raise DatasetError(f"cannot write checkpoint {final} ({reason}): {need}; free disk "
                           f"space or pick a writable folder; {kept}") from None
    for old in root.glob("step_*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return final


def checkpoint_bytes(agent, buffers: dict) -> int:
    """About how many bytes a checkpoint of `agent` and `buffers` takes (for a disk-full error)."""
    def tensors(tree) -> int:
        if isinstance(tree, torch.Tensor):
            return tree.numel() * tree.element_size()
        if isinstance(tree, np.ndarray):
            return int(tree.nbytes)
        if isinstance(tree, dict):
            return sum(tensors(v) for v in tree.values())
        if isinstance(tree, (list, tuple)):
            return sum(tensors(v) for v in tree)
        return 0

    total = 0
    try:
        total += tensors(agent.state_dict()) + tensors(agent.policy_state())
    except Exception:  # noqa: BLE001 - an estimate only
        pass
    for buffer in buffers.values():
        nbytes = getattr(buffer, "nbytes", None) if buffer is not None else None
        try:
            total += int(nbytes() if callable(nbytes) else nbytes or 0)
        except Exception:  # noqa: BLE001
            pass
    return total


def read_json_file(path: Path) -> Any:
    """A JSON file of a run/checkpoint; a truncated or corrupt one is a DatasetError naming it."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise DatasetError(f"{path} is missing: the checkpoint is incomplete") from None
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path} is truncated or corrupt ({exc}); restore it from a copy or "
                           "use an earlier run") from None


def read_tensors_file(path: Path) -> dict:
    """A safetensors file of a checkpoint; a truncated or corrupt one is a DatasetError naming it."""
    from safetensors.torch import load_file

    if not Path(path).is_file():
        raise DatasetError(f"{path} is missing: the checkpoint is incomplete")
    try:
        return load_file(str(path))
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
        raise DatasetError(f"{path} is truncated or corrupt ({exc}); restore it from a copy or "
                           "use an earlier run") from None


def find_checkpoint(path: str | Path) -> Path:
    """A run folder, its checkpoints/ folder, or one step_* folder -> the checkpoint folder."""
    p = Path(path)
    for root in (p / CHECKPOINTS, p):
        if (root / LATEST).is_file():
            ptr = read_json_file(root / LATEST)
            if not isinstance(ptr, dict) or not isinstance(ptr.get("checkpoint"), str):
                raise DatasetError(f"{root / LATEST} is truncated or corrupt (no 'checkpoint' entry)")
            return root / ptr["checkpoint"]
    if (p / "trainer.json").is_file():
        return p
    raise DatasetError(f"no checkpoint in {p}: pass a run folder written by `robolearn train` "
                       f"(it holds {CHECKPOINTS}/{LATEST})")


def load_agent(checkpoint: str | Path, render_mode: str | None = None,
               env_kwargs: dict | None = None, reality_gap: bool = True):
    """(agent, env, TrainConfig) from a run folder: rebuilds the agent from the saved config
    and loads only the policy weights (`policy.safetensors`), as an actor would.

    `env_kwargs` override the training env's options, e.g. {"backend": "real", "port": ...} to
    run a sim-trained policy on hardware. The `privileged` observation is dropped unless the
    policy's actor reads it (privileged="actor_and_critic", a sim-only study mode).
    `reality_gap=False` leaves out the run's `[reality_gap]` wrappers: a caller that sets the
    sim's model itself (a reality file's masses and camera) would see them reset every episode."""
    from robolearn.policies.registry import make_agent

    ckpt = find_checkpoint(checkpoint)
    state = read_json_file(ckpt / "trainer.json")
    weights = read_tensors_file(ckpt / "policy.safetensors")
    cfg = config_from_dict(state["train"], source=f"checkpoint {ckpt}")
    torch.set_num_threads(cfg.threads)
    kwargs = {**cfg.env_kwargs, **(env_kwargs or {})}
    if state["agent_overrides"].get("privileged") != "actor_and_critic" and not (env_kwargs or {}).get("privileged_obs"):
        kwargs.pop("privileged_obs", None)  # acting never needs it: runs where it does not exist
    env = make_env(cfg.env, cfg.obs, render_mode, cfg.max_episode_steps, kwargs,
                   cfg.reality_gap if reality_gap else None, cfg.sim_params)
    try:
        # acting needs no GPU: a policy trained with --device cuda runs on a CPU-only computer
        agent = make_agent(cfg.algo, env.observation_space, env.action_space, seed=cfg.seed,
                           **{**state["agent_overrides"], "device": "cpu"})
        agent.load_policy_state(weights)
    except BaseException:
        env.close()
        raise
    return agent, env, cfg


def load_policy(checkpoint: str | Path, render_mode: str | None = None,
                env_kwargs: dict | None = None, reality_gap: bool = True):
    """(act_fn, env, TrainConfig): the deterministic policy of a run folder (see load_agent)."""
    agent, env, cfg = load_agent(checkpoint, render_mode, env_kwargs, reality_gap)
    return (lambda obs: agent.act(obs, deterministic=True)), env, cfg
