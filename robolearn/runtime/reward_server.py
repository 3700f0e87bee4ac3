"""`robolearn reward serve`: a reward model in a process of its own, answering on a ZeroMQ socket.

Why a process of its own (`[reward] where = "server"`): a model that crashes, leaks or is killed
takes neither the actor nor the learner with it, and a session can restart it alone. The model
is loaded by `build_model` (robolearn/rewards/serving.py), the loading code of every other
`where`, and each request is scored by the same `TransitionLabeler`, so a served reward is the
in-process reward bit for bit.

Wire: a ROUTER socket bound at the address; requests and replies are the runtime's msgpack
envelopes (runtime/messages.py: no pickle, a size limit per frame). A request is
`SCORE {id, next_obs: {key: (N, ...) array}}`; the reply is `SCORES {id, reward: float32[N]
(NaN = MISSING), success: bool[N]}`, or `SCORES {id, error}` when the model cannot read the
observation (a configuration error: the client raises it). The learner's side (a client with a
timeout, and the transitions it holds while the server is down) is runtime/reward_client.py;
`RewardServerProcess` is how `robolearn finetune` starts and restarts it.
"""
from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from robolearn.errors import ConfigError
from robolearn.reward_config import RewardConfig, check_address
from robolearn.runtime import messages as M

log = logging.getLogger("robolearn.runtime.reward_server")


def bind_router(address: str, max_bytes: int):
    """A bound ROUTER socket; an address that cannot be bound is a one-line ConfigError."""
    import zmq

    check_address(address, "reward server address")
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, int(max_bytes))
    try:
        sock.bind(address)
    except zmq.ZMQError as exc:
        sock.close()
        raise ConfigError(f"reward server: cannot bind {address} ({exc}); is another server on that port, "
                          "or is the host not this machine's?") from None
    return sock


class RewardServer:
    """The model and its socket; `serve()` answers until `stop` is set."""

    def __init__(self, cfg: RewardConfig, address: str, max_bytes: int = M.MAX_MESSAGE_BYTES):
        from robolearn.rewards.serving import TransitionLabeler, build_model

        self.cfg, self.address, self.max_bytes = cfg, address, int(max_bytes)
        check_address(address, "reward server address")
        self.labeler = TransitionLabeler(build_model(cfg))  # before binding: a bad folder fails first
        self.sock = bind_router(address, self.max_bytes)
        self.requests = self.transitions = self.errors = self.bad_messages = 0

    def handle(self, frame: bytes) -> bytes | None:
        try:
            msg = M.decode(frame, max_bytes=self.max_bytes)
        except M.MessageError as exc:
            self.bad_messages += 1
            log.error("dropped a malformed request: %s", exc)
            return None
        rid = msg.get("id")
        obs = msg.get("next_obs")
        if msg["type"] != M.SCORE or not isinstance(obs, dict) or not obs or not all(
                isinstance(v, np.ndarray) and v.ndim >= 1 for v in obs.values()) or \
                len({len(v) for v in obs.values()}) != 1:
            self.bad_messages += 1
            return M.encode(M.SCORES, id=rid, error="a request is SCORE {id, next_obs: {key: (N, ...) arrays "
                                                    "of one length N}}", max_bytes=self.max_bytes)
        from robolearn.errors import RobolearnError

        try:
            reward, success, _ = self.labeler.label(obs)
        except RobolearnError as exc:   # the model cannot read these observations: the user's to fix
            self.errors += 1
            return M.encode(M.SCORES, id=rid, error=str(exc), max_bytes=self.max_bytes)
        self.requests += 1
        self.transitions += len(reward)
        return M.encode(M.SCORES, id=rid, reward=reward.astype(np.float32), success=success,
                        max_bytes=self.max_bytes)

    def serve(self, stop: threading.Event) -> dict:
        import zmq

        try:
            while not stop.is_set():
                if not self.sock.poll(100, zmq.POLLIN):
                    continue
                frames = self.sock.recv_multipart()
                if len(frames) != 2:
                    self.bad_messages += 1
                    continue
                reply = self.handle(frames[1])
                if reply is not None:
                    try:
                        self.sock.send_multipart([frames[0], reply], zmq.NOBLOCK)
                    except zmq.ZMQError:
                        pass  # the client is gone; it asks again
        finally:
            self.sock.close()
        return {"requests": self.requests, "transitions": self.transitions, "errors": self.errors,
                "bad_messages": self.bad_messages}


def serve(cfg: RewardConfig, address: str, max_bytes: int = M.MAX_MESSAGE_BYTES) -> dict:
    """Run a server in this process until SIGINT/SIGTERM; prints one line when it answers."""
    stop = threading.Event()
    server = RewardServer(cfg, address, max_bytes)
    old = {s: signal.signal(s, lambda signum, frame: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    # the time it is ready (unix s): a supervisor or the soak can tell when a restarted server could
    # first answer, which a probe from outside only bounds from above
    print(f"reward server: serving {cfg.model} ({type(server.labeler.source.inner).__name__}) on {address} "
          f"(ready at {time.time():.3f})", flush=True)
    try:
        counts = server.serve(stop)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    print(f"reward server: stopped after {counts['requests']} requests ({counts['transitions']} transitions, "
          f"{counts['errors']} errors)", flush=True)
    return counts


def serve_command(model: str, address: str, kind: str | None = None, threshold: float | None = None,
                  device: str = "cpu") -> list[str]:
    """The `robolearn reward serve` command line for a `[reward]` table's model."""
    cmd = [sys.executable, "-m", "robolearn.cli", "reward", "serve", "--model", str(model), "--address", address,
           "--device", device]
    if kind:
        cmd += ["--kind", kind]
    if threshold is not None:
        cmd += ["--threshold", repr(float(threshold))]
    return cmd


class RewardServerProcess:
    """A `robolearn reward serve` child of a session: started, watched, restarted when it dies.

    `check()` is called from the session's supervision loop: a server that exited (killed, or
    crashed) is started again on the same address, up to `max_restarts` times; each restart is
    counted and logged, like the learner's and the actor's."""

    def __init__(self, cfg: RewardConfig, address: str, log_path: Path, max_restarts: int):
        self.cmd = serve_command(cfg.model, address, cfg.kind, cfg.threshold, cfg.device)
        self.address, self.log_path, self.max_restarts = address, Path(log_path), int(max_restarts)
        self.restarts = 0
        self.restart_log: list[dict] = []
        self._files: list = []
        self.proc = None
        self.t0 = time.monotonic()

    def _popen(self, cmd):
        from robolearn.processes import die_with_parent

        f = open(self.log_path, "a")
        self._files.append(f)
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=die_with_parent())

    def start(self):
        self.proc = self._popen(self.cmd)
        print(f"started reward_server pid {self.proc.pid} (log {self.log_path})", flush=True)
        return self.proc

    def check(self) -> str | None:
        """None while it runs (or was restarted); a sentence when it died past its restarts."""
        rc = self.proc.poll()
        if rc is None:
            return None
        if self.restarts >= self.max_restarts:
            return f"reward server exited with code {rc} after {self.restarts} restarts"
        self.restarts += 1
        print(f"reward server exited with code {rc}: transitions are held by the learner; restarting it "
              f"({self.restarts}/{self.max_restarts})", flush=True)
        old = self.proc.pid
        self.start()
        self.restart_log.append({"process": "reward_server", "rc": rc, "pid": self.proc.pid, "killed_pid": old,
                                 "t_s": round(time.monotonic() - self.t0, 1)})
        return None

    def stop(self, grace: float = 5.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in self._files:
            f.close()
        self._files.clear()
