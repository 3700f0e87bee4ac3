"""Every launch file we ship parses and validates with the reader its command uses, so a README
command never fails on a stale key. Async/finetune files (with [learner]/[actor]/[finetune])
go through the runtime reader, training files through the trainer's."""
from __future__ import annotations

from pathlib import Path

import pytest

from robolearn.configs import read_toml

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(p for p in (ROOT / "launch").glob("*.toml"))


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_launch_file_validates(path):
    data = read_toml(path)
    if {"learner", "actor", "finetune"} & set(data):
        from robolearn.runtime.config import load_launch

        cfg = load_launch(path)
        if path.name.startswith("finetune_"):
            assert cfg.finetune is not None and cfg.finetune.checkpoint
            assert cfg.finetune.reality == "hard"   # measured against the hard reality by default
    else:
        from robolearn.policies.train_config import load_launch

        load_launch(path)
