"""`train --out` never deletes an earlier run unless told (`--overwrite`)."""
import json

from robolearn.cli import main

REACH = "robolearn/ArmReach-v0"


def _train(out, steps, *extra):
    return main(["train", "--env", REACH, "--algo", "sac", "--steps", str(steps), "--learning-starts",
                 str(steps), "--eval-every", "0", "--eval-episodes", "1", "--no-video", "--no-progress",
                 "--out", str(out), *extra])


def test_out_reuse_is_refused_and_keeps_the_run_then_overwrite_replaces_it(tmp_path, capsys):
    out = tmp_path / "reach"
    assert _train(out, 100) == 0
    before = (out / "summary.json").read_text()
    metrics = (out / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert _train(out, 50) == 2
    err = capsys.readouterr().err
    assert "already holds a finished run" in err and "--overwrite" in err
    assert (out / "summary.json").read_text() == before          # nothing deleted
    assert (out / "metrics.jsonl").read_text() == metrics
    assert (out / "checkpoints" / "latest.json").is_file()
    # --resume still continues the same folder
    assert main(["train", "--resume", str(out), "--steps", "150", "--no-video", "--no-progress"]) == 0
    assert json.loads((out / "summary.json").read_text())["env_steps"] == 150
    assert main(["train", "--resume", str(out), "--overwrite"]) == 2
    # told to: the earlier run is replaced
    assert _train(out, 50, "--overwrite") == 0
    assert json.loads((out / "summary.json").read_text())["env_steps"] == 50
