"""Minibatches drawn on the training device: a run's replay mirrored on its CUDA GPU.

Why: with the agent on a GPU, each host minibatch is a numpy gather and pageable copies; with
`device_replay` (`robolearn train --device cuda --device-replay`) each host buffer gets a
device mirror instead (`DeviceReplay`: only the slots written since the last draw are copied,
once per env step), and indices are drawn and n-step transitions gathered on the device, as
one CUDA graph per draw (`GraphedDraw`). The host buffers stay the ones written to and saved
in checkpoints; the mirror's sampling generators are saved beside them (`state()`), so a
resumed run draws the batches the uninterrupted one would have drawn.

When: by default (`device_replay` None) on CUDA for camera observations only. On ArmReach
with state obs (batch 256) on an H100 the Trainer loop ran 0.77x (UTD 1) and 0.86x (UTD 20) the
updates/s of host batches + the graphed update: the host path's copies are small and the
graphed update is the speed-up. With two 84x84 cameras (drq) on an H200 the mirror ran 1.41x
(UTD 1) and 1.18x (UTD 20) the host path, graphed update in both (docs/bench/gpu-train/): a
host batch there is ~10 MB of frames to gather and copy. `--device-replay` /
`--no-device-replay` force it either way. Off, nothing changes: `batch_source` hands back the
host sampler, so CPU runs stay bit for bit what they were.
"""
from __future__ import annotations

import numpy as np
import torch

from robolearn.data.replay import Batch, DeviceReplay, MixedSampler, ReplayBuffer, prior_rows
from robolearn.errors import ConfigError
from robolearn.policies.cuda_graph import GraphedUpdate


def check_device(device) -> torch.device:
    """The torch device for `device`, or a ConfigError saying why this machine cannot use it."""
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device={str(device)!r}: this torch ({torch.__version__}) sees no CUDA "
                              "GPU; train with --device cpu (the default), or run on a machine with "
                              "an NVIDIA GPU and a CUDA build of torch")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"device={str(device)!r}: this machine has {torch.cuda.device_count()} "
                              f"CUDA GPU(s) (cuda:0..cuda:{torch.cuda.device_count() - 1})")
    return dev


def on_device_replay(agent) -> bool:
    """True when `agent` trains on a CUDA GPU, where batches are drawn on the device."""
    return agent.device.type == "cuda"


def has_camera_frames(replay: ReplayBuffer) -> bool:
    """Whether the replay stores camera frames (uint8 HxWxC observations)."""
    return any(s.dtype == np.uint8 and len(s.shape) == 3
               for s in replay.observation_space.spaces.values())


def wants_device_replay(agent, replay: ReplayBuffer, sampler, device_replay: bool | None) -> bool:
    """`device_replay` as given, or (None) on where it measured faster: a CUDA agent whose
    replay holds camera frames and whose batches have no earlier-runs share."""
    if device_replay is not None:
        return bool(device_replay)
    return (on_device_replay(agent) and has_camera_frames(replay)
            and getattr(sampler, "earlier", None) is None)


def batch_source(agent, replay: ReplayBuffer, prior: ReplayBuffer | None, sampler, seed: int,
                 device_replay: bool | None = False):
    """What a training loop calls `.sample(batch_size)` on: the host `sampler`, or with
    `device_replay` (CUDA only; None: camera observations on CUDA) a `DeviceSampler` over the
    same buffers and prior share."""
    if not wants_device_replay(agent, replay, sampler, device_replay):
        return sampler
    if not on_device_replay(agent):
        raise ConfigError(f"device_replay keeps the replay on a CUDA GPU, and this agent trains on "
                          f"{agent.device}: add --device cuda, or drop --device-replay")
    if getattr(sampler, "earlier", None) is not None:
        raise ConfigError("device_replay draws online and prior rows only, and this run gives earlier "
                          "runs ([replay] prior_runs) a batch share of their own beside its demos: "
                          "drop --device-replay (host batches)")
    fraction = sampler.prior_fraction if isinstance(sampler, MixedSampler) else None
    return DeviceSampler(replay, prior if fraction is not None else None, fraction, agent.device, seed)


