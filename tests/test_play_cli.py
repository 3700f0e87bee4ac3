"""`robolearn play`: steps envs with each driver, prints per-episode lines, writes an MP4."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from robolearn.cli import main


def test_play_scripted_reach(capsys):
    assert main(["play", "robolearn/ArmReach-v0", "--driver", "scripted", "--episodes", "3", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    lines = re.findall(r"episode (\d+): return (-?[\d.]+)  success (True|False)  length (\d+)", out)
    assert [int(l[0]) for l in lines] == [0, 1, 2]
    assert all(l[2] == "True" for l in lines)  # the IK controller solves reach
    assert "success rate 1.00" in out


@pytest.mark.parametrize("driver", ["random", "zero", "ik", "pure_pursuit"])
def test_play_drivers(driver, capsys):
    assert main(["play", "robolearn/ArmLift-v0", "--driver", driver, "--steps", "4"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"episode 0: return (-?[\d.]+)  success (True|False)  length (\d+)", out)
    assert m and int(m.group(3)) == 4


def test_play_zero_holds_random_moves(capsys):
    main(["play", "robolearn/ArmReach-v0", "--driver", "zero", "--steps", "10", "--seed", "1"])
    zero = float(re.search(r"return (-?[\d.]+)", capsys.readouterr().out).group(1))
    main(["play", "robolearn/ArmReach-v0", "--driver", "random", "--steps", "10", "--seed", "1"])
    rand = float(re.search(r"return (-?[\d.]+)", capsys.readouterr().out).group(1))
    assert zero != rand


def test_play_video(tmp_path, capsys):
    import imageio.v2 as imageio

    out = tmp_path / "sub" / "lift.mp4"
    assert main(["play", "robolearn/ArmLift-v0", "--driver", "random", "--steps", "5",
                 "--episodes", "2", "--video", str(out)]) == 0
    assert out.exists() and out.stat().st_size > 1000
    reader = imageio.get_reader(str(out))
    frames = [f for f in reader]
    reader.close()
    assert len(frames) == 2 * (5 + 1)  # reset frame + one per step, per episode
    assert frames[0].shape == (240, 320, 3)
    assert np.asarray(frames[0]).std() > 5


def test_play_pixels_obs(capsys):
    assert main(["play", "robolearn/ArmReach-v0", "--obs", "pixels", "--steps", "2"]) == 0


@pytest.mark.parametrize("env_id", ["robolearn/CarLap-v0", "robolearn/dmc-cheetah-run-v0"])
def test_play_other_family(env_id, capsys):
    """Works for any registered env, not only the arm."""
    assert main(["play", env_id, "--steps", "3"]) == 0
    assert "episode 0:" in capsys.readouterr().out


def test_play_errors(tmp_path, capsys):
    assert main(["play", "robolearn/ArmReach-v9"]) == 2
    err = capsys.readouterr().err
    assert "unknown env" in err and "robolearn/ArmReach-v0" in err
    assert main(["play", "robolearn/ArmReach-v0", "--episodes", "0"]) == 2
    assert main(["play", "robolearn/ArmReach-v0", "--video", str(tmp_path / "x.gif")]) == 2
    assert ".mp4" in capsys.readouterr().err
    assert main(["play", "robolearn/ArmReach-v0", "--driver", "scripted", "--steps", "2"]) == 0


def test_play_console_script():
    script = os.path.join(os.path.dirname(sys.executable), "robolearn")
    cmd = [script] if os.path.exists(script) else [sys.executable, "-m", "robolearn.cli"]
    r = subprocess.run(cmd + ["play", "robolearn/ArmReach-v0", "--steps", "3"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "episode 0:" in r.stdout
    r = subprocess.run(cmd + ["play", "--help"], capture_output=True, text=True, timeout=120)
    assert "--driver" in r.stdout and "--video" in r.stdout
