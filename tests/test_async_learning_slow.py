"""Slow: `robolearn launch launch/sim_arm_reach_async.toml` solves ArmReach through the
actor/learner path (separate processes, ZeroMQ), not only through the single-process `train`."""
import json
import os
import signal
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_async_launch_solves_arm_reach(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "robolearn.cli", "launch",
                             "launch/sim_arm_reach_async.toml", "--out", str(out), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        log, _ = proc.communicate(timeout=1700)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, log
    summary = json.loads((out / "summary.json").read_text())
    print(json.dumps({k: summary[k] for k in ("env_steps", "updates", "wall_s",
                                              "eval_success_rate", "eval_return")}))
    assert summary["mode"] == "async" and summary["eval_episodes"] >= 20
    assert summary["eval_success_rate"] >= 0.9, summary
    actor = json.loads((out / "actor_actor0.json").read_text())
    assert actor["weight_swaps"] > 10 and actor["loop"]["ticks"] >= summary["env_steps"]
