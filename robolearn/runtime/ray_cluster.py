"""Ray as the cluster engine of an actor/learner run (`[cluster] engine = "ray"`).

Why Ray: placement across machines, restarts of failed workers, resource accounting and
scheduling are what a distributed engine already does; robolearn does not grow its own. Ray
only *places and supervises* here: the learner and each actor are Ray actors that wrap the same
`Learner` / `Actor` objects `robolearn learner` / `robolearn actor` run, and the data plane stays
ZeroMQ with today's message format (measured against Ray object passing by `robolearn bench
fleet`; the decision and its numbers are in docs/runtime.md "Ray cluster").

- learner: `num_gpus=1` when the cluster has a GPU (`[cluster] learner_gpu`), never restarted
  (a new learner would start from an empty replay); it binds its ZeroMQ ports on its own node
  (port 0: free ones there) and tells the driver the addresses the actors connect to.
- sim actors: spread over the nodes (`SPREAD`), `max_restarts` / `max_task_retries` =
  `[cluster] max_restarts`: a dead one comes back by itself, with a fresh seed, and the learner
  keeps training from the others meanwhile. Each may step `envs_per_actor` envs
  (`runtime/fleet.py`).
- robot actors (env_kwargs `backend = "real"` or a `port`): pinned to the node that offers the
  custom resource `robot:<id>` (`[cluster] robot`), `max_restarts=0`: a robot actor that died
  comes back only through the robot's own start-up checks (a person starts it again), never
  blindly.

Ray is imported only here and only when asked for, so without the extra installed the error
is one line saying how to install it.
"""
from __future__ import annotations

import logging
import math
import os
import threading
import time
from pathlib import Path

from robolearn.errors import ConfigError
from robolearn.runtime.config import LaunchConfig

log = logging.getLogger("robolearn.runtime.ray_cluster")

RAY_MISSING = "engine = \"ray\" needs Ray: pip install 'robolearn[ray]'"
ACTOR_SEED_STRIDE = 1000  # actor i gets launch seed + 1000 * (i + 1), as `robolearn launch`


def require_ray():
    """`import ray`, or one line saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(RAY_MISSING) from None
    return ray


def init_ray(address: str = "", num_cpus: float | None = None, **kwargs):
    """Join the cluster at `address` ("auto", "HOST:6379"), or start a local one (no dashboard).
    Returns the ray module; does nothing if this process is already connected."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    common = dict(logging_level=logging.WARNING, **kwargs)
    if address:
        ray.init(address=address, **common)
    else:
        ncpu = max(os.cpu_count() or 1, int(math.ceil(num_cpus or 0)))
        # "local": always a new local instance, never one some other job on this machine started
        ray.init(address="local", num_cpus=ncpu, include_dashboard=False, **common)
    return ray


def node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


# --------------------------------------------------------------------- the Ray actors
class LearnerWorker:
    """The learner as a Ray actor: binds on its node, `run()` trains until the learner ends."""

    def __init__(self, cfg: LaunchConfig, run_dir: str):
        from robolearn.runtime.learner import Learner
        from robolearn.runtime.transport import endpoint, free_port

        self._stop = threading.Event()
        self.learner = Learner(cfg, run_dir=Path(run_dir), stop=self._stop)
        lc = cfg.learner
        port = lc.port or free_port(lc.host)
        wport = lc.weights_port or free_port(lc.host)
        while wport == port:
            wport = free_port(lc.host)
        self.learner.bind(port, wport)
        # 0.0.0.0 binds every interface: actors elsewhere connect to this node's address
        host = node_ip() if lc.host in ("0.0.0.0", "*", "") else lc.host
        self._endpoints = (endpoint(host, port), endpoint(host, wport))

    def endpoints(self) -> tuple[str, str]:
        return self._endpoints

    def info(self) -> dict:
        import ray

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(),
                "node_ip": node_ip()}

    def run(self) -> dict:
        return self.learner.run()

    def progress(self) -> dict | None:
        try:
            return self.learner.progress()
        except RuntimeError:  # a dict changed size while the run thread wrote it: ask again
            return None

    def stop(self) -> None:
        self._stop.set()


class ActorWorker:
    """One actor (or a vector of sim envs) as a Ray actor; `run()` acts until the learner ends."""

    def __init__(self, cfg: LaunchConfig, actor_id: str, data_endpoint: str,
                 weights_endpoint: str, seed: int, out_dir: str, n_envs: int = 1):
        import ray

        self.reconstructed = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        if self.reconstructed:  # a restart: a new seed, or it would replay the episodes it sent
            seed = seed + 1 + (os.getpid() % 100_000) * 7
        self._stop = threading.Event()
        self.seed = seed
        if n_envs > 1:
            from robolearn.runtime.fleet import VectorActor

            self.actor = VectorActor(cfg, actor_id, data_endpoint, weights_endpoint, n_envs,
                                     seed=seed, out_dir=Path(out_dir), stop=self._stop)
        else:
            from robolearn.runtime.actor import Actor

            self.actor = Actor(cfg, actor_id, data_endpoint, weights_endpoint, seed=seed,
                               out_dir=Path(out_dir), stop=self._stop)

    def info(self) -> dict:
        import ray

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(),
                "node_ip": node_ip(), "reconstructed": self.reconstructed, "seed": self.seed}

    def run(self) -> dict:
        return self.actor.run()

    def stop(self) -> None:
        self._stop.set()


