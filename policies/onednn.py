"""fp32 linear layers on oneDNN's inner-product kernel for the CPU update (`cpu_matmul="onednn"`).

Why: on this class of CPU (AVX-512, torch 2.x) `torch.ops.mkldnn._linear_pointwise` runs an
fp32 256x256x256 product about 2x faster than `F.linear`/`mm` (MKL) and than `bmm`, on dense
unpacked weights and on transposed (strided) operands alike, so no weight repacking is needed
after an optimiser step. Stock autograd sends the backward of `F.linear` to MKL, so the op is
wrapped in an autograd Function whose backward also runs on oneDNN:
    y = x W^T + b          -> lp(x, W, b)
    dL/dx = g W            -> lp(g, W^T)            (W^T: a strided view, no copy)
    dL/dW = g^T x          -> lp(g^T, x^T)
    dL/db = sum_rows(g)
`relu=True` fuses the ReLU into the forward kernel (oneDNN post-op); its backward masks the
gradient with the saved output (what `nn.ReLU`'s backward does). Same fp32 numerics class as
F.linear (differences ~1e-6 relative, from summation order).

The critic ensemble (E, in, out weights) runs one such product per member: measured 2x faster
than one `baddbmm` over the members for 2 and for 10 critics (bmm takes the slow MKL path).

Falls back to `F.linear` where the op is absent or would not pay: no mkldnn build, not CPU
fp32, autocast on, tracing/ONNX export (the exported graph must hold standard ops), and small
outputs (< `MIN_OUT` features: Q heads, action heads, where F.linear is faster).

bf16 (`cpu_matmul="bf16"`): the same kernel on bf16 operands (~1.85x the fp32 rate here: 86 vs
158 us per 256^3 product, 1 thread) with fp32 master weights. A layer marked `bf16` casts its
input and weight to bf16 (a 256x256 cast is ~5 us) only inside `bf16_region()`, which the
learner opens around its update; outside (acting, evaluation, export) it is the fp32 path, so
the policy on the robot and every checkpoint stay fp32. Weight and bias gradients come back in
fp32 (the bias gradient is summed in fp32). A layer's output stays bf16 only when it feeds
another product through a folded ReLU (`out_bf16`): everything else (heads, LayerNorm,
batch renorm, residual sums, log-probabilities, TD targets) sees fp32 tensors.
"""
from __future__ import annotations

import contextlib
import threading

import torch
import torch.nn.functional as F
from torch import nn

MIN_OUT = 64  # below this many output features F.linear is faster (256 -> 1: 5 us vs 13.5 us)


def _find_op():
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        op = torch.ops.mkldnn._linear_pointwise
        x = torch.ones(2, 3)
        y = op(x, torch.ones(4, 3), torch.zeros(4), "none", [], "")
        return op if y.shape == (2, 4) and float(y[0, 0]) == 3.0 else None
    except (AttributeError, RuntimeError):
        return None


_OP = _find_op()


def available() -> bool:
    """True when this torch build has oneDNN's fp32 linear (else every call is F.linear)."""
    return _OP is not None


def _find_bf16() -> bool:
    if _OP is None:
        return False
    try:
        y = _OP(torch.ones(2, 3, dtype=torch.bfloat16), torch.ones(4, 3, dtype=torch.bfloat16),
                torch.zeros(4), "none", [], "")
        return y.dtype == torch.bfloat16 and float(y[0, 0]) == 3.0
    except RuntimeError:
        return False


_BF16_OK = _find_bf16()
_REGION = threading.local()  # per thread: a learner thread's region never reaches an actor's
BF16 = torch.bfloat16


def bf16_available() -> bool:
    """True when oneDNN's linear takes bf16 operands here (else `bf16` layers run fp32)."""
    return _BF16_OK


@contextlib.contextmanager
def bf16_region(on: bool = True):
    """Layers marked `bf16` compute their products in bf16 inside this block (the learner's
    update); outside it they run fp32, so acting and evaluation never see bf16."""
    before = getattr(_REGION, "on", False)
    _REGION.on = bool(on)
    try:
        yield
    finally:
        _REGION.on = before


