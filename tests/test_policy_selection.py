"""`[finetune] final_policy = "reward"`: the final evaluation runs the policy snapshot whose
training episodes the session's reward called successful without the operator most often,
never judged by the emulator's truth (robolearn/runtime/policy_selection.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from robolearn.errors import DatasetError
from robolearn.runtime.policy_selection import choose_policy, wilson_lower
from robolearn.runtime.snapshots import FILES, SNAPSHOTS, keep_policy_snapshot


def _run(tmp_path: Path, episodes: list[tuple[int, bool, int, bool]], snapshots: list[int], last: int) -> Path:
    """A run folder: episodes (steps, reward success, interventions, true success) in order,
    policy snapshots at the given env steps and the learner's last checkpoint."""
    run = tmp_path / "run"
    (run / "episodes").mkdir(parents=True)
    (run / "episodes" / "meta.json").write_text("{}")
    for i, (steps, success, interventions, truth) in enumerate(episodes):
        d = run / "episodes" / f"episode_{i:06d}"
        d.mkdir()
        (d / "episode.json").write_text(json.dumps({"index": i, "steps": steps, "success": success,
                                                    "interventions": interventions, "true_success": truth}))
    for step in snapshots:
        d = run / SNAPSHOTS / f"step_{step:09d}"
        d.mkdir(parents=True)
        for f in FILES:
            (d / f).write_text("{}")
    ck = run / "checkpoints" / f"step_{last:09d}"
    ck.mkdir(parents=True)
    (ck / "trainer.json").write_text("{}")
    (run / "checkpoints" / "latest.json").write_text(json.dumps({"checkpoint": ck.name, "env_steps": last}))
    return run


def test_the_snapshot_whose_episodes_the_reward_called_lifted_alone_is_chosen(tmp_path):
    # 40 episodes of 50 steps (2000 env steps): alone successes only around env step 1000;
    # the truth says the late episodes lifted (and the reward missed them): it must not count
    eps = [(50, 900 <= 50 * i + 25 <= 1100, 0, False) for i in range(40)]
    eps[-8:] = [(50, False, 0, True)] * 8
    eps[5] = (50, True, 3, True)                  # lifted, but the operator drove: not the policy's
    run = _run(tmp_path, eps, [500, 1000, 1500], last=2000)
    path, rep = choose_policy(run, 250)
    assert rep["chosen_env_step"] == 1000 and path == run / SNAPSHOTS / "step_000001000"
    row = {r["env_step"]: r for r in rep["candidates"]}
    assert row[1000]["alone_successes"] == 4 and row[1000]["episodes"] == 10
    assert row[500]["alone_successes"] == 0 and row[2000]["score"] == 0.0
    assert rep["last_env_step"] == 2000 and set(row) == {500, 1000, 1500, 2000}


def test_ties_go_to_the_later_policy_and_thin_windows_get_no_score(tmp_path):
    eps = [(100, True, 0, True)] * 20             # every episode lifted alone: all tie
    run = _run(tmp_path, eps, [500, 1000], last=2000)
    path, rep = choose_policy(run, 200)
    assert rep["chosen_env_step"] == 2000 and path == run / "checkpoints" / "step_000002000"
    path, rep = choose_policy(run, 100)           # 2-3 episodes a window: no score, the last is run
    assert all(r["score"] is None for r in rep["candidates"]) and rep["chosen_env_step"] == 2000


def test_a_thin_lucky_window_does_not_beat_a_wide_one():
    # lift session 33: 6/11 at step 99 beat 11/21 at step 3504 by the raw rate (0.545 > 0.524)
    assert wilson_lower(6, 11) < wilson_lower(11, 21)
    assert wilson_lower(0, 10) == pytest.approx(0.0, abs=1e-12) and wilson_lower(10, 10) < 1.0
    assert wilson_lower(5, 10, z=0.0) == pytest.approx(0.5)
    for k, n in ((1, 5), (7, 17), (13, 22)):       # always below the rate, and above 0 with a success
        assert 0.0 < wilson_lower(k, n) < k / n


def _trainer(path: Path, updates: int, frozen: int) -> None:
    (path / "trainer.json").write_text(json.dumps(
        {"env_steps": 0, "updates": updates, "launch": {"learner": {"agent": {"actor_frozen_updates": frozen}}}}))


def test_a_snapshot_of_the_still_frozen_actor_does_not_compete(tmp_path):
    # 6/11 around step 100 (the pretrained actor's weights: 500 updates of 1000 frozen), 11/21
    # around 1100; then 6/11 again around 2100 with the actor trained: the wide window wins
    eps = [(50, i % 2 == 0, 0, True) for i in range(11)] + [(50, False, 0, False)] * 9
    eps += [(50, i < 11, 0, True) for i in range(21)] + [(50, False, 0, False)] * 9
    run = _run(tmp_path, eps, [250, 1300], last=2500)
    _trainer(run / SNAPSHOTS / "step_000000250", 500, 1000)
    _trainer(run / SNAPSHOTS / "step_000001300", 6500, 1000)
    path, rep = choose_policy(run, 300)
    row = {r["env_step"]: r for r in rep["candidates"]}
    assert row[250]["actor_trained"] is False and row[250]["score"] is None and row[250]["alone_successes"] >= 6
    assert row[1300]["actor_trained"] is True and row[1300]["score"] is not None
    assert rep["chosen_env_step"] == 1300 and path == run / SNAPSHOTS / "step_000001300"
    _trainer(run / SNAPSHOTS / "step_000000250", 1500, 1000)    # trained after all: it competes
    _, rep = choose_policy(run, 300)
    assert {r["env_step"]: r for r in rep["candidates"]}[250]["score"] is not None
    _trainer(run / SNAPSHOTS / "step_000000250", 500, 0)        # nothing frozen: every snapshot trained
    _, rep = choose_policy(run, 300)
    assert {r["env_step"]: r for r in rep["candidates"]}[250]["actor_trained"] is True


def test_an_unfinished_snapshot_is_not_a_candidate_and_no_episodes_is_an_error(tmp_path):
    run = _run(tmp_path, [(50, True, 0, True)] * 12, [250], last=600)
    (run / SNAPSHOTS / "step_000000300.tmp").mkdir()
    half = run / SNAPSHOTS / "step_000000350"
    half.mkdir()
    (half / "trainer.json").write_text("{}")     # no policy.safetensors: never loaded
    _, rep = choose_policy(run, 300)
    assert [r["env_step"] for r in rep["candidates"]] == [250, 600]
    empty = _run(tmp_path / "e", [], [250], last=600)
    with pytest.raises(DatasetError, match="no recorded episodes"):
        choose_policy(empty, 300)


def test_keep_policy_snapshot_copies_what_load_policy_reads(tmp_path):
    ck = tmp_path / "checkpoints" / "step_000000700"
    ck.mkdir(parents=True)
    for f in FILES:
        (ck / f).write_text(f)
    (ck / "agent.safetensors").write_text("big")
    out = keep_policy_snapshot(ck, tmp_path)
    assert out == tmp_path / SNAPSHOTS / "step_000000700"
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert (out / "trainer.json").read_text() == "trainer.json"
