"""Issue 14 items 8 and 9 (datasets): appending continues seeds; other-task datasets, truncated
episodes and 10 Hz durations are handled and reported correctly."""
import json

import numpy as np
import pytest

from robolearn.cli import main
from robolearn.data.dataset import Dataset


def _record(out, n, *extra, env="robolearn/ArmReach-v0"):
    return main(["record", env, "--device", "scripted", "--episodes", str(n), "--obs", "state",
                 "--max-steps", "8", "--out", str(out), *extra])


def test_appending_continues_seeds_after_the_last_episode(tmp_path, capsys):
    out = tmp_path / "ds"
    assert _record(out, 2) == 0
    assert _record(out, 2) == 0
    ds = Dataset(out)
    seeds = [e["seed"] for e in ds.meta["episodes"]]
    assert seeds == [0, 1, 2, 3]
    goals = [tuple(np.round(ds.episode(i).data["obs.state"][0], 6)) for i in ds.indices]
    assert len(set(goals)) == 4  # four different episodes, not two recorded twice
    # an explicit --seed that repeats recorded seeds is allowed but said out loud
    capsys.readouterr()
    assert _record(out, 1, "--seed", "1") == 0
    assert "already recorded" in capsys.readouterr().err
