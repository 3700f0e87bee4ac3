"""The learner's side of `[reward] where = "server"`: ask the reward server, hold while it is down.

Why hold and not drop or guess: a transition stored with a made-up reward (0, or the last one)
teaches the agent a value the world never gave; a transition dropped is robot time lost. So
transitions wait in arrival order in a bounded queue until the server answers, and are stored
then ("relabelled after return"); when the queue is full the oldest are dropped, and counted.

Non-blocking: one request (the queue's head batch) is in flight at a time; `pump()` is called
from the learner's loop, so training goes on while the server is away. No reply within
`timeout_s` (or no connection to send on for that long) marks the server down; everything queued then, and
everything arriving until it answers again, is counted `held`. Invariant, checked by the tests:
held = relabelled + dropped + still held.
"""
from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from robolearn.errors import ConfigError
from robolearn.reward_config import check_address
from robolearn.runtime import messages as M

log = logging.getLogger("robolearn.runtime.reward_client")

RETRY_S = 0.5   # after the server was found down, ask again this often


@dataclass
class Pending:
    key: Any            # whose transitions (the learner's ActorRecord)
    batch: dict         # stacked transitions (messages.stack_transitions layout)
    n: int
    held: bool = False  # waited through a time the server was down
    frame: bytes | None = None  # its encoded request (id, next_obs), kept while it cannot be sent
    rid: int = 0


