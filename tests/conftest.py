"""Shared test set-up: headless rendering, single-threaded torch (2-core CI), env IDs."""
import os

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

import pytest  # noqa: E402


def pytest_configure(config):
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass


@pytest.fixture(scope="session")
def env_ids():
    from robolearn.registry import registered_ids

    return registered_ids()


@pytest.fixture
def term():
    """A pseudo-terminal (master, slave fds): keyboard teleop tests type into the master."""
    master, slave = os.openpty()
    yield master, slave
    os.close(master)
    os.close(slave)
