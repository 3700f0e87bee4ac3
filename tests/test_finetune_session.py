"""`robolearn finetune`: a session from a pretrained checkpoint, and its faults (learner killed,
Ctrl-C) — each must keep the robot held, the recording whole, and the session resumable."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from robolearn.data.dataset import Dataset

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args, **kw):
    return [sys.executable, "-m", "robolearn.cli", *args]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    out = tmp_path_factory.mktemp("pre") / "reach"
    subprocess.run(_cli("train", "--env", "robolearn/ArmReach-v0", "--algo", "sac", "--steps", "300",
                        "--out", str(out), "--eval-episodes", "1", "--no-video"),
                   check=True, cwd=ROOT, capture_output=True, timeout=300)
    return out


def _launch(tmp_path, pretrained, steps=400, **ft) -> Path:
    extra = "\n".join(f"{k} = {json.dumps(v)}" for k, v in ft.items())
    path = tmp_path / "ft.toml"
    path.write_text(f"""
env = "robolearn/ArmReach-v0"
algo = "sac"
out = "{tmp_path / 'session'}"
[learner]
port = 0
weights_port = 0
total_env_steps = {steps}
checkpoint_every = 50
[actor]
loop_hz = 100
learner_timeout_s = 1.0
realtime = false
[finetune]
checkpoint = "{pretrained}"
warmup_episodes = 1
zero_shot_episodes = 2
final_episodes = 2
{extra}
""")
    return path


def _episodes_ok(root: Path) -> int:
    ds = Dataset(root)
    for i in range(len(ds)):
        ep = ds.episode(i)
        assert ep.steps > 0
    return len(ds)


def test_session_runs_and_reports(tmp_path, pretrained):
    launch = _launch(tmp_path, pretrained, steps=200)
    r = subprocess.run(_cli("finetune", str(launch), "--quiet"), cwd=ROOT, capture_output=True,
                       text=True, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    run = tmp_path / "session"
    rep = json.loads((run / "session_report.json").read_text())
    assert rep["zero_shot"]["episodes"] == 2 and rep["final"]["episodes"] == 2
    assert rep["warm_start"] == "wsrl" and rep["learner_summary"]["finetune"]["warmup_steps"] == 50
    assert rep["episodes"] == _episodes_ok(run / "episodes") >= 3
    assert (run / "session_report.png").stat().st_size > 1000
    assert rep["budget_robot_minutes"] == pytest.approx(200 / 10 / 60, abs=0.01)
    # never a random action on the robot: the first episode acted with the pretrained policy
    actor = json.loads((run / "actor_robot0.json").read_text())
    assert actor["weights_received"] >= 1
    # the UTD as trained is reported beside the configured one (issue 23: updates per control step)
    ls = rep["learner_summary"]
    assert ls["updates_per_env_step"] == pytest.approx(ls["updates"] / ls["env_steps"], abs=1e-3)
    assert ls["updates_behind_max"] >= 1 and ls["updates_owed"] >= 0


def test_learner_killed_actor_holds_and_session_resumes(tmp_path, pretrained):
    launch = _launch(tmp_path, pretrained, steps=600)
    p = subprocess.Popen(_cli("finetune", str(launch)), cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    out = []
    reader = threading.Thread(target=lambda: out.extend(iter(p.stdout.readline, "")), daemon=True)
    reader.start()  # lines arrive in the background: the kill below must not wait for one
    deadline = time.monotonic() + 300
    run = tmp_path / "session"
    learner_pid = None
    while time.monotonic() < deadline and p.poll() is None:
        m = re.search(r"started learner pid (\d+)", "".join(out))
        learner_pid = int(m.group(1)) if m else None
        if learner_pid and (run / "checkpoints" / "latest.json").exists():
            break
        time.sleep(0.02)
    assert learner_pid and p.poll() is None, "".join(out)
    os.kill(learner_pid, signal.SIGKILL)
    p.wait(timeout=400)
    reader.join(timeout=10)
    text = "".join(out)
    assert p.returncode == 0, text
    assert "restarting the learner from the session's last checkpoint" in text
    rep = json.loads((run / "session_report.json").read_text())
    assert rep["learner_restarts"] == 1
    assert "resumed_at_env_step" in rep["learner_summary"]["finetune"]
    assert rep["learner_summary"]["env_steps"] >= 600
    actor = json.loads((run / "actor_robot0.json").read_text())
    assert actor["paused_ticks"] > 0          # held the robot while the learner was away
    assert actor["reconnects"] >= 1
    assert rep["episodes"] == _episodes_ok(run / "episodes")


def test_ctrl_c_leaves_checkpoint_and_complete_dataset(tmp_path, pretrained):
    launch = _launch(tmp_path, pretrained, steps=100_000)
    p = subprocess.Popen(_cli("finetune", str(launch)), cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    run = tmp_path / "session"
    deadline = time.monotonic() + 300
    out = []
    while time.monotonic() < deadline:
        out.append(p.stdout.readline())
        if (run / "episodes" / "episode_000002").exists() and (run / "checkpoints" / "latest.json").exists():
            break
    p.send_signal(signal.SIGINT)
    rest, _ = p.communicate(timeout=120)
    text = "".join(out) + rest
    assert p.returncode == 130, text
    assert (run / "checkpoints" / "latest.json").exists()
    assert not list((run / "episodes").glob(".tmp-*"))
    n = _episodes_ok(run / "episodes")
    rep = json.loads((run / "session_report.json").read_text())
    assert rep["episodes"] == n >= 3 and rep["stopped_by_signal"] == signal.SIGINT
    summary = json.loads((run / "summary.json").read_text())
    assert summary["exit_reason"] == "stopped"


def _children(pid: int) -> list[int]:
    """Direct children of `pid`, from /proc (Linux)."""
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(d.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("reality", [None, "mild"])
def test_sigkill_of_finetune_stops_learner_actor_and_emulator(tmp_path, pretrained, reality):
    """As for `launch` (test_launch_stops_its_children.py), for the other launcher: a SIGKILLed `finetune` must
    not leave its learner, actor and emulated robot (a `robolearn emulate` process) running."""
    launch = _launch(tmp_path, pretrained, steps=100_000, **({"reality": reality} if reality else {}))
    p = subprocess.Popen(_cli("finetune", str(launch)), cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    out = []
    reader = threading.Thread(target=lambda: out.extend(iter(p.stdout.readline, "")), daemon=True)
    reader.start()
    kids: list[int] = []
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and p.poll() is None and "started actor pid" not in "".join(out):
            time.sleep(0.05)
        assert p.poll() is None, "".join(out)
        kids = _children(p.pid)
        assert len(kids) == (3 if reality else 2), (kids, "".join(out))  # learner, actor (+ emulator)
        p.kill()
        p.wait(10)
        deadline = time.monotonic() + 30
        while any(_alive(k) for k in kids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [k for k in kids if _alive(k)], "children outlived a SIGKILLed finetune"
    finally:
        if p.poll() is None:
            p.kill()
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_bad_launch_files(tmp_path, pretrained):
    from robolearn.errors import ConfigError
    from robolearn.runtime import finetune as F
    from robolearn.runtime.config import config_from_dict, load_launch

    with pytest.raises(ConfigError, match="warm_start"):
        config_from_dict({"finetune": {"checkpoint": "x", "warm_start": "magic"}})
    with pytest.raises(ConfigError, match="prior_data"):
        config_from_dict({"finetune": {"checkpoint": "x", "warm_start": "rlpd"}})
    with pytest.raises(ConfigError, match="final_policy"):
        config_from_dict({"finetune": {"checkpoint": "x", "final_policy": "best"}})
    with pytest.raises(ConfigError, match="record = true"):
        config_from_dict({"finetune": {"checkpoint": "x", "final_policy": "reward", "record": False}})
    with pytest.raises(ConfigError, match="snapshot_every"):
        config_from_dict({"finetune": {"checkpoint": "x", "final_policy": "reward", "snapshot_every": 0}})
    cfg = load_launch(_launch(tmp_path, pretrained))
    cfg.algo = "redq"
    with pytest.raises(ConfigError, match="networks must match"):
        F.resolve_agent(cfg)
    cfg = load_launch(_launch(tmp_path, tmp_path / "nope"))
    from robolearn.errors import DatasetError
    with pytest.raises(DatasetError, match="not found"):
        F.resolve_agent(cfg)
    r = subprocess.run(_cli("finetune", str(ROOT / "launch/sim_arm_reach_async.toml")), cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no [finetune] table" in r.stderr


def test_session_calibrates_the_emulated_arm_before_the_zero_shot(tmp_path, pretrained):
    """finetune.calibrate_arm: the stop calibration runs on the freshly started emulated arm
    (hard reality: hidden encoder offsets) through the actor's port; every robot env of the
    session then reads RUN/arm_calibration.json."""
    from robolearn.drivers.calibration import RAD_PER_TICK, Calibration
    from robolearn.drivers.reality import load_reality

    launch = _launch(tmp_path, pretrained, reality="hard", calibrate_arm=True)
    r = subprocess.run(_cli("finetune", str(launch), "--zero-shot-only", "--quiet"), cwd=ROOT,
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    run = tmp_path / "session"
    rep = json.loads((run / "session_report.json").read_text())
    cal = Calibration.load(run / "arm_calibration.json")
    assert rep["arm_calibration"]["file"] == str(run / "arm_calibration.json")
    assert set(rep["arm_calibration"]["joints"]) == set(cal.names)
    hidden = load_reality("hard").arm.joint_offsets_rad
    for name, off in zip(cal.names, hidden):
        assert abs((cal[name].offset - 2048) * RAD_PER_TICK - off) < 0.004, (name, cal[name])
    assert rep["zero_shot"]["episodes"] == 2 and rep["zero_shot"]["true_success_rate"] is not None
    resolved = (run / "finetune_launch.toml").read_text()
    assert "arm_calibration.json" in resolved           # what the actor would have read
    assert rep["episodes"] == 0 and not (run / "episodes").exists()


def test_calibrate_arm_needs_an_arm_and_a_robot(tmp_path, pretrained):
    from robolearn.errors import ConfigError
    from robolearn.runtime.config import config_from_dict, load_launch
    from robolearn.runtime.finetune_calibration import calibrate_robot_arm

    with pytest.raises(ConfigError, match="calibrate_arm is for servo arms"):
        config_from_dict({"env": "robolearn/CarLap-v0", "finetune": {"checkpoint": "x", "calibrate_arm": True}})
    cfg = load_launch(_launch(tmp_path, pretrained, calibrate_arm=True))   # sim backend: no robot
    with pytest.raises(ConfigError, match="needs the robot"):
        calibrate_robot_arm(cfg, tmp_path)


def test_load_agent_keeps_the_launch_files_learning_rates(pretrained):
    """`load = "agent"` restores the optimisers' moments, and with them the pretrained run's
    learning rates: a launch file's `actor_lr` was silently replaced by the checkpoint's 3e-4
    (push session 7, docs/bench/finetune/README.md). The agent's own options decide."""
    import gymnasium as gym

    from robolearn.policies.registry import make_agent
    from robolearn.runtime.finetune import load_pretrained

    env = gym.make("robolearn/ArmReach-v0")
    agent = make_agent("sac", env.observation_space, env.action_space, actor_lr=3e-5, critic_lr=1e-4,
                       temperature_lr=2e-4, adam_beta1=0.5)
    load_pretrained(agent, pretrained, "agent")
    assert [g["lr"] for g in agent.actor_opt.param_groups] == [3e-5, 2e-4]
    assert [g["lr"] for g in agent.critic_opt.param_groups] == [1e-4]
    assert all(g["betas"] == (0.5, 0.999) for g in agent.actor_opt.param_groups + agent.critic_opt.param_groups)


