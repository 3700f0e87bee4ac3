"""Learner process: receives transitions from actors, trains, publishes weights, checkpoints.

Why it looks like this: one thread does everything in a simple loop (drain the socket ->
train a slice -> publish -> log), so there are no locks around the agent or the replay.
Pacing: with `pace = "utd"` the learner does `utd` updates per received env step (after
`learning_starts`), i.e. the algorithm's ratio holds whatever the actors' speed, and it idles
when it is ahead; `pace = "free"` trains continuously (benchmarks). Actors are tracked by id
with a last-heard time: a dead actor is reported and training continues from the others.
All actors share one replay; the buffer starts a new chain whenever consecutive transitions
do not connect (another actor's batch), so streams never get spliced together.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robolearn.errors import ConfigError
from robolearn.runtime import messages as M
from robolearn.runtime.config import LaunchConfig, to_dict
from robolearn.runtime.socket_events import SocketEventLog
from robolearn.jsonfile import write_json_atomic

log = logging.getLogger("robolearn.runtime.learner")


@dataclass
class ActorRecord:
    actor_id: str
    identity: bytes
    last_heard: float
    transitions: int = 0
    episodes: int = 0
    alive: bool = True
    ep_return: float = 0.0
    ep_success: bool = False
    returns: list = field(default_factory=list)
    successes: list = field(default_factory=list)


class Learner:
    def __init__(self, cfg: LaunchConfig, run_dir: Path | None = None,
                 stop: threading.Event | None = None, env=None):
        import torch

        from robolearn.policies.demos import load_demos
        from robolearn.data.replay import slots_needed
        from robolearn.policies.replay_setup import batch_shares, build_replays
        from robolearn.policies.train_config import replay_options
        from robolearn.runtime.actor import _make_env, agent_overrides
        from robolearn.policies.registry import make_agent

        self.cfg = cfg
        lc = self.lcfg = cfg.learner
        torch.set_num_threads(lc.threads)
        if lc.nice:
            try:
                os.nice(lc.nice)
            except OSError:
                pass
        self.dir = Path(run_dir) if run_dir else cfg.run_dir()
        self.dir.mkdir(parents=True, exist_ok=True)
        self._next_snapshot = 0          # env step of the next policy snapshot (policy_snapshot_every)
        self.stop_event = stop or threading.Event()
        if env is None and cfg.finetune is not None:  # never open the robot from the learner
            from robolearn.runtime.finetune import make_sim_twin

            env = make_sim_twin(cfg)
        self.env = env if env is not None else _make_env(cfg)
        self.fingerprint = M.env_fingerprint(cfg.env, self.env.observation_space,
                                             self.env.action_space)
        self.agent = make_agent(cfg.algo, self.env.observation_space, self.env.action_space,
                                seed=cfg.seed, **agent_overrides(cfg))
        try:
            self.agent.require_learning()
        except Exception:
            self.env.close()
            raise
        ac = self.agent.config
        self.utd = int(ac.utd)
        self.batch_size = int(ac.batch_size)
        self.learning_starts = int(getattr(ac, "learning_starts", 0))
        # episode ends take a pad slot each, hence the margin over total_env_steps
        cap = lc.buffer_size or min(int(getattr(ac, "replay_capacity", 1_000_000)),
                                    lc.total_env_steps + lc.total_env_steps // 4 + 1000
                                    if lc.total_env_steps else 1_000_000)
        prior_fraction = getattr(ac, "prior_fraction", None)
        demos = load_demos(lc.demos, self.env, seed=cfg.seed) if lc.demos else None
        # RLPD: the demos are the prior part of every batch; other algos: they seed the replay
        prior_capacity = len(demos["action"]) + cap if demos is not None and prior_fraction else 0
        try:
            prior_data, self.prior_runs_report = self._prior_runs(cfg)
        except Exception:
            self.env.close()
            raise
        # a fine-tuning session's rlpd warm start fills the prior buffer itself (prepare_learner:
        # sim rollouts, robot demos, interventions): earlier runs then get a buffer of their own
        session_prior = cfg.finetune is not None and cfg.finetune.warm_start == "rlpd"
        demos_in_prior = bool(demos is not None and prior_fraction) or session_prior
        if session_prior:  # the share prepare_learner gives the session's prior buffer
            from robolearn.runtime.finetune import SESSION_PRIOR_FRACTION

            prior_fraction = SESSION_PRIOR_FRACTION
        # RaE, as `train` does it (policies/trainer_setup.py): earlier runs fill the prior buffer,
        # or beside rlpd's demos get a buffer and a share of their own
        prior_fraction, earlier_fraction = batch_shares(
            float(prior_fraction or 0.0), replay_options(cfg.replay)[1], bool(prior_data), demos_in_prior)
        if prior_data and earlier_fraction is None:
            prior_capacity = max(prior_capacity, cap) + sum(slots_needed(d) for d in prior_data)
        self.replay, self.prior, self.earlier, self.sampler = build_replays(
            self.env.observation_space, self.env.action_space, ac, cap, cfg.seed, demos=demos,
            prior_capacity=prior_capacity, prior_fraction=prior_fraction, prior_data=prior_data,
            demos_in_prior=demos_in_prior, earlier_fraction=earlier_fraction)
        self.earlier_fraction = earlier_fraction
        from robolearn.rewards.serving import learner_labeler

        # [reward] where = "learner": label transitions here, as they arrive, before replay
        self.labeler = learner_labeler(cfg.reward, self.env.observation_space)
        # [reward] where = "server": ask `robolearn reward serve`, holding transitions while it is down
        self.server_labeler = self._server_labeler(cfg)
        self.rejected_missing_reward = 0  # transitions with no reward (model had no answer): dropped
        from robolearn.env import env_control_hz
        from robolearn.runtime.takeover_prior import TakeoverPrior, takeover_climb_dims

        self.takeover_prior = TakeoverPrior.at_rate(
            cfg.finetune.prior_takeovers if cfg.finetune is not None else "all", env_control_hz(self.env, 10.0),
            takeover_climb_dims(cfg, self.env))
        from robolearn.runtime.takeover_penalty import TakeoverPenalty

        self.takeover_penalty = TakeoverPenalty(cfg.finetune.takeover_penalty if cfg.finetune is not None else None)
        self.republish_s = 0.0  # > 0: re-send weights this often while no update happens
        self.finetune_info: dict | None = None
        # before prepare_learner: a restarted session learner resumes this count from its
        # checkpoint, and the UTD pacing (updates owed = UTD x env steps - updates done) needs it
        self.env_steps = 0
        if cfg.finetune is not None:
            from robolearn.runtime.finetune import prepare_learner

            self.finetune_info = prepare_learner(self)
        self.session = uuid.uuid4().hex[:12]
        self.actors: dict[bytes, ActorRecord] = {}
        self.weights_version = 0
        self.published = 0
        self.holds_sent = 0   # HOLD broadcasts (the step budget reached while updates were due)
        self.bad_messages = 0
        self.nonfinite = 0           # transitions refused for NaN/inf (counted, logged)
        self.checkpoint_failures = 0  # periodic checkpoints that failed (disk full): logged, training went on
        self.refused = 0
        self.dropped_unknown = 0
        self.socket_log = SocketEventLog(self.lcfg.max_message_bytes)
        self.last_eval: dict | None = None
        self.eval_curve: list[tuple[int, float]] = []  # (env_steps, success rate)
        self.sockets = None
        self._metrics_f = None
        self._loss_acc: dict[str, list] = {}   # update metrics (critic_loss, q, bc_loss, ...) since the last row
        # how far behind its UTD the learner ran: a real-time robot sends 10 steps/s in an episode,
        # more than one core can update at a high UTD; the slack is made up in the resets
        self.updates_behind_max = 0
        self._t_start = time.monotonic()

    def _server_labeler(self, cfg: LaunchConfig):
        if not cfg.reward:
            return None
        from robolearn.reward_config import reward_config

        rc = reward_config(cfg.reward)
        if rc.where != "server":
            return None
        if not rc.address:
            self.env.close()
            raise ConfigError("[reward] where = \"server\" needs address = \"tcp://HOST:PORT\" (the socket of "
                              "`robolearn reward serve`; `robolearn finetune` picks one and starts the server)")
        from robolearn.runtime.reward_client import ServerLabeler

        return ServerLabeler(rc.address, rc.timeout_s, rc.max_held, self.lcfg.max_message_bytes)

    def _prior_runs(self, cfg: LaunchConfig) -> tuple[list[dict], list[dict]]:
        """`[replay] prior_runs`: earlier runs' and datasets' transitions, checked against this
        run (policies/prior_runs.py). A stored reward that means something else is an error here:
        the learner has no relabelling model for them (`robolearn train` does)."""
        from robolearn.policies.prior_runs import load_prior_runs
        from robolearn.policies.train_config import replay_options

        runs = list(replay_options(cfg.replay)[0]) if cfg.replay else []
        if cfg.finetune is not None and cfg.finetune.pretraining_replay:  # the pretrained run's own data
            runs = [str(cfg.finetune.checkpoint), *runs]
        if not runs:
            return [], []
        data, report = load_prior_runs(runs, self.env, cfg.env, cfg.obs, cfg.reward, cfg.env_kwargs,
                                       run_dir=self.dir)
        for r in report:
            log.info("prior run %s: %s transitions", r.get("path"), r.get("transitions"))
        return data, report

    # ---------------------------------------------------------------------- sockets
    def bind(self, data_port: int, weights_port: int) -> tuple[str, str]:
        from robolearn.runtime.transport import CurveServer, LearnerSockets

        curve = CurveServer(Path(self.cfg.keys)) if self.cfg.keys else None
        self.sockets = LearnerSockets(self.lcfg.host, data_port, weights_port, curve=curve,
                                      max_bytes=self.lcfg.max_message_bytes)
        self.socket_log.max_message_bytes = int(self.lcfg.max_message_bytes)  # what the sockets enforce
        return self.sockets.data_endpoint, self.sockets.weights_endpoint

    def _reply(self, identity: bytes, msg_type: str, **fields) -> None:
        import zmq

        try:
            self.sockets.router.send_multipart([identity, M.encode(msg_type, **fields)],
                                               zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # actor gone; it will say HELLO again

    # ---------------------------------------------------------------------- messages
    def poll(self, timeout_ms: int = 0, max_messages: int = 1000) -> int:
        """Handle waiting messages; return how many transitions were added."""
        import zmq

        router = self.sockets.router
        added = 0
        self.socket_events()
        if not router.poll(timeout_ms, zmq.POLLIN):
            return 0
        for _ in range(max_messages):
            try:
                frames = router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            added += self._handle(frames)
        return added

    def socket_events(self) -> None:
        if self.sockets is not None:
            self.socket_log.read(self.sockets.events())

    @property
    def peer_disconnects(self) -> int:
        return self.socket_log.peer_disconnects

    @property
    def rejected_handshakes(self) -> int:
        return self.socket_log.rejected_handshakes

    def _handle(self, frames: list[bytes]) -> int:
        if len(frames) != 2:
            self.bad_messages += 1
            log.error("dropped a message with %d frames (expected 1 after the identity)",
                      len(frames) - 1)
            return 0
        identity, frame = frames
        try:
            msg = M.decode(frame, max_bytes=self.lcfg.max_message_bytes, check_version=False)
        except M.MessageError as exc:
            self.bad_messages += 1
            log.error("dropped a message from %r: %s", identity, exc)
            return 0
        now = time.monotonic()
        if msg["v"] != M.PROTOCOL_VERSION:
            self.refused += 1
            reason = (f"protocol version mismatch: actor speaks {msg['v']}, learner speaks "
                      f"{M.PROTOCOL_VERSION}; install the same robolearn version on both")
            log.error("refused %r: %s", identity, reason)
            self._reply(identity, M.REFUSE, reason=reason)
            return 0
        kind = msg["type"]
        rec = self.actors.get(identity)
        if kind == M.HELLO:
            problem = M.compare_fingerprints(self.fingerprint, msg.get("fingerprint"))
            if problem:
                self.refused += 1
                log.error("refused actor %s: %s", msg.get("actor_id"), problem)
                self._reply(identity, M.REFUSE, reason=problem)
                return 0
            actor_id = str(msg.get("actor_id", identity.decode(errors="replace")))
            if rec is None:
                rec = self.actors[identity] = ActorRecord(actor_id, identity, now)
                log.info("actor %s connected", actor_id)
            rec.last_heard, rec.alive = now, True
            self._reply(identity, M.WELCOME, session=self.session,
                        weights_version=self.weights_version)
            return 0
        if rec is None or msg.get("session") != self.session:
            # not (or no longer) handshaken with this learner: ask it to say HELLO again
            self.dropped_unknown += 1
            self._reply(identity, M.HEARTBEAT, session=self.session, known=False)
            return 0
        if not rec.alive:
            log.info("actor %s is back", rec.actor_id)
        rec.last_heard, rec.alive = now, True
        if kind == M.HEARTBEAT:
            self._reply(identity, M.HEARTBEAT, session=self.session, known=True)
            return 0
        if kind == M.TRANSITIONS:
            batch = msg.get("batch")
            try:
                n = M.check_transitions(batch, self.fingerprint)
            except M.MessageError as exc:
                self.bad_messages += 1
                log.error("dropped transitions from %s: %s", rec.actor_id, exc)
                return 0
            bad = M.nonfinite_rows(batch)
            if bad.any():  # one sensor glitch must not kill the run: refuse those rows only
                self.nonfinite += int(bad.sum())
                log.warning("refused %d transition(s) with NaN/inf (observation, action or "
                            "reward) from actor %s at step(s) %s; training goes on",
                            int(bad.sum()), rec.actor_id, batch["step"][bad].tolist()[:20])
                batch = M.select_rows(batch, ~bad)
                n = len(batch["reward"])
            missing = np.isnan(batch["reward"])
            if missing.any():  # the reward model had no answer: dropped in _add, never a reward
                log.warning("actor %s sent %d transition(s) with no reward (NaN: the reward model "
                            "had no answer) at step(s) %s; not stored", rec.actor_id,
                            int(missing.sum()), batch["step"][missing].tolist()[:20])
            if self.server_labeler is not None:  # stored when the server has labelled them
                rec.transitions += n
                self.env_steps += n
                self.server_labeler.submit(rec, batch, n)
                self.pump_labels(0.0)
            else:
                self._add(rec, batch, n)
            self._reply(identity, M.HEARTBEAT, session=self.session, known=True)
            return n
        self.bad_messages += 1
        log.error("dropped an unexpected %r message from %s", kind, rec.actor_id)
        return 0

    def pump_labels(self, budget_s: float = 0.01) -> int:
        """Store the batches the reward server has labelled since the last call; returns how many
        transitions were stored (a MISSING answer is dropped and counted, as any other)."""
        if self.server_labeler is None:
            return 0
        stored = 0
        for rec, batch, reward, success, _held in self.server_labeler.pump(budget_s):
            n = len(reward)
            self._store(rec, batch, n, reward, success, success)
            stored += n
        return stored

    def _add(self, rec: ActorRecord, b: dict, n: int) -> None:
        rewards, successes = b["reward"], b["success"]
        labelled_term = None
        if self.labeler is not None:
            rewards, successes, _ = self.labeler.label(b["next_obs"])
            labelled_term = successes
        self._store(rec, b, n, rewards, successes, labelled_term)
        rec.transitions += n
        self.env_steps += n

    def _store(self, rec: ActorRecord, b: dict, n: int, rewards, successes, labelled_term) -> None:
        """Into replay, with their rewards (a NaN reward is never stored: dropped and counted)."""
        obs_keys = list(b["obs"])
        for i in range(n):
            obs = {k: b["obs"][k][i] for k in obs_keys}
            nxt = {k: b["next_obs"][k][i] for k in obs_keys}
            term, trunc = bool(b["terminated"][i]), bool(b["truncated"][i])
            if labelled_term is not None:
                term = term or bool(labelled_term[i])
            interv = bool(b["intervention"][i])
            r = float(rewards[i])
            row = slot = None
            if r == r:  # NaN = the reward model had no answer: never stored as a reward
                row = (obs, b["action"][i], r, nxt, term, trunc)
                slot = self.replay.add(*row, interv)
                rec.ep_return += r
            else:
                self.rejected_missing_reward += 1
            ended = self.takeover_penalty.offer(rec.actor_id, slot, interv, term or trunc)
            if ended is not None:  # the policy's step into this takeover: a failed attempt (RLIF)
                self.replay.end_at(ended, -self.takeover_penalty.penalty)
            if self.prior is not None:  # HIL-SERL: interventions join the prior data (all, or the successful)
                for kept in self.takeover_prior.offer(rec.actor_id, row, interv, bool(successes[i]),
                                                      term or trunc):
                    self.prior.add(*kept, True)
            rec.ep_success = rec.ep_success or bool(successes[i])
            if term or trunc:
                rec.episodes += 1
                rec.returns.append(rec.ep_return)
                rec.successes.append(rec.ep_success)
                rec.ep_return, rec.ep_success = 0.0, False

    # ---------------------------------------------------------------------- training
    def updates_due(self) -> int:
        if len(self.replay) + (len(self.prior) if self.prior is not None else 0) == 0:
            return 0
        if self.env_steps < self.learning_starts:
            return 0
        total = self.lcfg.total_env_steps
        if self.lcfg.pace == "free":
            return 0 if total and self.env_steps >= total else 1 << 30
        steps = min(self.env_steps, total) if total else self.env_steps
        return self.utd * (steps - self.learning_starts + 1) - self.agent.num_updates

    def train_slice(self, max_updates: int, max_seconds: float = 0.02) -> int:
        t_end = time.monotonic() + max_seconds
        if self.lcfg.pace == "utd":   # "free" asks for all it can do: not a lag
            self.updates_behind_max = max(self.updates_behind_max, int(max_updates))
        done = 0
        while done < max_updates:
            out = self.agent.update(self.sampler.sample(self.batch_size))
            for k, v in out.items():   # means since the last metrics row, as `robolearn train` logs them
                acc = self._loss_acc.setdefault(k, [0.0, 0])
                acc[0] += float(v)
                acc[1] += 1
            done += 1
            if self.agent.num_updates % self.lcfg.publish_every == 0:
                self.publish()
            if time.monotonic() > t_end:
                break
        return done

    def pace_report(self) -> dict:
        """Updates per control step as trained, not as configured: the UTD a session reached,
        how far behind it ran at worst, and the updates still owed when training stopped."""
        return {"updates_per_env_step": (round(self.agent.num_updates / self.env_steps, 3)
                                         if self.env_steps else None),
                "updates_behind_max": int(self.updates_behind_max), "updates_owed": self.updates_owed()}

    def updates_owed(self) -> int:
        """Updates the UTD pace still owes (0 when caught up, and always with pace = "free")."""
        return max(0, self.updates_due()) if self.lcfg.pace == "utd" else 0

    def publish(self) -> None:
        import zmq

        self.weights_version = int(self.agent.num_updates)
        data = M.encode_weights(self.agent.policy_state(), self.weights_version,
                                self.fingerprint["hash"], max_bytes=self.lcfg.max_message_bytes,
                                hold=self.holds_sent > 0)
        try:
            self.sockets.pub.send(data, zmq.NOBLOCK)
            self.published += 1
        except zmq.Again:
            pass

    def broadcast_hold(self) -> None:
        """Tell the actors the step budget is reached: a learner still working through its due
        updates would otherwise have them act on (robot time past the budget: two lift
        sessions sharing 2 cores ran 6570 and 7266 steps of a 6000-step budget). Weights
        published after it say `hold` too (the actors' SUB socket keeps only the newest
        message). Sent every second until the last due update, for an actor that reconnects."""
        import zmq

        try:
            self.sockets.pub.send(M.encode(M.HOLD, env_hash=self.fingerprint["hash"]), zmq.NOBLOCK)
            self.holds_sent += 1
        except zmq.ZMQError:
            pass

    def check_actors(self) -> None:
        now = time.monotonic()
        for identity, rec in list(self.actors.items()):
            if not rec.transitions and now - rec.last_heard > self.lcfg.actor_timeout_s:
                del self.actors[identity]  # a handshake that never sent data: forget it
                continue
            if rec.alive and now - rec.last_heard > self.lcfg.actor_timeout_s:
                rec.alive = False
                log.warning("actor %s silent for %.1f s: marked dead; training continues "
                            "from the others", rec.actor_id, now - rec.last_heard)

    # ---------------------------------------------------------------------- main loop
    def run(self) -> dict:
        if self.sockets is None:
            self.bind(self.lcfg.port, self.lcfg.weights_port)
        self._metrics_f = open(self.dir / "metrics.jsonl", "a")
        last_metrics = time.monotonic()
        last_ckpt = 0
        last_eval_step = 0
        upd_mark, t_mark = self.agent.num_updates, time.monotonic()
        total = self.lcfg.total_env_steps
        reason = "stopped"
        last_pub = (-1, 0.0)  # (updates, time) of the last idle re-publish
        last_hold = -1e9      # when HOLD was last broadcast (every second while catching up)
        try:
            while not self.stop_event.is_set():
                due = self.updates_due()
                self.poll(timeout_ms=0 if due > 0 else 20)
                self.pump_labels()
                due = self.updates_due()
                if due > 0:
                    self.train_slice(due)
                now = time.monotonic()
                if self.republish_s and (self.agent.num_updates != last_pub[0]
                                         or now - last_pub[1] >= self.republish_s):
                    if self.agent.num_updates == last_pub[0] or last_pub[0] < 0:
                        self.publish()  # warm-up / restart: (re)connecting actors get weights
                    last_pub = (self.agent.num_updates, now)
                if now - last_metrics >= self.lcfg.metrics_every_s:
                    self.check_actors()
                    ups = (self.agent.num_updates - upd_mark) / max(now - t_mark, 1e-9)
                    upd_mark, t_mark = self.agent.num_updates, now
                    self._log({"kind": "train", **self.progress(), "updates_per_s": round(ups, 1),
                               **{k: t / n for k, (t, n) in self._loss_acc.items()}})
                    self._loss_acc = {}
                    last_metrics = now
                ee = self.lcfg.eval_every
                if ee and self.env_steps - last_eval_step >= ee and self.agent.num_updates:
                    last_eval_step = self.env_steps
                    self.last_eval = self.evaluate()
                    if self.last_eval:
                        self.eval_curve.append((self.env_steps, self.last_eval["success_rate"]))
                        self._log({"kind": "eval", "step": self.env_steps,
                                   "updates": int(self.agent.num_updates), **self.last_eval})
                ce = self.lcfg.checkpoint_every
                if ce and self.agent.num_updates - last_ckpt >= ce:
                    self.periodic_checkpoint()
                    last_ckpt = self.agent.num_updates
                if total and self.env_steps >= total:
                    if self.updates_due() <= 0:
                        reason = "total_env_steps reached"
                        break
                    if now - last_hold >= 1.0:   # a lagging learner: the actors hold meanwhile
                        self.broadcast_hold()
                        last_hold = now
            return self.finish(reason)
        finally:
            self.close()

    def progress(self) -> dict:
        recent = [s for r in self.actors.values() for s in r.successes[-20:]]
        rets = [x for r in self.actors.values() for x in r.returns[-20:]]
        return {
            "env_steps": self.env_steps, "updates": int(self.agent.num_updates),
            "updates_behind": self.updates_owed(),
            "wall_s": round(time.monotonic() - self._t_start, 2),
            "replay": len(self.replay), "weights_published": self.published,
            # an actor counts once it sends data: a HELLO alone (or a fake one) is not an actor
            "actors_alive": sum(r.alive and r.transitions > 0 for r in self.actors.values()),
            "train_return": float(np.mean(rets)) if rets else None,
            "train_success_rate": float(np.mean(recent)) if recent else None,
            "bad_messages": self.bad_messages,
            "nonfinite_transitions": self.nonfinite,
            "rejected_missing_reward": self.rejected_missing_reward,
            "prior_takeovers": self.takeover_prior.report(),
            **({"takeover_penalty": self.takeover_penalty.report()} if self.takeover_penalty.on else {}),
            "peer_disconnects": self.peer_disconnects,
            "checkpoint_failures": self.checkpoint_failures,
            "rejected_handshakes": self.rejected_handshakes,
            **({"reward_server": self.server_labeler.metrics()} if self.server_labeler is not None else {}),
            "time": round(time.time(), 3), "pid": os.getpid(),   # a restarted learner's lines apart
            "per_actor": {r.actor_id: {"transitions": r.transitions, "episodes": r.episodes,
                                       "alive": r.alive} for r in self.actors.values()},
        }

    def _log(self, rec: dict) -> None:
        if self._metrics_f is not None:
            self._metrics_f.write(json.dumps(rec) + "\n")
            self._metrics_f.flush()

    def periodic_checkpoint(self) -> Path | None:
        """A checkpoint on the way: one that fails (disk full, read-only) is logged and counted
        and training goes on, since the previous checkpoint is intact and the next one is due
        after another `checkpoint_every` updates; only the final checkpoint's failure stops."""
        from robolearn.errors import DatasetError

        try:
            return self.save_checkpoint()
        except DatasetError as exc:
            self.checkpoint_failures += 1
            log.error("checkpoint at env step %d failed (%d so far), training goes on: %s",
                      self.env_steps, self.checkpoint_failures, exc)
            return None

    def save_checkpoint(self) -> Path:
        """checkpoints/step_<N>/: agent state, policy weights, replay (safetensors/npy/JSON),
        then checkpoints/latest.json points at it (the layout `robolearn eval` reads)."""
        import dataclasses

        from robolearn.policies.checkpoints import CHECKPOINTS, write_checkpoint
        from robolearn.policies.train_config import TrainConfig
        from robolearn.runtime.actor import agent_overrides

        c = self.cfg
        # the single-process trainer's config too, so `robolearn eval --checkpoint` works
        train = TrainConfig(env=c.env, algo=c.algo, seed=c.seed, obs=c.obs,
                            steps=max(self.env_steps, 1), max_episode_steps=c.max_episode_steps,
                            env_kwargs=dict(c.env_kwargs), reality_gap=dict(c.reality_gap),
                            sim_params=c.sim_params,
                            out=str(self.dir))
        state = {"env_steps": self.env_steps, "updates": int(self.agent.num_updates),
                 "launch": to_dict(c), "agent_overrides": agent_overrides(c), "mode": "async",
                 "train": dataclasses.asdict(train)}
        path = write_checkpoint(self.dir / CHECKPOINTS, self.env_steps, self.agent,
                                {"replay": self.replay}, state)
        every = self.lcfg.policy_snapshot_every
        if every and self.env_steps >= self._next_snapshot:
            from robolearn.runtime.snapshots import keep_policy_snapshot

            try:
                keep_policy_snapshot(path, self.dir)
            except OSError as exc:  # the checkpoint itself is whole: training goes on
                log.error("policy snapshot at env step %d not kept: %s", self.env_steps, exc)
            self._next_snapshot = (self.env_steps // every + 1) * every
        return path

    def evaluate(self) -> dict | None:
        if not self.lcfg.eval_episodes:
            return None
        from robolearn.policies.evaluation import evaluate

        calls = [0]

        def policy(obs):  # keep serving actors (heartbeats, transitions) while evaluating
            calls[0] += 1
            if self.sockets is not None and calls[0] % 10 == 0:
                self.poll(0)
            return self.agent.act(obs, deterministic=True)

        res = evaluate(self.env, policy, self.lcfg.eval_episodes, seed=self.cfg.seed)
        return res.as_dict()

    def finish(self, reason: str) -> dict:
        import zmq

        self.socket_events()
        if self.server_labeler is not None:  # what the server can still label goes in; the rest
            # stays counted as held (never stored with a made-up reward)
            for rec, batch, reward, success, _held in self.server_labeler.finish(
                    2 * self.server_labeler.timeout_s):
                self._store(rec, batch, len(reward), reward, success, success)
        # tell the actors first, so they stop while we evaluate
        try:
            self.sockets.pub.send(M.encode(M.SHUTDOWN, env_hash=self.fingerprint["hash"],
                                           reason=reason), zmq.NOBLOCK)
        except zmq.ZMQError:
            pass
        ckpt = self.save_checkpoint()
        # a user stop (Ctrl-C / SIGTERM) should stop promptly: no evaluation then
        self.last_eval = self.evaluate() if reason != "stopped" else None
        summary = {
            "env": self.cfg.env, "algo": self.cfg.algo, "seed": self.cfg.seed,
            "mode": "async", "exit_reason": reason,
            **{k: v for k, v in self.progress().items()},
            "utd": self.utd, "pace": self.lcfg.pace, **self.pace_report(),
            "eval_return": self.last_eval["return"] if self.last_eval else None,
            "eval_success_rate": self.last_eval["success_rate"] if self.last_eval else None,
            "eval_episodes": self.last_eval["episodes"] if self.last_eval else 0,
            "eval_curve": self.eval_curve + ([(self.env_steps, self.last_eval["success_rate"])]
                                             if self.last_eval else []),
            "checkpoint": str(ckpt), "refused": self.refused, "holds_sent": self.holds_sent,
            **({"finetune": self.finetune_info} if self.finetune_info else {}),
            **({"prior_runs": self.prior_runs_report} if self.prior_runs_report else {}),
            "data_endpoint": self.sockets.data_endpoint,
            "weights_endpoint": self.sockets.weights_endpoint,
        }
        if self.last_eval:
            self._log({"kind": "eval", "step": self.env_steps, **self.last_eval})
        write_json_atomic(self.dir / "summary.json", summary, indent=2)
        return summary

    def close(self) -> None:
        if self.server_labeler is not None:
            self.server_labeler.close()
        if self._metrics_f is not None:
            self._metrics_f.close()
            self._metrics_f = None
        if self.sockets is not None:
            time.sleep(0.05)  # let the SHUTDOWN broadcast leave
            self.sockets.close()
            self.sockets = None
        self.env.close()


def run_learner(cfg: LaunchConfig, run_dir: Path | None = None) -> dict:
    stop = threading.Event()

    def _on_signal(signum, frame):
        stop.set()

    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        learner = Learner(cfg, run_dir=run_dir, stop=stop)
        if cfg.learner.port == 0 or cfg.learner.weights_port == 0:
            raise ConfigError("learner.port/weights_port = 0 only works with `robolearn launch` "
                              "(which picks free ports); give fixed ports or --port")
        d, w = learner.bind(cfg.learner.port, cfg.learner.weights_port)
        print(f"learner: data {d}  weights {w}  run {learner.dir}", flush=True)
        return learner.run()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