class ServerLabeler:
    """Labels transition batches by asking the reward server at `address`."""

    def __init__(self, address: str, timeout_s: float = 2.0, max_held: int = 10_000,
                 max_bytes: int = M.MAX_MESSAGE_BYTES, retry_s: float = RETRY_S):
        import zmq

        self.address = check_address(address, "[reward] address")
        self.timeout_s, self.max_held, self.max_bytes, self.retry_s = float(timeout_s), int(max_held), \
            int(max_bytes), float(retry_s)
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.IMMEDIATE, 1)   # no connection: a send fails now, nothing queues in ZMQ
        self.sock.setsockopt(zmq.MAXMSGSIZE, self.max_bytes)
        self.sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        self.sock.connect(self.address)
        self.queue: deque[Pending] = deque()
        self._ids = itertools.count(1)
        self.inflight: tuple[int, float] | None = None   # (request id, sent at)
        self.unsent_since: float | None = None          # first failed send while no connection
        self.down = False
        self.next_try = 0.0
        self.labelled = 0          # transitions stored with the server's reward
        self.held = 0              # transitions that waited while the server was down
        self.relabelled = 0        # of those, labelled after it came back
        self.dropped = 0           # of those, dropped because the queue was full (oldest first)
        self.server_timeouts = 0   # requests with no reply within timeout_s
        self.server_unreachable = 0  # waits of timeout_s with no connection to send on
        self.missing = 0           # transitions the server answered MISSING (NaN): not stored

    # ------------------------------------------------------------------ queue
    @property
    def queued(self) -> int:
        return sum(p.n for p in self.queue)

    def submit(self, key, batch: dict, n: int) -> None:
        """Queue a batch (arrival order); while the server is down it counts as held."""
        if n <= 0:
            return
        p = Pending(key, batch, int(n))
        self.queue.append(p)
        if self.down:
            self._hold(p)
        self._trim()

    def _hold(self, p: Pending) -> None:
        if not p.held:
            p.held = True
            self.held += p.n

    def _trim(self) -> None:
        excess = self.queued - self.max_held
        before = self.dropped
        while excess > 0 and self.queue:
            head = self.queue[0]
            self._hold(head)     # it waited, and is now given up: held, then dropped
            self.inflight = None  # a reply now would be for rows no longer here: ignored by its id
            if head.n <= excess:
                self.queue.popleft()
                self.dropped += head.n
                excess -= head.n
            else:
                head.batch = M.select_rows(head.batch, np.arange(head.n) >= excess)
                head.frame = None
                head.n -= excess
                self.dropped += excess
                excess = 0
        if self.dropped > before and (before == 0 or self.dropped // 1000 > before // 1000):
            log.error("reward server down: %d held transitions dropped so far (queue full at %d, oldest first)",
                      self.dropped, self.max_held)

    # ------------------------------------------------------------------ the wire
    def _mark_down(self, why: str) -> None:
        if not self.down:
            log.error("reward server at %s %s: holding transitions until it answers (at most %d, "
                      "oldest dropped)", self.address, why, self.max_held)
        self.down = True
        for p in self.queue:
            self._hold(p)
        self.inflight = None
        self.next_try = time.monotonic() + self.retry_s

    def _send_head(self) -> bool:
        import zmq

        head = self.queue[0]
        if head.frame is None:  # a new id per request: a late reply to an old one is told apart
            head.rid = next(self._ids)
            try:
                head.frame = M.encode(M.SCORE, id=head.rid, next_obs=head.batch["next_obs"],
                                      max_bytes=self.max_bytes)
            except M.MessageError as exc:
                raise ConfigError(f"[reward] where = \"server\": a batch of {head.n} transitions does not "
                                  f"fit one message ({exc})") from None
        now = time.monotonic()
        try:
            self.sock.send(head.frame, zmq.NOBLOCK)
        except zmq.Again:  # no connection (yet: one takes a few ms after connect, or a restart)
            if self.unsent_since is None:
                self.unsent_since = now
            elif now - self.unsent_since > self.timeout_s:
                self.server_unreachable += 1
                self.unsent_since = None
                self._mark_down(f"could not be reached for {self.timeout_s:g} s")
            return False
        self.unsent_since = None
        self.inflight = (head.rid, now)
        head.frame = None       # sent: asking again (after a timeout) takes a new id
        return True

    def _receive(self, wait_ms: int) -> dict | None:
        """The reply to the request in flight, None if none came within wait_ms."""
        import zmq

        t_end = time.monotonic() + wait_ms / 1000.0
        while True:
            left = max(0, int((t_end - time.monotonic()) * 1000))
            if not self.sock.poll(left, zmq.POLLIN):
                return None
            frame = self.sock.recv()
            try:
                msg = M.decode(frame, max_bytes=self.max_bytes)
            except M.MessageError as exc:
                log.error("dropped a malformed reply from the reward server: %s", exc)
                continue
            if self.inflight is not None and msg.get("type") == M.SCORES and msg.get("id") == self.inflight[0]:
                return msg
            # a late reply to a request given up on (timed out, or its rows dropped): ignored

    def pump(self, budget_s: float = 0.01) -> list[tuple[Any, dict, np.ndarray, np.ndarray, bool]]:
        """Send and receive for up to `budget_s`; returns the batches labelled now, in arrival
        order, as (key, batch, reward, success, was_held)."""
        out = []
        t_end = time.monotonic() + budget_s
        while self.queue:
            now = time.monotonic()
            if self.inflight is None:
                if now < self.next_try or not self._send_head():
                    if self.inflight is None and time.monotonic() < t_end and not self.down:
                        time.sleep(0.002)   # connecting: try again within this call's budget
                        continue
                    break
            wait = max(0, int((t_end - time.monotonic()) * 1000))
            msg = self._receive(wait)
            if msg is None:
                if time.monotonic() - self.inflight[1] > self.timeout_s:
                    self.server_timeouts += 1
                    self._mark_down(f"gave no reply in {self.timeout_s:g} s")
                break
            self.inflight = None
            if msg.get("error"):
                raise ConfigError(f"reward server at {self.address}: {msg['error']}")
            head = self.queue.popleft()
            reward = np.asarray(msg.get("reward"), np.float32)
            success = np.asarray(msg.get("success"), bool)
            if reward.shape != (head.n,) or success.shape != (head.n,):
                raise ConfigError(f"reward server at {self.address} answered {reward.shape} rewards for "
                                  f"{head.n} transitions: is it another program on that port?")
            if self.down:
                self.down = False
                log.warning("reward server at %s answers again: labelling %d held transitions",
                            self.address, sum(p.n for p in self.queue if p.held) + (head.n if head.held else 0))
            ok = np.isfinite(reward)
            self.labelled += int(ok.sum())
            self.missing += int((~ok).sum())
            if head.held:
                self.relabelled += head.n
            out.append((head.key, head.batch, reward, success & ok, head.held))
            if time.monotonic() >= t_end:
                break
        return out

    def finish(self, seconds: float) -> list:
        """Label what is queued, for up to `seconds` (the learner is ending); what is left stays
        counted as held, never stored."""
        out = []
        t_end = time.monotonic() + seconds
        while self.queue and time.monotonic() < t_end:
            out += self.pump(0.05)
            if self.down and self.queue:
                time.sleep(min(self.retry_s, max(0.0, t_end - time.monotonic())))
        return out

    def metrics(self) -> dict:
        return {"address": self.address, "labelled": self.labelled, "held": self.held,
                "relabelled": self.relabelled, "dropped": self.dropped,
                "still_held": sum(p.n for p in self.queue if p.held), "queued": self.queued,
                "server_timeouts": self.server_timeouts, "server_unreachable": self.server_unreachable,
                "missing": self.missing, "down": self.down}

    def close(self) -> None:
        self.sock.close()