def test_load_policy_carries_the_pretrained_temperature_unless_the_launch_file_sets_one(pretrained, tmp_path):
    """`load = "policy"`: the actor was tuned at its run's temperature; starting it at the
    preset's 0.1 widened the sampled actions on the robot (the car's practice stalled). An
    explicit `init_temperature` wins; `none` keeps the preset's."""
    import math

    import torch

    from robolearn.policies.checkpoints import find_checkpoint
    from robolearn.policies.serialize import load_state
    from robolearn.runtime.finetune import load_pretrained
    from robolearn.policies.registry import make_agent
    import gymnasium as gym

    import shutil

    from robolearn.policies.serialize import save_state

    # the short fixture run never moved its temperature: give a copy the one a long run ends at
    pretrained = Path(shutil.copytree(pretrained, tmp_path / "pre"))
    ckpt = find_checkpoint(pretrained / "checkpoints")
    state = load_state(ckpt / "agent.safetensors")
    state["log_alpha"] = torch.tensor(math.log(0.004))
    save_state(ckpt / "agent.safetensors", state)
    saved = 0.004
    env = gym.make("robolearn/ArmReach-v0")

    def fresh(**kw):
        return make_agent("sac", env.observation_space, env.action_space, **kw)

    agent = fresh()
    assert agent.alpha == pytest.approx(0.1, rel=1e-6) and saved != pytest.approx(0.1, rel=1e-3)
    assert load_pretrained(agent, pretrained, "policy") == pytest.approx(saved, rel=1e-6)
    assert agent.alpha == pytest.approx(saved, rel=1e-6)
    # the actor's weights came too; the critic did not (a fresh one)
    policy = load_state(ckpt / "agent.safetensors")["actor"]
    for k, v in agent.actor.state_dict().items():
        torch.testing.assert_close(v, policy[k])
    explicit = fresh(init_temperature=0.02)
    assert load_pretrained(explicit, pretrained, "policy", keep_temperature=False) is None
    assert explicit.alpha == pytest.approx(0.02, rel=1e-6)
    scratch = fresh()
    assert load_pretrained(scratch, pretrained, "none") is None and scratch.alpha == pytest.approx(0.1, rel=1e-6)
    assert math.isfinite(load_pretrained(fresh(), pretrained, "agent"))
    env.close()


