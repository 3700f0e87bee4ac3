"""Wire format between actors and the learner: msgpack envelopes with raw numpy buffers.

Why not pickle: bytes from a network must never be able to run code. Every message is one
msgpack map `{"v": PROTOCOL_VERSION, "type": ..., ...}`; numpy arrays travel as
`{"__nd__": 1, "dtype": "<f4", "shape": [...], "data": <raw bytes>}` with a dtype allow-list
and a byte-count check; weights travel as safetensors bytes (also code-free).

Handshake: an actor's HELLO carries the protocol version and an env-spec fingerprint (env id,
observation/action space shapes + dtypes); the learner answers WELCOME or REFUSE with the
reason, so a mismatched pair refuses each other with a clear error instead of training on
garbage. Oversized or malformed frames raise `MessageError`, which receivers log and drop.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

import msgpack
import numpy as np

from robolearn.errors import ConfigError, RobolearnError

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # default size limit of one frame

# message types
HELLO = "hello"            # actor -> learner: actor id, version, env fingerprint
WELCOME = "welcome"        # learner -> actor: session id, weights version
REFUSE = "refuse"          # learner -> actor: reason (version / env-spec mismatch)
TRANSITIONS = "transitions"  # actor -> learner: a batch of transitions (stacked arrays)
HEARTBEAT = "heartbeat"    # both ways: liveness
WEIGHTS = "weights"        # learner -> actors (PUB): safetensors policy state
SHUTDOWN = "shutdown"      # learner -> actors (PUB): training finished, stop
HOLD = "hold"              # learner -> actors (PUB): the env-step budget is reached, stop stepping
                           # and hold the robot until SHUTDOWN (the learner finishes its updates)
SCORE = "score"            # learner -> reward server: request id + a batch of next observations
SCORES = "scores"          # reward server -> learner: request id + rewards (NaN = MISSING), success
TYPES = (HELLO, WELCOME, REFUSE, TRANSITIONS, HEARTBEAT, WEIGHTS, SHUTDOWN, HOLD, SCORE, SCORES)

ALLOWED_DTYPES = {
    np.dtype(t).str for t in
    ("bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
     "float16", "float32", "float64")
}


class MessageError(RobolearnError, ValueError):
    """A frame that is too big, not msgpack, of the wrong version or shape: drop it."""


class HandshakeError(ConfigError):
    """Actor and learner disagree on protocol version or env spec (or the learner refused)."""


# ------------------------------------------------------------------------------ numpy codec
def _default(obj):
    if isinstance(obj, np.ndarray):
        arr = np.ascontiguousarray(obj)
        if arr.dtype.str not in ALLOWED_DTYPES:
            raise MessageError(f"cannot send arrays of dtype {arr.dtype} (allowed: numeric, bool)")
        return {"__nd__": 1, "dtype": arr.dtype.str, "shape": list(arr.shape), "data": arr.data}
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot encode {type(obj).__name__}")


def _object_hook(d):
    if d.get("__nd__") == 1:
        dtype, shape, data = d.get("dtype"), d.get("shape"), d.get("data")
        if dtype not in ALLOWED_DTYPES:
            raise MessageError(f"array dtype {dtype!r} is not allowed")
        if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise MessageError(f"array shape {shape!r} is invalid")
        if not isinstance(data, (bytes, bytearray)):
            raise MessageError("array data is not a byte string")
        dt = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if n * dt.itemsize != len(data):
            raise MessageError(f"array of shape {shape} {dtype} needs {n * dt.itemsize} bytes, "
                               f"got {len(data)}")
        return np.frombuffer(data, dtype=dt).reshape(shape)
    return d


def encode(msg_type: str, max_bytes: int = MAX_MESSAGE_BYTES, **fields) -> bytes:
    """One message -> bytes. Raises MessageError if it would exceed `max_bytes`."""
    if msg_type not in TYPES:
        raise MessageError(f"unknown message type {msg_type!r}")
    data = msgpack.packb({"v": PROTOCOL_VERSION, "type": msg_type, **fields},
                         default=_default, use_bin_type=True)
    if len(data) > max_bytes:
        raise MessageError(f"{msg_type} message of {len(data)} bytes exceeds the limit of "
                           f"{max_bytes} bytes (send smaller batches or raise max_message_bytes)")
    return data


def decode(frame: bytes, max_bytes: int = MAX_MESSAGE_BYTES,
           check_version: bool = True) -> dict[str, Any]:
    """bytes -> message dict (arrays read-only views into `frame`); MessageError if bad."""
    if len(frame) > max_bytes:
        raise MessageError(f"message of {len(frame)} bytes exceeds the limit of {max_bytes}")
    try:
        msg = msgpack.unpackb(frame, object_hook=_object_hook, raw=False, strict_map_key=True,
                              max_bin_len=max_bytes, max_str_len=1 << 20,
                              max_array_len=1 << 20, max_map_len=1 << 16)
    except MessageError:
        raise
    except Exception as exc:  # msgpack raises many types on garbage input
        raise MessageError(f"malformed message ({type(exc).__name__}: {exc})") from None
    if not isinstance(msg, dict) or "type" not in msg or "v" not in msg:
        raise MessageError("malformed message: not an envelope with 'v' and 'type'")
    if msg["type"] not in TYPES:
        raise MessageError(f"unknown message type {msg['type']!r}")
    if check_version and msg["v"] != PROTOCOL_VERSION:
        raise MessageError(f"protocol version {msg['v']!r} (this side speaks {PROTOCOL_VERSION})")
    return msg


# --------------------------------------------------------------------------- env fingerprint
def space_spec(space) -> dict:
    """JSON-able description of a Box / Dict space (shape, dtype, bounds for actions)."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Dict):
        return {"dict": {k: space_spec(s) for k, s in sorted(space.spaces.items())}}
    if isinstance(space, gym.spaces.Box):
        return {"shape": list(space.shape), "dtype": np.dtype(space.dtype).str}
    raise ConfigError(f"unsupported space {space!r}: the runtime handles Box and Dict spaces")


