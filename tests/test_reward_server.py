"""`robolearn reward serve` and the learner's client (`[reward] where = "server"`), issue 29.

Real processes and real sockets: the server is the CLI in a child process, killed with SIGKILL
(or stopped with SIGSTOP: alive, connected, silent) the way the soak does it.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from robolearn.errors import ConfigError
from robolearn.reward_config import RewardConfig, reward_config
from robolearn.rewards.reach_distance import save_reach_distance
from robolearn.rewards.serving import TransitionLabeler, build_model
from robolearn.runtime import messages as M
from robolearn.runtime.reward_client import ServerLabeler
from robolearn.runtime.transport import free_port

CLI = [sys.executable, "-m", "robolearn.cli"]


def start_server(model: Path, address: str, timeout: float = 60.0) -> subprocess.Popen:
    """`robolearn reward serve` as a child; returns once it said it is serving."""
    p = subprocess.Popen(CLI + ["reward", "serve", "--model", str(model), "--address", address],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, PYTHONUNBUFFERED="1"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if "reward server: serving" in line:
            return p
        if not line and p.poll() is not None:
            break
    p.kill()
    raise AssertionError(f"reward server did not start (rc {p.poll()})")


def kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)


@pytest.fixture
def reach(tmp_path):
    return save_reach_distance(tmp_path / "reach")


def reach_batch(rng, n: int, first_step: int = 0) -> dict:
    """n ArmReach-shaped transitions; target - ee within 0-4 cm, so some are successes."""
    state = rng.normal(size=(n, 20)).astype(np.float32)
    state[:, 17:20] = rng.uniform(-0.025, 0.025, size=(n, 3))
    rows = [{"obs": {"state": state[i]}, "next_obs": {"state": state[i]}, "action": np.zeros(4, np.float32),
             "reward": 0.0, "terminated": False, "truncated": False, "success": False,
             "step": first_step + i} for i in range(n)]
    return M.stack_transitions(rows)


def pump_until(lab: ServerLabeler, cond, seconds: float = 30.0) -> list:
    out = []
    deadline = time.monotonic() + seconds
    while not cond() and time.monotonic() < deadline:
        out += lab.pump(0.05)
    assert cond(), lab.metrics()
    return out


def in_process(model: Path, next_obs: dict):
    r, s, _ = TransitionLabeler(build_model(RewardConfig(model=str(model)))).label(next_obs)
    return r, s


def tiny_classifier(path: Path) -> Path:
    """A (random-weight) success classifier folder, saved as `reward train` saves one: the
    server must give the same answers as the in-process model on camera frames."""
    import torch

    from robolearn.rewards.checkpoint import save_model
    from robolearn.rewards.classifier import SuccessClassifier

    torch.manual_seed(0)
    arch = {"feature_dim": 8, "filters": 4, "layers": 2, "hidden": 8}
    model = SuccessClassifier((32, 32, 3), ["front"], **arch)
    save_model(path, model, {"kind": "classifier", "cameras": ["front"], "image_shape": [32, 32, 3],
                             "arch": arch, "threshold": 0.5})
    return path


def test_served_rewards_equal_the_in_process_model(tmp_path, reach):
    rng = np.random.default_rng(0)
    cls = tiny_classifier(tmp_path / "cls")
    frames = {"front": rng.integers(0, 256, size=(12, 32, 32, 3), dtype=np.uint8)}
    from robolearn.rewards.classifier import ClassifierReward

    scores = ClassifierReward(cls).score(frames)
    meta = (cls / "reward.json").read_text().replace('"threshold": 0.5', f'"threshold": {float(np.median(scores))}')
    (cls / "reward.json").write_text(meta)        # half the frames above it: both answers occur
    for model, next_obs in ((reach, reach_batch(rng, 16)["next_obs"]), (cls, frames)):
        address = f"tcp://127.0.0.1:{free_port()}"
        server = start_server(model, address)
        lab = ServerLabeler(address, timeout_s=10.0)
        try:
            n = len(next(iter(next_obs.values())))
            batch = {"obs": next_obs, "next_obs": next_obs, "step": np.arange(n)}
            lab.submit("actor", batch, n)
            (key, got_batch, reward, success, held), = pump_until(lab, lambda: not lab.queue)
            want_r, want_s = in_process(model, next_obs)
            np.testing.assert_array_equal(reward, want_r)
            np.testing.assert_array_equal(success, want_s)
            assert key == "actor" and got_batch is batch and not held
            assert 0 < success.sum() < n                # the comparison sees both outcomes
            assert lab.metrics()["labelled"] == n and lab.held == 0
        finally:
            lab.close()
            kill(server)


def test_killed_server_holds_transitions_and_relabels_them_on_its_return(reach):
    rng = np.random.default_rng(1)
    address = f"tcp://127.0.0.1:{free_port()}"
    server = start_server(reach, address)
    lab = ServerLabeler(address, timeout_s=0.5, retry_s=0.1)
    try:
        b0 = reach_batch(rng, 4, 0)
        lab.submit("a", b0, 4)
        first = pump_until(lab, lambda: not lab.queue)
        assert [len(x[2]) for x in first] == [4] and lab.held == 0
        kill(server)                                    # SIGKILL, mid-stream
        b1, b2 = reach_batch(rng, 5, 4), reach_batch(rng, 3, 9)
        lab.submit("a", b1, 5)
        got = []
        t_end = time.monotonic() + 2.0                  # > timeout_s: it must be found down
        while time.monotonic() < t_end:
            got += lab.pump(0.05)
        lab.submit("a", b2, 3)                          # arrives while it is down
        got += lab.pump(0.05)
        assert got == []                                # nothing labelled while it is down
        m = lab.metrics()
        assert m["down"] and m["held"] == 8 and m["still_held"] == 8 and m["relabelled"] == 0
        assert m["server_timeouts"] + m["server_unreachable"] >= 1
        server = start_server(reach, address)           # restarted on the same address
        back = pump_until(lab, lambda: not lab.queue)
        assert [x[1]["step"].tolist() for x in back] == [list(range(4, 9)), list(range(9, 12))]  # in order
        for _, batch, reward, success, held in back:
            want_r, want_s = in_process(reach, batch["next_obs"])
            np.testing.assert_array_equal(reward, want_r)
            np.testing.assert_array_equal(success, want_s)
            assert held
        m = lab.metrics()
        assert (m["held"], m["relabelled"], m["dropped"], m["still_held"], m["labelled"]) == (8, 8, 0, 0, 12)
        assert not m["down"]
    finally:
        lab.close()
        kill(server)


def test_a_silent_server_times_out_and_its_late_reply_is_not_used(reach):
    """SIGSTOP: the connection stays up but nothing answers, so only the timeout can tell."""
    rng = np.random.default_rng(2)
    address = f"tcp://127.0.0.1:{free_port()}"
    server = start_server(reach, address)
    lab = ServerLabeler(address, timeout_s=0.4, retry_s=0.1)
    try:
        lab.submit("a", reach_batch(rng, 2), 2)
        pump_until(lab, lambda: not lab.queue)          # connected and answering
        os.kill(server.pid, signal.SIGSTOP)
        b = reach_batch(rng, 6)
        lab.submit("a", b, 6)
        t_end = time.monotonic() + 1.5
        got = []
        while time.monotonic() < t_end:
            got += lab.pump(0.05)
        assert got == [] and lab.server_timeouts >= 1 and lab.held == 6
        os.kill(server.pid, signal.SIGCONT)             # it answers the old requests too: ignored by id
        back = pump_until(lab, lambda: not lab.queue)
        assert len(back) == 1 and lab.relabelled == 6 and lab.labelled == 8   # labelled once, not twice
        np.testing.assert_array_equal(back[0][2], in_process(reach, b["next_obs"])[0])
    finally:
        os.kill(server.pid, signal.SIGCONT)
        lab.close()
        kill(server)


def test_full_queue_drops_the_oldest_and_counts_them(reach):
    rng = np.random.default_rng(3)
    address = f"tcp://127.0.0.1:{free_port()}"            # no server yet
    lab = ServerLabeler(address, timeout_s=0.3, retry_s=0.05, max_held=8)
    server = None
    try:
        lab.submit("a", reach_batch(rng, 3, 0), 3)
        t_end = time.monotonic() + 1.0                  # > timeout_s: found down
        while time.monotonic() < t_end:
            lab.pump(0.05)
        assert lab.down and lab.server_unreachable >= 1 and lab.held == 3
        for i in range(1, 4):                            # 12 transitions in all, steps 0..11
            lab.submit("a", reach_batch(rng, 3, 3 * i), 3)
            lab.pump(0.02)
        m = lab.metrics()
        assert m["queued"] == 8 and m["dropped"] == 4 and m["held"] == 12
        assert m["held"] == m["relabelled"] + m["dropped"] + m["still_held"]
        server = start_server(reach, address)
        back = pump_until(lab, lambda: not lab.queue)
        steps = [s for x in back for s in x[1]["step"].tolist()]
        assert steps == list(range(4, 12))              # the newest 8, in order; 0-3 dropped
        m = lab.metrics()
        assert (m["held"], m["relabelled"], m["dropped"], m["still_held"]) == (12, 8, 4, 0)
    finally:
        lab.close()
        if server is not None:
            kill(server)


def test_bad_address_or_model_folder_is_a_one_line_error(tmp_path, reach):
    for addr in ("localhost:5590", "tcp://127.0.0.1", "tcp://127.0.0.1:99999", "ipc:///tmp/x"):
        with pytest.raises(ConfigError, match="tcp://HOST:PORT"):
            reward_config({"model": str(reach), "where": "server", "address": addr})
        with pytest.raises(ConfigError, match="tcp://HOST:PORT"):
            ServerLabeler(addr)
    for bad in ({"timeout_s": 0}, {"max_held": 0}, {"where": "cloud"}):
        with pytest.raises(ConfigError):
            reward_config({"model": str(reach), "where": "server", **bad})
    busy = f"tcp://127.0.0.1:{free_port()}"
    server = start_server(reach, busy)
    try:
        cases = [(["--model", str(tmp_path / "nope"), "--address", "tcp://127.0.0.1:5591"], "no such model folder"),
                 (["--model", str(tmp_path), "--address", "tcp://127.0.0.1:5591"], "no reward.json"),
                 (["--model", str(reach), "--address", "127.0.0.1:5591"], "tcp://HOST:PORT"),
                 (["--model", str(reach), "--address", busy], "cannot bind")]
        for argv, words in cases:
            r = subprocess.run(CLI + ["reward", "serve", *argv], capture_output=True, text=True, timeout=60)
            err = r.stderr.strip()
            assert r.returncode == 2 and words in err and len(err.splitlines()) == 1, err
    finally:
        kill(server)


def test_a_model_that_cannot_read_the_observation_is_an_error_not_a_hold(reach):
    address = f"tcp://127.0.0.1:{free_port()}"
    server = start_server(reach, address)
    lab = ServerLabeler(address, timeout_s=10.0)
    try:
        wrong = {"state": np.zeros((2, 7), np.float32)}          # not ArmReach's 20 values
        lab.submit("a", {"obs": wrong, "next_obs": wrong, "step": np.arange(2)}, 2)
        with pytest.raises(ConfigError, match="reach_distance.*20 values"):
            pump_until(lab, lambda: False, seconds=10.0)
    finally:
        lab.close()
        kill(server)


def test_session_restarts_a_killed_server_and_counts_it(tmp_path, reach):
    from robolearn.runtime.reward_server import RewardServerProcess

    address = f"tcp://127.0.0.1:{free_port()}"
    sup = RewardServerProcess(RewardConfig(model=str(reach), where="server", address=address), address,
                              tmp_path / "reward_server.log", max_restarts=1)
    lab = ServerLabeler(address, timeout_s=0.5, retry_s=0.1)
    try:
        first = sup.start()
        assert sup.check() is None and sup.restarts == 0
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        assert sup.check() is None                                # restarted
        assert sup.restarts == 1 and sup.proc.pid != first.pid
        assert sup.restart_log[0]["rc"] == -signal.SIGKILL and sup.restart_log[0]["killed_pid"] == first.pid
        lab.submit("a", reach_batch(np.random.default_rng(4), 3), 3)
        pump_until(lab, lambda: not lab.queue, seconds=60)        # the new one answers
        os.kill(sup.proc.pid, signal.SIGKILL)
        sup.proc.wait(timeout=10)
        assert "after 1 restarts" in sup.check()                  # past --max-restarts: said so
    finally:
        lab.close()
        sup.stop()
    assert "reward server: serving" in (tmp_path / "reward_server.log").read_text()


def test_learner_stores_no_transition_while_the_server_is_down(tmp_path, reach):
    """The learner's labelling path end to end: transitions over its data socket, a server
    SIGKILLed between two batches: the replay does not grow while it is down, and afterwards
    holds the server's rewards (the in-process model's), never the actor's placeholder."""
    import zmq

    from robolearn.runtime.learner import Learner
    from tests.test_transport import dealer, exchange, hello, small_cfg

    address = f"tcp://127.0.0.1:{free_port()}"
    server = start_server(reach, address)
    cfg = small_cfg(tmp_path, env="robolearn/ArmReach-v0", max_episode_steps=50,
                    reward={"model": str(reach), "where": "server", "address": address, "timeout_s": 0.5})
    learner = Learner(cfg)
    learner.bind(free_port(), free_port())
    ctx = zmq.Context()
    rng = np.random.default_rng(5)

    def send(b):
        exchange(learner, s, M.encode(M.TRANSITIONS, session=session, batch=b), wait_ms=200)

    def settle(seconds):
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            learner.poll(timeout_ms=20)
            learner.pump_labels()

    try:
        s = dealer(learner, ctx, identity=b"robot0")
        session = exchange(learner, s, hello(learner, actor_id="robot0"))["session"]
        b1, b2, b3 = (reach_batch(rng, 6, 6 * i) for i in range(3))
        send(b1)
        settle(1.0)
        assert len(learner.replay) == 6
        kill(server)
        send(b2)
        send(b3)
        settle(1.5)                                    # > timeout_s
        m = learner.progress()["reward_server"]
        assert len(learner.replay) == 6 and m["held"] == 12 and m["down"]
        assert learner.env_steps == 18                 # the actor's steps are counted on arrival
        server = start_server(reach, address)
        settle(2.0)
        m = learner.progress()["reward_server"]
        assert (m["held"], m["relabelled"], m["dropped"], m["still_held"]) == (12, 12, 0, 0)
        t = learner.replay.transitions()
        want = np.concatenate([in_process(reach, b["next_obs"])[0] for b in (b1, b2, b3)])
        assert len(t["reward"]) == 18
        np.testing.assert_allclose(t["reward"], want, rtol=1e-6)   # not the placeholder 0.0
        assert (want != 0).all()
    finally:
        ctx.destroy(0)
        learner.close()
        kill(server)