class DeviceSampler:
    """`ReplayBuffer.sample` / `MixedSampler.sample` on the device: same shares and rules,
    device tensors out. `refresh()` runs at each draw, so writes to the host buffers since the
    last draw are always in the batch's population."""

    def __init__(self, online: ReplayBuffer, prior: ReplayBuffer | None = None,
                 prior_fraction: float | None = None, device="cuda", seed: int = 0):
        self.device = torch.device(device)
        self.online = DeviceReplay(online, self.device, seed=seed)
        self.prior = DeviceReplay(prior, self.device, seed=seed + 1) if prior is not None else None
        graphed = self.device.type == "cuda" and GraphedUpdate.supported()
        self._draw = {id(r): (GraphedDraw(r) if graphed else r.sample)
                      for r in (self.online, self.prior) if r is not None}
        self.prior_fraction = float(prior_fraction or 0.0)
        self.draws = 0  # batches drawn (tests assert the trainer really draws here)

    def __len__(self) -> int:
        return len(self.online.buffer) + (len(self.prior.buffer) if self.prior is not None else 0)

    def sample(self, batch_size: int) -> Batch:
        self.online.refresh()
        if self.prior is None:
            batch = self._draw[id(self.online)](batch_size)
        else:
            self.prior.refresh()
            batch = self._mixed(int(batch_size))
        self.draws += 1
        return batch

    def _mixed(self, batch_size: int) -> Batch:
        """MixedSampler's rule (`prior_rows`) on the device mirrors."""
        n_prior = prior_rows(batch_size, self.prior_fraction, len(self.online), len(self.prior))
        parts = []
        if batch_size - n_prior > 0:
            parts.append((self._draw[id(self.online)](batch_size - n_prior), False))
        if n_prior > 0:
            parts.append((self._draw[id(self.prior)](n_prior), True))
        for b, is_prior in parts:
            b.prior = torch.full((len(b),), is_prior, dtype=torch.bool, device=self.device)
        if len(parts) == 1:
            return parts[0][0]
        bs = [b for b, _ in parts]
        cat = torch.cat
        return Batch(obs={k: cat([b.obs[k] for b in bs]) for k in bs[0].obs},
                     action=cat([b.action for b in bs]), reward=cat([b.reward for b in bs]),
                     next_obs={k: cat([b.next_obs[k] for b in bs]) for k in bs[0].next_obs},
                     discount=cat([b.discount for b in bs]),
                     intervention=cat([b.intervention for b in bs]), prior=cat([b.prior for b in bs]))

    def sync(self) -> None:
        """Wait for the queued updates (so a clock read after it times them, not their launch)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict:
        """The sampling generators' states (JSON): with the host buffers, what a resume needs."""
        out = {"online": self.online.generator.get_state().tolist()}
        if self.prior is not None:
            out["prior"] = self.prior.generator.get_state().tolist()
        return out

    def load_state(self, state: dict) -> None:
        self.online.generator.set_state(torch.tensor(state["online"], dtype=torch.uint8))
        if self.prior is not None and "prior" in state:
            self.prior.generator.set_state(torch.tensor(state["prior"], dtype=torch.uint8))


class GraphedDraw:
    """`DeviceReplay.sample` replayed as one CUDA graph per batch size (callable like it).

    Why: drawn eagerly, a batch is some twenty small kernels launched from Python, which on
    an H100 cost more than the numpy gather and copy of the host path they replace (measured:
    docs/bench/gpu-train/). Captured, they are one launch. What makes the draw capturable: the
    sampleable slots live in a fixed device buffer with their count as a device scalar (both
    updated in place when the mirror is refreshed), the index is `floor(u * count)` with
    `u ~ U[0, 1)` from the replay's own generator (registered with the graph, so each replay
    draws fresh numbers and a checkpoint's generator state continues the stream), and the
    n-step gather has a fixed number of steps. The returned batch is the graph's output
    buffers: valid until the next draw (the update copies or consumes it at once).
    """

    WARMUP = 3  # eager draws on the capture stream first (lazy CUDA init)

    def __init__(self, replay: DeviceReplay):
        self.replay = r = replay
        self.slots = torch.zeros(r.buffer.capacity, dtype=torch.int64, device=r.device)
        self.count = torch.zeros((), dtype=torch.float64, device=r.device)
        self.stream = torch.cuda.Stream(device=r.device)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, Batch]] = {}
        self.calls: dict[int, int] = {}
        self.replays = 0
        self._listed = None

    def _draw(self, batch_size: int) -> Batch:
        r = self.replay
        u = torch.rand(batch_size, generator=r.generator, device=r.device, dtype=torch.float64)
        pick = torch.minimum((u * self.count).long(), (self.count - 1).long())
        return r.gather(self.slots[pick])

    def __call__(self, batch_size: int) -> Batch:
        r, batch_size = self.replay, int(batch_size)
        if r.size == 0:
            return r.sample(batch_size)  # its error: an empty replay
        if self._listed is not r._valid_idx:  # refreshed since the last draw
            self.slots[: r.size].copy_(r._valid_idx)
            self.count.fill_(r.size)
            self._listed = r._valid_idx
        n = self.calls[batch_size] = self.calls.get(batch_size, 0) + 1
        current = torch.cuda.current_stream(r.device)
        if n <= self.WARMUP:
            self.stream.wait_stream(current)
            with torch.cuda.stream(self.stream):
                batch = self._draw(batch_size)
            current.wait_stream(self.stream)
            return batch
        if batch_size not in self.graphs:
            graph = torch.cuda.CUDAGraph()
            graph.register_generator_state(r.generator)
            current.synchronize()
            with torch.cuda.graph(graph, stream=self.stream):
                out = self._draw(batch_size)
            self.graphs[batch_size] = (graph, out)
        graph, out = self.graphs[batch_size]
        graph.replay()
        self.replays += 1
        return out