def test_a_restarted_learner_keeps_the_session_step_count_and_owes_its_updates(tmp_path, pretrained):
    """Found by the 120-minute soak: a learner restarted after a kill loaded its checkpoint's
    env-step count, then zeroed it. Its UTD pacing (updates owed = UTD x env steps - updates done)
    then owed nothing until the actors had sent every step of the session again, so it trained
    not at all for as long as the session had run, and named its checkpoints from the zeroed count."""
    from robolearn.runtime.config import load_launch
    from robolearn.runtime.learner import Learner

    cfg = load_launch(_launch(tmp_path, pretrained, steps=2000))
    run = tmp_path / "session"
    first = Learner(cfg, run_dir=run)
    env = first.env
    obs, _ = env.reset(seed=0)
    for t in range(300):  # the session so far: 300 robot steps, stored as the actors send them
        nxt, r, term, trunc, _ = env.step(env.action_space.sample())
        first.replay.add(obs, env.action_space.sample(), float(r), nxt, bool(term), bool(trunc or t % 50 == 49))
        obs = nxt if not (term or trunc or t % 50 == 49) else env.reset()[0]
    first.env_steps = 300
    first.agent.num_updates = first.utd * (300 - first.learning_starts + 1)  # caught up
    assert first.updates_due() == 0
    first.save_checkpoint()
    first.env.close()

    again = Learner(cfg, run_dir=run)  # what `finetune` starts after the learner's SIGKILL
    try:
        assert again.finetune_info["resumed_at_env_step"] == 300
        assert again.env_steps == 300 and again.agent.num_updates == first.agent.num_updates
        assert again.updates_due() == 0
        again.env_steps += 10  # the next transitions from the actor are owed their updates at once
        assert again.updates_due() == 10 * again.utd
        assert again.save_checkpoint().name == "step_000000310"
    finally:
        again.env.close()