def _bf16_now(x: torch.Tensor, out_features: int) -> bool:
    return (_BF16_OK and getattr(_REGION, "on", False) and x.device.type == "cpu"
            and out_features >= MIN_OUT and not torch.is_autocast_enabled("cpu")
            and not torch.jit.is_tracing() and not torch.jit.is_scripting()
            and not torch.onnx.is_in_onnx_export())


def _fast_ok(x: torch.Tensor, w: torch.Tensor, out_features: int) -> bool:
    return (_OP is not None and x.device.type == "cpu" and x.dtype == torch.float32
            and w.dtype == torch.float32 and out_features >= MIN_OUT
            and not torch.is_autocast_enabled("cpu") and not torch.jit.is_tracing()
            and not torch.jit.is_scripting() and not torch.onnx.is_in_onnx_export())


class _OneDNNLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, relu: bool):
        y = _OP(x, w, b, "relu" if relu else "none", [], "")
        ctx.relu = relu
        ctx.has_bias = b is not None
        ctx.save_for_backward(x, w, y if relu else None)
        return y

    @staticmethod
    def backward(ctx, gy):
        x, w, y = ctx.saved_tensors
        if ctx.relu:
            gy = torch.ops.aten.threshold_backward(gy, y, 0)
        gx = _OP(gy, w.t(), None, "none", [], "") if ctx.needs_input_grad[0] else None
        gw = _OP(gy.t(), x.t(), None, "none", [], "") if ctx.needs_input_grad[1] else None
        gb = gy.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return gx, gw, gb, None


class _BF16Linear(torch.autograd.Function):
    """`_OneDNNLinear` on bf16 operands: x and W cast to bf16, fp32 weight/bias gradients, the
    input gradient in the input's dtype; output bf16 with `out_bf16`, else fp32."""

    @staticmethod
    def forward(ctx, x, w, b, relu: bool, out_bf16: bool):
        xb, wb = x.to(BF16), w.to(BF16)
        y = _OP(xb, wb, b, "relu" if relu else "none", [], "")
        ctx.relu, ctx.has_bias, ctx.x_dtype = relu, b is not None, x.dtype
        ctx.save_for_backward(xb, wb, y if relu else None)
        return y if out_bf16 else y.float()

    @staticmethod
    def backward(ctx, gy):
        xb, wb, y = ctx.saved_tensors
        gy, g32 = _masked_grads(gy, y, ctx.relu)
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = _OP(gy, wb.t(), None, "none", [], "").to(ctx.x_dtype)
        if ctx.needs_input_grad[1]:
            gw = torch.mm(gy.t(), xb).float()  # bf16 mm: ~20% faster than lp on two transposes
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = g32.sum(0, dtype=torch.float32)
        return gx, gw, gb, None, None


def _masked_grads(gy: torch.Tensor, y: torch.Tensor | None, relu: bool):
    """(bf16 output gradient for the products, the most precise one for the bias sum): an fp32
    gradient (fp32 output) is masked and summed in fp32 before it is rounded to bf16."""
    if relu:
        gy = torch.ops.aten.threshold_backward(gy, y if gy.dtype == BF16 else y.float(), 0)
    return gy.to(BF16), gy


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None,
           relu: bool = False, bf16: bool = False, out_bf16: bool = False) -> torch.Tensor:
    """F.linear(x, w, b) (then ReLU with `relu`) for 2-D x, on oneDNN where that pays; with
    `bf16`, in bf16 inside `bf16_region()` (output bf16 with `out_bf16`)."""
    if bf16 and x.dim() == 2 and _bf16_now(x, w.shape[0]):
        if not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad
                                             or (b is not None and b.requires_grad))):
            y = _OP(x.to(BF16), w.to(BF16), b, "relu" if relu else "none", [], "")
            return y if out_bf16 else y.float()
        return _BF16Linear.apply(x, w, b, relu, out_bf16)
    if x.dtype != w.dtype:  # a bf16 activation reaching an fp32 layer (a head): compute in fp32
        x = x.to(w.dtype)
    if x.dim() != 2 or not _fast_ok(x, w, w.shape[0]):
        y = F.linear(x, w, b)
        return F.relu(y) if relu else y
    if not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad
                                         or (b is not None and b.requires_grad))):
        return _OP(x, w, b, "relu" if relu else "none", [], "")
    return _OneDNNLinear.apply(x, w, b, relu)


