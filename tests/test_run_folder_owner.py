"""One writer per run folder (issue 29 item 1): a live owner refuses a second writer with its
pid, a stale lock from a dead process is named and taken over, `launch` / `learner` refuse an
earlier run unless --overwrite, and `launch` checks its file before starting any child."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robolearn.cli import main
from robolearn.errors import ConfigError
from robolearn.run_lock import lock_folder, read_owner
from robolearn.runtime.transport import free_port

ROOT = Path(__file__).resolve().parents[1]


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_live_owner_refused_with_its_pid_stale_lock_named_and_taken_over(tmp_path, capsys):
    folder = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from robolearn.run_lock import lock_folder; "
        f"l = lock_folder({str(folder)!r}); print('held', flush=True); time.sleep(30)")],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=rf"locked by pid {holder.pid} \(running\)"):
            lock_folder(folder)
    finally:
        holder.kill()
        holder.wait()
    # a lock file left by a process that died without releasing it
    dead = _dead_pid()
    (folder / ".lock").write_text(json.dumps({"pid": dead, "host": __import__("socket").gethostname()}))
    lock = lock_folder(folder)
    err = capsys.readouterr().err
    assert f"is locked by pid {dead} (not running)" in err and "taking it over" in err
    import os
    assert read_owner(folder)["pid"] == os.getpid()
    lock.release()
    assert read_owner(folder) == {}           # released cleanly: names no owner


def test_train_resume_refused_while_the_run_trains(tmp_path, capsys):
    out = tmp_path / "run"
    a = subprocess.Popen([sys.executable, "-m", "robolearn.cli", "train", "--env", "Pendulum-v1",
                          "--steps", "100000", "--learning-starts", "100000", "--checkpoint-every", "50",
                          "--max-episode-steps", "20", "--no-video", "--no-progress", "--out", str(out)],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t_end = time.monotonic() + 120
        while not (out / "checkpoints" / "latest.json").exists():
            assert a.poll() is None and time.monotonic() < t_end, "run A did not checkpoint"
            time.sleep(0.2)
        metrics = (out / "metrics.jsonl").stat().st_size
        assert main(["train", "--resume", str(out), "--no-video", "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert f"locked by pid {a.pid} (running)" in err, err
        assert main(["train", "--env", "Pendulum-v1", "--steps", "10", "--out", str(out),
                     "--overwrite", "--no-video", "--no-progress"]) == 2
        assert f"locked by pid {a.pid}" in capsys.readouterr().err
        assert (out / "metrics.jsonl").stat().st_size >= metrics   # run A's files untouched
    finally:
        a.kill()
        a.wait()


def _launch_toml(tmp_path, algo="sac", env="Pendulum-v1", kwargs=""):
    p = tmp_path / "run.toml"
    p.write_text(f"""
env = "{env}"
algo = "{algo}"
out = "{tmp_path / 'run'}"
max_episode_steps = 20
[env_kwargs]
{kwargs}
[learner]
port = {free_port()}
weights_port = {free_port()}
total_env_steps = 50
[actor]
loop_hz = 0
realtime = false
""")
    return p


@pytest.mark.parametrize("verb", ["launch", "learner"])
def test_launch_and_learner_refuse_an_earlier_run(tmp_path, capsys, verb):
    toml = _launch_toml(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text('{"env_steps": 5}')
    (run / "metrics.jsonl").write_text('{"step": 5}\n')
    assert main([verb, str(toml)]) == 2
    err = capsys.readouterr().err
    assert "already holds a finished run" in err and "--overwrite" in err
    assert (run / "summary.json").read_text() == '{"env_steps": 5}'
    assert not (run / "logs").exists()                       # no child was started


def test_learner_child_checks_its_parents_lock(tmp_path, capsys):
    toml = _launch_toml(tmp_path)
    assert main(["learner", str(toml), "--owned-by", str(_dead_pid())]) == 2
    assert "not locked by pid" in capsys.readouterr().err


@pytest.mark.parametrize("bad, says", [
    (dict(algo="sacc"), "unknown algo 'sacc'"),
    (dict(env="robolearn/NoSuchEnv-v0"), "NoSuchEnv"),
    (dict(env="robolearn/ArmReach-v0", kwargs='no_such_option = 1'), "no_such_option"),
])
def test_launch_checks_algo_and_env_before_starting_children(tmp_path, capsys, bad, says):
    toml = _launch_toml(tmp_path, **bad)
    assert main(["launch", str(toml)]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run" / "logs").exists()          # nothing was started


def test_interrupted_run_is_not_called_finished(tmp_path, capsys):
    from robolearn.policies.run_folder import clear_earlier_run

    (tmp_path / "summary.json").write_text(json.dumps({"interrupted": True, "env_steps": 40}))
    with pytest.raises(ConfigError) as exc:
        clear_earlier_run(tmp_path, overwrite=False)
    msg = str(exc.value)
    assert "interrupted run" in msg and "finished" not in msg and f"train --resume {tmp_path}" in msg


def test_a_live_actors_periodic_summary_is_not_an_earlier_run(tmp_path):
    """Actors rewrite actor_<id>.json while they run (exit_reason "running"), e.g. while they
    wait for a restarted learner: that file must not make the folder look like an old run."""
    from robolearn.commands.run_owner import take_run_folder
    from robolearn.errors import ConfigError

    run = tmp_path / "run"
    run.mkdir()
    (run / "actor_a0.json").write_text('{"exit_reason": "running", "env_steps": 10}')
    take_run_folder(run, overwrite=False).release()
    (run / "actor_a0.json").write_text('{"exit_reason": "max_steps", "env_steps": 10}')
    with pytest.raises(ConfigError, match=r"actor_a0.json"):
        take_run_folder(run, overwrite=False)
