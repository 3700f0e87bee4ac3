"""What ZeroMQ did below the learner's messages, counted and logged.

Why: ZeroMQ drops a frame over `max_message_bytes` by cutting its sender's connection, and
refuses a Curve handshake from an unauthorised key, both without a word to the application.
The learner reads its sockets' monitor events through this, so each is counted (metrics,
summary.json) and logged (repeats of one kind at most every 10 s, with the count).
"""
from __future__ import annotations

import logging
import time

log = logging.getLogger("robolearn.runtime.learner")


class SocketEventLog:
    def __init__(self, max_message_bytes: int):
        self.max_message_bytes = int(max_message_bytes)
        self.peer_disconnects = 0    # data-port connections ZeroMQ closed (oversized frame, actor exit)
        self.rejected_handshakes = 0  # Curve handshakes refused (key not authorised) or malformed
        self._last_event_log: dict[str, float] = {}

    def read(self, events) -> None:
        """Count and log `(channel, event, value)` socket-monitor events."""
        import zmq

        for channel, event, value in events:
            if event == zmq.EVENT_DISCONNECTED:
                if channel != "data":
                    continue  # a subscriber leaving the weights port loses nothing
                self.peer_disconnects += 1
                self._event_log("disconnect", logging.WARNING,
                                "data port: ZeroMQ closed an actor's connection (%d so far): either the "
                                "actor exited, or it sent a frame over max_message_bytes = %d bytes, "
                                "which ZeroMQ drops together with the connection (the actor "
                                "reconnects; raise max_message_bytes on both sides or send smaller "
                                "batches)", self.peer_disconnects, self.max_message_bytes)
            else:
                self.rejected_handshakes += 1
                why = ("its Curve key is not authorised (not in the learner's keys folder)"
                       if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH
                       else f"the handshake failed (ZeroMQ event {event}, value {value}: wrong "
                            "server key or not Curve)")
                self._event_log("handshake", logging.ERROR,
                                "%s port: refused a connection (%d so far): %s",
                                channel, self.rejected_handshakes, why)

    def _event_log(self, kind: str, level: int, fmt: str, *args) -> None:
        now = time.monotonic()
        if now - self._last_event_log.get(kind, -1e9) >= 10.0:
            self._last_event_log[kind] = now
            log.log(level, fmt, *args)
