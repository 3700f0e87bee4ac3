"""Ctrl-C / SIGTERM in `train` saves a resumable checkpoint and the summary."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from robolearn.cli import main


@pytest.mark.parametrize("sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)])
def test_signal_saves_checkpoint_and_summary_then_resume_works(tmp_path, sig):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "robolearn.cli", "train", "--env", "robolearn/ArmReach-v0",
           "--algo", "sac", "--steps", "100000", "--learning-starts", "100", "--log-every", "20",
           "--eval-every", "0", "--checkpoint-every", "0", "--eval-episodes", "1", "--no-video",
           "--no-progress", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        metrics = out / "metrics.jsonl"
        while time.monotonic() < deadline:  # wait until it is training (past learning_starts)
            if metrics.exists() and '"step": 140' in metrics.read_text():
                break
            assert p.poll() is None, p.communicate()
            time.sleep(0.2)
        p.send_signal(sig)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, stderr
    assert "--resume" in stderr
    latest = json.loads((out / "checkpoints" / "latest.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["env_steps"] == latest["env_steps"] >= 140
    assert not list(out.rglob("*.tmp"))
    # the interrupted run continues from where it stopped
    steps = latest["env_steps"] + 30
    assert main(["train", "--resume", str(out), "--steps", str(steps), "--no-video", "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env_steps"] == steps and not summary.get("interrupted")
