"""Fixed-rate control loop: policy -> optional safety supervisor -> env.step at `hz`.

Why absolute deadlines: sleeping `period` after each tick accumulates every tick's compute
time and OS wake-up error (drift). Here tick k is scheduled at `t0 + k * period` on the
monotonic clock, so errors never accumulate. Sleeping is hybrid: `time.sleep` until ~1 ms
before the deadline (the OS may wake us late by that much), then a short busy-wait.

Tick order (why): the action computed from the last observation is sent *at* the deadline
(`env.step`), the new observation is turned into the next action right away, and only then
does the loop sleep. So the command goes out at a precise time and the obs->action latency is
just the policy + safety compute time.

Stats per tick: obs->action latency, period jitter (actual start-to-start period minus the
nominal one), overruns (the tick's work ended after the next deadline). A late tick does not
cause a burst of catch-up ticks: missed deadlines are skipped (counted) and the grid is kept.
"""
from __future__ import annotations

import gc
import math
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from robolearn.errors import CameraError
from robolearn.pacing import SPIN_S, Clock, Rate

HELD_SLEEP_S = 0.01  # an unpaced loop (hz = 0) that is held still sleeps this long per tick

def percentile(values, q: float) -> float:
    if len(values) == 0:
        return float("nan")
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


@dataclass
class LoopStats:
    """Per-tick records of one loop run and their summary (seconds internally, ms in summary)."""

    period: float
    latency: list[float] = field(default_factory=list)       # obs -> action, s
    jitter: list[float] = field(default_factory=list)        # actual period - nominal, s
    overruns: int = 0                                         # ticks whose work ended late (below)
    skipped: int = 0                                          # deadlines missed entirely
    ticks: int = 0
    start_times: list[float] = field(default_factory=list)   # scheduled-grid check in tests
    keep_start_times: bool = False

    def summary(self) -> dict[str, float]:
        lat_ms = np.asarray(self.latency) * 1e3
        jit_ms = np.abs(np.asarray(self.jitter)) * 1e3
        return {
            "hz": 1.0 / self.period,
            "ticks": self.ticks,
            "latency_p50_ms": percentile(lat_ms, 50),
            "latency_p99_ms": percentile(lat_ms, 99),
            "latency_max_ms": float(lat_ms.max()) if lat_ms.size else float("nan"),
            "jitter_p50_ms": percentile(jit_ms, 50),
            "jitter_p99_ms": percentile(jit_ms, 99),
            "jitter_max_ms": float(jit_ms.max()) if jit_ms.size else float("nan"),
            "overruns": int(self.overruns),
            "skipped_deadlines": int(self.skipped),
        }


TickFn = Callable[[], Any]


class FixedRateLoop:
    """Run `tick()` on a fixed grid; `tick` returns the obs->action latency (s) or None.

    `tick()` may return the string "restart" to re-anchor the grid (after an env reset) so
    that reset time is neither an overrun nor jitter.

    An overrun is a tick whose work ended after the next deadline, unless the tick set
    `tick_overrun`: a tick that stepped a backend which waits to its own period deadline (a real
    arm or car, `paces_itself`) always ends just after that deadline, so the backend's own
    verdict (its overrun, s: > 0 when the tick came late to it) counts instead. Counting the end
    time there made 3800 of 6049 ticks of every lift session "overruns" while the backend saw 4.
    """

    def __init__(self, hz: float, clock: Clock | None = None, spin_s: float = SPIN_S,
                 keep_start_times: bool = False, gc_in_slack: bool = True):
        # hz == 0: unpaced (as fast as possible; sim only), no overrun accounting
        self.unpaced = hz == 0
        self.rate = Rate(1e6 if self.unpaced else hz, clock, spin_s)
        self.clock = self.rate.clock
        self.stats = LoopStats(period=self.rate.period, keep_start_times=keep_start_times)
        self.gc_in_slack = gc_in_slack and not self.unpaced
        self.tick_overrun: float | None = None   # set by a tick whose backend paced itself

    def run(self, tick: TickFn, max_ticks: int | None = None,
            stop: threading.Event | None = None, max_seconds: float | None = None) -> LoopStats:
        st = self.stats
        clock = self.clock
        prev_start: float | None = None
        t_begin = clock.now()
        gc_was_enabled = gc.isenabled()
        if self.gc_in_slack:
            gc.freeze()       # everything allocated so far is never scanned again
            gc.disable()      # young-generation collections run in slack time instead
        try:
            self.rate.restart()
            first = True
            while True:
                if max_ticks is not None and st.ticks >= max_ticks:
                    break
                if stop is not None and stop.is_set():
                    break
                if max_seconds is not None and clock.now() - t_begin >= max_seconds:
                    break
                if self.unpaced:
                    start = clock.now()
                else:
                    start = self.rate.restart() if first else self.rate.wait()
                first = False
                actual = clock.now()
                if prev_start is not None and not self.unpaced:
                    st.jitter.append((actual - prev_start) - self.rate.period)
                prev_start = actual
                if st.keep_start_times:
                    st.start_times.append(actual)
                result = tick()
                st.ticks += 1
                end = clock.now()
                backend_overrun, self.tick_overrun = self.tick_overrun, None
                if result == "restart":
                    first = True
                    prev_start = None
                    continue
                if result is not None:
                    st.latency.append(float(result))
                if self.unpaced:
                    continue
                late = end > start + self.rate.period if backend_overrun is None else backend_overrun > 0
                if late:
                    st.overruns += 1
                elif self.gc_in_slack and (start + self.rate.period - end) > 0.5 * self.rate.period:
                    gc.collect(0)
        finally:
            st.skipped = self.rate.skipped
            if self.gc_in_slack:
                gc.unfreeze()
                if gc_was_enabled:
                    gc.enable()
        return st


