"""Actor process: owns the env and the fixed-rate loop; streams transitions, takes weights.

Why the split into two threads: the control loop must never wait on the network or on weight
decoding ("late weights are fine, a late action is not"). The loop thread only appends to a
bounded outbox and, between ticks, swaps in a policy that the link thread already decoded and
loaded into a spare agent (double buffering: the swap is a reference assignment). The link
thread owns both ZMQ sockets (they are not thread-safe) and makes the reconnection logic
explicit: HELLO until WELCOME, heartbeats, a `learner_alive` flag driven by the last word from
the learner, and a fresh HELLO when the learner restarts (new session id) or goes silent.
"""
from __future__ import annotations

import collections
import logging
import os
import queue
import signal
import threading
import time
import uuid
from pathlib import Path

import numpy as np

from robolearn.env import env_control_hz
from robolearn.errors import ConfigError
from robolearn.jsonfile import write_json_atomic
from robolearn.runtime import messages as M
from robolearn.runtime.config import ActorConfig, LaunchConfig
from robolearn.runtime.loop import ControlLoop, raise_priority

log = logging.getLogger("robolearn.runtime.actor")


class LearnerLink(threading.Thread):
    """Actor side of the link, run in its own thread. Read its counters from any thread."""

    HELLO_RETRY_S = 0.5

    def __init__(self, cfg: ActorConfig, data_endpoint: str, weights_endpoint: str,
                 actor_id: str, fingerprint: dict, curve=None, spare_agents: list | None = None):
        super().__init__(name=f"link-{actor_id}", daemon=True)
        self.cfg = cfg
        self.data_endpoint, self.weights_endpoint = data_endpoint, weights_endpoint
        self.actor_id = actor_id
        self.fingerprint = fingerprint
        self.curve = curve
        self.outbox: collections.deque = collections.deque()
        self._halt = threading.Event()
        # weights: spare agents to load into (free) and loaded ones waiting for the loop (ready)
        self.free: queue.Queue = queue.Queue()
        self.ready: queue.Queue = queue.Queue()
        for a in spare_agents or []:
            self.free.put(a)
        self._pending_weights: dict | None = None
        # state and counters
        self.welcomed = False
        self.session: str | None = None
        self.last_heard = 0.0
        self.ever_connected = False
        self.refused: str | None = None
        self.shutdown = False
        self.hold = False        # the learner's step budget is reached: stop stepping (HOLD)
        self.sent = 0
        self.dropped = 0
        self.weights_received = 0
        self.weights_version = -1
        self.reconnects = 0
        self.bad_messages = 0
        self.error: BaseException | None = None

    # ------------------------------------------------------------------ loop-thread side
    def submit(self, transition: dict) -> None:
        """Queue one transition; never blocks. When full, the oldest is dropped and counted."""
        if len(self.outbox) >= self.cfg.outbox:
            self.outbox.popleft()
            self.dropped += 1
        self.outbox.append(transition)

    @property
    def learner_alive(self) -> bool:
        return self.welcomed and (time.monotonic() - self.last_heard) < self.cfg.learner_timeout_s

    def stop(self) -> None:
        self._halt.set()

    # ------------------------------------------------------------------- link thread
    def run(self) -> None:
        import zmq

        from robolearn.runtime.transport import ActorSockets

        try:
            socks = ActorSockets(self.data_endpoint, self.weights_endpoint,
                                 identity=f"{self.actor_id}-{uuid.uuid4().hex[:6]}",
                                 curve=self.curve, max_bytes=self.cfg.max_message_bytes)
        except BaseException as exc:  # noqa: BLE001 - reported to the loop thread
            self.error = exc
            return
        poller = zmq.Poller()
        poller.register(socks.dealer, zmq.POLLIN)
        poller.register(socks.sub, zmq.POLLIN)
        last_hello = last_hb = last_flush = 0.0
        pending: list | None = None  # a batch that could not be sent yet
        started = last_unreachable = time.monotonic()
        try:
            while not self._halt.is_set():
                now = time.monotonic()
                if not self.ever_connected and not self.refused and \
                        now - last_unreachable > max(self.cfg.learner_timeout_s, 1.0):
                    last_unreachable = now + 8.0  # then again every ~10 s
                    log.error(
                        "%s: cannot reach the learner at %s after %.0f s: check that the "
                        "learner runs and the host/port (--connect, --port, learner.port); with "
                        "keys = DIR, that DIR holds actor.key_secret and learner.key and that the "
                        "learner's DIR authorises actor.key (Curve keys that do not match fail "
                        "silently in ZMQ). %s", self.actor_id, self.data_endpoint, now - started,
                        "Acting without it (act_without_learner = true)."
                        if self.cfg.act_without_learner else "Holding still until it answers.")
                if self.welcomed and now - self.last_heard > self.cfg.learner_timeout_s:
                    log.warning("%s: no word from the learner for %.1f s: learner lost; %s",
                                self.actor_id, now - self.last_heard,
                                "holding still (no trained weights yet)"
                                if not self.weights_received and not self.cfg.act_without_learner
                                else f"on_learner_lost = {self.cfg.on_learner_lost}")
                    self.welcomed = False
                if not self.welcomed and now - last_hello > self.HELLO_RETRY_S:
                    last_hello = now
                    self._send(socks, M.encode(M.HELLO, actor_id=self.actor_id,
                                               fingerprint=self.fingerprint, pid=os.getpid()))
                if self.welcomed and now - last_hb > self.cfg.heartbeat_s:
                    last_hb = now
                    self._send(socks, M.encode(M.HEARTBEAT, actor_id=self.actor_id,
                                               session=self.session))
                for _ in range(8):  # up to 8 batches per turn: drains a backlog quickly
                    if not self.welcomed:
                        break
                    if pending is None and self.outbox and (
                            len(self.outbox) >= self.cfg.send_batch
                            or now - last_flush > self.cfg.flush_s):
                        pending = self._take_batch()
                    if pending is None:
                        break
                    # encoded at each try, so a batch held over a learner restart carries
                    # the new session
                    try:
                        data = self._encode(pending)
                    except M.MessageError as exc:  # too big: never retry it
                        log.error("%s: dropped %d transitions: %s", self.actor_id,
                                  len(pending), exc)
                        self.dropped += len(pending)
                        pending = None
                        continue
                    if not self._send(socks, data):
                        break
                    self.sent += len(pending)
                    pending = None
                    last_flush = now
                self._load_pending_weights()
                for sock, _ in poller.poll(timeout=5):
                    while True:
                        try:
                            frame = sock.recv(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self._handle(frame, from_pub=sock is socks.sub)
        except BaseException as exc:  # noqa: BLE001
            self.error = exc
            log.exception("%s: link thread failed", self.actor_id)
        finally:
            socks.close()

    def _send(self, socks, data: bytes) -> bool:
        import zmq

        try:
            socks.dealer.send(data, zmq.NOBLOCK)
            return True
        except zmq.Again:  # learner not connected (immediate=1): keep it for later
            return False

    def _take_batch(self) -> list | None:
        items = []
        while self.outbox and len(items) < self.cfg.send_batch:
            items.append(self.outbox.popleft())
        return items or None

    def _encode(self, items: list) -> bytes:
        return M.encode(M.TRANSITIONS, max_bytes=self.cfg.max_message_bytes,
                        actor_id=self.actor_id, session=self.session,
                        batch=M.stack_transitions(items))

    def _handle(self, frame: bytes, from_pub: bool) -> None:
        try:
            msg = M.decode(frame, max_bytes=self.cfg.max_message_bytes, check_version=False)
        except M.MessageError as exc:
            self.bad_messages += 1
            log.error("%s: dropped a malformed message from the learner: %s", self.actor_id, exc)
            return
        kind = msg["type"]
        if msg["v"] != M.PROTOCOL_VERSION:
            self.refused = (f"learner speaks protocol version {msg['v']}, this actor speaks "
                            f"{M.PROTOCOL_VERSION}: install the same robolearn version on both")
            return
        if kind == M.WELCOME:
            if self.session is not None and msg.get("session") != self.session:
                self.reconnects += 1
                log.warning("%s: connected to a new learner session %s", self.actor_id,
                            msg.get("session"))
            self.session = msg.get("session")
            self.welcomed = True
            self.ever_connected = True
            self.last_heard = time.monotonic()
        elif kind == M.REFUSE:
            self.refused = str(msg.get("reason"))
            log.error("%s: the learner refused this actor: %s", self.actor_id, self.refused)
        elif kind == M.HEARTBEAT:
            if not msg.get("known", True) or msg.get("session") != self.session:
                self.welcomed = False   # the learner restarted and does not know us: HELLO again
            else:
                self.last_heard = time.monotonic()
        elif kind == M.WEIGHTS and from_pub:
            if msg.get("env_hash") != self.fingerprint["hash"]:
                self.bad_messages += 1
                log.error("%s: ignored weights for another env spec (%s)", self.actor_id,
                          msg.get("env_hash"))
                return
            try:
                state = M.decode_weights(msg)
            except M.MessageError as exc:
                self.bad_messages += 1
                log.error("%s: dropped weights: %s", self.actor_id, exc)
                return
            self.weights_received += 1
            self.weights_version = int(msg.get("version", -1))
            self._pending_weights = state
            self.hold = self.hold or bool(msg.get("hold", False))   # sent after the budget: HOLD
        elif kind == M.SHUTDOWN and from_pub:
            if msg.get("env_hash") == self.fingerprint["hash"]:
                self.shutdown = True
        elif kind == M.HOLD and from_pub:
            if msg.get("env_hash") == self.fingerprint["hash"]:
                self.hold = True

    def _load_pending_weights(self) -> None:
        """Load the newest decoded weights into a spare agent (off the loop thread)."""
        if self._pending_weights is None:
            return
        try:
            agent = self.free.get_nowait()
        except queue.Empty:
            return  # the loop has not swapped the previous one in yet
        state, self._pending_weights = self._pending_weights, None
        try:
            agent.load_policy_state(state)
        except Exception as exc:  # noqa: BLE001 - wrong architecture: drop, keep acting
            self.bad_messages += 1
            log.error("%s: weights do not fit this actor's policy (%s); check that actor and "
                      "learner use the same [learner.agent] settings", self.actor_id, exc)
            self.free.put(agent)
            return
        self.ready.put(agent)


class Actor:
    """Env + control loop + learner link. `run()` returns a summary dict."""

    def __init__(self, cfg: LaunchConfig, actor_id: str, data_endpoint: str,
                 weights_endpoint: str, seed: int | None = None, out_dir: Path | None = None,
                 stop: threading.Event | None = None, env=None, agents: list | None = None):
        from robolearn.runtime.transport import CurveClient

        self.cfg = cfg
        self.acfg = cfg.actor
        self.actor_id = actor_id
        self.seed = cfg.seed if seed is None else seed
        self.out_dir = Path(out_dir) if out_dir else None
        self.stop_event = stop or threading.Event()
        from robolearn.teleop.intervention import maybe_intervene  # actor.intervene / --intervene

        if env is None and cfg.reward.get("kind") == "human":  # the operator's device labels success
            from robolearn.rewards.human import attach_human_labels

            env = attach_human_labels(_make_env(cfg), cfg.actor.intervene or "keyboard")
        self.env = env if env is not None else _intervening(_make_env(cfg), cfg, maybe_intervene)
        if env is None:  # [finetune] label_successes: the operator confirms the reward's successes
            from robolearn.runtime.finetune_labels import label_successes

            self.env = label_successes(self.env, cfg, self.out_dir)
        if self.acfg.record:  # outermost: sees the applied (possibly human) actions and all info
            from robolearn.data.recording import RecordingWrapper

            self.env = RecordingWrapper(self.env, self.acfg.record, env_id=cfg.env,
                                        device=f"policy:{actor_id}", obs_mode=cfg.obs)
        self.fingerprint = M.env_fingerprint(cfg.env, self.env.observation_space,
                                             self.env.action_space)
        # two agents: one acting, one being loaded by the link thread (double buffering)
        if agents is None:
            agents = [_make_agent(cfg, self.env, self.seed) for _ in range(2)]
        self.active = None  # no weights yet
        curve = CurveClient(Path(cfg.keys)) if cfg.keys else None
        self.link = LearnerLink(self.acfg, data_endpoint, weights_endpoint, actor_id,
                                self.fingerprint, curve=curve, spare_agents=agents)
        self.rng = np.random.default_rng(self.seed)
        self.swaps = 0
        self.paused_ticks = 0
        self.budget_held_ticks = 0   # ticks held after the learner's HOLD (step budget reached)
        self.exit_reason = "running"
        self._t0 = self._last_summary = time.monotonic()
        hz = self.acfg.loop_hz
        if hz is None:
            hz = env_control_hz(self.env)
            if not hz:
                raise ConfigError(f"{cfg.env} declares no control_hz; set actor.loop_hz")
        self.hz = float(hz)
        from robolearn.runtime.camera_outage import CameraOutage

        # a camera that stops: hold the robot, discard the episode, wait for it (not an error)
        self.camera = CameraOutage(self.env, self.acfg.camera_outage_s)
        self.control = ControlLoop(self.env, self._get_policy, self.hz,
                                   on_step=self._on_step, before_tick=self._before_tick,
                                   seed=self.seed, on_camera_error=self.camera.dropped)

    # ----------------------------------------------------------------- loop callbacks
    def _random_policy(self, obs):
        space = self.env.action_space
        return self.rng.uniform(space.low, space.high).astype(np.float32)

    def _agent_policy(self, obs):
        return self.active.act(obs, deterministic=False)

    def _get_policy(self):
        if self.active is None:
            if self.acfg.random_until_weights:
                return self._random_policy
            return self._zero_policy
        return self._agent_policy

    def _zero_policy(self, obs):
        return np.zeros(self.env.action_space.shape, np.float32)

    def _on_step(self, tr: dict) -> None:
        info = tr.pop("info")
        # own copies: an env may reuse its observation buffers between steps
        tr["obs"] = {k: np.array(v) for k, v in tr["obs"].items()}
        tr["next_obs"] = {k: np.array(v) for k, v in tr["next_obs"].items()}
        tr["intervention"] = bool(info.get("intervention", False))
        tr["success"] = bool(info.get("success", False))
        tr["step"] = self.control.env_steps
        self.link.submit(tr)

    def _before_tick(self):
        link = self.link
        try:
            new = link.ready.get_nowait()
        except queue.Empty:
            new = None
        if new is not None:  # swap: the old one goes back to the link thread to be refilled
            old, self.active = self.active, new
            self.swaps += 1
            if old is not None:
                link.free.put(old)
        if link.refused:
            self.exit_reason = f"refused: {link.refused}"
            self.stop_event.set()
        if link.error is not None:
            self.exit_reason = f"link failed: {link.error}"
            self.stop_event.set()
        if link.shutdown:
            self.exit_reason = "learner finished"
            self.stop_event.set()
        if self.acfg.max_steps and self.control.env_steps >= self.acfg.max_steps:
            self.exit_reason = "max_steps"
            self.stop_event.set()
        self._periodic_summary()
        if self.stop_event.is_set():
            return "pause"
        if link.hold:   # the budget is spent: no more robot time while the learner catches up
            self.budget_held_ticks += 1
            return "pause"
        if self.camera.poll() == "pause":  # holding the robot until the cameras are back
            self.paused_ticks += 1
            return "pause"
        return hold_for_lost_learner(self, link)

    # ------------------------------------------------------------------------- run
    def run(self) -> dict:
        import torch

        torch.set_num_threads(self.acfg.threads)
        self.link.start()  # before raising priority: the link thread must not inherit it
        priority = raise_priority() if self.acfg.realtime and self.hz > 0 else "default"
        t0 = self._t0 = self._last_summary = time.monotonic()
        failure = None
        try:
            self.control.run(stop=self.stop_event)
            if self.exit_reason == "running":
                self.exit_reason = "stopped"
        except BaseException as exc:  # a device error, Ctrl-C...: the summary still says why
            failure = exc
            self.exit_reason = f"error: {type(exc).__name__}: {exc}"
            raise
        finally:
            # give the link a moment to flush what is queued (learner may want the tail)
            deadline = time.monotonic() + 0.5
            while self.link.outbox and self.link.learner_alive and time.monotonic() < deadline:
                time.sleep(0.01)
            self.link.stop()
            self.link.join(timeout=2.0)
            try:
                self.env.close()
            finally:
                summary = self.summary(time.monotonic() - t0)
                summary["priority"] = priority
                if failure is not None:
                    summary["error"] = f"{type(failure).__name__}: {failure}"
                self._write_summary(summary, quiet=failure is not None)
        return summary

    def _write_summary(self, summary: dict, quiet: bool) -> None:
        """actor_<id>.json, strict JSON (NaN as null), also when the actor stops on an error."""
        if self.out_dir is None:
            return
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.out_dir / f"actor_{self.actor_id}.json", summary, indent=1)
        except OSError as exc:
            if not quiet:
                raise
            log.error("%s: could not write actor_%s.json (%s)", self.actor_id, self.actor_id, exc)

    def summary(self, wall_s: float) -> dict:
        link, ctl = self.link, self.control
        eps = ctl.episodes
        return {
            "actor_id": self.actor_id, "exit_reason": self.exit_reason,
            "env_steps": ctl.env_steps, "episodes": len(eps), "wall_s": round(wall_s, 3),
            "train_success_rate_last20": (float(np.mean([e["success"] for e in eps[-20:]]))
                                          if eps else None),
            "sent": link.sent, "dropped": link.dropped, "weights_received": link.weights_received,
            "weights_version": link.weights_version, "weight_swaps": self.swaps,
            "reconnects": link.reconnects, "bad_messages": link.bad_messages,
            "paused_ticks": self.paused_ticks, "budget_held_ticks": self.budget_held_ticks,
            "learner_reached": link.ever_connected,
            "loop": ctl.stats.summary(),
            **self.camera.summary(),
            **({"bus": bus_stats(self.env)} if bus_stats(self.env) is not None else {}),
            **({"car": car_stats(self.env)} if car_stats(self.env) is not None else {}),
            **({"operator": operator_stats(self.env)} if operator_stats(self.env) is not None else {}),
        }

    def _periodic_summary(self) -> None:
        """Rewrite actor_<id>.json every SUMMARY_EVERY_S: a killed actor (SIGKILL writes nothing
        at exit) leaves counts at most that old, which the session report adds up."""
        now = time.monotonic()
        if self.out_dir is None or now - self._last_summary < SUMMARY_EVERY_S:
            return
        self._last_summary = now
        try:
            summary = self.summary(now - self._t0)
            summary["exit_reason"] = "running"
            self._write_summary(summary, quiet=True)
        except Exception as exc:  # noqa: BLE001 - a report must never stop the robot's loop
            log.error("%s: periodic summary not written (%s)", self.actor_id, exc)