def test_pace_report_counts_the_updates_a_lagging_learner_still_owes(tmp_path, pretrained):
    """A real-time robot sends 10 steps/s in an episode; at UTD 10 one core falls behind and makes
    it up in the resets. The report must say how far behind it ran and what it still owed, so a
    session's "updates per control step" is the one it trained at, not the configured one."""
    from robolearn.runtime.config import load_launch
    from robolearn.runtime.learner import Learner

    learner = Learner(load_launch(_launch(tmp_path, pretrained, steps=2000)), run_dir=tmp_path / "s")
    try:
        learner.bind(0, 0)   # free ports: the slice publishes weights as it trains
        env = learner.env
        obs, _ = env.reset(seed=0)
        for t in range(120):
            nxt, r, term, trunc, _ = env.step(env.action_space.sample())
            learner.replay.add(obs, env.action_space.sample(), float(r), nxt, bool(term), bool(trunc))
            obs = nxt if not (term or trunc) else env.reset()[0]
        learner.env_steps, learner.learning_starts = 120, 0
        owed = learner.updates_due()
        assert owed == learner.utd * (120 - learner.learning_starts + 1) > 1
        done = learner.train_slice(owed, max_seconds=0.0)   # one update, then the slice's time is up
        assert done == 1
        rep = learner.pace_report()
        assert rep["updates_behind_max"] == owed and rep["updates_owed"] == owed - 1
        assert rep["updates_per_env_step"] == pytest.approx(1 / 120, abs=1e-3)
        learner.train_slice(learner.updates_due(), max_seconds=60.0)
        rep = learner.pace_report()
        assert rep["updates_owed"] == 0 and rep["updates_behind_max"] == owed
        assert rep["updates_per_env_step"] == pytest.approx(learner.agent.num_updates / 120, abs=1e-3)
    finally:
        learner.close()


