"""`robolearn bench drivers`: servo-bus round trip and control rate against the emulator.

Measures, in one run:
- baseline: raw pty round trip: the host writes a request of the size of a 6-servo sync read
  and a device process answers with a canned reply of the same size as the real one (no
  parsing, no emulation): the floor set by the pty, process wake-ups and pyserial;
- sync read of `--servos` positions through `ServoBus` against `robolearn emulate arm` in its
  own process (which also waits the UART wire time of request + reply at `--baud`, as real
  servos on the wire would take);
- control rate: sync read + sync write per tick, back to back.
Prints p50/p99 latencies, ticks/s, and ratios to the baseline.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np


def _percentiles(samples: list[float]) -> dict[str, float]:
    a = np.asarray(samples) * 1e3
    return {"p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99)),
            "mean_ms": float(a.mean()), "n": int(a.size)}


def serve_echo(request_len: int, reply_len: int) -> None:
    """Baseline device (own process): answer every `request_len` bytes with `reply_len` zeros."""
    from robolearn.drivers.ptylink import PtyDevice

    dev = PtyDevice()
    print(dev.path, flush=True)
    reply, got = bytes(reply_len), 0
    try:
        while True:
            got += len(dev.read(0.5))
            while got >= request_len:
                got -= request_len
                dev.write(reply)
    except KeyboardInterrupt:
        pass
    finally:
        dev.close()


def _spawn(argv: list[str]) -> tuple[subprocess.Popen, str]:
    """Start a device process (as a real device is: another CPU, not our threads) -> its path."""
    p = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    path = p.stdout.readline().strip()
    if not path.startswith("/dev/"):
        p.kill()
        raise RuntimeError(f"device process {argv} did not print its pty path")
    return p, path


def _stop(p: subprocess.Popen) -> None:
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def bench_raw_pty(request: bytes, reply_len: int, seconds: float) -> dict:
    """Raw pty round trip of the same byte counts, pyserial on the host, no protocol."""
    import select

    import serial

    proc, path = _spawn(["-c", f"from robolearn.bench.drivers import serve_echo; "
                               f"serve_echo({len(request)}, {reply_len})"])
    ser = serial.Serial(path, timeout=0)
    fd = ser.fileno()
    lat: list[float] = []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            t0 = time.perf_counter()
            ser.write(request)
            n = 0
            while n < reply_len:
                if not select.select([fd], [], [], 1.0)[0]:
                    raise RuntimeError("baseline echo device stopped answering")
                n += len(ser.read(max(1, ser.in_waiting)))
            lat.append(time.perf_counter() - t0)
    finally:
        ser.close()
        _stop(proc)
    return _percentiles(lat)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="robolearn bench drivers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measurement (s)")
    parser.add_argument("--servos", type=int, default=6, help="servos in the sync read (<= 6)")
    parser.add_argument("--baud", type=int, default=1_000_000, help="emulated UART rate")
    parser.add_argument("--plant", choices=("first_order", "sim"), default="first_order",
                        help="emulator physics (sim = MuJoCo arm; costs CPU the bus shares)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if not 1 <= args.servos <= 6:
        parser.error("--servos must be in 1..6 (the emulated arm has 6 servos)")
    if args.seconds <= 0:
        parser.error("--seconds must be positive")

    from robolearn.drivers import feetech as ft
    from robolearn.drivers.servo_bus import ServoBus

    ids = list(range(1, args.servos + 1))
    request = ft.sync_read(ids, ft.PRESENT_POSITION.address, 2)
    reply_len = len(ids) * len(ft.status(1, 0, b"\0\0"))
    wire_ms = 10.0 * (len(request) + reply_len) / args.baud * 1e3

    print(f"raw pty round trip ({len(request)} B request, {reply_len} B reply) ...", flush=True)
    base = bench_raw_pty(request, reply_len, args.seconds)

    emu, path = _spawn(["-m", "robolearn.cli", "emulate", "arm", "--plant", args.plant,
                        "--baud", str(args.baud)])
    bus = ServoBus(path, baudrate=args.baud, timeout=0.05, retries=0)
    try:
        print(f"sync read of {len(ids)} servos through ServoBus + emulator ...", flush=True)
        lat: list[float] = []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            bus.read_positions(ids)
            lat.append(time.perf_counter() - t0)
        sync = _percentiles(lat)

        print("control loop: sync read + sync write per tick ...", flush=True)
        bus.set_torque(ids, True)
        ticks, tick_lat = 0, []
        end = time.monotonic() + args.seconds
        t_start = time.perf_counter()
        while time.monotonic() < end:
            t0 = time.perf_counter()
            pos = bus.read_positions(ids)
            bus.write_positions(pos)
            tick_lat.append(time.perf_counter() - t0)
            ticks += 1
        rate = ticks / (time.perf_counter() - t_start)
        loop = _percentiles(tick_lat)
        bus.set_torque(ids, False)
    finally:
        bus.close()
        _stop(emu)

    result = {
        "servos": len(ids), "baud": args.baud, "wire_time_ms": wire_ms,
        "baseline_raw_pty": base, "sync_read": sync, "control_tick": loop,
        "control_rate_hz": rate,
        "ratio_sync_read_p50_to_baseline": sync["p50_ms"] / base["p50_ms"],
        "ratio_sync_read_p50_to_baseline_plus_wire": sync["p50_ms"] / (base["p50_ms"] + wire_ms),
    }
    print()
    print(f"{'measurement':<34}{'p50 ms':>9}{'p99 ms':>9}{'n':>8}")
    print(f"{'baseline: raw pty round trip':<34}{base['p50_ms']:9.3f}{base['p99_ms']:9.3f}{base['n']:8d}")
    print(f"{f'sync read {len(ids)} servos @ {args.baud} Bd':<34}{sync['p50_ms']:9.3f}{sync['p99_ms']:9.3f}{sync['n']:8d}")
    print(f"{'control tick (read + write)':<34}{loop['p50_ms']:9.3f}{loop['p99_ms']:9.3f}{loop['n']:8d}")
    print()
    print(f"UART wire time of one sync read at {args.baud} Bd: {wire_ms:.3f} ms (emulated)")
    print(f"sync read p50 / raw pty p50:                {result['ratio_sync_read_p50_to_baseline']:.2f}x")
    print(f"sync read p50 / (raw pty p50 + wire time):  {result['ratio_sync_read_p50_to_baseline_plus_wire']:.2f}x")
    print(f"achievable control rate (read + write per tick): {rate:.0f} Hz")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.json}")
    return 0