#: seconds between an actor's periodic summaries (actor_<id>.json, exit_reason "running")
SUMMARY_EVERY_S = 5.0


def hold_for_lost_learner(actor, link: LearnerLink) -> str | None:
    """The `on_learner_lost` rule for one tick of `actor` (an `Actor` or a `VectorActor`):
    "pause" to hold still this tick (and, for `stop`, end the run), None to act."""
    if link.learner_alive:
        return None
    policy = actor.acfg.on_learner_lost
    if policy == "stop" and link.ever_connected:
        actor.exit_reason = "learner lost (on_learner_lost = stop)"
        actor.stop_event.set()
        return "pause"
    if policy == "pause" or (actor.active is None and not actor.acfg.act_without_learner):
        # no learner and no trained weights: never drive a robot with an untrained random
        # policy unless the launch file explicitly allows it
        actor.paused_ticks += 1
        return "pause"
    return None


def bus_stats(env) -> dict | None:
    """The servo bus's counters (transactions, retries, bad checksums) of a real arm env, or
    None: what the driver saw of a noisy bus, to set beside what the emulator injected."""
    robot = getattr(getattr(getattr(env, "unwrapped", None), "backend", None), "robot", None)
    bus = getattr(robot, "bus", None)
    stats = getattr(bus, "stats", None)
    return dict(stats) if isinstance(stats, dict) else None


