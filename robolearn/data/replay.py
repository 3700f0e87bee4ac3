"""Replay for dict observations: numpy ring buffers, n-step returns, online+prior mixing, disk.

Why this layout: camera frames dominate memory, so every observation is stored ONCE in a slot
ring. Slot i holds obs_i plus the action/reward/flags taken from it; its next observation is
slot i+1. When an episode ends (terminated or truncated) the final next observation goes into
the following slot as a *pad* slot (no action, never sampled), and the next episode starts one
slot further on. A transition whose next slot is not a valid transition (the write head, a pad,
a break in the stream) bootstraps from that slot, so n-step chains stop there by construction.

Files on disk (`save(dir)`): one raw `.npy` per array plus `meta.json` (written last) with the
spaces, counters and the sampling RNG state; loading never unpickles (`allow_pickle=False`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from robolearn.errors import ConfigError, DatasetError, TrainingError
from robolearn.jsonfile import read_json, write_json_atomic

FORMAT_VERSION = 1


@dataclass
class Batch:
    """A minibatch of n-step transitions (numpy; the learner moves it to its device)."""

    obs: dict[str, np.ndarray]
    action: np.ndarray  # (B, A) float32
    reward: np.ndarray  # (B,) float32: sum_{k<n} gamma^k r_{t+k}
    next_obs: dict[str, np.ndarray]
    discount: np.ndarray  # (B,) float32: gamma^n * (1 - terminated)
    intervention: np.ndarray  # (B,) bool
    #: (B,) bool, True for rows drawn from the prior buffer (MixedSampler); None: no prior part
    prior: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.action.shape[0])

    @staticmethod
    def concat(batches: list["Batch"]) -> "Batch":
        """One batch from several (used by the mixing sampler)."""
        keys = batches[0].obs.keys()
        return Batch(
            obs={k: np.concatenate([b.obs[k] for b in batches]) for k in keys},
            action=np.concatenate([b.action for b in batches]),
            reward=np.concatenate([b.reward for b in batches]),
            next_obs={k: np.concatenate([b.next_obs[k] for b in batches]) for k in keys},
            discount=np.concatenate([b.discount for b in batches]),
            intervention=np.concatenate([b.intervention for b in batches]),
            prior=None if all(b.prior is None for b in batches) else np.concatenate(
                [b.prior if b.prior is not None else np.zeros(len(b), bool) for b in batches]),
        )


def _space_spec(space: gym.spaces.Dict) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    if not isinstance(space, gym.spaces.Dict):
        raise ConfigError(f"observation_space must be a gymnasium.spaces.Dict, got {type(space).__name__}")
    return {k: (tuple(s.shape), np.dtype(s.dtype)) for k, s in space.spaces.items()}


class ReplayBuffer:
    """Numpy ring buffer of transitions with dict observations (each frame stored once)."""

    def __init__(self, observation_space: gym.spaces.Dict, action_space: gym.spaces.Box,
                 capacity: int, n_step: int = 1, gamma: float = 0.99, seed: int = 0):
        self.spec = _space_spec(observation_space)
        if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
            raise ConfigError(f"action_space must be a 1-D Box, got {action_space}")
        if int(capacity) < 2:
            raise ConfigError(f"replay capacity={capacity}: needs at least 2 slots")
        if int(n_step) < 1:
            raise ConfigError(f"n_step={n_step}: must be >= 1")
        if not 0.0 <= float(gamma) <= 1.0:
            raise ConfigError(f"gamma={gamma}: must be in [0, 1]")
        self.observation_space = observation_space
        self.action_space = action_space
        self.capacity = int(capacity)
        self.n_step = int(n_step)
        self.gamma = float(gamma)
        self.action_dim = int(action_space.shape[0])
        cap = self.capacity
        self._obs = {k: np.zeros((cap, *shape), dtype) for k, (shape, dtype) in self.spec.items()}
        self._action = np.zeros((cap, self.action_dim), np.float32)
        self._reward = np.zeros(cap, np.float32)
        self._terminated = np.zeros(cap, bool)
        self._truncated = np.zeros(cap, bool)
        self._intervention = np.zeros(cap, bool)
        self._valid = np.zeros(cap, bool)  # slot starts a sampleable transition
        self._ptr = 0  # slot the next transition's obs goes to
        self._filled = 0  # slots ever written (<= capacity)
        self._count = 0  # number of valid slots
        self._open = False  # slot _ptr already holds the previous transition's next_obs
        self.rng = np.random.default_rng(seed)
        self._touched: list[int] | None = None  # slots written since a DeviceReplay's refresh

    # ------------------------------------------------------------------------------ writing
    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        arrays = [*self._obs.values(), self._action, self._reward, self._terminated,
                  self._truncated, self._intervention, self._valid]
        return int(sum(a.nbytes for a in arrays))

    def _check_obs(self, obs: dict, what: str) -> None:
        if not isinstance(obs, dict) or set(obs) != set(self.spec):
            got = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
            raise DatasetError(f"{what} has keys {got}, the buffer expects {sorted(self.spec)}")
        for k, (shape, _) in self.spec.items():
            if np.shape(obs[k]) != shape:
                raise DatasetError(f"{what}[{k!r}] has shape {np.shape(obs[k])}, expected {shape}")

    def _write_obs(self, slot: int, obs: dict) -> None:
        if self._touched is not None:
            self._touched.append(slot)
        self._set_valid(slot, False)
        for k, arr in self._obs.items():
            arr[slot] = obs[k]
        self._filled = max(self._filled, slot + 1)

    def _set_valid(self, slot: int, value: bool) -> None:
        if self._valid[slot] != value:
            self._count += 1 if value else -1
            self._valid[slot] = value

    def _same_obs(self, slot: int, obs: dict) -> bool:
        return all(np.array_equal(self._obs[k][slot], obs[k]) for k in self._obs)

    def add(self, obs: dict, action, reward: float, next_obs: dict, terminated: bool,
            truncated: bool, intervention: bool = False) -> int:
        """Store one transition; returns its slot. Consecutive calls of one episode share the
        frame in between."""
        self._check_obs(obs, "obs")
        self._check_obs(next_obs, "next_obs")
        action = np.asarray(action, np.float32)
        if action.shape != (self.action_dim,):
            raise DatasetError(f"action has shape {action.shape}, expected ({self.action_dim},)")
        if not np.all(np.isfinite(action)) or not np.isfinite(reward):
            raise DatasetError(f"non-finite transition: action={action.tolist()} reward={reward}")
        cap = self.capacity
        if self._open and not self._same_obs(self._ptr, obs):
            # The stream broke without a done flag: keep the stored frame as the previous
            # transition's next_obs (a pad) and start afresh in the following slot.
            self._ptr = (self._ptr + 1) % cap
            self._open = False
        if not self._open:
            self._write_obs(self._ptr, obs)
        i = self._ptr
        self._action[i] = action
        self._reward[i] = reward
        self._terminated[i] = bool(terminated)
        self._truncated[i] = bool(truncated)
        self._intervention[i] = bool(intervention)
        self._set_valid(i, True)
        if self._touched is not None:
            self._touched.append(i)
        j = (i + 1) % cap
        self._write_obs(j, next_obs)
        self._ptr = j
        self._open = True
        if terminated or truncated:  # slot j stays a pad holding the final observation
            self._ptr = (j + 1) % cap
            self._open = False
        return i

    def end_at(self, slot: int, reward_delta: float = 0.0) -> None:
        """Make the stored transition at `slot` terminal, its reward moved by `reward_delta`
        (`runtime/takeover_penalty.py`: the policy's step into an operator takeover). The frames
        stay: the stream that follows still starts from its next observation."""
        if not self._valid[slot]:
            raise DatasetError(f"slot {slot} holds no transition")
        self._reward[slot] += np.float32(reward_delta)
        self._terminated[slot] = True
        if self._touched is not None:
            self._touched.append(int(slot))

    # ----------------------------------------------------------------------------- sampling
    def _sample_indices(self, batch_size: int) -> np.ndarray:
        if self._count == 0:
            raise TrainingError("sample() on an empty replay buffer: add transitions first "
                                "(or raise learning_starts)")
        out = np.empty(0, np.int64)
        while out.size < batch_size:
            need = batch_size - out.size
            draw = self.rng.integers(0, self._filled, size=max(2 * need, 16))
            draw = draw[self._valid[draw]]
            out = np.concatenate([out, draw[:need]])
        return out

    def sample(self, batch_size: int) -> Batch:
        """Uniform minibatch of n-step transitions (own RNG, so resumed runs sample alike)."""
        return self.gather(self._sample_indices(int(batch_size)))

    def gather(self, idx: np.ndarray) -> Batch:
        """The n-step transitions starting at slots `idx`."""
        cap = self.capacity
        idx = np.asarray(idx, np.int64)
        reward = self._reward[idx].astype(np.float64)
        last = idx.copy()  # last transition slot included in each chain
        alive = ~(self._terminated[idx] | self._truncated[idx])
        for k in range(1, self.n_step):
            nxt = (last + 1) % cap
            step = alive & self._valid[nxt]
            # a chain must not run into the write head (slot holding pending next_obs)
            if not np.any(step):
                break
            last = np.where(step, nxt, last)
            reward = reward + np.where(step, self.gamma ** k * self._reward[nxt], 0.0)
            alive = step & ~(self._terminated[nxt] | self._truncated[nxt])
        steps = ((last - idx) % cap) + 1
        discount = (self.gamma ** steps) * (~self._terminated[last])
        nxt = (last + 1) % cap
        return Batch(
            obs={k: a[idx] for k, a in self._obs.items()},
            action=self._action[idx],
            reward=reward.astype(np.float32),
            next_obs={k: a[nxt] for k, a in self._obs.items()},
            discount=discount.astype(np.float32),
            intervention=self._intervention[idx],
        )

    # --------------------------------------------------------------------------------- disk
    def _arrays(self) -> dict[str, np.ndarray]:
        n = self._filled
        arrays = {f"obs_{i}": a[:n] for i, a in enumerate(self._obs.values())}
        arrays.update(action=self._action[:n], reward=self._reward[:n],
                      terminated=self._terminated[:n], truncated=self._truncated[:n],
                      intervention=self._intervention[:n], valid=self._valid[:n])
        return arrays

    def _meta(self) -> dict[str, Any]:
        return {
            "format": "robolearn.replay", "version": FORMAT_VERSION,
            "capacity": self.capacity, "n_step": self.n_step, "gamma": self.gamma,
            "obs_keys": list(self.spec),
            "obs_spec": {k: [list(s), d.str] for k, (s, d) in self.spec.items()},
            "action_dim": self.action_dim, "ptr": self._ptr, "filled": self._filled,
            "count": self._count, "open": self._open,
            "rng": self.rng.bit_generator.state,
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write the buffer into directory `path` (`*.npy` + `meta.json`, written last)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for name, arr in self._arrays().items():
            tmp = path / f"{name}.npy.tmp"
            with open(tmp, "wb") as f:
                np.save(f, np.ascontiguousarray(arr), allow_pickle=False)
            os.replace(tmp, path / f"{name}.npy")
        write_json_atomic(path / "meta.json", self._meta())

    def load(self, path: str | os.PathLike) -> "ReplayBuffer":
        """Restore contents, counters and RNG saved by `save` into this (same-spec) buffer."""
        path = Path(path)
        meta_file = path / "meta.json"
        meta = read_json(meta_file, DatasetError,
                         f"{meta_file} not found: not a saved replay buffer (or the save was "
                         "interrupted); point to a directory written by ReplayBuffer.save")
        if meta.get("format") != "robolearn.replay":
            raise DatasetError(f"{meta_file} is not a robolearn replay buffer")
        want = self._meta()
        for key in ("capacity", "obs_keys", "obs_spec", "action_dim"):
            if meta.get(key) != want[key]:
                raise DatasetError(f"replay in {path} has {key}={meta.get(key)}, this buffer has "
                                   f"{want[key]}; build the buffer with the same spaces/capacity")
        n, old_filled = int(meta["filled"]), self._filled
        if not 0 <= n <= self.capacity or not 0 <= int(meta["ptr"]) < self.capacity:
            raise DatasetError(f"replay in {path} has filled={n}, ptr={meta['ptr']} outside capacity")
        sources = {}
        for name, dst in self._named_storage().items():  # check everything before touching self
            f = path / f"{name}.npy"
            try:
                arr = np.load(f, mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise DatasetError(f"cannot read {f}: {exc}") from None
            if arr.shape != (n, *dst.shape[1:]) or arr.dtype != dst.dtype:
                raise DatasetError(f"{f} has shape {arr.shape} {arr.dtype}, expected "
                                   f"{(n, *dst.shape[1:])} {dst.dtype}")
            sources[name] = arr
        if int(meta["count"]) != int(np.count_nonzero(sources["valid"])):
            raise DatasetError(f"replay in {path} is inconsistent (count != valid slots); the "
                               "save was interrupted or files were mixed from two saves")
        for name, dst in self._named_storage().items():
            dst[:n] = sources[name]
            if old_filled > n:  # clear only what was written (untouched pages stay unallocated)
                dst[n:old_filled] = 0
        self.n_step, self.gamma = int(meta["n_step"]), float(meta["gamma"])
        self._ptr, self._filled = int(meta["ptr"]), n
        self._count, self._open = int(meta["count"]), bool(meta["open"])
        self.rng.bit_generator.state = meta["rng"]
        return self

    def _named_storage(self) -> dict[str, np.ndarray]:
        d = {f"obs_{i}": a for i, a in enumerate(self._obs.values())}
        d.update(action=self._action, reward=self._reward, terminated=self._terminated,
                 truncated=self._truncated, intervention=self._intervention, valid=self._valid)
        return d

    def transitions(self) -> dict:
        """Every sampleable one-step transition, oldest first, as the dict
        `transitions_to_buffer` takes (raw rewards, not n-step sums): how an earlier run's
        replay becomes prior data for a new run (policies/prior_runs.py)."""
        cap = self.capacity
        order = (np.arange(self._filled) if self._filled < cap
                 else (np.arange(cap) + self._ptr) % cap)
        idx = order[self._valid[order]]
        nxt = (idx + 1) % cap
        return {"obs": {k: a[idx] for k, a in self._obs.items()},
                "next_obs": {k: a[nxt] for k, a in self._obs.items()},
                "action": self._action[idx].copy(), "reward": self._reward[idx].copy(),
                "terminated": self._terminated[idx].copy(), "truncated": self._truncated[idx].copy(),
                "intervention": self._intervention[idx].copy()}

    def state_equal(self, other: "ReplayBuffer") -> bool:
        """Same contents, counters and RNG state (for resume tests)."""
        a, b = self._named_storage(), other._named_storage()
        return (self._meta() == other._meta()
                and all(np.array_equal(a[k], b[k]) for k in a))


class DeviceReplay:
    """A device-resident copy of a ReplayBuffer that samples and gathers on the device.

    Why: on a GPU, copying each minibatch from host memory makes the host wait for the GPU
    every update (a pageable host->device copy synchronises the stream) and costs the numpy
    gather besides. Here the storage lives on the device; `sample` draws indices with a
    device torch.Generator and `gather` builds n-step transitions with the same rule as
    `ReplayBuffer.gather`, returning a `Batch` of device tensors that `Agent.update` takes
    as it is. The host buffer stays the one written to (and saved); `refresh()` copies the
    slots written since the last refresh (call it after adding, e.g. once per env step).
    """

    def __init__(self, buffer: ReplayBuffer, device="cpu", seed: int = 0):
        import torch

        self.buffer = buffer
        self.device = torch.device(device)
        self.generator = torch.Generator(self.device).manual_seed(int(seed))
        b = buffer
        self._obs = {k: torch.as_tensor(a).to(self.device, copy=True) for k, a in b._obs.items()}
        self._action = torch.as_tensor(b._action).to(self.device, copy=True)
        self._reward = torch.as_tensor(b._reward).to(self.device, copy=True)
        self._flags = {k: torch.as_tensor(getattr(b, f"_{k}")).to(self.device, copy=True)
                       for k in ("terminated", "truncated", "intervention", "valid")}
        self.last_indices = None
        b._touched = []
        self._refresh_valid()

    def _refresh_valid(self) -> None:
        """The sampleable slots, listed on the device from the mirrored flags: O(written slots)
        of host work, where listing them on the host scanned the whole capacity every env step
        (about 1 ms per step at a 1M-slot replay). `nonzero` waits for the GPU once per refresh,
        which a training loop pays anyway when it acts."""
        import torch

        self.size = int(self.buffer._count)
        self._valid_idx = torch.nonzero(self._flags["valid"][: self.buffer._filled]).squeeze(1)

    def refresh(self) -> None:
        """Copy the slots written into the host buffer since the last refresh."""
        import torch

        b = self.buffer
        if not b._touched:
            return
        slots = np.unique(np.asarray(b._touched, np.int64))
        b._touched = []
        idx = torch.as_tensor(slots).to(self.device)
        for k, a in self._obs.items():
            a.index_copy_(0, idx, torch.as_tensor(b._obs[k][slots]).to(self.device))
        self._action.index_copy_(0, idx, torch.as_tensor(b._action[slots]).to(self.device))
        self._reward.index_copy_(0, idx, torch.as_tensor(b._reward[slots]).to(self.device))
        for k, a in self._flags.items():
            a.index_copy_(0, idx, torch.as_tensor(getattr(b, f"_{k}")[slots]).to(self.device))
        self._refresh_valid()

    def __len__(self) -> int:
        return self.size

    def sample(self, batch_size: int) -> Batch:
        """Uniform minibatch over the sampleable slots, drawn and gathered on the device
        (no host sync: the count of valid slots is known on the host since the refresh)."""
        import torch

        if self.size == 0:
            raise TrainingError("sample() on an empty replay buffer: add transitions first "
                                "(or raise learning_starts)")
        pick = torch.randint(0, self.size, (int(batch_size),), generator=self.generator,
                             device=self.device)
        self.last_indices = self._valid_idx[pick]
        return self.gather(self.last_indices)

    def gather(self, idx) -> Batch:
        """`ReplayBuffer.gather` on device tensors (same n-step rule, float64 return sums)."""
        import torch

        b, f = self.buffer, self._flags
        cap = b.capacity
        idx = torch.as_tensor(idx, dtype=torch.int64, device=self.device)
        reward = self._reward[idx].double()
        last = idx.clone()
        ended = f["terminated"] | f["truncated"]
        alive = ~ended[idx]
        for k in range(1, b.n_step):  # no early exit: that would need a host sync
            nxt = (last + 1) % cap
            step = alive & f["valid"][nxt]
            last = torch.where(step, nxt, last)
            reward = reward + torch.where(step, b.gamma ** k * self._reward[nxt].double(), 0.0)
            alive = step & ~ended[nxt]
        steps = ((last - idx) % cap) + 1
        discount = torch.pow(b.gamma, steps.double()) * (~f["terminated"][last])
        nxt = (last + 1) % cap
        return Batch(obs={k: a[idx] for k, a in self._obs.items()}, action=self._action[idx],
                     reward=reward.float(), next_obs={k: a[nxt] for k, a in self._obs.items()},
                     discount=discount.float(), intervention=f["intervention"][idx])


def prior_rows(batch_size: int, prior_fraction: float, n_online: int, n_prior: int) -> int:
    """How many of a batch's rows come from the prior buffer: `prior_fraction` of them, all of
    them from one side while the other is empty (MixedSampler and the device sampler)."""
    if n_prior == 0:
        return 0
    if n_online == 0:
        return batch_size
    return int(round(batch_size * prior_fraction))


class MixedSampler:
    """RLPD symmetric sampling: each batch is `prior_fraction` prior data, the rest online.

    If one side is still empty the whole batch comes from the other one (e.g. a demo buffer
    that only fills with human interventions), so training can start either way.

    `earlier` (Replay across Experiments beside RLPD demos): earlier runs' transitions in a
    buffer of their own, `earlier_fraction` of every batch, taken from the online part, so
    thousands of another policy's transitions do not dilute the demos' share. Their rows are
    not `prior` (no BC term pulls the actor onto another policy's actions).
    """

    def __init__(self, online: ReplayBuffer, prior: ReplayBuffer, prior_fraction: float = 0.5,
                 earlier: ReplayBuffer | None = None, earlier_fraction: float = 0.0):
        if not 0.0 <= float(prior_fraction) <= 1.0:
            raise ConfigError(f"prior_fraction={prior_fraction}: must be in [0, 1]")
        for other in (prior, earlier):
            if other is not None and (online.spec != other.spec or online.action_dim != other.action_dim):
                raise DatasetError(
                    f"prior data spaces {other.spec} / action dim {other.action_dim} do not match the "
                    f"online ones {online.spec} / {online.action_dim}; record demos with the same env")
        if earlier is not None and not 0.0 < earlier_fraction < 1.0 - prior_fraction:
            raise ConfigError(f"earlier runs' share {earlier_fraction} with the prior share "
                              f"{prior_fraction}: must be in (0, {1.0 - prior_fraction:g}), so that "
                              "online data keep a share of every batch")
        self.online, self.prior = online, prior
        self.prior_fraction = float(prior_fraction)
        self.earlier, self.earlier_fraction = earlier, float(earlier_fraction if earlier is not None else 0.0)

    def __len__(self) -> int:
        return len(self.online) + len(self.prior) + (len(self.earlier) if self.earlier is not None else 0)

    def rows(self, batch_size: int) -> tuple[int, int, int]:
        """(online, prior, earlier) rows of a batch of `batch_size`."""
        n_earlier_buf = len(self.earlier) if self.earlier is not None else 0
        n_prior = prior_rows(batch_size, self.prior_fraction, len(self.online) + n_earlier_buf, len(self.prior))
        n_earlier = 0
        if n_earlier_buf:  # its share of the rows the prior buffer leaves
            rest = batch_size - n_prior
            share = self.earlier_fraction / (1.0 - self.prior_fraction)
            n_earlier = min(rest, prior_rows(rest, share, len(self.online), n_earlier_buf))
        return batch_size - n_prior - n_earlier, n_prior, n_earlier

    def sample(self, batch_size: int) -> Batch:
        n_online, n_prior, n_earlier = self.rows(batch_size)
        parts = []
        for buffer, n, is_prior in ((self.online, n_online, False), (self.prior, n_prior, True),
                                    (self.earlier, n_earlier, False)):
            if n > 0:
                parts.append(buffer.sample(n))
                parts[-1].prior = np.full(n, is_prior, bool)
        return parts[0] if len(parts) == 1 else Batch.concat(parts)


def slots_needed(transitions: dict) -> int:
    """Buffer slots `transitions_to_buffer` uses for `transitions`: one per transition, plus a
    pad slot after each episode end and each break in the stream (a next observation that is
    not the following transition's observation). A prior buffer sized so never overwrites."""
    n = len(transitions["action"])
    if n == 0:
        return 0
    done = np.asarray(transitions["terminated"], bool) | np.asarray(transitions["truncated"], bool)
    joined = np.ones(max(n - 1, 0), bool)
    for k, nxt in transitions["next_obs"].items():
        a, b = np.asarray(nxt)[:-1], np.asarray(transitions["obs"][k])[1:]
        joined &= np.all((a == b).reshape(len(a), -1), axis=1)
    segments = int(done.sum()) + int((~joined & ~done[:-1]).sum()) + int(not done[-1])
    return n + segments


def transitions_to_buffer(transitions: dict, buffer: ReplayBuffer) -> ReplayBuffer:
    """Append a dict of arrays (`obs`, `action`, `reward`, `next_obs`, `terminated`,
    `truncated`, optional `intervention`), in time order, to `buffer`.

    Raises DatasetError naming the key and shapes when the data does not fit the buffer's
    spaces (e.g. demos recorded with another camera size or a different env). A NaN reward is
    a reward model's "no answer" (robolearn.rewards.base.MISSING, e.g. demos labelled by a
    learned reward): that row is skipped, never stored; an infinite reward is refused.
    """
    required = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
    missing = [k for k in required if k not in transitions]
    if missing:
        raise DatasetError(f"transitions miss keys {missing}; expected {list(required)}")
    action = np.asarray(transitions["action"])
    if action.ndim != 2 or action.shape[1] != buffer.action_dim:
        raise DatasetError(f"'action' has shape {action.shape}, expected (N, {buffer.action_dim})")
    n = action.shape[0]

    def vec(name, kinds):
        a = np.asarray(transitions[name]) if name in transitions else np.zeros(n, bool)
        if a.shape != (n,):
            raise DatasetError(f"{name!r} has shape {a.shape}, expected ({n},)")
        if a.dtype.kind not in kinds:
            raise DatasetError(f"{name!r} has dtype {a.dtype}, expected kind {kinds!r}")
        return a

    reward = vec("reward", "fiu").astype(np.float32)
    term, trunc = vec("terminated", "bui").astype(bool), vec("truncated", "bui").astype(bool)
    interv = vec("intervention", "bui").astype(bool)
    if action.dtype.kind != "f":
        raise DatasetError(f"'action' has dtype {action.dtype}, expected float")
    obs_sets = {}
    for which in ("obs", "next_obs"):
        d = transitions[which]
        if not isinstance(d, dict) or set(d) != set(buffer.spec):
            got = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise DatasetError(f"{which!r} has keys {got}, the buffer expects {sorted(buffer.spec)}")
        for k, (shape, dtype) in buffer.spec.items():
            a = np.asarray(d[k])
            if a.shape != (n, *shape):
                raise DatasetError(f"{which}[{k!r}] has shape {a.shape}, expected {(n, *shape)}")
            same_kind = a.dtype == dtype or (a.dtype.kind == "f" and dtype.kind == "f")
            if not same_kind:
                raise DatasetError(f"{which}[{k!r}] has dtype {a.dtype}, expected {dtype}")
        obs_sets[which] = {k: np.asarray(d[k]) for k in buffer.spec}
    for t in range(n):
        if np.isnan(reward[t]):
            continue
        buffer.add({k: v[t] for k, v in obs_sets["obs"].items()}, action[t], float(reward[t]),
                   {k: v[t] for k, v in obs_sets["next_obs"].items()}, bool(term[t]),
                   bool(trunc[t]), bool(interv[t]))
    return buffer
