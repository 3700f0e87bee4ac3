"""Ray as the cluster engine (`[cluster] engine = "ray"`): restarts, vector envs, robot pinning,
the one-line error without Ray, and (slow) ArmReach on a two-node local Ray cluster."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from robolearn.errors import ConfigError
from robolearn.runtime.config import config_from_dict

RAY_MISSING = "engine = \"ray\" needs Ray: pip install 'robolearn[ray]'"

LAUNCH_TOML = """
env = "Pendulum-v1"
max_episode_steps = 50
out = "{out}"
[learner]
port = 0
weights_port = 0
total_env_steps = 300
[cluster]
engine = "{engine}"
"""


def _no_ray(args, tmp_path):
    """Run robolearn with `import ray` failing (as without the extra installed)."""
    code = ("import sys; sys.modules['ray'] = None; from robolearn.cli import main; "
            f"sys.exit(main({args!r}))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)


@pytest.mark.parametrize("how", ["file", "flag"])
def test_engine_ray_without_ray_is_one_line(tmp_path, how):
    toml = tmp_path / "l.toml"
    toml.write_text(LAUNCH_TOML.format(out=tmp_path / "run", engine="ray" if how == "file" else "local"))
    args = ["launch", str(toml)] + (["--engine", "ray"] if how == "flag" else [])
    p = _no_ray(args, tmp_path)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == f"robolearn launch: error: {RAY_MISSING}", p.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_bench_learners_engine_ray_without_ray_is_one_line(tmp_path):
    p = _no_ray(["bench", "learners", "--steps", "10", "--seeds", "0", "--no-speed", "--engine", "ray",
                 "--out", str(tmp_path / "b")], tmp_path)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == f"robolearn bench: error: {RAY_MISSING}", p.stderr


def test_cluster_table_is_checked():
    base = {"env": "Pendulum-v1"}
    assert config_from_dict(base).cluster.engine == "local"
    with pytest.raises(ConfigError, match="cluster.engine"):
        config_from_dict({**base, "cluster": {"engine": "slurm"}})
    with pytest.raises(ConfigError, match="envs_per_actr"):
        config_from_dict({**base, "cluster": {"envs_per_actr": 2}})
    with pytest.raises(ConfigError, match="envs_per_actor"):
        config_from_dict({**base, "cluster": {"envs_per_actor": 0}})
    # an actor that drives hardware: one env, and (below) never restarted
    hw = {**base, "env_kwargs": {"backend": "real", "port": "/dev/ttyUSB0"}}
    assert config_from_dict(hw).drives_hardware()
    assert not config_from_dict(base).drives_hardware()
    with pytest.raises(ConfigError, match="envs_per_actor > 1"):
        config_from_dict({**hw, "cluster": {"envs_per_actor": 2}})


def test_robot_actor_options_pin_and_never_restart():
    from robolearn.runtime.ray_cluster import RayRun

    hw = config_from_dict({"env": "Pendulum-v1", "env_kwargs": {"backend": "real", "port": "/dev/x"},
                           "cluster": {"engine": "ray", "robot": "arm0", "max_restarts": 5}})
    opts = RayRun(hw)._actor_options({"CPU": 2, "robot:arm0": 1})
    assert opts["resources"] == {"robot:arm0": 1}
    assert opts["max_restarts"] == 0 and opts["max_task_retries"] == 0
    with pytest.raises(ConfigError, match="robot:arm0"):  # no node has the robot
        RayRun(hw)._actor_options({"CPU": 2})
    two = config_from_dict({"env": "Pendulum-v1", "actors": 2, "env_kwargs": {"port": "/dev/x"},
                            "cluster": {"engine": "ray", "robot": ["arm0", "arm1"]}})
    have = {"CPU": 2, "robot:arm0": 1, "robot:arm1": 1}
    assert [RayRun(two)._actor_options(have, i)["resources"] for i in range(2)] == [
        {"robot:arm0": 1}, {"robot:arm1": 1}]
    with pytest.raises(ConfigError, match="one actor per robot"):
        RayRun(hw.__class__(**{**hw.__dict__, "actors": 2}))._actor_options(have, 0)
    sim = config_from_dict({"env": "Pendulum-v1", "cluster": {"engine": "ray", "max_restarts": 5}})
    opts = RayRun(sim)._actor_options({"CPU": 2})
    assert opts["max_restarts"] == 5 and opts["scheduling_strategy"] == "SPREAD"
    assert "resources" not in opts
    assert RayRun(sim)._learner_options({"CPU": 2, "GPU": 1})["num_gpus"] == 1
    assert RayRun(sim)._learner_options({"CPU": 2})["num_gpus"] == 0


@pytest.fixture
def ray_local():
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=80 * 1024 * 1024,
             logging_level="warning")
    yield ray
    ray.shutdown()


def _wait(cond, timeout, what):
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        v = cond()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _metrics(out):
    try:
        return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    except (OSError, ValueError):
        return []


def test_ray_restarts_a_killed_sim_actor_and_training_goes_on(tmp_path, ray_local):
    """Learner + 2 sim actors (actor1 a vector of 2 envs) on Ray: SIGKILL actor1's process;
    Ray restarts it (new pid), the learner keeps training from actor0 meanwhile, and the
    restarted actor streams again until the run ends."""
    from robolearn.runtime.ray_cluster import RayRun

    out = tmp_path / "run"
    cfg = config_from_dict({
        "env": "Pendulum-v1", "max_episode_steps": 50, "actors": 2, "out": str(out),
        "learner": {"port": 0, "weights_port": 0, "total_env_steps": 4000, "learning_starts": 100,
                    "eval_episodes": 2, "metrics_every_s": 0.3, "actor_timeout_s": 1.0,
                    "agent": {"batch_size": 32, "actor_hidden": [32, 32], "critic_hidden": [32, 32]}},
        "actor": {"loop_hz": 100, "heartbeat_s": 0.1, "send_batch": 8, "realtime": False},
        "cluster": {"engine": "ray", "envs_per_actor": 2, "actor_cpus": 0.5, "learner_cpus": 0.5}})
    run = RayRun(cfg, out).start()
    try:
        def streaming(names):
            for m in reversed(_metrics(out)):
                pa = m.get("per_actor", {})
                if all(pa.get(n, {}).get("transitions", 0) > 30 for n in names):
                    return m
            return None

        names = ["actor0.e0", "actor0.e1", "actor1.e0", "actor1.e1"]
        _wait(lambda: streaming(names), 60, "both actors (2 envs each) streaming")
        old_pid = run.pid("actor1")
        os.kill(old_pid, signal.SIGKILL)
        before = streaming(names)
        rec = run.wait(timeout_s=180)
    finally:
        run.shutdown()
    assert rec["restarts"]["actor1"] >= 1, rec["restarts"]
    assert rec["workers"]["actor1"]["pid"] != old_pid and rec["workers"]["actor1"]["reconstructed"]
    assert rec["restarts"]["actor0"] == 0 and not rec["failed"], rec["failed"]
    s = rec["summary"]
    assert s["exit_reason"] == "total_env_steps reached" and s["env_steps"] >= 4000
    # both of actor1's envs streamed again after the restart
    for n in ("actor1.e0", "actor1.e1"):
        assert s["per_actor"][n]["transitions"] > before["per_actor"][n]["transitions"], s["per_actor"]
    assert rec["actor_results"]["actor1"]["exit_reason"] == "learner finished"
    assert rec["actor_results"]["actor1"]["envs"] == 2


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_two_node_cluster_learns_arm_reach_through_an_actor_restart(tmp_path):
    """The issue's check: a local 2-node Ray cluster, learner + 2 sim actors on ArmReach (SAC);
    one actor's process is SIGKILLed mid-run, Ray restarts it, and the run still reaches
    >= 90% eval success."""
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from robolearn.runtime.ray_cluster import RayRun
    from robolearn.runtime.config import load_launch

    cluster = Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=1, object_store_memory=80 * 1024 * 1024, include_dashboard=False))
    cluster.add_node(num_cpus=2, object_store_memory=80 * 1024 * 1024)
    import ray

    ray.init(address=cluster.address, logging_level="warning")
    out = tmp_path / "run"
    # the two-actor launch file with the plain sac preset (docs/bench/default: 90% eval success
    # first reached at 5-10k env steps in 5/5 seeds) and 12k env steps
    cfg = load_launch("launch/sim_arm_reach_two_actors.toml")
    cfg.out = str(out)
    cfg.learner.agent = {}
    cfg.learner.learning_starts = 1000
    cfg.learner.total_env_steps = 12000
    cfg.learner.checkpoint_every = 0
    cfg.actor.loop_hz = 25  # per actor: 50 transitions/s in all, about the learner's update rate
    cfg.actor.realtime = False
    cfg.cluster.engine = "ray"
    cfg.cluster.actor_cpus = 1
    cfg.cluster.learner_cpus = 1
    cfg.validate()
    try:
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        run = RayRun(cfg, out).start()
        try:
            _wait(lambda: any(m.get("env_steps", 0) > 2000 for m in _metrics(out)), 300,
                  "2000 env steps")
            old_pid = run.pid("actor0")
            os.kill(old_pid, signal.SIGKILL)
            rec = run.wait(timeout_s=900)
        finally:
            run.shutdown()
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert rec["restarts"]["actor0"] >= 1 and rec["workers"]["actor0"]["pid"] != old_pid
    assert len({w["node_id"] for w in rec["workers"].values()}) == 2  # spread over both nodes
    s = rec["summary"]
    assert s["env_steps"] >= 12000
    assert s["eval_success_rate"] >= 0.9, s


def test_bench_learners_on_ray_gives_the_sequential_numbers(tmp_path):
    """Seeds as Ray tasks reproduce the sequential run field by field (short budget)."""
    pytest.importorskip("ray")
    common = ["bench", "learners", "--steps", "300", "--seeds", "0", "1", "--eval-every", "150",
              "--eval-episodes", "2", "--learning-starts", "100", "--no-speed"]
    results = {}
    for engine in ("local", "ray"):
        out = tmp_path / engine
        p = subprocess.run([sys.executable, "-m", "robolearn.cli", *common, "--engine", engine,
                            "--out", str(out)], capture_output=True, text=True, timeout=400)
        assert p.returncode == 0, p.stderr[-3000:]
        results[engine] = json.loads((out / "results.json").read_text())["runs"]
    assert [r["seed"] for r in results["ray"]] == [0, 1]
    for seq, par in zip(results["local"], results["ray"]):
        for key in ("env_steps", "updates", "eval_return", "eval_success_rate", "curve"):
            assert seq[key] == par[key], (seq["seed"], key, seq[key], par[key])
    # the two seeds differ, so equality above is not a constant
    assert results["local"][0]["curve"] != results["local"][1]["curve"]