def test_session_report_sums_the_counters_over_learner_processes(tmp_path):
    """A learner killed and restarted: each process counts from 0, the report adds them up (the
    killed one as of its last metrics line; what it held then is lost with it, and said so)."""
    import json

    from robolearn.runtime.finetune_report import reward_server_counts

    def rs(**kw):
        return {"labelled": 0, "held": 0, "relabelled": 0, "dropped": 0, "server_timeouts": 0,
                "server_unreachable": 0, "missing": 0, "still_held": 0, **kw}

    lines = [{"kind": "train", "pid": 11, "reward_server": rs(labelled=10)},
             {"kind": "train", "pid": 11, "reward_server": rs(labelled=40, held=9, relabelled=5, still_held=4,
                                                              server_timeouts=1)},
             {"kind": "train", "pid": 12, "reward_server": rs(labelled=20)}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    (tmp_path / "summary.json").write_text(json.dumps({"pid": 12, "reward_server": rs(
        labelled=70, held=6, relabelled=4, dropped=2, server_timeouts=2)}))
    got = reward_server_counts(tmp_path)
    assert (got["labelled"], got["held"], got["relabelled"], got["dropped"], got["server_timeouts"]) == \
        (110, 15, 9, 2, 3)
    assert got["learner_processes"] == 2 and got["held_lost_with_learner"] == 4 and got["still_held_at_end"] == 0
    assert got["held"] == got["relabelled"] + got["dropped"] + got["held_lost_with_learner"] + got["still_held_at_end"]
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"kind": "train", "pid": 1}) + "\n")
    (tmp_path / "summary.json").unlink()
    assert reward_server_counts(tmp_path) is None                # no reward server in that session


