"""Saving a `Trainer` into a checkpoint and loading it back, exactly.

Why: a resumed run must continue bit-identically (agent, replays, counters, the loop's, numpy's,
python's, torch's and the env's RNGs), and refuse a checkpoint whose perception model or
update count does not match rather than train on silently mixed data.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from robolearn.errors import ConfigError, DatasetError
from robolearn.policies.checkpoints import (CHECKPOINTS, find_checkpoint, json_rng, py_random_state,
                                            read_json_file, read_tensors_file, set_py_random_state,
                                            unjson_rng, write_checkpoint)
from robolearn.policies.env_building import perception_digest
from robolearn.policies.serialize import load_state
from robolearn.policies.trainer_hooks import reset_record


def save_trainer_checkpoint(trainer, final: bool = False) -> Path:
    """A `Trainer`'s checkpoint: agent, replays and every RNG the loop touches, plus what its
    hooks add (robolearn/policies/checkpoints.py writes the folder)."""
    env_rng = trainer.env.unwrapped.np_random.bit_generator.state
    # Envs with randomness outside `np_random` (e.g. dm_control's task RandomState) can
    # expose get_rng_state()/set_rng_state(state) (JSON-able) to be resumed exactly too.
    get_extra = getattr(trainer.env.unwrapped, "get_rng_state", None)
    state = {
        "env_steps": trainer.env_steps, "updates": trainer.updates, "episodes": trainer.episodes,
        "wall_s": trainer.wall_before, "update_time_s": trainer.update_time, "demo_count": trainer.demo_count, "final": final,
        "replay_capacity": trainer.replay_capacity, "prior_capacity": trainer.prior_capacity,
        "earlier_capacity": trainer.earlier.capacity if trainer.earlier is not None else 0,
        "prior_runs": trainer.prior_runs_report,
        "last_eval": trainer.last_eval, "loss_acc": trainer._loss_acc,
        "rejected_missing_reward": trainer.rejected_missing_reward,
        "rng": {"loop": json_rng(trainer.rng.bit_generator.state), "env": json_rng(env_rng),
                "env_extra": json_rng(get_extra()) if get_extra else None,
                "numpy_global": json_rng(np.random.get_state(legacy=False)),
                "python": py_random_state()},
        "train": dataclasses.asdict(trainer.cfg), "agent_overrides": trainer.agent_overrides,
        "perception_sha256": perception_digest(trainer.env),
        "hooks": {"kind": trainer.hooks.kind, **trainer.hooks.checkpoint_state(trainer)},
    }
    if trainer.batches is not None and trainer.batches is not trainer.sampler:
        state["device_sampling"] = trainer.batches.state()  # CUDA: the device draws' generators
    from safetensors.torch import save_file

    def extra_files(folder: Path) -> None:
        save_file({"torch_rng": torch.get_rng_state()}, str(folder / "torch_rng.safetensors"))
        trainer.hooks.write_checkpoint_files(trainer, folder)

    return write_checkpoint(trainer.dir / CHECKPOINTS, trainer.env_steps, trainer.agent,
                            {"replay": trainer.replay, "prior": trainer.prior, "earlier": trainer.earlier,
                             **trainer.hooks.checkpoint_buffers(trainer)}, state, extra_files)


def init_state(run: str | Path) -> tuple[Path, dict]:
    """(last checkpoint, its trainer.json) of the run a new run starts from (`init_from`)."""
    ckpt = find_checkpoint(run)
    return ckpt, read_json_file(ckpt / "trainer.json")


def init_trainer_from(trainer, run: str | Path) -> dict:
    """Start a freshly built `Trainer` from another run's last checkpoint: its agent (weights,
    optimisers, temperature) and its replay, with this run's counters at zero (the prior buffer is
    this run's own `demos`).

    Why: continuing a finished training under changed options (a `[reality_gap]` table, another
    reward) is a new run, not a resume: its config, budget and folder are its own, but the
    policy and the data it learned from carry over (a resume refuses a changed config)."""
    ckpt, state = init_state(run)
    saved, now = state.get("perception_sha256"), perception_digest(trainer.env)
    if "perception_sha256" in state and saved != now:
        raise ConfigError(f"init_from {run}: its replay holds the features of another perception model "
                          f"(sha256 {str(saved)[:12]}, this run's {str(now)[:12]}); use the same "
                          "env_kwargs perception folder")
    trainer.agent.load_state_dict(load_state(ckpt / "agent.safetensors"))
    trainer.agent.num_updates = 0      # this run's update count (UTD pacing, actor delays) starts here
    try:
        trainer.replay.load(ckpt / "replay")
    except DatasetError as exc:
        raise DatasetError(f"init_from {run}: {exc} (give this run its buffer_size, "
                           f"{state.get('replay_capacity')})") from None
    return {"run": str(run), "checkpoint": str(ckpt), "env_steps": int(state["env_steps"]),
            "replay": len(trainer.replay), "prior": len(trainer.prior) if trainer.prior is not None else 0}


def restore_trainer(trainer, ckpt: Path, state: dict) -> None:
    """Load a checkpoint into a `Trainer` built with the checkpoint's config, and start the
    episode the uninterrupted run would have started."""
    cfg = trainer.cfg
    # the replay holds the perception model's features: another model's would silently mix in
    saved, now = state.get("perception_sha256"), perception_digest(trainer.env)
    if "perception_sha256" in state and saved != now:
        raise ConfigError(f"checkpoint {ckpt}: the perception model "
                          f"{cfg.env_kwargs.get('perception')!r} is not the one this run was trained "
                          f"with (sha256 {str(now)[:12]}, the run used {str(saved)[:12]}); "
                          "restore that model folder, or start a new run")
    trainer.agent.load_state_dict(load_state(ckpt / "agent.safetensors"))
    trainer.replay.load(ckpt / "replay")
    if trainer.prior is not None:
        trainer.prior.load(ckpt / "prior")
    if trainer.earlier is not None:  # earlier runs' own buffer (RaE beside rlpd's demos)
        trainer.earlier.load(ckpt / "earlier")
    trainer.env_steps = int(state["env_steps"])
    trainer.episodes = int(state["episodes"])
    trainer.wall_before = float(state["wall_s"])
    trainer.update_time = float(state["update_time_s"])
    trainer.last_eval = state["last_eval"]
    trainer._loss_acc = state["loss_acc"]
    trainer.rejected_missing_reward = int(state.get("rejected_missing_reward", trainer.rejected_missing_reward))
    if trainer.updates != int(state["updates"]):
        raise DatasetError(f"checkpoint {ckpt}: agent has {trainer.updates} updates, "
                           f"trainer.json says {state['updates']}; the checkpoint is inconsistent")
    trainer.hooks.restore(trainer, ckpt, state)
    # CUDA: the device mirror is built from the loaded buffers when run() starts
    trainer.batches, trainer._batches_state = None, state.get("device_sampling")
    rng = state["rng"]
    trainer.rng.bit_generator.state = unjson_rng(rng["loop"])
    np.random.set_state(unjson_rng(rng["numpy_global"]))
    set_py_random_state(rng["python"])
    torch.set_rng_state(read_tensors_file(ckpt / "torch_rng.safetensors")["torch_rng"])
    # The checkpoint was taken at an episode boundary just before reset(): seed the env
    # once (the first reset must be seeded in gymnasium), then restore its RNG and reset
    # so the next episode is the one the uninterrupted run would have started.
    trainer.env.reset(seed=cfg.seed, options=trainer.hooks.first_reset_options(trainer) or None)
    trainer.env.unwrapped.np_random.bit_generator.state = unjson_rng(rng["env"])
    if rng.get("env_extra") is not None and hasattr(trainer.env.unwrapped, "set_rng_state"):
        trainer.env.unwrapped.set_rng_state(unjson_rng(rng["env_extra"]))
    trainer._obs, info0 = trainer.env.reset(options=trainer.hooks.resume_reset_options(trainer) or None)
    trainer._last_reset = trainer.hooks.note_reset(trainer, reset_record(info0), None)
