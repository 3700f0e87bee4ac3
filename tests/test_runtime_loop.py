"""Fixed-rate loop: deadline scheduling without drift, and exact per-tick statistics."""
import time

import gymnasium as gym
import numpy as np
import pytest

from robolearn.errors import ConfigError
from robolearn.pacing import Clock, Rate
from robolearn.runtime.loop import ControlLoop, FixedRateLoop


class SimClock(Clock):
    """Simulated time: sleep() and work() advance it exactly (deterministic stats)."""

    def __init__(self):
        self.t = 100.0
        self.oversleep = 0.0  # every sleep wakes this late (like a real OS)

    def now(self):
        return self.t

    def sleep(self, dt):
        self.t += dt + self.oversleep

    def work(self, dt):
        self.t += dt


def test_stats_exact_with_one_slow_tick():
    clock = SimClock()
    loop = FixedRateLoop(50, clock=clock, spin_s=0.0, gc_in_slack=False)
    n = [0]

    def tick():
        n[0] += 1
        clock.work(0.035 if n[0] == 10 else 0.005)  # tick 10 overruns the 20 ms period
        return 0.005

    st = loop.run(tick, max_ticks=30)
    assert st.ticks == 30
    assert st.overruns == 1
    assert st.skipped == 0
    s = st.summary()
    assert s["latency_p50_ms"] == pytest.approx(5.0)
    jit = np.asarray(st.jitter)
    # tick 11 starts 15 ms late (35 ms after tick 10), tick 12 is back on the grid (5 ms period)
    assert jit[9] == pytest.approx(0.015)
    assert jit[10] == pytest.approx(-0.015)
    others = np.delete(jit, [9, 10])
    assert np.allclose(others, 0.0, atol=1e-9)
    assert s["jitter_max_ms"] == pytest.approx(15.0)


def test_grid_kept_after_missed_periods():
    clock = SimClock()
    loop = FixedRateLoop(100, clock=clock, spin_s=0.0, gc_in_slack=False, keep_start_times=True)
    n = [0]

    def tick():
        n[0] += 1
        clock.work(0.035 if n[0] == 3 else 0.001)  # 3.5 periods: 3 deadlines skipped, no burst
        return None

    st = loop.run(tick, max_ticks=10)
    assert st.overruns == 1
    assert st.skipped == 3  # deadlines at +30, +40, +50 ms had no tick
    starts = np.asarray(st.start_times) - st.start_times[0]
    k = starts / 0.01
    assert np.allclose(k, np.round(k), atol=1e-6)  # every start is on the t0 + k*period grid
    assert np.all(np.diff(starts) > 0.0099)         # no catch-up burst


def test_no_drift_with_late_wakeups():
    """Each sleep wakes 0.3 ms late and each tick works 2 ms: relative scheduling would drift
    by 2.3 ms per tick; absolute deadlines keep tick k at t0 + k * period."""
    clock = SimClock()
    clock.oversleep = 0.0003
    loop = FixedRateLoop(100, clock=clock, spin_s=0.0, gc_in_slack=False, keep_start_times=True)

    def tick():
        clock.work(0.002)

    st = loop.run(tick, max_ticks=1000)
    drift = st.start_times[-1] - st.start_times[0] - 999 * 0.01
    assert abs(drift) < 0.0004  # bounded by one wake-up error, not 1000 of them
    assert st.overruns == 0


def test_real_clock_no_drift():
    loop = FixedRateLoop(200, keep_start_times=True)
    st = loop.run(lambda: time.sleep(0.001), max_ticks=200)
    rel = np.asarray(st.start_times) - st.start_times[0]
    k = np.round(rel / 0.005)
    err = rel - k * 0.005
    # a shared 2-core CI box may wake us late now and then (those deadlines are skipped and
    # counted), but the error never accumulates: the last ticks are still on the grid
    assert k[-1] == 199 + st.skipped
    assert np.median(np.abs(err)) < 0.001
    assert np.min(np.abs(err[-20:])) < 0.001


def test_bad_rate_is_config_error():
    with pytest.raises(ConfigError):
        Rate(-1)
    with pytest.raises(ConfigError):
        Rate(float("nan"))


class DictPendulum(gym.ObservationWrapper):
    def __init__(self):
        super().__init__(gym.make("Pendulum-v1", max_episode_steps=20))
        self.observation_space = gym.spaces.Dict(
            {"state": gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)})

    def observation(self, obs):
        return {"state": obs.astype(np.float32)}