class _OneDNNEnsembleLinear(torch.autograd.Function):
    """E members, one oneDNN product each: x (E, B, in) or shared (B, in), w (E, in, out),
    b (E, 1, out) -> (E, B, out). Member views come from one `unbind` each (few ops per call:
    at these sizes the dispatch of view ops is a visible share of the update)."""

    @staticmethod
    def forward(ctx, x, w, b, relu: bool):
        ctx.relu, ctx.shared = relu, x.dim() == 2
        y = _members_forward(x, w, b, relu)
        ctx.save_for_backward(x, w, y if relu else None)
        return y

    @staticmethod
    def backward(ctx, gy):
        x, w, y = ctx.saved_tensors
        if ctx.relu:
            gy = torch.ops.aten.threshold_backward(gy, y, 0)
        gys = gy.unbind(0)
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            parts = [_OP(g, wi, None, "none", [], "") for g, wi in zip(gys, w.unbind(0))]
            if ctx.shared:  # one input read by every member: its gradient is their sum
                gx = parts[0]
                for p in parts[1:]:
                    gx.add_(p)
            else:
                gx = torch.stack(parts)
        if ctx.needs_input_grad[1]:
            xts = [x.t()] * len(gys) if ctx.shared else x.transpose(1, 2).unbind(0)
            gw = torch.stack([_OP(xt, g, None, "none", [], "")
                              for xt, g in zip(xts, gy.transpose(1, 2).unbind(0))])
        if ctx.needs_input_grad[2]:
            gb = gy.sum(1, keepdim=True)
        return gx, gw, gb, None


def _members_forward(x, w, b, relu: bool, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    attr = "relu" if relu else "none"
    wts = w.transpose(1, 2).unbind(0)
    xs = [x] * len(wts) if x.dim() == 2 else x.unbind(0)
    ys = [_OP(xi, wi, bi, attr, [], "") for xi, wi, bi in zip(xs, wts, b.squeeze(1).unbind(0))]
    if out_dtype is None or out_dtype == ys[0].dtype:
        return torch.stack(ys)
    out = torch.empty((len(ys),) + ys[0].shape, dtype=out_dtype)  # stack and cast in one pass
    for o, y in zip(out.unbind(0), ys):
        o.copy_(y)
    return out


class _BF16EnsembleLinear(torch.autograd.Function):
    """`_OneDNNEnsembleLinear` on bf16 operands (see `_BF16Linear`)."""

    @staticmethod
    def forward(ctx, x, w, b, relu: bool, out_bf16: bool):
        xb, wb = x.to(BF16), w.to(BF16)
        ctx.relu, ctx.shared, ctx.x_dtype = relu, x.dim() == 2, x.dtype
        y = _members_forward(xb, wb, b, relu)
        ctx.save_for_backward(xb, wb, y if relu else None)
        return y if out_bf16 else y.float()

    @staticmethod
    def backward(ctx, gy):
        xb, wb, y = ctx.saved_tensors
        gy, g32 = _masked_grads(gy, y, ctx.relu)
        gys = gy.unbind(0)
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            parts = [_OP(g, wi, None, "none", [], "") for g, wi in zip(gys, wb.unbind(0))]
            if ctx.shared:  # one input read by every member: its gradient is their sum (fp32)
                gx = parts[0].to(torch.float32)
                for p in parts[1:]:
                    gx.add_(p)
                gx = gx.to(ctx.x_dtype)
            else:
                gx = torch.stack(parts).to(ctx.x_dtype)
        if ctx.needs_input_grad[1]:
            xts = [xb.t()] * len(gys) if ctx.shared else xb.transpose(1, 2).unbind(0)
            gws = [torch.mm(xt, g) for xt, g in zip(xts, gys)]
            gw = torch.empty((len(gws),) + gws[0].shape, dtype=torch.float32)
            for o, g in zip(gw.unbind(0), gws):
                o.copy_(g)
        if ctx.needs_input_grad[2]:
            gb = g32.sum(1, keepdim=True, dtype=torch.float32)
        return gx, gw, gb, None, None


def ensemble_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
                    relu: bool = False, bf16: bool = False,
                    out_bf16: bool = False) -> torch.Tensor | None:
    """`EnsembleLinear`'s product on oneDNN, or None where the fast path does not apply (the
    caller then runs its batched matmul); with `bf16`, in bf16 inside `bf16_region()`."""
    if bf16 and x.dim() in (2, 3) and _bf16_now(x, w.shape[-1]):
        if not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or b.requires_grad)):
            return _members_forward(x.to(BF16), w.to(BF16), b, relu,
                                    None if out_bf16 else torch.float32)
        return _BF16EnsembleLinear.apply(x, w, b, relu, out_bf16)
    if x.dtype != w.dtype:
        x = x.to(w.dtype)
    if x.dim() not in (2, 3) or not _fast_ok(x, w, w.shape[-1]):
        return None
    if not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or b.requires_grad)):
        return _members_forward(x, w, b, relu)
    return _OneDNNEnsembleLinear.apply(x, w, b, relu)


