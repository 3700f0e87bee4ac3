"""Prototype (issue 25): does torch.compile (inductor, C++ CPU backend) speed up one SAC update?

Times, in one process and interleaved rounds, 1 thread, process CPU time per update:
- `eager`: `Agent.update` on the current fastest path (cpu_matmul="onednn");
- `compiled-<mode>-<matmul>`: the same update with the critic loss (TD target included) and the
  actor+temperature loss each compiled by torch.compile (dynamic=False, fullgraph); backward
  through AOTAutograd's compiled backward graph; then the same fused Adam steps and target lerp.
  The Gaussian noise is drawn from the agent's generator outside the compiled code, in the
  eager update's order, so both see the same random numbers.
Also checks numerical agreement (losses of eager vs compiled over N updates from the same
state and batches, beside the drift of two eager fp32 paths) and reports compile time.
Options: `--no-bool-masks` (the ReLU-gradient rewrite that makes it pay), `--step-compiled`,
`--whole` (compiled autograd), `--guards skip-modules`, `--pieces` (the losses alone),
`--micro` (the bool-store pathology). Results and the commands behind them:
docs/bench/speed/README.md ("torch.compile of the SAC update").

    .venv/bin/python scripts/proto_compile_update.py --steps 400 --rounds 10 --check 300 \
        --matmul onednn --no-bool-masks
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from robolearn.data.replay import ReplayBuffer
from robolearn.policies.networks import LOG_STD_MAX, LOG_STD_MIN
from robolearn.policies.registry import make_agent
from robolearn.policies.speed_harness import _fill_ours, _random_data, _spaces


def sample_with(actor, feat, eps):
    """Actor.sample with given noise (same math)."""
    mean, log_std = actor.net(feat).chunk(2, dim=-1)
    log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1.0)
    u = mean + log_std.exp() * eps
    action = torch.tanh(u)
    log_prob = (-0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    log_prob = log_prob - (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)
    return action, log_prob


def _batch_tensors(batch):
    return (torch.as_tensor(batch.obs["state"]), torch.as_tensor(batch.action),
            torch.as_tensor(batch.reward), torch.as_tensor(batch.discount),
            torch.as_tensor(batch.next_obs["state"]))


def _onednn_as_extern():
    """Inductor lowers mkldnn._linear_pointwise only for frozen (constant) weights; for
    training graphs, call the op as an extern kernel instead."""
    from torch._inductor import lowering as L
    from torch._inductor import mkldnn_lowerings  # noqa: F401  (registers the lowering first)
    from torch._inductor.fx_passes import mkldnn_fusion
    mkldnn_fusion._mkldnn_fusion_init = lambda: None  # no pattern fusing our products into others
    op = torch.ops.mkldnn._linear_pointwise.default
    L.lowerings.pop(op, None)
    L.make_fallback(op, warn=False)


_onednn_as_extern()


def _relu_grad_without_bool_masks():
    """Inductor's vectorised store of a bool tensor is ~25x slower than eager here (AVX-512:
    570 us vs 23 us for 256x256), and the min-cut partitioner saves ReLU masks as bool. With
    the ReLU gradient written as gy * sign(y) (y >= 0: sign is 0 or 1) no bool mask exists
    (only while compiling: eager keeps threshold_backward)."""
    import inspect
    import textwrap
    from robolearn.policies import onednn
    for cls in (onednn._OneDNNLinear, onednn._OneDNNEnsembleLinear):
        src = textwrap.dedent(inspect.getsource(cls.backward))
        src = src.replace("torch.ops.aten.threshold_backward(gy, y, 0)", "(gy * torch.sign(y) if torch.compiler.is_compiling() else torch.ops.aten.threshold_backward(gy, y, 0))")
        src = src.replace("@staticmethod\n", "")
        ns: dict = {}
        exec(src, vars(onednn), ns)
        cls.backward = staticmethod(ns["backward"])


class CompiledUpdate:
    def __init__(self, agent, mode: str | None, step_compiled: bool = False, guards: str = "all",
                 whole: bool = False):
        self.a = agent
        kw = dict(dynamic=False, fullgraph=True)
        if guards == "skip-modules":  # no per-call guard walk over every parameter
            kw["options"] = {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}
        if mode and mode != "default":
            kw["mode"] = mode
        self.critic_fn = torch.compile(self._critic_loss, **kw)
        self.actor_fn = torch.compile(self._actor_loss, **kw)
        self.step_compiled = step_compiled
        self.whole = None
        if whole:
            torch._dynamo.config.compiled_autograd = True
            self.whole = (torch.compile(self._whole_critic, **dict(kw, fullgraph=False)),
                          torch.compile(self._whole_actor, **dict(kw, fullgraph=False)))
        if step_compiled:
            kw_step = dict(kw, fullgraph=False)  # Optimizer.step breaks the graph once by design
            self.critic_step = torch.compile(self._critic_step, **kw_step)
            self.actor_step = torch.compile(agent.actor_opt.step, **kw_step)

    def _whole_critic(self, obs, action, reward, discount, next_obs, eps_next, subset):
        """Critic loss, backward, Adam step and target lerp in one function (`--whole`:
        compiled with compiled autograd, so the backward and the step are captured too)."""
        a, cfg = self.a, self.a.config
        loss, qm = self._critic_loss(obs, action, reward, discount, next_obs, eps_next, subset, a.log_alpha)
        a.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        a.critic_opt.step()
        torch._foreach_lerp_(a._target_params, a._critic_params, cfg.tau)
        return loss.detach(), qm

    def _whole_actor(self, obs, eps):
        a = self.a
        total, al, tl, ent, alpha = self._actor_loss(obs, eps, a.log_alpha)
        a.actor_opt.zero_grad(set_to_none=True)
        total.backward()
        a.actor_opt.step()
        return al, tl, ent, alpha

    def _critic_step(self):
        a = self.a
        a.critic_opt.step()
        torch._foreach_lerp_(a._target_params, a._critic_params, a.config.tau)

    def _critic_loss(self, obs, action, reward, discount, next_obs, eps_next, subset, log_alpha):
        a, cfg = self.a, self.a.config
        alpha = log_alpha.detach().exp()
        with torch.no_grad():
            next_action, next_logp = sample_with(a.actor, next_obs, eps_next)
            q_next = a.critic_target(next_obs, next_action, subset)
            v_next = q_next.min(dim=0).values - alpha * next_logp
            target = reward + discount * v_next
        q = a.critic(obs, action)
        loss = 0.5 * (q - target).pow(2).mean(dim=1).sum()
        return loss, q.detach().mean()

    def _actor_loss(self, obs, eps, log_alpha):
        a, cfg = self.a, self.a.config
        alpha = log_alpha.detach().exp()
        pi_action, logp = sample_with(a.actor, obs, eps)
        q_pi = a._critic_frozen(obs, pi_action)
        q_pi = q_pi.min(dim=0).values if cfg.actor_q == "min" else q_pi.mean(dim=0)
        actor_loss = (alpha * logp - q_pi).mean()
        temp_loss = -(log_alpha * (logp.detach() + a.target_entropy)).mean()
        return actor_loss + temp_loss, actor_loss.detach(), temp_loss.detach(), -logp.detach().mean(), alpha

    def update(self, batch):
        if self.whole is not None:
            return self._update_whole(batch)
        a, cfg = self.a, self.a.config
        a.num_updates += 1
        n = a.num_updates
        obs = torch.as_tensor(batch.obs["state"])
        next_obs = torch.as_tensor(batch.next_obs["state"])
        action = torch.as_tensor(batch.action)
        reward = torch.as_tensor(batch.reward)
        discount = torch.as_tensor(batch.discount)
        g = a.generator
        eps_next = torch.randn(action.shape, generator=g)
        subset = None
        if cfg.num_target_min < cfg.num_critics:
            subset = torch.rand(cfg.num_critics, generator=g).argsort()[: cfg.num_target_min]
        a.critic.train()
        loss, qm = self.critic_fn(obs, action, reward, discount, next_obs, eps_next, subset, a.log_alpha)
        a.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.step_compiled:
            self.critic_step()
        else:
            a.critic_opt.step()
            torch._foreach_lerp_(a._target_params, a._critic_params, cfg.tau)
        metrics = [loss.detach(), qm]
        if n % cfg.actor_every == 0:
            eps = torch.randn(action.shape, generator=g)
            total, al, tl, ent, alpha = self.actor_fn(obs, eps, a.log_alpha)
            a.actor_opt.zero_grad(set_to_none=True)
            total.backward()
            if self.step_compiled:
                self.actor_step()
            else:
                a.actor_opt.step()
            metrics += [al, tl, ent, alpha]
        vals = torch.stack(metrics).tolist()
        if not all(math.isfinite(v) for v in vals):
            raise RuntimeError(f"update {n}: non-finite {vals}")
        return vals

    def _update_whole(self, batch):
        a, cfg = self.a, self.a.config
        a.num_updates += 1
        n = a.num_updates
        obs, action, reward, discount, next_obs = _batch_tensors(batch)
        g = a.generator
        eps_next = torch.randn(action.shape, generator=g)
        subset = None
        if cfg.num_target_min < cfg.num_critics:
            subset = torch.rand(cfg.num_critics, generator=g).argsort()[: cfg.num_target_min]
        a.critic.train()
        metrics = list(self.whole[0](obs, action, reward, discount, next_obs, eps_next, subset))
        if n % cfg.actor_every == 0:
            eps = torch.randn(action.shape, generator=g)
            metrics += list(self.whole[1](obs, eps))
        vals = torch.stack(metrics).tolist()
        if not all(math.isfinite(v) for v in vals):
            raise RuntimeError(f"update {n}: non-finite {vals}")
        return vals


def micro_bool_store(reps: int = 500) -> None:
    """The pathology `--no-bool-masks` avoids: one 256x256 comparison whose bool result is
    stored, eager vs compiled (vectorised) vs compiled with vectorisation off (simdlen 1)."""
    import torch._inductor.config as ic
    a = torch.randn(256, 256)
    fns = {"eager": lambda x: x <= 0, "compiled": torch.compile(lambda x: x <= 0, dynamic=False)}
    for name, fn in fns.items():
        for _ in range(10):
            fn(a)
        c0 = time.process_time()
        for _ in range(reps):
            fn(a)
        print(f"bool store 256x256 (x <= 0), {name}: {(time.process_time() - c0) / reps * 1e6:.1f} us CPU")
    with ic.patch({"cpp.simdlen": 1}):
        torch._dynamo.reset()
        fn = torch.compile(lambda x: x <= 0, dynamic=False)
        for _ in range(10):
            fn(a)
        c0 = time.process_time()
        for _ in range(reps):
            fn(a)
        print(f"bool store 256x256 (x <= 0), compiled scalar (simdlen 1): "
              f"{(time.process_time() - c0) / reps * 1e6:.1f} us CPU")
    torch._dynamo.reset()


def pieces(agent, buf, reps: int = 40, rounds: int = 5) -> None:
    """Critic and actor loss forward(+backward) alone, eager vs compiled, same agent and batch."""
    cu = CompiledUpdate(agent, "default")
    b = buf.sample(256)
    obs, action, reward, discount, next_obs = (torch.as_tensor(x) for x in (
        b.obs["state"], b.action, b.reward, b.discount, b.next_obs["state"]))
    eps = torch.randn(action.shape)
    cfg = agent.config
    subset = torch.arange(cfg.num_target_min) if cfg.num_target_min < cfg.num_critics else None

    def critic(fn, backward):
        def run():
            loss, _ = fn(obs, action, reward, discount, next_obs, eps, subset, agent.log_alpha)
            if backward:
                agent.critic_opt.zero_grad(set_to_none=True)
                loss.backward()
        return run

    def actor(fn):
        def run():
            total = fn(obs, eps, agent.log_alpha)[0]
            agent.actor_opt.zero_grad(set_to_none=True)
            total.backward()
        return run

    runs = {"critic loss forward, eager": critic(cu._critic_loss, False),
            "critic loss forward, compiled": critic(cu.critic_fn, False),
            "critic loss forward+backward, eager": critic(cu._critic_loss, True),
            "critic loss forward+backward, compiled": critic(cu.critic_fn, True),
            "actor loss forward+backward, eager": actor(cu._actor_loss),
            "actor loss forward+backward, compiled": actor(cu.actor_fn)}
    for run in runs.values():
        for _ in range(5):
            run()
    res: dict = {k: [] for k in runs}
    for _ in range(rounds):
        for k, run in runs.items():
            c0 = time.process_time()
            for _ in range(reps):
                run()
            res[k].append((time.process_time() - c0) / reps)
    for k in runs:
        print(f"{k:42s} {np.median(res[k]) * 1e3:7.3f} ms CPU", flush=True)


def eager_vals(agent, batch):
    m = agent.update(batch)
    keys = ["critic_loss", "q", "actor_loss", "temperature_loss", "entropy", "alpha"]
    return [m[k] for k in keys if k in m]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--critics", type=int, default=2)
    p.add_argument("--algo", default="sac")
    p.add_argument("--modes", default="default")
    p.add_argument("--matmul", default="torch", help="cpu_matmul of the compiled agent(s), comma list")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--check", type=int, default=300, help="updates of the numerical comparison")
    p.add_argument("--step-compiled", action="store_true")
    p.add_argument("--guards", default="all", choices=("all", "skip-modules"))
    p.add_argument("--no-bool-masks", action="store_true",
                   help="ReLU gradients as gy*sign(y) while compiling (one process per setting: dynamo "
                        "guards on the Function's backward, so patching later recompiles every agent)")
    p.add_argument("--whole", action="store_true",
                   help="compile the whole update (compiled autograd: backward and Adam steps too)")
    p.add_argument("--micro", action="store_true", help="only the bool-store micro-benchmark")
    p.add_argument("--pieces", action="store_true",
                   help="only the critic/actor loss forward(+backward) timings, eager vs compiled")
    args = p.parse_args()
    if args.micro:
        torch.set_num_threads(1)
        micro_bool_store()
        return
    if args.no_bool_masks:
        _relu_grad_without_bool_masks()
    torch.set_num_threads(1)
    obs_space, act_space = _spaces(17, 6)
    data = _random_data(5000, 17, 6, 0)
    buf = ReplayBuffer(obs_space, act_space, 5100, seed=0)
    _fill_ours(buf, data)
    over = dict(batch_size=256, num_critics=args.critics)
    if args.algo == "redq":
        over["num_target_min"] = 2
    eager = make_agent(args.algo, obs_space, act_space, seed=0, cpu_matmul="onednn", **over)
    if args.pieces:
        pieces(eager, buf)
        return
    runners = {"eager": lambda b: eager.update(b)}
    eager_torch = make_agent(args.algo, obs_space, act_space, seed=0, cpu_matmul="torch", **over)
    runners["eager-torch"] = eager_torch.update
    comp = {}
    nobool = args.no_bool_masks
    for mode, mm in [(m, mm) for m in args.modes.split(",") for mm in args.matmul.split(",")]:
        ag = make_agent(args.algo, obs_space, act_space, seed=0, cpu_matmul=mm, **over)
        cu = CompiledUpdate(ag, mode, args.step_compiled, args.guards, args.whole)
        t0 = time.perf_counter()
        c0 = time.process_time()
        for _ in range(max(2, ag.config.actor_every) + 1):
            cu.update(buf.sample(256))
        name = (f"compiled-{mode}{'-step' if args.step_compiled else ''}{'-whole' if args.whole else ''}"
                f"{'-noguard' if args.guards != 'all' else ''}{'-nobool' if nobool else ''}-{mm}")
        print(f"{name}: first updates (compile) {time.perf_counter() - t0:.1f} s wall, "
              f"{time.process_time() - c0:.1f} s CPU of this process", flush=True)
        runners[name] = cu.update
        comp[name] = (ag, cu)
    # fp32 reference: how far two eager fp32 paths (oneDNN vs torch matmuls: other summation
    # orders) drift apart over the same updates from one state
    if comp and args.check:
        ag0 = next(iter(comp.values()))[0]
        e1 = make_agent(args.algo, obs_space, act_space, seed=0, cpu_matmul="onednn", **over)
        e2 = make_agent(args.algo, obs_space, act_space, seed=0, cpu_matmul="torch", **over)
        e1.load_state_dict(ag0.state_dict())
        e2.load_state_dict(ag0.state_dict())
        worst = 0.0
        for i in range(args.check):
            b = buf.sample(256)
            v1, v2 = eager_vals(e1, b), eager_vals(e2, b)
            worst = max(worst, max(abs(x - y) / max(abs(x), 1e-3) for x, y in zip(v1, v2)))
        pd = max(float((p1.detach() - p2.detach()).abs().max()) for p1, p2 in
                 zip(e1.critic.parameters(), e2.critic.parameters()))
        print(f"reference eager onednn vs eager torch: over {args.check} updates, worst relative "
              f"loss/metric difference {worst:.2e}; max |critic param diff| {pd:.2e}", flush=True)
    # numerical agreement: eager agent (same matmul) vs compiled from the same state
    for name, (ag, cu) in comp.items():
        mm = name.rsplit("-", 1)[1]  # the eager reference: same matmul path
        ref = make_agent(args.algo, obs_space, act_space, seed=0, cpu_matmul=mm, **over)
        ref.load_state_dict(ag.state_dict())
        worst = 0.0
        for i in range(args.check):
            b = buf.sample(256)
            v_e, v_c = eager_vals(ref, b), cu.update(b)
            rel = max(abs(x - y) / max(abs(x), 1e-3) for x, y in zip(v_e, v_c))
            worst = max(worst, rel)
        pd = max(float((p1.detach() - p2.detach()).abs().max()) for p1, p2 in
                 zip(ref.critic.parameters(), ag.critic.parameters()))
        print(f"{name}: over {args.check} updates from one state, worst relative loss/metric difference "
              f"vs eager cpu_matmul={mm}: {worst:.2e}; max |critic param diff| at the end {pd:.2e}", flush=True)
    # timing, interleaved
    for run in runners.values():
        for _ in range(20):
            run(buf.sample(256))
    per = args.steps // args.rounds
    cpu = {k: [] for k in runners}
    for _ in range(args.rounds):
        for k, run in runners.items():
            c0 = time.process_time()
            for _ in range(per):
                run(buf.sample(256))
            cpu[k].append((time.process_time() - c0) / per)
    base = float(np.median(cpu["eager"]))
    for k in runners:
        t = float(np.median(cpu[k]))
        print(f"{k:45s} {t * 1e3:7.3f} ms/update  {1 / t:7.1f} updates/s  eager/this = {base / t:.2f}x",
              flush=True)


if __name__ == "__main__":
    main()
