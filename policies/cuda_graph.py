"""Replay the learner's update as one captured CUDA graph per schedule (critic-only, critic+actor).

Why: a SAC update at batch 256 is a few hundred small kernels; on a GPU the Python and launch
overhead of issuing them, not the arithmetic, sets the update rate. A CUDA graph issues them
all with one call. What makes the update capturable (see `Agent._learn`): no host sync inside
it (metrics come back as one tensor, read every `check_every` updates), fused Adam with
`capturable=True` (step counters on the GPU), no `requires_grad_` toggles (the actor loss uses
a detached-weight alias of the critic), the update's torch.Generator registered with the graph
(so each replay draws fresh noise from the agent's own RNG stream) and static input buffers the
batch is copied into.

The first `warmup` updates run eagerly on a side stream (cuBLAS/cuDNN lazy init and the
optimisers' state must exist before capture). Anything that replaces tensors the graph holds
(`load_state_dict` swaps the optimiser state) calls `reset()`.
"""
from __future__ import annotations

import torch


def _tree_map(fn, tree):
    if isinstance(tree, dict):
        return {k: _tree_map(fn, v) for k, v in tree.items()}
    return fn(tree)


def _tree_copy_(dst, src) -> None:
    if isinstance(dst, dict):
        for k in dst:
            _tree_copy_(dst[k], src[k])
    else:
        dst.copy_(torch.as_tensor(src), non_blocking=True)


class GraphedUpdate:
    """Runs `agent._learn(inputs, do_actor)` eagerly for `warmup` calls, then as CUDA graphs."""

    @staticmethod
    def supported() -> bool:
        """CUDA graphs with the agent's own generator need torch's `register_generator_state`
        (torch >= 2.5); without it the agent runs its update eagerly."""
        return hasattr(torch.cuda, "CUDAGraph") and hasattr(torch.cuda.CUDAGraph,
                                                            "register_generator_state")

    def __init__(self, agent, warmup: int = 3):
        self.agent = agent
        self.warmup = int(warmup)
        self.stream = torch.cuda.Stream(device=agent.device)
        self.replays = 0  # graph replays so far (tests and benchmarks check the graph really ran)
        self.reset()

    def reset(self) -> None:
        """Forget the captured graphs (after `load_state_dict` swapped tensors they hold); the
        next calls warm up and capture again, on the same side stream."""
        torch.cuda.current_stream(self.agent.device).synchronize()
        self.calls = {False: 0, True: 0}
        self.static_inputs: dict | None = None
        self.graphs: dict[bool, tuple[torch.cuda.CUDAGraph, list[str], torch.Tensor]] = {}

    def run(self, inputs: dict, do_actor: bool) -> tuple[list[str], torch.Tensor]:
        agent = self.agent
        self.calls[do_actor] += 1
        if self.calls[do_actor] <= self.warmup:  # eager, on the side stream capture will use
            self.stream.wait_stream(torch.cuda.current_stream(agent.device))
            with torch.cuda.stream(self.stream):
                out = agent._learn(inputs, do_actor)
            torch.cuda.current_stream(agent.device).wait_stream(self.stream)
            return out
        if self.static_inputs is None:
            self.static_inputs = _tree_map(
                lambda x: torch.as_tensor(x).to(agent.device, copy=True), inputs)
        else:
            _tree_copy_(self.static_inputs, inputs)
        if do_actor not in self.graphs:
            self.graphs[do_actor] = self._capture(do_actor)
        graph, keys, values = self.graphs[do_actor]
        graph.replay()
        self.replays += 1
        return keys, values

    def _capture(self, do_actor: bool):
        agent = self.agent
        graph = torch.cuda.CUDAGraph()
        graph.register_generator_state(agent.generator)
        torch.cuda.current_stream(agent.device).synchronize()
        # own memory pool per schedule: the two graphs replay in any order
        with torch.cuda.graph(graph, stream=self.stream):
            keys, values = agent._learn(self.static_inputs, do_actor)
        return graph, keys, values
