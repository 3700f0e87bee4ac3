"""The layer contract (pyproject [tool.importlinter], docs/DEVELOPING.md) and zero import cycles,
checked on the sources as they are, and shown to fail on an added upward or circular import."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import check_layers  # noqa: E402


def _check(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "check_layers.py"), "--tree", str(tree)],
                          capture_output=True, text=True, timeout=120)


def test_the_checkout_keeps_the_layers_and_has_no_import_cycles(tmp_path):
    res = _check(check_layers.build_tree(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Contracts: 1 kept, 0 broken" in res.stdout and "0 import cycles" in res.stdout


@pytest.mark.parametrize("where", ["top", "function"])
def test_an_upward_import_breaks_the_contract(tmp_path, where):
    """The env (low) importing the composition layer (high): at the top of the file or hidden
    inside a function, import-linter names it."""
    tree = check_layers.build_tree(tmp_path)
    env = tree / "robolearn" / "env.py"
    line = ("from robolearn.compose.envs import build_env  # noqa\n" if where == "top" else
            "\n\ndef _sneaky():\n    from robolearn.compose.envs import build_env  # noqa\n    return build_env\n")
    env.write_text(line + env.read_text() if where == "top" else env.read_text() + line)
    res = _check(tree)
    assert res.returncode == 1
    assert "BROKEN" in res.stdout and "robolearn.env -> robolearn.compose.envs" in res.stdout


def test_a_cycle_inside_one_layer_is_found(tmp_path):
    """Siblings that may import each other (rewards : resets : teleop) still must not import
    in a circle."""
    tree = check_layers.build_tree(tmp_path)
    scripted = tree / "robolearn" / "resets" / "scripted.py"
    scripted.write_text(scripted.read_text() + "\n\ndef _loop():\n    from robolearn.resets import cube  # noqa\n")
    res = _check(tree)
    assert res.returncode == 1
    assert "import cycle among 2 modules: robolearn.resets.cube, robolearn.resets.scripted" in res.stderr


def test_a_module_in_no_layer_is_reported(tmp_path):
    tree = check_layers.build_tree(tmp_path)
    (tree / "robolearn" / "stray.py").write_text('"""A new module nobody placed."""\n')
    res = _check(tree)
    assert res.returncode == 1 and "modules in no layer" in res.stderr and "robolearn.stray" in res.stderr