# ------------------------------------------------------------------------ the driver
class RayRun:
    """Start the learner and the actors of a launch file on a Ray cluster and supervise them.

    `start()` places them; `wait()` returns when the learner ends (or every actor is gone for
    good: then the learner is stopped), counting restarts (a changed pid) on the way; `stop()`
    asks everyone to stop. `record()` is what `launch.json` holds."""

    POLL_S = 0.5

    def __init__(self, cfg: LaunchConfig, run_dir: Path | str | None = None, *,
                 quiet: bool = True, printer=print):
        self.cfg = cfg
        self.cc = cfg.cluster
        self.run_dir = Path(run_dir or cfg.run_dir()).resolve()
        self.quiet = quiet
        self.print = printer
        self.ray = None
        self.learner = None
        self.learner_ref = None
        self.actors: dict = {}
        self.refs: dict = {}
        self.results: dict[str, dict] = {}
        self.failed: dict[str, str] = {}
        self.infos: dict[str, dict] = {}
        self.restarts: dict[str, int] = {}
        self._info_refs: dict = {}
        self.hardware = cfg.drives_hardware()
        self.summary: dict | None = None
        self.endpoints: tuple[str, str] | None = None

    def _learner_options(self, resources: dict) -> dict:
        gpu = {"auto": resources.get("GPU", 0) >= 1, "always": True, "never": False}[self.cc.learner_gpu]
        return dict(num_cpus=self.cc.learner_cpus, num_gpus=1 if gpu else 0, max_restarts=0,
                    max_concurrency=4)

    def robot_ids(self) -> list[str]:
        r = self.cc.robot
        return [x for x in ([r] if isinstance(r, str) else list(r)) if x]

    def _actor_options(self, resources: dict, i: int = 0) -> dict:
        """Ray options of actor i: a sim actor spreads and restarts; a robot actor is pinned to
        the node offering robot:<id> (the i-th of `[cluster] robot`) and never restarted."""
        cc = self.cc
        if self.hardware:
            ids = self.robot_ids()
            if not ids:
                raise ConfigError("this launch file drives a robot (env_kwargs backend/port): under "
                                  "Ray set [cluster] robot = \"ID\" (or a list, one per actor) and start "
                                  "the robot computer's Ray node with --resources '{\"robot:ID\": 1}' "
                                  "(docs/runtime.md)")
            if len(ids) != self.cfg.actors:
                raise ConfigError(f"actors = {self.cfg.actors} but [cluster] robot names {len(ids)} "
                                  f"robot(s) ({', '.join(ids)}): one actor per robot")
            res = f"robot:{ids[i]}"
            if resources.get(res, 0) < 1:
                raise ConfigError(f"no node of the Ray cluster offers the resource {res}: on the robot "
                                  f"computer run `ray start --address HEAD:6379 --resources "
                                  f"'{{\"{res}\": 1}}'` (docs/runtime.md)")
            # never restarted: a robot comes back through its own start-up checks
            return dict(num_cpus=cc.actor_cpus, resources={res: 1}, max_restarts=0,
                        max_task_retries=0, max_concurrency=2)
        return dict(num_cpus=cc.actor_cpus, scheduling_strategy="SPREAD",
                    max_restarts=cc.max_restarts, max_task_retries=cc.max_restarts,
                    max_concurrency=2)

    def start(self) -> "RayRun":
        cfg, cc = self.cfg, self.cc
        need = cc.learner_cpus + cfg.actors * cc.actor_cpus
        ray = self.ray = init_ray(cc.address, num_cpus=need)
        resources = ray.cluster_resources()
        actor_opts = [self._actor_options(resources, i) for i in range(cfg.actors)]
        self.run_dir.mkdir(parents=True, exist_ok=True)
        L = ray.remote(LearnerWorker).options(**self._learner_options(resources))
        self.learner = L.remote(cfg, str(self.run_dir))
        self.endpoints = d, w = ray.get(self.learner.endpoints.remote())
        self.infos["learner"] = ray.get(self.learner.info.remote())
        self.learner_ref = self.learner.run.remote()
        n_envs = 1 if self.hardware else cc.envs_per_actor
        for i in range(cfg.actors):
            name = f"actor{i}"
            A = ray.remote(ActorWorker).options(**actor_opts[i])
            self.actors[name] = A.remote(cfg, name, d, w, cfg.seed + ACTOR_SEED_STRIDE * (i + 1),
                                         str(self.run_dir), n_envs)
            self.restarts[name] = 0
        for name, a in self.actors.items():
            self.infos[name] = ray.get(a.info.remote())
            self.refs[name] = a.run.remote()
        if not self.quiet:
            self.print(f"ray: learner on {self.infos['learner']['node_ip']} (pid "
                       f"{self.infos['learner']['pid']}), data {d}, weights {w}")
            for name in self.actors:
                self.print(f"ray: {name} on {self.infos[name]['node_ip']} (pid {self.infos[name]['pid']}, "
                           f"{n_envs} env{'s' if n_envs > 1 else ''})")
        return self

    # ------------------------------------------------------------------ supervision
    def pid(self, name: str) -> int:
        return int(self.infos[name]["pid"])

    def _poll_restarts(self) -> None:
        """Ask each live actor its pid (never blocks): a new pid is a restart by Ray."""
        ray = self.ray
        for name, a in self.actors.items():
            if name in self.results or name in self.failed:
                continue
            ref = self._info_refs.get(name)
            if ref is None:
                self._info_refs[name] = a.info.remote()
                continue
            ready, _ = ray.wait([ref], timeout=0)
            if not ready:
                continue
            del self._info_refs[name]
            try:
                info = ray.get(ref)
            except Exception:  # noqa: BLE001 - dead for good: the run ref says why
                continue
            if info["pid"] != self.infos[name]["pid"]:
                self.restarts[name] += 1
                self.print(f"ray: {name} restarted by Ray (pid {self.infos[name]['pid']} -> "
                           f"{info['pid']} on {info['node_ip']}); the learner kept training")
            self.infos[name] = info

    def _collect_actors(self) -> None:
        ray = self.ray
        pending = {n: r for n, r in self.refs.items() if n not in self.results and n not in self.failed}
        if not pending:
            return
        ready, _ = ray.wait(list(pending.values()), num_returns=len(pending), timeout=0)
        for name, ref in pending.items():
            if ref not in ready:
                continue
            try:
                self.results[name] = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - RayActorError: died, restarts used up
                why = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
                self.failed[name] = why
                if self.hardware:
                    self.print(f"ray: {name} (robot {self.robot_ids()[int(name[5:])]}) died and is NOT restarted: bring "
                               "the robot back through its start-up checks, then start the actor "
                               f"again (robolearn actor ... --id {name}); {why}")
                else:
                    self.print(f"ray: {name} died after {self.restarts[name]} restart(s) "
                               f"(max_restarts = {self.cc.max_restarts}): {why}")

    def wait(self, timeout_s: float | None = None, progress_every_s: float = 10.0) -> dict:
        ray = self.ray
        t_end = None if timeout_s is None else time.monotonic() + timeout_s
        last_print = time.monotonic()
        stopping = False
        while True:
            ready, _ = ray.wait([self.learner_ref], timeout=self.POLL_S)
            self._poll_restarts()
            self._collect_actors()
            if ready:
                break
            if not stopping and len(self.failed) == len(self.actors):
                self.print("ray: no actor is running any more: stopping the learner")
                self.learner.stop.remote()
                stopping = True
            if t_end is not None and time.monotonic() > t_end and not stopping:
                self.print("ray: time limit reached: stopping the learner")
                self.learner.stop.remote()
                stopping = True
            if not self.quiet and time.monotonic() - last_print > progress_every_s:
                last_print = time.monotonic()
                m = self.progress()
                if m:
                    self.print(f"env_steps {m.get('env_steps')}  updates {m.get('updates')}  "
                               f"actors {m.get('actors_alive')}  train success "
                               f"{m.get('train_success_rate')}  restarts {sum(self.restarts.values())}")
        try:
            self.summary = ray.get(self.learner_ref)
        except Exception as exc:  # noqa: BLE001
            self.failed["learner"] = str(exc).strip().splitlines()[0][:300]
        # the learner's SHUTDOWN stops the actors; give them a moment, then end them
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and len(self.results) + len(self.failed) < len(self.actors) + (
                "learner" in self.failed):
            self._collect_actors()
            time.sleep(0.1)
        return self.record()

    def progress(self) -> dict | None:
        try:
            return self.ray.get(self.learner.progress.remote(), timeout=5)
        except Exception:  # noqa: BLE001 - a busy or finished learner: no line this time
            return None

    def stop(self) -> None:
        if self.learner is not None:
            self.learner.stop.remote()
        for a in self.actors.values():
            a.stop.remote()

    def shutdown(self) -> None:
        """Kill every Ray actor of this run (no restarts); the cluster itself stays up."""
        ray = self.ray
        if ray is None:
            return
        for a in list(self.actors.values()) + ([self.learner] if self.learner is not None else []):
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass

    def record(self) -> dict:
        return {"engine": "ray", "data_endpoint": self.endpoints[0] if self.endpoints else None,
                "weights_endpoint": self.endpoints[1] if self.endpoints else None,
                "workers": self.infos, "restarts": self.restarts, "failed": self.failed,
                "actor_results": self.results, "hardware": self.hardware,
                "envs_per_actor": 1 if self.hardware else self.cc.envs_per_actor,
                "summary": self.summary}