def env_fingerprint(env_id: str, observation_space, action_space) -> dict:
    spec = {"env_id": env_id, "obs": space_spec(observation_space),
            "action": space_spec(action_space)}
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    return {**spec, "hash": digest}


def compare_fingerprints(mine: dict, theirs: Any) -> str | None:
    """None if compatible, else a sentence saying what differs."""
    if not isinstance(theirs, dict):
        return "the peer sent no env fingerprint"
    if mine.get("hash") == theirs.get("hash"):
        return None
    diffs = [f"{key}: {theirs.get(key)!r} vs {mine.get(key)!r}"
             for key in ("env_id", "obs", "action") if mine.get(key) != theirs.get(key)]
    return "env spec mismatch (peer vs this side) - " + "; ".join(diffs or ["hash differs"])


# --------------------------------------------------------------------- transitions batching
TRANSITION_KEYS = ("action", "reward", "terminated", "truncated", "intervention", "success")


def stack_transitions(items: list[dict]) -> dict:
    """List of per-step transition dicts -> one dict of stacked arrays (what goes on the wire)."""
    out = {
        "obs": {k: np.stack([t["obs"][k] for t in items]) for k in items[0]["obs"]},
        "next_obs": {k: np.stack([t["next_obs"][k] for t in items]) for k in items[0]["next_obs"]},
        "action": np.stack([np.asarray(t["action"], np.float32) for t in items]),
        "reward": np.asarray([t["reward"] for t in items], np.float32),
        "terminated": np.asarray([t["terminated"] for t in items], bool),
        "truncated": np.asarray([t["truncated"] for t in items], bool),
        "intervention": np.asarray([t.get("intervention", False) for t in items], bool),
        "success": np.asarray([t.get("success", False) for t in items], bool),
        "step": np.asarray([t.get("step", -1) for t in items], np.int64),
    }
    return out


