"""Input checks of the CLI and training helpers: module:ID env names, the --set example in
`train --help`, non-UTF-8 launch files, pickled demo arrays, EGL shutdown, the documented
eval-video length."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from robolearn.cli import main
from robolearn.errors import ConfigError, DatasetError


# ------------------------------------------------------------ --env module:EnvId-v0 (Gymnasium syntax)
def test_env_module_colon_id_is_accepted(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_envs_i14.py").write_text(textwrap.dedent('''
        import gymnasium as gym
        if "MyPendulumI14-v0" not in gym.registry:
            gym.register("MyPendulumI14-v0", entry_point="gymnasium.envs.classic_control:PendulumEnv",
                         max_episode_steps=20)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = main(["train", "--env", "my_envs_i14:MyPendulumI14-v0", "--steps", "30", "--learning-starts", "30",
               "--eval-episodes", "1", "--no-video", "--no-progress", "--out", str(tmp_path / "run")])
    assert rc == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["env_steps"] == 30
    # a module that cannot be imported is named
    assert main(["train", "--env", "no_such_mod_i14:X-v0", "--steps", "5", "--out", str(tmp_path / "r2")]) == 2
    assert "no_such_mod_i14" in capsys.readouterr().err


# ------------------------------------------------------------ `train --help` examples must work
def test_train_help_set_example_is_accepted(tmp_path, capsys):
    import re

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    examples = re.findall(r"e\.g\. --set (\w+=[^\s,;)]+)", text)
    assert examples, text
    for ex in examples:
        rc = main(["train", "--env", "Pendulum-v1", "--steps", "5", "--learning-starts", "5",
                   "--eval-episodes", "1", "--no-video", "--no-progress", "--set", ex,
                   "--out", str(tmp_path / ex.replace("=", "_"))])
        assert rc == 0, (ex, capsys.readouterr().err)


# ------------------------------------------------------------ non-UTF-8 launch file
@pytest.mark.parametrize("verb", ["train", "launch", "learner"])
def test_non_utf8_launch_file_is_a_clear_error(tmp_path, capsys, verb):
    f = tmp_path / "latin1.toml"
    f.write_bytes('env = "robolearn/ArmReach-v0"\n# caf\xe9 (Latin-1)\n'.encode("latin-1"))
    assert main([verb, str(f)]) == 2
    err = capsys.readouterr().err
    assert "UTF-8" in err and str(f) in err and "Traceback" not in err


# ------------------------------------------------------------ .npz demos with pickled arrays
def test_npz_demo_with_object_arrays_does_not_suggest_allow_pickle(tmp_path):
    from robolearn.policies.demos import load_npz_transitions

    f = tmp_path / "demos.npz"
    np.savez(f, obs_state=np.array([{"a": 1}], dtype=object), action=np.zeros((1, 1)),
             reward=np.zeros(1), terminated=np.zeros(1, bool), truncated=np.zeros(1, bool))
    with pytest.raises(DatasetError) as exc:
        load_npz_transitions(f)
    msg = str(exc.value)
    assert "allow_pickle" not in msg and "obs_state" in msg and "numeric" in msg


# ------------------------------------------------------------ no EGL tracebacks at interpreter exit
RENDER_SCRIPT = """
import atexit, gc, sys

def count_open_renderers():  # registered first, so it runs last (atexit is last-in first-out):
    import mujoco            # after MuJoCo's own eglTerminate hook
    n = sum(isinstance(o, mujoco.Renderer) and o._gl_context is not None for o in gc.get_objects())
    sys.stderr.write(f"open renderers after exit hooks: {n}\\n")

atexit.register(count_open_renderers)
import gymnasium as gym, numpy as np, robolearn
env = gym.make(sys.argv[1], obs="pixels")
env.reset(seed=0)
env.step(np.zeros(env.action_space.shape, np.float32))
if sys.argv[2] == "close":
    env.close()
    import mujoco
    n = sum(isinstance(o, mujoco.Renderer) and o._gl_context is not None for o in gc.get_objects())
    sys.stderr.write(f"open renderers after close: {n}\\n")
"""


@pytest.mark.parametrize("env_id", ["robolearn/ArmReach-v0", "robolearn/CarLap-v0"])
@pytest.mark.parametrize("close", ["close", "no-close"])
def test_rendering_script_exits_without_egl_tracebacks(tmp_path, env_id, close):
    script = tmp_path / "render.py"
    script.write_text(RENDER_SCRIPT)
    env = {**os.environ, "MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"}
    p = subprocess.run([sys.executable, str(script), env_id, close], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr and "EGLError" not in p.stderr, p.stderr
    # whether a renderer freed after EGL is gone prints a traceback depends on teardown order
    # (rarely reproducible here), so the check is direct: none is left open for that teardown
    assert "open renderers after exit hooks: 0" in p.stderr, p.stderr
    if close == "close":
        assert "open renderers after close: 0" in p.stderr, p.stderr


# ------------------------------------------------------------ docs: what eval.mp4 holds
def test_training_docs_state_the_eval_video_episode_count():
    from pathlib import Path

    from robolearn.policies.run_summary import EVAL_VIDEO_EPISODES

    words = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}
    doc = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text()
    lines = [ln for ln in doc.splitlines() if ln.strip().startswith("eval.mp4")]
    assert lines, "docs/training.md no longer lists eval.mp4"
    for ln in lines:
        assert f"{words[EVAL_VIDEO_EPISODES]} evaluation episode" in ln, ln