def car_stats(env) -> dict | None:
    """A real car env's late-but-alive counts, or None: serial writes that timed out and were
    written again (drivers/car.py), the pose tracker's late frames and silences
    (drivers/tracker.py) and the steps whose progress was missing for it (tasks/car.py). What
    a loaded machine cost the run without ending it."""
    base = getattr(env, "unwrapped", None)
    backend = getattr(base, "backend", None)
    link = getattr(getattr(backend, "robot", None), "link_stats", None)
    tracker = getattr(backend, "tracker", None)
    if not callable(link) and tracker is None:
        return None
    out: dict = {}
    if callable(link):
        out.update({f"serial_{k}": v for k, v in link().items()})
    if tracker is not None and callable(getattr(tracker, "stats", None)):
        out.update({f"tracker_{k}": v for k, v in tracker.stats().items()})
        out["missing_progress_steps"] = int(getattr(getattr(base, "task", None), "tracker_missing_total", 0))
    return out


def operator_stats(env) -> dict | None:
    """The intervening device's own counts (takeovers, driven steps, hand-backs by reason) when
    it keeps them (the emulated operator), else None."""
    while env is not None:
        stats = getattr(getattr(env, "device", None), "stats", None)
        if callable(stats):
            return stats()
        env = getattr(env, "env", None)
    return None