def test_control_loop_policy_safety_step_and_episode_restart():
    env = DictPendulum()
    clock = SimClock()
    seen = []
    policy_calls = []

    def policy(obs):
        policy_calls.append(obs["state"].copy())
        clock.work(0.001)
        return np.array([0.9], np.float32)

    def safety(action, obs):
        return np.clip(action, -0.5, 0.5)  # a supervisor that limits the command

    loop = ControlLoop(env, lambda: policy, hz=50, safety=safety, on_step=seen.append,
                       seed=3, clock=clock, spin_s=0.0)
    st = loop.run(max_ticks=45)
    env.close()
    # tick 1 resets; every later tick steps (an episode's last step resets in the same tick)
    assert loop.env_steps == len(seen) == 44
    assert len(loop.episodes) == 2
    assert all(np.allclose(t["action"], [0.5]) for t in seen)
    assert seen[19]["truncated"] and not seen[18]["truncated"]
    for a, b in zip(seen[:18], seen[1:19]):   # next_obs of step t is obs of step t+1
        assert np.array_equal(a["next_obs"]["state"], b["obs"]["state"])
    assert st.summary()["latency_p50_ms"] == pytest.approx(1.0)
    assert st.overruns == 0


def test_intervention_action_is_what_gets_recorded():
    class Intervene(gym.Wrapper):
        def step(self, action):
            applied = np.array([-0.25], np.float32)
            obs, r, te, tr, info = self.env.step(applied)
            return obs, r, te, tr, {**info, "intervention": True, "intervention_action": applied}

    env = Intervene(DictPendulum())
    seen = []
    loop = ControlLoop(env, lambda: (lambda o: np.array([0.7], np.float32)), hz=50,
                       on_step=seen.append, clock=SimClock(), spin_s=0.0)
    loop.run(max_ticks=5)
    assert seen and all(np.allclose(t["action"], [-0.25]) for t in seen)


class SelfPacedPendulum(gym.Wrapper):
    """A backend that waits to its own period deadline inside `step`, as the drivers' `Pacer`
    does on a real arm: its grid trails the loop's by the tick's work, so every tick ends just
    after the loop's deadline while only the `slow` steps come late to the backend."""

    def __init__(self, clock, period, slow, paces_itself=True):
        super().__init__(DictPendulum())
        self.clock, self.period, self.slow, self.n, self.t_prev = clock, period, slow, 0, None
        if paces_itself:
            self.unwrapped.paces_itself = True      # what RobotEnv says of a ServoArm backend

    def reset(self, **kw):
        self.t_prev = None
        return self.env.reset(**kw)

    def step(self, action):
        self.n += 1
        self.clock.work(0.030 if self.n in self.slow else 0.002)   # the work before `advance`
        now = self.clock.now()
        target = (now if self.t_prev is None else self.t_prev) + self.period
        overrun = now - target if now - target > 1e-9 else 0.0   # not the clock's rounding
        if overrun:                      # late: the backend restarts its schedule from now
            self.t_prev = now
        else:                            # on time: it waits to its deadline
            self.clock.t, self.t_prev = target, target
        obs, r, te, tr, info = self.env.step(action)
        return obs, r, te, tr, {**info, "overrun": overrun}


def test_a_backend_that_paces_itself_counts_its_own_overruns():
    """A real arm waits to its own deadline in `advance`, so the loop's ticks all end past the
    loop's deadline; the overruns are the steps the backend found late (2), not every tick."""
    def run(paces_itself):
        clock = SimClock()
        env = SelfPacedPendulum(clock, 0.02, slow={5, 12}, paces_itself=paces_itself)
        loop = ControlLoop(env, lambda: (lambda o: np.array([0.1], np.float32)), hz=50,
                           clock=clock, spin_s=0.0)
        st = loop.run(max_ticks=19)   # one reset tick + 18 steps, inside one 20-step episode
        env.close()
        return st

    assert run(paces_itself=True).overruns == 2
    assert run(paces_itself=False).overruns >= 10   # what the end-time count made of it (12)


def test_the_env_says_whether_its_backend_paces_itself():
    """`RobotEnv.paces_itself`: the servo arm's (driver over the byte protocol, on the emulator)
    waits to its own deadline, the simulator's does not; the loop reads it from the env."""
    from robolearn.drivers.emulation import start_emulator

    sim = gym.make("robolearn/ArmReach-v0")
    assert sim.unwrapped.paces_itself is False
    assert ControlLoop(sim, lambda: (lambda o: sim.action_space.sample()), hz=10).backend_paces is False
    sim.close()
    with start_emulator("arm", reality=None) as robot:
        arm = gym.make("robolearn/ArmReach-v0", backend="real", port=robot.port, timeout=0.1)
        try:
            assert arm.unwrapped.paces_itself is True
            assert ControlLoop(arm, lambda: (lambda o: arm.action_space.sample()), hz=10).backend_paces is True
        finally:
            arm.close()
