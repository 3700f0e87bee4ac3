"""The training progress bar's ETA counts what the remaining steps will cost
(cheap random steps vs learning steps with updates), not one average rate."""
import re

from robolearn.policies.progress import Eta
from robolearn.policies.train_config import TrainConfig
from robolearn.policies.trainer import Trainer


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_eta_uses_the_learning_phase_cost():
    clock = Clock()
    eta = Eta(total=1000, learning_starts=100, clock=clock)
    for step in range(1, 101):            # random phase: 1 ms per step
        clock.t += 0.001
        eta.update(step)
    assert eta.remaining_s() is None      # learning cost not measured yet: no made-up number
    for step in range(101, 151):          # learning phase: 100 ms per step (updates)
        clock.t += 0.1
        eta.update(step)
    assert abs(eta.remaining_s() - 850 * 0.1) < 1e-6  # tqdm's average rate would say ~28 s
    assert eta.text() == "01:25"


def test_eta_counts_the_random_steps_left_too():
    clock = Clock()
    eta = Eta(total=300, learning_starts=200, start=0, clock=clock)
    for step in range(1, 51):
        clock.t += 0.002
        eta.update(step)
    assert eta.remaining_s() is None
    resumed = Eta(total=300, learning_starts=100, start=100, clock=clock)  # resumed run
    for step in range(101, 121):
        clock.t += 0.05
        resumed.update(step)
    assert abs(resumed.remaining_s() - 180 * 0.05) < 1e-6


def test_progress_bar_shows_the_eta(tmp_path, capsys):
    cfg = TrainConfig(env="Pendulum-v1", steps=120, learning_starts=40, eval_every=0, eval_episodes=1,
                      log_every=20, progress=True, video=False, out=str(tmp_path / "run"),
                      agent={"actor_hidden": [8], "critic_hidden": [8], "batch_size": 8})
    t = Trainer(cfg)
    old = Eta.MIN_LEARNING_STEPS, Eta.REFRESH_S
    Eta.MIN_LEARNING_STEPS, Eta.REFRESH_S = 1, 0.0   # recompute the eta on every step
    try:
        t.run()
    finally:
        Eta.MIN_LEARNING_STEPS, Eta.REFRESH_S = old
        t.close()
    shown = re.findall(r"eta=(\d\d:\d\d|\?)", capsys.readouterr().err)
    # the bar's final state shows the last step's estimate (nothing left); an Eta the loop
    # never updates, or a bar that does not show it, leaves "?" or nothing there
    assert shown and shown[-1] == "00:00", shown
