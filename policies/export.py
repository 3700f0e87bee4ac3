"""Export a trained policy for the robot computer: ONNX (onnxruntime) or TorchScript.

Why: the robot computer should run the policy with a small runtime and no learner, no
replay, no training code. The exported graph is the *deterministic* actor (tanh of the
Gaussian mean) with everything the actor needs folded in: the running observation
normalisation and the pixel encoder, so it takes raw env observations (state float32,
camera images uint8 HxWx3) and returns an action in [-1, 1].

Beside each exported file a JSON sidecar (`FILE.json`) names the inputs in order, their
shapes and dtypes, the env, the obs mode and the parity figure measured at export time, so a
loader can check an observation before it reaches the runtime. `ExportedPolicy` is that
loader; it refuses a non-finite action instead of passing it to the robot.
"""
from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from robolearn.errors import ConfigError, DatasetError, InvalidActionError

FORMATS = ("onnx", "torchscript")
SIDECAR_VERSION = 1
ONNX_OPSET = 17


class DeterministicPolicy(nn.Module):
    """Raw observations (in `input_names` order) -> deterministic action, as one graph."""

    def __init__(self, agent):
        super().__init__()
        self.state_key = agent.state_key
        self.image_keys = list(agent.image_keys)
        self.obs_norm = agent.obs_norm
        self.encoder = agent.encoder
        self.actor = agent.actor

    @property
    def input_names(self) -> list[str]:
        return ([self.state_key] if self.state_key else []) + self.image_keys

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        parts = []
        i = 0
        if self.state_key:
            state = inputs[0]
            parts.append(self.obs_norm(state) if self.obs_norm is not None else state)
            i = 1
        if self.encoder is not None:
            images = {}
            for k, img in zip(self.image_keys, inputs[i:]):
                images[k] = img.permute(0, 3, 1, 2).float()  # uint8 NHWC -> float NCHW
            parts.append(self.encoder(images))
        feat = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
        return self.actor.mode(feat)


def load_agent(checkpoint: str | Path):
    """(agent, TrainConfig) from a run folder, policy weights only (as an actor loads them)."""
    from robolearn.policies.checkpoints import load_agent as _load

    agent, env, cfg = _load(checkpoint)
    env.close()
    return agent, cfg


