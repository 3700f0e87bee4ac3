"""Wire format and transport: codec round trips, bad frames dropped, handshake refusals, Curve."""
import logging

import numpy as np
import pytest
import zmq

from robolearn.runtime import messages as M
from robolearn.runtime.config import config_from_dict
from robolearn.runtime.learner import Learner
from robolearn.runtime.transport import ActorSockets, CurveClient, free_port, generate_keys

SMALL_AGENT = {"batch_size": 16, "actor_hidden": [16, 16], "critic_hidden": [16, 16]}


def small_cfg(tmp_path, **top):
    return config_from_dict({"env": "Pendulum-v1", "out": str(tmp_path / "run"),
                             "learner": {"total_env_steps": 100, "eval_episodes": 0,
                                         "agent": SMALL_AGENT},
                             "actor": {"loop_hz": 100}, **top})


# ----------------------------------------------------------------------------------- codec
def test_codec_round_trip_state_and_images():
    rng = np.random.default_rng(0)
    items = [{"obs": {"state": rng.normal(size=5).astype(np.float32),
                      "front": rng.integers(0, 256, (84, 84, 3), dtype=np.uint8)},
              "next_obs": {"state": rng.normal(size=5).astype(np.float32),
                           "front": rng.integers(0, 256, (84, 84, 3), dtype=np.uint8)},
              "action": rng.uniform(-1, 1, 2).astype(np.float32), "reward": float(i),
              "terminated": i == 3, "truncated": False, "intervention": i == 1,
              "success": False, "step": i} for i in range(4)]
    batch = M.stack_transitions(items)
    data = M.encode(M.TRANSITIONS, batch=batch, actor_id="a")
    out = M.decode(data)["batch"]
    for part in ("obs", "next_obs"):
        for k in ("state", "front"):
            assert out[part][k].dtype == batch[part][k].dtype
            assert np.array_equal(out[part][k], batch[part][k])
    assert out["obs"]["front"].shape == (4, 84, 84, 3)
    for k in ("action", "reward", "terminated", "intervention", "step"):
        assert np.array_equal(out[k], batch[k]) and out[k].dtype == batch[k].dtype
    # raw buffers: the image bytes are not inflated by the encoding
    assert len(data) < batch["obs"]["front"].nbytes * 2 + 4096


def test_weights_round_trip_safetensors():
    import torch

    state = {"actor.w": torch.randn(4, 3), "actor.b": torch.zeros(4, dtype=torch.float64)}
    msg = M.decode(M.encode_weights(state, version=7, fingerprint_hash="abc"))
    assert msg["version"] == 7 and msg["env_hash"] == "abc"
    back = M.decode_weights(msg)
    assert set(back) == set(state)
    assert all(torch.equal(back[k], state[k]) for k in state)


@pytest.mark.parametrize("frame", [b"", b"\x00\x01garbage", b"\xc1", b"\x81\xa1a\x01",
                                   bytes(range(256))])
def test_decode_garbage_raises_message_error(frame):
    with pytest.raises(M.MessageError):
        M.decode(frame)


def test_decode_rejects_lying_array_header_and_object_dtype():
    import msgpack

    bad = msgpack.packb({"v": M.PROTOCOL_VERSION, "type": M.TRANSITIONS,
                         "batch": {"__nd__": 1, "dtype": "<f4", "shape": [1000], "data": b"xx"}})
    with pytest.raises(M.MessageError, match="needs 4000 bytes"):
        M.decode(bad)
    obj = msgpack.packb({"v": M.PROTOCOL_VERSION, "type": M.TRANSITIONS,
                         "batch": {"__nd__": 1, "dtype": "|O", "shape": [1], "data": b"x" * 8}})
    with pytest.raises(M.MessageError, match="not allowed"):
        M.decode(obj)
    with pytest.raises(M.MessageError, match="exceeds the limit"):
        M.decode(b"\x00" * 101, max_bytes=100)
    with pytest.raises(M.MessageError, match="exceeds the limit"):
        M.encode(M.HEARTBEAT, max_bytes=10, pad=b"x" * 100)