class Linear(nn.Linear):
    """nn.Linear (same parameters, same state_dict keys) computed by `linear`; `relu=True`
    when the ReLU that followed it was folded in."""

    relu: bool = False
    bf16: bool = False  # bf16 products inside bf16_region()
    out_bf16: bool = False  # ... and a bf16 output (it feeds another product)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.relu, self.bf16, self.out_bf16)


def _is_linear(m: nn.Module) -> bool:
    return type(m) is nn.Linear or isinstance(m, Linear) or hasattr(type(m), "matmul")


def use_onednn(module: nn.Module, bf16: bool = False) -> nn.Module:
    """Put the linear layers of `module` (in place) on the oneDNN path: every plain nn.Linear
    becomes `Linear` sharing its parameters, every `EnsembleLinear` gets `matmul="onednn"`,
    and a ReLU that directly follows one in a Sequential/ModuleList is folded into it (replaced
    by Identity: same state_dict). Call before copying the module (targets, aliases).

    `bf16`: the layers also run in bf16 inside `bf16_region()` (`matmul="bf16"`); a folded
    layer whose ReLU feeds another linear layer keeps its output in bf16."""
    for parent in list(module.modules()):
        if not isinstance(parent, (nn.Sequential, nn.ModuleList)):
            continue
        names = list(parent._modules)
        for i, name in enumerate(names):
            child = parent._modules[name]
            if type(child) is nn.Linear:
                fast = Linear.__new__(Linear)
                fast.__dict__.update(child.__dict__)
                parent._modules[name] = child = fast
            ensemble = hasattr(type(child), "matmul")  # networks.EnsembleLinear
            if ensemble:
                child.matmul = "onednn"
            if isinstance(child, Linear) or ensemble:
                child.bf16 = bf16
            if (isinstance(child, Linear) or ensemble) and i + 1 < len(names):
                nxt = parent._modules[names[i + 1]]
                out = child.out_features
                if isinstance(nxt, nn.ReLU) and out >= MIN_OUT:
                    child.relu = True
                    parent._modules[names[i + 1]] = nn.Identity()
                    child.out_bf16 = bf16 and i + 2 < len(names) and _is_linear(parent._modules[names[i + 2]])
    return module
