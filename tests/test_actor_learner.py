"""Actor/learner as real processes over loopback: learner restarts, actor deaths, `launch`."""
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robolearn.runtime.transport import free_port

TOML = """
env = "Pendulum-v1"
algo = "sac"
seed = 0
max_episode_steps = 50
actors = {actors}
out = "{out}"

[learner]
port = {port}
weights_port = {wport}
total_env_steps = {steps}
learning_starts = 100
publish_every = 10
eval_episodes = {eval_episodes}
metrics_every_s = 0.3
actor_timeout_s = 1.0

[learner.agent]
batch_size = 32
actor_hidden = [32, 32]
critic_hidden = [32, 32]

[actor]
loop_hz = {hz}
learner_timeout_s = 1.0
heartbeat_s = 0.1
send_batch = 8
"""


def write_toml(tmp_path, name="run.toml", actors=1, port=None, wport=None, steps=1_000_000,
               hz=50, eval_episodes=0):
    out = tmp_path / "run"
    path = tmp_path / name
    path.write_text(TOML.format(actors=actors, out=out, port=port if port is not None else free_port(),
                                wport=wport if wport is not None else free_port(), steps=steps,
                                hz=hz, eval_episodes=eval_episodes))
    return path, out


class Procs:
    """Start robolearn subprocesses in their own process groups; kill them all at the end."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.procs = []

    def start(self, *args, name):
        log = open(self.tmp_path / f"{name}.log", "w")
        p = subprocess.Popen([sys.executable, "-m", "robolearn.cli", *args], stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True,
                             env=dict(os.environ, PYTHONUNBUFFERED="1"))
        p.log_path = self.tmp_path / f"{name}.log"
        self.procs.append(p)
        return p

    def kill_all(self):
        # children of a `launch` run live in their own process groups: if a launcher is still
        # running here (a failed test), kill its children too (a launcher that exited has
        # already stopped them, and their pids may be reused by now)
        launchers_running = any(p.poll() is None and "launch" in p.args for p in self.procs)
        for rec in self.tmp_path.rglob("launch.json") if launchers_running else ():
            try:
                children = json.loads(rec.read_text())["children"].values()
            except (OSError, ValueError, KeyError):
                continue
            for child in children:
                try:
                    os.killpg(child["pid"], signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()


@pytest.fixture
def procs(tmp_path):
    ps = Procs(tmp_path)
    yield ps
    ps.kill_all()


def metrics(out: Path) -> list[dict]:
    f = out / "metrics.jsonl"
    if not f.exists():
        return []
    recs = []
    for line in f.read_text().splitlines():
        try:
            recs.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return recs


def wait_for(cond, timeout, what, procs_to_check=()):
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        v = cond()
        if v:
            return v
        for p in procs_to_check:
            if p.poll() is not None:
                raise AssertionError(f"{what}: a process died early:\n{p.log_path.read_text()[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_learner_killed_actor_keeps_rate_and_reconnects(tmp_path, procs):
    port, wport = free_port(), free_port()
    toml, out = write_toml(tmp_path, port=port, wport=wport)
    learner = procs.start("learner", str(toml), name="learner1")
    actor = procs.start("actor", str(toml), "--id", "a0", name="actor")
    # the actor has trained weights before the outage (without them it holds still, issue 14)
    wait_for(lambda: any(m.get("per_actor", {}).get("a0", {}).get("transitions", 0) > 50
                         and m.get("weights_published", 0) >= 2 for m in metrics(out)), 60,
             "actor streaming to learner 1 and weights published", [learner, actor])
    time.sleep(0.5)
    os.killpg(learner.pid, signal.SIGKILL)
    learner.wait()
    t_kill = time.monotonic()
    time.sleep(2.5)  # the actor notices (learner_timeout_s = 1) and keeps acting
    (out / "metrics.jsonl").unlink()
    learner2 = procs.start("learner", str(toml), name="learner2")
    wait_for(lambda: any(m.get("per_actor", {}).get("a0", {}).get("transitions", 0) > 20
                         for m in metrics(out)), 60, "actor streaming to the restarted learner",
             [learner2, actor])
    elapsed = time.monotonic() - t_kill
    actor.send_signal(signal.SIGTERM)
    assert actor.wait(timeout=20) == 0
    s = json.loads((out / "actor_a0.json").read_text())
    assert s["reconnects"] >= 1, s
    # the actor kept stepping at its rate through the outage (50 Hz; no stall while away)
    loop = s["loop"]
    assert s["env_steps"] >= 0.8 * 50 * elapsed, (s["env_steps"], elapsed)
    assert loop["skipped_deadlines"] <= 0.02 * loop["ticks"], loop
    assert s["bad_messages"] == 0


def test_one_of_two_actors_killed_learner_keeps_training(tmp_path, procs):
    toml, out = write_toml(tmp_path, actors=2)
    learner = procs.start("learner", str(toml), name="learner")
    a0 = procs.start("actor", str(toml), "--id", "a0", "--seed", "1", name="a0")
    a1 = procs.start("actor", str(toml), "--id", "a1", "--seed", "2", name="a1")

    def both_streaming():
        for m in metrics(out):
            pa = m.get("per_actor", {})
            if all(pa.get(a, {}).get("transitions", 0) > 20 for a in ("a0", "a1")) \
                    and m["updates"] > 0:
                return m
        return None

    wait_for(both_streaming, 60, "both actors streaming and training", [learner, a0, a1])
    # the learner logs its updates' losses, as `robolearn train` does: the means since the last row
    rows = wait_for(lambda: [r for r in metrics(out) if r.get("kind") == "train" and "critic_loss" in r],
                    30, "a train row with the update metrics", [learner])
    assert all(math.isfinite(rows[-1][k]) for k in ("critic_loss", "q", "actor_loss", "alpha")), rows[-1]
    os.killpg(a1.pid, signal.SIGKILL)
    a1.wait()
    dead = wait_for(lambda: next((m for m in metrics(out)
                                  if not m["per_actor"].get("a1", {}).get("alive", True)), None),
                    20, "a1 reported dead", [learner, a0])
    later = wait_for(lambda: next((m for m in metrics(out) if m["updates"] > dead["updates"] + 50
                                   and m["per_actor"]["a0"]["transitions"]
                                   > dead["per_actor"]["a0"]["transitions"] + 50), None),
                     60, "training continuing from a0", [learner, a0])
    assert later["actors_alive"] == 1
    assert later["per_actor"]["a1"]["transitions"] == dead["per_actor"]["a1"]["transitions"]
    learner.send_signal(signal.SIGTERM)
    assert learner.wait(timeout=30) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["updates"] >= later["updates"]
    assert (out / "checkpoints" / "latest.json").exists()


def test_launch_end_to_end_smoke(tmp_path, procs):
    toml, out = write_toml(tmp_path, port=0, wport=0, steps=300, hz=0, eval_episodes=2)
    launch = procs.start("launch", str(toml), "--quiet", name="launch")
    rc = launch.wait(timeout=120)
    log = launch.log_path.read_text()
    assert rc == 0, log
    assert "learner data    tcp://127.0.0.1:" in log
    summary = json.loads((out / "summary.json").read_text())
    for key in ("env", "algo", "env_steps", "updates", "eval_return", "eval_success_rate"):
        assert key in summary
    assert summary["env_steps"] >= 300 and summary["updates"] == 300 - 100 + 1
    assert summary["eval_episodes"] == 2
    rec = json.loads((out / "launch.json").read_text())
    assert rec["failed"] == {}
    for child in rec["children"].values():  # every child is gone
        with pytest.raises(ProcessLookupError):
            os.kill(child["pid"], 0)
    actor = json.loads((out / "actor_actor0.json").read_text())
    assert actor["exit_reason"] == "learner finished" and actor["weight_swaps"] > 0


def test_a_lagging_learner_holds_the_actor_at_the_step_budget(tmp_path, procs):
    """A 50 Hz actor against a learner due 100 updates a step: the learner is still working
    through its due updates when the 200-step budget is reached. The actor holds from then on
    (the learner's HOLD) instead of acting on, as a robot would past its robot-time budget."""
    toml, out = write_toml(tmp_path, port=0, wport=0, steps=200, hz=50)
    toml.write_text(toml.read_text().replace("[learner.agent]", "utd = 100\n\n[learner.agent]"))
    launch = procs.start("launch", str(toml), "--quiet", name="launch")
    rc = launch.wait(timeout=240)
    assert rc == 0, launch.log_path.read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_reason"] == "total_env_steps reached"
    assert summary["updates"] == 100 * (200 - 100 + 1)         # every due update was done
    assert summary["holds_sent"] >= 1
    assert 200 <= summary["env_steps"] <= 200 + 40             # what was in flight, no more
    actor = json.loads((out / "actor_actor0.json").read_text())
    assert actor["budget_held_ticks"] > 0 and actor["exit_reason"] == "learner finished"


def test_launch_ctrl_c_stops_everything(tmp_path, procs):
    toml, out = write_toml(tmp_path, port=0, wport=0, actors=2)
    launch = procs.start("launch", str(toml), "--quiet", name="launch")
    wait_for(lambda: any(m["env_steps"] > 0 for m in metrics(out)), 60, "run started", [launch])
    launch.send_signal(signal.SIGINT)
    rc = launch.wait(timeout=40)
    assert rc == 130, launch.log_path.read_text()
    rec = json.loads((out / "launch.json").read_text())
    assert set(rec["children"]) == {"learner", "actor0", "actor1"}
    for child in rec["children"].values():
        with pytest.raises(ProcessLookupError):
            os.kill(child["pid"], 0)
    assert (out / "summary.json").exists()  # the learner saved on its way out


# ------------------------------------------------------------------- in-process actor logic
def _cfg(tmp_path, **actor):
    from robolearn.runtime.config import config_from_dict

    return config_from_dict({"env": "Pendulum-v1", "max_episode_steps": 20, "out": str(tmp_path),
                             "learner": {"agent": {"actor_hidden": [8], "critic_hidden": [8]}},
                             "actor": {"loop_hz": 100, "learner_timeout_s": 0.3, **actor}})


def test_outbox_is_bounded_and_drops_oldest(tmp_path):
    from robolearn.runtime.actor import LearnerLink

    cfg = _cfg(tmp_path, outbox=3)
    link = LearnerLink(cfg.actor, "tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "a", {"hash": "x"})
    for i in range(5):
        link.submit({"step": i})
    assert link.dropped == 2
    assert [t["step"] for t in link.outbox] == [2, 3, 4]


@pytest.mark.parametrize("policy", ["continue", "pause"])
def test_actor_without_learner_continues_or_pauses(tmp_path, policy):
    from robolearn.runtime.actor import Actor

    cfg = _cfg(tmp_path, on_learner_lost=policy, max_steps=0, realtime=False, outbox=50,
               act_without_learner=True)  # else it holds still before any weights (issue 14)
    port, wport = free_port(), free_port()
    actor = Actor(cfg, "solo", f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{wport}")
    import threading

    threading.Timer(1.0, actor.stop_event.set).start()
    s = actor.run()
    if policy == "continue":  # no learner: acts at its rate, the outbox keeps the newest 50
        assert s["env_steps"] >= 70  # 100 Hz for 1 s, minus start-up, on a busy machine
        assert s["dropped"] == s["env_steps"] - 50 and s["sent"] == 0
    else:
        assert s["env_steps"] == 0 and s["paused_ticks"] >= 70