def test_pretraining_replay_gives_the_pretraining_runs_data_a_share_beside_the_rlpd_prior(tmp_path, pretrained):
    """`[finetune] pretraining_replay = true`: the pretrained run's own replay joins the session as
    earlier data, a buffer of its own with 0.25 of every batch beside the rlpd prior's 0.5 (no BC
    on it: it holds the pretraining's exploration). Without it a push session's updates took the
    pretrained actor from 0.95 to 0.6-0.75 in the sim twin, even on sim data
    (docs/bench/finetune/README.md, "Push sessions 9-12"). With warm_start other than rlpd it is an error."""
    from robolearn.data.replay import MixedSampler
    from robolearn.errors import ConfigError
    from robolearn.policies.checkpoints import find_checkpoint
    from robolearn.runtime.config import load_launch
    from robolearn.runtime.learner import Learner

    stored = json.loads((find_checkpoint(pretrained) / "replay" / "meta.json").read_text())["count"]
    for keep in (True, False):
        cfg = load_launch(_launch(tmp_path, pretrained, warm_start="rlpd", prior_data="sim:2",
                                  pretraining_replay=keep))
        learner = Learner(cfg, run_dir=tmp_path / f"session_{keep}")
        try:
            assert isinstance(learner.sampler, MixedSampler) and learner.sampler.prior is learner.prior
            learner.replay.add(*_one_transition(learner.env))
            if keep:
                assert len(learner.earlier) == stored and learner.sampler.earlier is learner.earlier
                assert learner.finetune_info["earlier_transitions"] == stored
                assert learner.sampler.rows(256) == (64, 128, 64)
                batch = learner.sampler.sample(256)
                assert int(batch.prior.sum()) == 128   # the BC rows: the rlpd prior's only
            else:
                assert learner.earlier is None and "earlier_transitions" not in learner.finetune_info
                assert learner.sampler.rows(256) == (128, 128, 0)
        finally:
            learner.env.close()
    with pytest.raises(ConfigError, match="pretraining_replay"):
        load_launch(_launch(tmp_path, pretrained, warm_start="wsrl", pretraining_replay=True))


