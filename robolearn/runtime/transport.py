"""ZeroMQ sockets for the actor/learner link, with optional CurveZMQ auth + encryption.

Two channels per learner (why two: transitions need per-actor replies, weights are a
broadcast where only the latest matters):
- data: learner ROUTER (bind) <- actor DEALER (connect): HELLO / TRANSITIONS / HEARTBEAT up,
  WELCOME / REFUSE / HEARTBEAT down. `immediate` is set on the DEALER so nothing queues
  inside ZMQ while the learner is away: the actor's own bounded outbox is the only buffer.
- weights: learner PUB (bind) -> actor SUB (connect, `conflate`: only the newest frame kept).

Curve: `robolearn keygen DIR` writes `learner.key(_secret)` and `actor.key(_secret)`. The
learner serves with its secret key and accepts only client public keys found in DIR (via a
`ThreadAuthenticator`); an actor needs `actor.key_secret` and `learner.key`. A client without
the right keys never completes the handshake, so the learner never sees its messages.
"""
from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from robolearn.errors import ConfigError

log = logging.getLogger("robolearn.runtime")
# socket events the learner counts and logs (measured with pyzmq 27 / libzmq 4.3.5): a frame over
# the receiving socket's maxmsgsize is never delivered: libzmq closes that connection
# (EVENT_DISCONNECTED, no reason given) and the sender's socket reconnects by itself; a client
# whose Curve key is not authorised gets EVENT_HANDSHAKE_FAILED_AUTH (value 400) on each try
MONITOR_EVENTS = (zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
                  | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now (tests and `port = 0` in launch files)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def endpoint(host: str, port: int) -> str:
    return f"tcp://{host}:{int(port)}"


# ------------------------------------------------------------------------------ curve keys
def generate_keys(directory: str | os.PathLike, names=("learner", "actor")) -> list[Path]:
    """Create `<name>.key` (public) + `<name>.key_secret` per name in `directory`."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        if (d / f"{name}.key_secret").exists():
            raise ConfigError(f"{d / (name + '.key_secret')} already exists; pick another "
                              "directory or delete the old keys first")
        pub, sec = zmq.auth.create_certificates(str(d), name)
        os.chmod(sec, 0o600)
        written += [Path(pub), Path(sec)]
    return written


def _load_keypair(path: Path) -> tuple[bytes, bytes]:
    if not path.exists():
        raise ConfigError(f"CurveZMQ key file {path} is missing; create keys with "
                          f"`robolearn keygen {path.parent}`")
    pub, sec = zmq.auth.load_certificate(str(path))
    if sec is None:
        raise ConfigError(f"{path} has no secret key (use the `.key_secret` file)")
    return pub, sec


def _load_public(path: Path) -> bytes:
    if not path.exists():
        raise ConfigError(f"CurveZMQ public key {path} is missing; copy it from the machine "
                          f"that ran `robolearn keygen`")
    pub, _ = zmq.auth.load_certificate(str(path))
    return pub


@dataclass
class CurveServer:
    """Learner-side Curve: own key pair + the folder of authorised client public keys."""

    keys_dir: Path
    name: str = "learner"

    def apply(self, ctx: zmq.Context, sockets: list[zmq.Socket]) -> ThreadAuthenticator:
        pub, sec = _load_keypair(Path(self.keys_dir) / f"{self.name}.key_secret")
        auth = ThreadAuthenticator(ctx, log=logging.getLogger("robolearn.runtime.auth"))
        auth.start()

        auth.configure_curve(domain="*", location=str(self.keys_dir))
        for s in sockets:
            s.curve_secretkey = sec
            s.curve_publickey = pub
            s.curve_server = True
        return auth


@dataclass
class CurveClient:
    """Actor-side Curve: own key pair + the learner's public key."""

    keys_dir: Path
    name: str = "actor"
    server_name: str = "learner"

    def apply(self, sockets: list[zmq.Socket]) -> None:
        pub, sec = _load_keypair(Path(self.keys_dir) / f"{self.name}.key_secret")
        server = _load_public(Path(self.keys_dir) / f"{self.server_name}.key")
        for s in sockets:
            s.curve_secretkey = sec
            s.curve_publickey = pub
            s.curve_serverkey = server


# ------------------------------------------------------------------------------ endpoints
class LearnerSockets:
    """ROUTER (data) + PUB (weights), bound on `host` (127.0.0.1 unless configured)."""

    def __init__(self, host: str, data_port: int, weights_port: int,
                 curve: CurveServer | None = None, max_bytes: int = 64 << 20):
        self.ctx = zmq.Context()
        self.router = self.ctx.socket(zmq.ROUTER)
        self.pub = self.ctx.socket(zmq.PUB)
        self.auth = curve.apply(self.ctx, [self.router, self.pub]) if curve else None
        for s in (self.router, self.pub):
            s.linger = 0
        # ZMQ drops a frame over maxmsgsize at the socket (never buffered whole) by cutting the
        # sender's connection; `events()` reports those disconnects, which the learner counts
        # and logs (a message is never dropped without a line)
        self.router.maxmsgsize = max_bytes
        self._monitors = {"data": self.router.get_monitor_socket(MONITOR_EVENTS),
                          "weights": self.pub.get_monitor_socket(MONITOR_EVENTS)}
        self.router.router_handover = 1
        self.router.router_mandatory = 0
        self.pub.sndhwm = 4
        try:
            self.router.bind(endpoint(host, data_port))
            self.pub.bind(endpoint(host, weights_port))
        except zmq.ZMQError as exc:
            self.close()
            raise ConfigError(f"learner cannot bind {host}:{data_port}/{weights_port} ({exc}); "
                              "another learner may be running - pick free ports") from None
        self.data_endpoint = endpoint(host, data_port)
        self.weights_endpoint = endpoint(host, weights_port)

    def events(self) -> list[tuple[str, int, int]]:
        """(channel, event, value) of the socket events since the last call (never blocks)."""
        from zmq.utils.monitor import recv_monitor_message

        out = []
        for channel, mon in self._monitors.items():
            while True:
                try:
                    if not mon.poll(0):
                        break
                    m = recv_monitor_message(mon, zmq.NOBLOCK)
                except zmq.ZMQError:
                    break
                out.append((channel, int(m["event"]), int(m["value"])))
        return out

    def close(self) -> None:
        for sock in (self.router, self.pub):
            try:
                sock.disable_monitor()
            except zmq.ZMQError:
                pass
        for mon in self._monitors.values():
            mon.close(0)
        if self.auth is not None:
            self.auth.stop()
            self.auth = None
        self.router.close(0)
        self.pub.close(0)
        self.ctx.term()


class ActorSockets:
    """DEALER (data) + SUB (weights) connected to a learner; ZMQ reconnects by itself."""

    def __init__(self, data_endpoint: str, weights_endpoint: str, identity: str,
                 curve: CurveClient | None = None, max_bytes: int = 64 << 20):
        self.ctx = zmq.Context()
        self.dealer = self.ctx.socket(zmq.DEALER)
        self.sub = self.ctx.socket(zmq.SUB)
        if curve:
            curve.apply([self.dealer, self.sub])
        self.dealer.routing_id = identity.encode()
        self.dealer.immediate = 1        # never queue for a learner that is not connected
        self.dealer.sndhwm = 64
        self.dealer.linger = 0
        self.dealer.reconnect_ivl = 100
        self.dealer.reconnect_ivl_max = 1000
        self.sub.linger = 0
        self.sub.maxmsgsize = max_bytes
        self.dealer.maxmsgsize = max_bytes
        self.sub.conflate = 1            # only the newest weights matter
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.dealer.connect(data_endpoint)
        self.sub.connect(weights_endpoint)

    def close(self) -> None:
        self.dealer.close(0)
        self.sub.close(0)
        self.ctx.term()