def sample_observations(agent, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """`n` observations spread over what the policy will see: states around the running
    normaliser's statistics (or unit scale) with heavy tails, uniformly random images."""
    rng = np.random.default_rng(seed)
    obs: dict[str, np.ndarray] = {}
    if agent.state_key:
        dim = agent.actor.in_features - (agent.encoder.feature_dim if agent.encoder else 0)
        if agent.obs_norm is not None and float(agent.obs_norm.count) > 0:
            mean = agent.obs_norm.mean.cpu().numpy()
            std = np.sqrt(agent.obs_norm.var.cpu().numpy())
        else:
            mean, std = np.zeros(dim), np.ones(dim)
        z = rng.standard_t(df=3, size=(n, dim))
        obs[agent.state_key] = (mean + std * z).astype(np.float32)
    if agent.encoder is not None:
        for k in agent.image_keys:
            conv = agent.encoder.encoders[k]
            h, w, c = conv.image_shape
            obs[k] = rng.integers(0, 256, size=(n, h, w, c), dtype=np.uint8)
    return obs


def _example_inputs(module: DeterministicPolicy, obs: dict[str, np.ndarray]) -> tuple:
    return tuple(torch.as_tensor(obs[k]) for k in module.input_names)


def export_policy(agent, fmt: str, out: str | Path, env_id: str = "", obs_mode: str = "",
                  parity_samples: int = 1000, seed: int = 0) -> dict:
    """Write the deterministic policy to `out` in `fmt` and its sidecar `out.json`.

    Checks parity on `parity_samples` observations (max |a_torch - a_export|) and raises
    `DatasetError` when it exceeds 1e-5. Returns the sidecar dict."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    out = Path(out)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    module = DeterministicPolicy(agent).eval().to("cpu")
    names = module.input_names
    obs = sample_observations(agent, parity_samples, seed)
    example = _example_inputs(module, {k: v[:2] for k, v in obs.items()})
    tmp = out.with_name(out.name + ".tmp")
    try:
        with torch.no_grad():
            if fmt == "onnx":
                _export_onnx(module, example, names, tmp)
            else:
                with warnings.catch_warnings():  # deprecated in torch 2.x, still what libtorch loads
                    warnings.simplefilter("ignore", DeprecationWarning)
                    traced = torch.jit.trace(module, example, check_trace=False)
                traced.save(str(tmp))
        spec = {
            "format": fmt, "sidecar_version": SIDECAR_VERSION, "env": env_id, "obs": obs_mode,
            "algo": getattr(agent.config, "algo", ""),
            "inputs": [{"name": k, "shape": list(obs[k].shape[1:]), "dtype": str(obs[k].dtype)}
                       for k in names],
            "action_dim": int(agent.action_dim), "action_low": -1.0, "action_high": 1.0,
        }
        tmp.replace(out)
    except Exception as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise DatasetError(f"cannot write {out}: {exc}") from None
        raise
    # parity: the exported file, loaded back through the same loader the robot uses
    with torch.no_grad():
        ref = module(*_example_inputs(module, obs)).numpy()
    policy = ExportedPolicy(out, spec=spec)
    try:
        got = policy.act_batch(obs)
        err = float(np.max(np.abs(ref - got)))
    except InvalidActionError:
        err = float("nan")
    spec["parity_max_abs_error"] = err
    spec["parity_samples"] = int(parity_samples)
    Path(str(out) + ".json").write_text(json.dumps(spec, indent=1))
    if not err < 1e-5:
        raise DatasetError(f"exported policy differs from the torch policy by {err:.2e} "
                           f"(> 1e-5) on {parity_samples} observations; {out} is not safe to use")
    return spec


def _export_onnx(module, example, names, path: Path) -> None:
    try:
        import onnx  # noqa: F401  (torch's exporter needs it)
    except ImportError:
        raise ConfigError("ONNX export needs the `onnx` package: pip install 'robolearn[export]'"
                          ) from None
    dynamic = {k: {0: "batch"} for k in names}
    dynamic["action"] = {0: "batch"}
    with warnings.catch_warnings():  # the TorchScript-based exporter: no onnxscript needed
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(module, example, str(path), input_names=names, output_names=["action"],
                          dynamic_axes=dynamic, opset_version=ONNX_OPSET, dynamo=False)


@dataclass
class ExportedPolicy:
    """Run an exported policy with no learner: `policy(obs) -> action` (float32, [-1, 1]).

    ONNX files run on onnxruntime (CPU provider unless `providers` says otherwise),
    TorchScript files on `torch.jit`. Observations are checked against the sidecar; a
    non-finite action raises `InvalidActionError` and never reaches the robot."""

    path: Path
    spec: dict | None = None
    providers: tuple[str, ...] = ("CPUExecutionProvider",)

    def __post_init__(self):
        self.path = Path(self.path)
        if not self.path.is_file():
            raise DatasetError(f"exported policy {self.path} not found (write one with "
                               "`robolearn export CHECKPOINT --format onnx --out FILE`)")
        if self.spec is None:
            side = Path(str(self.path) + ".json")
            if not side.is_file():
                raise DatasetError(f"{side} not found: the sidecar written beside {self.path.name} "
                                   "by `robolearn export` names the policy's inputs")
            try:
                self.spec = json.loads(side.read_text())
            except (ValueError, UnicodeDecodeError) as exc:
                raise DatasetError(f"{side} is not valid JSON ({exc}); re-export the policy") from None
        self.input_names = [i["name"] for i in self.spec["inputs"]]
        self.action_dim = int(self.spec["action_dim"])
        fmt = self.spec.get("format")
        if fmt == "onnx":
            try:
                import onnxruntime as ort
            except ImportError:
                raise ConfigError("running an ONNX policy needs onnxruntime: "
                                  "pip install 'robolearn[export]'") from None
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1  # one action at a time: threads only add latency
            try:
                self._sess = ort.InferenceSession(str(self.path), opts, providers=list(self.providers))
            except Exception as exc:  # onnxruntime raises its own types for corrupt files
                raise DatasetError(f"cannot load {self.path}: {exc}") from None
            self._run = self._run_onnx
        elif fmt == "torchscript":
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    self._module = torch.jit.load(str(self.path), map_location="cpu").eval()
            except Exception as exc:
                raise DatasetError(f"cannot load {self.path}: {exc}") from None
            self._run = self._run_torchscript
        else:
            raise DatasetError(f"{self.path}: unknown format {fmt!r} in its sidecar")

    def _run_onnx(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        return self._sess.run(["action"], inputs)[0]

    def _run_torchscript(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            return self._module(*(torch.as_tensor(inputs[k]) for k in self.input_names)).numpy()

    def _inputs(self, obs: dict[str, Any], batched: bool) -> dict[str, np.ndarray]:
        out = {}
        for spec in self.spec["inputs"]:
            k = spec["name"]
            if k not in obs:
                raise ConfigError(f"observation lacks {k!r} (has {sorted(obs)}); the exported policy "
                                  f"takes {self.input_names}")
            x = np.asarray(obs[k], dtype=spec["dtype"])
            want = tuple(spec["shape"])
            shape = x.shape[1:] if batched else x.shape
            if shape != want:
                raise ConfigError(f"observation {k!r} has shape {shape}, the exported policy "
                                  f"expects {want} (same env and obs mode as in training?)")
            out[k] = np.ascontiguousarray(x if batched else x[None])
        return out

    def act_batch(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        action = np.asarray(self._run(self._inputs(obs, batched=True)), dtype=np.float32)
        return self._check(action)

    def __call__(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        return self._check(np.asarray(self._run(self._inputs(obs, batched=False))[0],
                                      dtype=np.float32))

    def _check(self, action: np.ndarray) -> np.ndarray:
        if not np.all(np.isfinite(action)):
            raise InvalidActionError(f"exported policy {self.path.name} produced a non-finite action "
                                     f"{action.tolist() if action.size <= 12 else '...'}; refusing to "
                                     "send it to the robot (corrupt file or observation out of range?)")
        return action


def latency_per_action(policy, obs_one: dict[str, np.ndarray], n: int = 300) -> dict:
    """Median/p99 seconds per single (unbatched) action after a short warm-up."""
    for _ in range(10):
        policy(obs_one)
    times = np.empty(n)
    for i in range(n):
        t = time.perf_counter()
        policy(obs_one)
        times[i] = time.perf_counter() - t
    return {"p50_ms": float(np.median(times) * 1e3), "p99_ms": float(np.quantile(times, 0.99) * 1e3)}