def _make_env(cfg: LaunchConfig):
    from robolearn.policies.env_building import make_env
    from robolearn.rewards.serving import actor_env_kwargs

    kwargs = actor_env_kwargs(cfg.env_kwargs, cfg.reward)  # [reward]: in the loop, or a placeholder
    env = make_env(cfg.env, cfg.obs, None, cfg.max_episode_steps, kwargs, cfg.reality_gap,
                   cfg.sim_params)
    # emulated robot: truth for reports (the car has no true-success test: no fetch per step)
    if cfg.finetune is not None and cfg.finetune.truth_url and "CarLap" not in cfg.env:
        from robolearn.drivers.truth import TruthOracle

        env = TruthOracle(env, cfg.finetune.truth_url)
    return env


def _intervening(env, cfg: LaunchConfig, maybe_intervene):
    """The actor's env with its takeover device: the emulated operator for `[finetune] intervene =
    "operator"` (it sees the emulator's truth, teleop/intervening_operator.py), else
    `[actor] intervene` (a person's device), else none."""
    ft = cfg.finetune
    if ft is None or ft.intervene != "operator":
        return maybe_intervene(env, cfg.actor.intervene)
    from robolearn.teleop import make_device
    from robolearn.teleop.intervention import InterventionWrapper

    try:
        if not ft.truth_url:
            raise ConfigError("finetune.intervene = \"operator\" needs the emulator's truth "
                              "(finetune.truth_url, set by `robolearn finetune` for an emulated robot)")
        device = make_device("operator", env, mode="intervene", truth_url=ft.truth_url, seed=cfg.seed,
                             **ft.intervene_options)
    except BaseException:
        env.close()  # the robot's port and cameras
        raise
    log.info("interventions: %s", device.help())
    return InterventionWrapper(env, device)


def agent_overrides(cfg: LaunchConfig) -> dict:
    over = dict(cfg.learner.agent)
    if cfg.learner.utd is not None:
        over["utd"] = cfg.learner.utd
    if cfg.learner.learning_starts is not None:
        over["learning_starts"] = cfg.learner.learning_starts
    return over


def _make_agent(cfg: LaunchConfig, env, seed: int):
    from robolearn.policies.registry import make_agent

    return make_agent(cfg.algo, env.observation_space, env.action_space, seed=seed,
                      **agent_overrides(cfg))


def run_actor(cfg: LaunchConfig, actor_id: str, data_endpoint: str, weights_endpoint: str,
              seed: int | None = None, out_dir: Path | None = None) -> dict:
    """Build and run an actor until the learner finishes, max_steps, or SIGINT/SIGTERM."""
    stop = threading.Event()

    def _on_signal(signum, frame):
        stop.set()

    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        actor = Actor(cfg, actor_id, data_endpoint, weights_endpoint, seed=seed,
                      out_dir=out_dir, stop=stop)
        return actor.run()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