def _one_transition(env):
    obs, _ = env.reset(seed=0)
    a = env.action_space.sample()
    nxt, r, term, trunc, _ = env.step(a)
    return obs, a, float(r), nxt, bool(term), bool(trunc)


def test_the_push_camera_reward_means_the_sim_tasks_stored_reward():
    """A sim run's stored ArmPush rewards are the task's function at the true cube; the robot's
    `kind = "cube_finder"` reward is the same function at the camera's cube: prior runs load
    unrelabelled. Another reward model (a classifier) still does not match."""
    from robolearn.policies.prior_runs import reward_definition

    sim = reward_definition("robolearn/ArmPush-v0", {}, {})
    assert reward_definition("robolearn/ArmPush-v0", {"kind": "cube_finder", "model": "F", "where": "env",
                                                      "hidden": "last_seen"}, {}) == sim
    assert reward_definition("robolearn/ArmPush-v0", {"kind": "classifier", "model": "F"}, {}) != sim


def test_eval_actions_sampled_acts_as_in_training_in_both_evaluations(tmp_path, pretrained):
    """`[finetune] eval_actions = "sampled"`: the zero-shot and the final evaluation draw actions
    as the training episodes do (the fine-tuned push actor's mean dithers where its samples
    succeed, docs/bench/finetune/README.md "Push sessions 9-12"); "mean" (the default) repeats
    exactly; the report says which."""
    from robolearn.errors import ConfigError
    from robolearn.runtime import finetune as F
    from robolearn.runtime.config import load_launch

    mean_cfg = load_launch(_launch(tmp_path, pretrained))
    sampled_cfg = load_launch(_launch(tmp_path, pretrained, eval_actions="sampled"))
    first, again = (F.evaluate_checkpoint(mean_cfg, pretrained, 2) for _ in range(2))
    sampled = F.evaluate_checkpoint(sampled_cfg, pretrained, 2)
    assert first["actions"] == "mean" and sampled["actions"] == "sampled"
    assert first["return"] == again["return"] and sampled["return"] != first["return"]
    with pytest.raises(ConfigError, match="eval_actions"):
        load_launch(_launch(tmp_path, pretrained, eval_actions="greedy"))


def test_final_policy_reward_keeps_snapshots_and_evaluates_the_chosen_one(tmp_path, pretrained):
    """`final_policy = "reward"`: the learner keeps a policy snapshot every `snapshot_every` env
    steps and the final evaluation loads the one the report's `policy_selection` names."""
    launch = _launch(tmp_path, pretrained, steps=200, final_policy="reward", snapshot_every=50)
    r = subprocess.run(_cli("finetune", str(launch), "--quiet"), cwd=ROOT, capture_output=True,
                       text=True, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    run = tmp_path / "session"
    rep = json.loads((run / "session_report.json").read_text())
    kept = sorted(p.name for p in (run / "policy_snapshots").iterdir())
    # >= 2, not 4: a learner behind the actor (a loaded machine) takes in several 50-step spans at
    # once and keeps one snapshot for them (a fresh-clone run beside a session kept 132 and 204)
    assert len(kept) >= 2 and all((run / "policy_snapshots" / k / "policy.safetensors").is_file() for k in kept)
    sel = rep["policy_selection"]
    steps = [c["env_step"] for c in sel["candidates"]]
    assert sel["chosen_env_step"] in steps and steps[-1] == sel["last_env_step"] >= 200
    assert rep["final"]["checkpoint"] == sel["chosen_checkpoint"] and rep["final"]["episodes"] == 2