def check_transitions(batch: Any, fingerprint: dict) -> int:
    """Validate a decoded batch against the env spec; return its length or raise MessageError."""
    if not isinstance(batch, dict):
        raise MessageError("transitions payload is not a map")
    obs_spec = fingerprint["obs"]["dict"]
    act_shape = fingerprint["action"]["shape"]
    n = None
    for part in ("obs", "next_obs"):
        group = batch.get(part)
        if not isinstance(group, dict) or set(group) != set(obs_spec):
            raise MessageError(f"transitions {part} keys {sorted(group or {})} != "
                               f"{sorted(obs_spec)}")
        for key, spec in obs_spec.items():
            arr = group[key]
            if not isinstance(arr, np.ndarray) or list(arr.shape[1:]) != spec["shape"] \
                    or arr.dtype.str != spec["dtype"]:
                raise MessageError(
                    f"transitions {part}[{key!r}] has {getattr(arr, 'shape', None)} "
                    f"{getattr(arr, 'dtype', None)}, expected (N, *{spec['shape']}) {spec['dtype']}")
            n = arr.shape[0] if n is None else n
            if arr.shape[0] != n:
                raise MessageError("transitions arrays have different lengths")
    expected = {"action": (np.float32, [n, *act_shape]), "reward": (np.float32, [n]),
                "terminated": (np.bool_, [n]), "truncated": (np.bool_, [n]),
                "intervention": (np.bool_, [n]), "success": (np.bool_, [n]),
                "step": (np.int64, [n])}
    for key, (dtype, shape) in expected.items():
        arr = batch.get(key)
        if not isinstance(arr, np.ndarray) or arr.dtype != dtype or list(arr.shape) != shape:
            raise MessageError(f"transitions {key!r} has {getattr(arr, 'shape', None)} "
                               f"{getattr(arr, 'dtype', None)}, expected {shape} {np.dtype(dtype)}")
    return int(n or 0)


def nonfinite_rows(batch: dict) -> np.ndarray:
    """Bool mask of the transitions with a NaN/inf anywhere (every float observation key,
    next observation, action; an infinite reward): the learner refuses those rows, keeps the
    rest. A NaN reward alone is not garbage: it is a reward model's "no answer"
    (robolearn.rewards.base.MISSING), which the learner drops and counts on its own."""
    bad = np.isinf(batch["reward"])
    bad |= ~np.isfinite(batch["action"]).reshape(len(bad), -1).all(axis=1)
    for part in ("obs", "next_obs"):
        for arr in batch[part].values():
            if arr.dtype.kind == "f":
                bad |= ~np.isfinite(arr).reshape(len(bad), -1).all(axis=1)
    return bad


def select_rows(batch: dict, keep: np.ndarray) -> dict:
    """The transitions of `batch` where `keep` is True (same layout)."""
    return {k: ({kk: vv[keep] for kk, vv in v.items()} if isinstance(v, dict) else v[keep])
            for k, v in batch.items()}


# -------------------------------------------------------------------------------- weights
def encode_weights(state: dict, version: int, fingerprint_hash: str,
                   max_bytes: int = MAX_MESSAGE_BYTES, hold: bool = False) -> bytes:
    """policy_state() (flat tensors) -> WEIGHTS message with safetensors bytes. `hold`: the
    step budget is reached (as HOLD): the actors' SUB socket keeps only the newest message, so
    weights sent after HOLD carry it too."""
    from safetensors.torch import save

    tensors = {k: v.detach().cpu().contiguous() for k, v in state.items()}
    return encode(WEIGHTS, max_bytes=max_bytes, version=int(version),
                  env_hash=fingerprint_hash, safetensors=save(tensors), hold=bool(hold))


def decode_weights(msg: dict) -> dict:
    """WEIGHTS message -> dict of torch tensors (MessageError if the payload is not valid)."""
    from safetensors.torch import load

    blob = msg.get("safetensors")
    if not isinstance(blob, (bytes, bytearray)):
        raise MessageError("weights message without a safetensors payload")
    try:
        return load(bytes(blob))
    except Exception as exc:
        raise MessageError(f"weights payload is not valid safetensors ({exc})") from None
