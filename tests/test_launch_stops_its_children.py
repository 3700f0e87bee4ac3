"""SIGKILL of `robolearn launch` leaves no learner/actor running as orphans."""
import json
import os
import signal
import time

from tests.test_actor_learner import metrics, procs, wait_for, write_toml  # noqa: F401


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"   # a zombie has exited
    except FileNotFoundError:
        return False


def test_sigkill_of_launch_stops_its_children(tmp_path, procs):  # noqa: F811
    toml, out = write_toml(tmp_path, port=0, wport=0)
    launch = procs.start("launch", str(toml), "--quiet", name="launch")
    wait_for(lambda: any(m["env_steps"] > 0 for m in metrics(out)), 60, "run started", [launch])
    pids = [c["pid"] for c in json.loads((out / "launch.json").read_text())["children"].values()]
    assert pids and all(_alive(p) for p in pids)
    try:
        os.killpg(launch.pid, signal.SIGKILL)  # the launcher only: children have their own groups
        launch.wait()
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in pids if _alive(p)], "children outlived a SIGKILLed launcher"
    finally:
        for p in pids:
            try:
                os.killpg(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