# ------------------------------------------------------------------------ learner endpoint
@pytest.fixture
def learner(tmp_path):
    lrn = Learner(small_cfg(tmp_path))
    lrn.bind(free_port(), free_port())
    yield lrn
    lrn.close()


def dealer(lrn, ctx, identity=b"t", curve=None):
    s = ctx.socket(zmq.DEALER)
    s.routing_id = identity
    s.linger = 0
    # a peer whose handshake failed has no pipe: without a timeout send() would block forever
    s.sndtimeo = 2000
    if curve:
        curve(s)
    s.connect(lrn.sockets.data_endpoint)
    return s


def exchange(lrn, sock, data, wait_ms=2000):
    """Send a frame, let the learner handle it, return the decoded reply or None (also when
    the frame could not even be sent: no connection, e.g. a refused Curve handshake)."""
    try:
        sock.send(data)
    except zmq.Again:
        return None
    for _ in range(wait_ms // 50):
        lrn.poll(timeout_ms=50)
        if sock.poll(0):
            return M.decode(sock.recv(), check_version=False)
    return None


def hello(lrn, **over):
    fields = {"actor_id": "t", "fingerprint": lrn.fingerprint, **over}
    return M.encode(M.HELLO, **fields)


def test_malformed_and_oversized_dropped_with_logged_error(learner, caplog):
    ctx = zmq.Context()
    try:
        s = dealer(learner, ctx)
        caplog.set_level(logging.ERROR, logger="robolearn.runtime.learner")
        for junk in (b"\xc1\xc1", b"not msgpack at all", M.encode(M.HEARTBEAT)[:-1]):
            assert exchange(learner, s, junk, wait_ms=300) is None
        assert learner.bad_messages == 3
        assert "dropped a message" in caplog.text and "malformed" in caplog.text
        # oversized: beyond the learner's limit -> ZMQ drops it before decoding; no crash
        big = M.encode(M.HEARTBEAT, pad=b"x" * (learner.lcfg.max_message_bytes + 10),
                       max_bytes=1 << 30)
        s.send(big)
        learner.poll(timeout_ms=300)
        # a transitions batch with the wrong shapes is dropped by the validator
        reply = exchange(learner, s, hello(learner))
        assert reply["type"] == M.WELCOME
        wrong = {"obs": {"state": np.zeros((2, 7), np.float32)},
                 "next_obs": {"state": np.zeros((2, 7), np.float32)}}
        caplog.clear()
        exchange(learner, s, M.encode(M.TRANSITIONS, session=reply["session"], batch=wrong),
                 wait_ms=300)
        assert "dropped transitions" in caplog.text and len(learner.replay) == 0
        # the learner is still alive and serving
        s2 = dealer(learner, ctx, identity=b"t2")
        assert exchange(learner, s2, hello(learner))["type"] == M.WELCOME
    finally:
        ctx.destroy(0)


def test_oversized_message_logged_by_codec(learner, caplog):
    """A frame under ZMQ's limit but over the codec's is dropped with a logged error."""
    learner.lcfg.max_message_bytes = 1000
    ctx = zmq.Context()
    try:
        s = dealer(learner, ctx)
        caplog.set_level(logging.ERROR, logger="robolearn.runtime.learner")
        assert exchange(learner, s, M.encode(M.HEARTBEAT, pad=b"x" * 5000), wait_ms=300) is None
        assert "exceeds the limit" in caplog.text
    finally:
        ctx.destroy(0)


def test_version_mismatch_refused_with_clear_error(learner):
    import msgpack

    ctx = zmq.Context()
    try:
        s = dealer(learner, ctx)
        old = msgpack.packb({"v": M.PROTOCOL_VERSION + 1, "type": M.HELLO, "actor_id": "t",
                             "fingerprint": learner.fingerprint})
        reply = exchange(learner, s, old)
        assert reply["type"] == M.REFUSE
        assert "protocol version mismatch" in reply["reason"]
    finally:
        ctx.destroy(0)


def test_env_spec_mismatch_refused_both_ways(learner, tmp_path):
    ctx = zmq.Context()
    try:
        s = dealer(learner, ctx)
        other = M.env_fingerprint("robolearn/ArmReach-v0", learner.env.observation_space,
                                  learner.env.action_space)
        reply = exchange(learner, s, hello(learner, fingerprint=other))
        assert reply["type"] == M.REFUSE and "env spec mismatch" in reply["reason"]
        assert "ArmReach" in reply["reason"]
    finally:
        ctx.destroy(0)
    # through a real actor link: the actor learns it was refused and says why
    import gymnasium as gym

    from robolearn.runtime.actor import LearnerLink

    space = gym.spaces.Dict({"state": gym.spaces.Box(-1, 1, (4,), np.float32)})
    fp = M.env_fingerprint("Pendulum-v1", space, learner.env.action_space)
    link = LearnerLink(small_cfg(tmp_path).actor, learner.sockets.data_endpoint,
                       learner.sockets.weights_endpoint, "bad", fp)
    link.start()
    try:
        for _ in range(60):
            learner.poll(timeout_ms=50)
            if link.refused:
                break
        assert link.refused and "env spec mismatch" in link.refused and "[4]" in link.refused
    finally:
        link.stop()
        link.join(2)


# ----------------------------------------------------------------------------------- curve
def test_curve_refuses_unauthenticated_client(tmp_path):
    keys = tmp_path / "keys"
    generate_keys(keys)
    stranger = tmp_path / "stranger"
    generate_keys(stranger, names=("actor",))
    lrn = Learner(small_cfg(tmp_path, keys=str(keys)))
    lrn.bind(free_port(), free_port())
    assert lrn.sockets.auth is not None and lrn.sockets.router.curve_server
    ctx = zmq.Context()
    try:
        # 1. plain TCP client: the Curve handshake never completes, the learner sees nothing
        plain = dealer(lrn, ctx, identity=b"plain")
        assert exchange(lrn, plain, hello(lrn), wait_ms=1000) is None
        # 2. Curve client whose key is not authorised: refused by the authenticator
        curve_bad = dealer(lrn, ctx, identity=b"bad", curve=lambda s: _curve_with(
            s, stranger / "actor.key_secret", keys / "learner.key"))
        assert exchange(lrn, curve_bad, hello(lrn), wait_ms=1000) is None
        assert lrn.actors == {} and lrn.bad_messages == 0
        # 3. the authorised actor gets in
        good = ActorSockets(lrn.sockets.data_endpoint, lrn.sockets.weights_endpoint, "good",
                            curve=CurveClient(keys))
        try:
            assert exchange(lrn, good.dealer, hello(lrn))["type"] == M.WELCOME
        finally:
            good.close()
    finally:
        ctx.destroy(0)
        lrn.close()


def _curve_with(sock, secret_file, server_public_file):
    pub, sec = zmq.auth.load_certificate(str(secret_file))
    server, _ = zmq.auth.load_certificate(str(server_public_file))
    sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = pub, sec, server


def test_keygen_cli(tmp_path, capsys):
    from robolearn.cli import main

    assert main(["keygen", str(tmp_path / "k")]) == 0
    names = sorted(p.name for p in (tmp_path / "k").iterdir())
    assert names == ["actor.key", "actor.key_secret", "learner.key", "learner.key_secret"]
    assert (tmp_path / "k" / "actor.key_secret").stat().st_mode & 0o077 == 0
    assert main(["keygen", str(tmp_path / "k")]) == 2  # refuses to overwrite keys