def test_a_learner_without_the_servers_address_says_so(tmp_path, reach):
    from robolearn.runtime.learner import Learner
    from tests.test_transport import small_cfg

    cfg = small_cfg(tmp_path, env="robolearn/ArmReach-v0", reward={"model": str(reach), "where": "server"})
    with pytest.raises(ConfigError, match="needs address"):
        Learner(cfg)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_launch_run_rides_out_a_killed_reward_server(tmp_path, reach):
    """`robolearn launch` (learner + sim actor) with its reward served: the server SIGKILLed
    mid-run and started again; the run ends normally, every transition labelled by the server
    and stored, the outage's transitions held and relabelled (~40 s)."""
    import json

    address = f"tcp://127.0.0.1:{free_port()}"
    launch = tmp_path / "launch.toml"
    launch.write_text(f"""env = "robolearn/ArmReach-v0"
algo = "sac"
obs = "state"
out = "{tmp_path / 'run'}"
[learner]
port = 0
weights_port = 0
total_env_steps = 3000
metrics_every_s = 0.5
[learner.agent]
batch_size = 16
actor_hidden = [16, 16]
critic_hidden = [16, 16]
[actor]
loop_hz = 100
random_until_weights = true
act_without_learner = true
[reward]
model = "{reach}"
where = "server"
address = "{address}"
timeout_s = 0.5
""")
    server = start_server(reach, address)
    run = subprocess.Popen(CLI + ["launch", str(launch), "--quiet"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        metrics = tmp_path / "run" / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (metrics.exists() and '"env_steps": 5' in metrics.read_text()):
            time.sleep(0.2)                             # well under way (>= 500 steps)
        kill(server)
        time.sleep(3.0)
        server = start_server(reach, address)
        out, _ = run.communicate(timeout=300)
        assert run.returncode == 0, out
        s = json.loads((tmp_path / "run" / "summary.json").read_text())
        rs = s["reward_server"]
        assert rs["held"] > 0 and rs["relabelled"] == rs["held"] and rs["dropped"] == 0 and rs["still_held"] == 0
        assert rs["labelled"] == s["replay"]            # every stored step was labelled by the server
        # and every step the actor sent was, but those that arrived after the learner's last labels
        # (while it evaluated at the end): still queued, not stored
        assert s["env_steps"] == rs["labelled"] + rs["queued"] and rs["queued"] < 50, (rs, s["env_steps"])
        assert s["rejected_missing_reward"] == 0
    finally:
        if run.poll() is None:
            run.kill()
        kill(server)