def raise_priority() -> str:
    """Best effort: SCHED_FIFO for this thread, else a lower nice value. Returns what worked."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        return "SCHED_FIFO"
    except (AttributeError, PermissionError, OSError):
        pass
    try:
        os.nice(-5)
        return "nice-5"
    except (PermissionError, OSError):
        return "default"


# ------------------------------------------------------------------------------ control loop
Policy = Callable[[dict[str, np.ndarray]], np.ndarray]
Safety = Callable[[np.ndarray, dict[str, np.ndarray]], np.ndarray]
OnStep = Callable[[dict], None]


class ControlLoop:
    """policy -> safety -> env.step at `hz` over a Gymnasium env with dict observations.

    `policy(obs) -> action` is looked up through `get_policy()` every tick, so an actor can
    swap weights between ticks. `safety(action, obs) -> action` (e.g. the drivers' supervisor's
    `check`) may raise `SafetyError`, which stops the loop. `on_step(transition)` gets every
    transition (obs, action, reward, next_obs, terminated, truncated, info); it must not block.
    `before_tick()` runs first in every tick (weight swaps, pause checks) and may return
    "pause" to skip stepping this tick. `on_camera_error(exc, episode_steps)`, when given,
    gets a `CameraError` raised by `env.step` (the steps the episode had) or `env.reset`
    (None) instead of letting it end the loop (the actor's camera outages,
    runtime/camera_outage.py): the episode is abandoned, the next unpaused tick starts one.
    """

    def __init__(self, env, get_policy: Callable[[], Policy], hz: float,
                 safety: Safety | None = None, on_step: OnStep | None = None,
                 before_tick: Callable[[], Any] | None = None, seed: int | None = None,
                 clock: Clock | None = None, spin_s: float = SPIN_S,
                 on_camera_error: Callable[[BaseException, int | None], None] | None = None):
        self.env = env
        self.on_camera_error = on_camera_error
        self.get_policy = get_policy
        self.safety = safety
        self.on_step = on_step
        self.before_tick = before_tick
        self.loop = FixedRateLoop(hz, clock=clock, spin_s=spin_s)
        self.seed = seed
        self.obs = None
        self.action = None
        self.episode_return = 0.0
        self.episode_steps = 0
        self.episodes: list[dict] = []
        self.env_steps = 0
        self._first_reset = True
        self.backend_paces = bool(getattr(getattr(env, "unwrapped", env), "paces_itself", False))  # overruns

    @property
    def stats(self) -> LoopStats:
        return self.loop.stats

    def _reset(self):
        seed = self.seed if self._first_reset else None
        self._first_reset = False
        self.obs, _ = self.env.reset(seed=seed)
        self.episode_return = 0.0
        self.episode_steps = 0
        self.action = self._act(self.obs)

    def _act(self, obs):
        action = np.asarray(self.get_policy()(obs), dtype=np.float32)
        if self.safety is not None:
            action = np.asarray(self.safety(action, obs), dtype=np.float32)
        return action

    def tick(self):
        if self.before_tick is not None and self.before_tick() == "pause":
            if self.loop.unpaced:  # held still at loop_hz = 0: wait, do not busy-spin a core
                time.sleep(HELD_SLEEP_S)
            return None
        try:
            return self._tick()
        except CameraError as exc:  # no image: the episode is abandoned, the handler holds the robot
            if self.on_camera_error is None:
                raise
            started = self.obs is not None  # else the reset itself failed: no episode yet
            self.obs = None
            self.on_camera_error(exc, self.episode_steps if started else None)
            return "restart"

    def _tick(self):
        if self.obs is None:
            self._reset()
            return "restart"
        obs, action = self.obs, self.action
        next_obs, reward, terminated, truncated, info = self.env.step(action)
        t_obs = self.loop.clock.now()
        if self.backend_paces:
            self.loop.tick_overrun = float(info.get("overrun") or 0.0)
        self.env_steps += 1
        self.episode_steps += 1
        if math.isfinite(float(reward)):   # a missing reward (NaN) is no verdict: not summed
            self.episode_return += float(reward)
        if info.get("intervention"):
            action = np.asarray(info.get("intervention_action", action), dtype=np.float32)
        if self.on_step is not None:
            self.on_step({"obs": obs, "action": action, "reward": float(reward),
                          "next_obs": next_obs, "terminated": bool(terminated),
                          "truncated": bool(truncated), "info": info})
        if terminated or truncated:
            self.episodes.append({"return": self.episode_return,
                                  "success": bool(info.get("success", False))})
            self.obs = None
            self._reset()
            return "restart"
        self.obs = next_obs
        self.action = self._act(next_obs)
        return self.loop.clock.now() - t_obs

    def run(self, max_ticks: int | None = None, stop: threading.Event | None = None,
            max_seconds: float | None = None) -> LoopStats:
        return self.loop.run(self.tick, max_ticks=max_ticks, stop=stop, max_seconds=max_seconds)
