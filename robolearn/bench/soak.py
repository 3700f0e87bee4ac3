"""`robolearn bench soak [--minutes M] [--out DIR] [--seed S] [--checkpoint RUN]` (issue 29, item 4).

A fine-tuning session (`robolearn finetune`, ArmReach on the emulated arm with the hard reality)
with faults injected on a schedule from outside its processes, the way they happen for real:
- bus_corrupt / bus_drop: the emulator corrupts reply checksums / drops reply bytes on the
  pseudo-terminal (`POST /faults` on the emulated robot, drivers/fault_control.py);
- camera_stall: the emulator's MJPEG streams keep their connections and send nothing;
- learner_kill: SIGKILL to the learner process (the session restarts it from its checkpoint);
- actor_kill: SIGKILL to the actor process (the session restarts it);
- disk_full: the session's folder lives on a tmpfs of fixed size, which the soak fills to 2.5 MB
  free (checkpoints then hit ENOSPC, episodes still fit) until a checkpoint has failed, then frees;
- reward_model_kill: SIGKILL to the session's reward server (`robolearn reward serve`; the soak
  serves ArmReach's reward rule from a model folder): the learner holds transitions until the
  restarted server answers, then labels them;
one round of every kind each ~10 minutes of `--minutes`. Afterwards it checks: every episode the
session said it recorded is on disk and loads; no goal-position write outside the joints' range
reached the servos (the emulator's count, servo side); the learner resumed from the latest
checkpoint after each kill; the session report counts every fault (and no transition got a
reward while the reward server was down, except by relabelling after); and true success after the
session is at least what it was before. DIR/soak.json and soak.md; exit 1 when a check fails.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

LAUNCH = "launch/finetune_arm_reach_real.toml"
#: a partly pretrained policy (4000 sim steps: eval success 0.4 in sim), so that the session starts
#: below the ceiling (0.75-0.80 true success on the calibrated hard reality) and `still_learning`
#: has room to see fine-tuning raise it; 7000 or 10000 steps start at 0.9-1.0, where one miss in
#: the evaluation decides the check. Measured: it ended >= its start in 1 of 2 ten-minute soaks
#: (a 7000-step start: 1.00 -> 0.95) (docs/runtime.md, "Soak")
PRETRAIN_STEPS = 4000
PRETRAIN = ["--env", "robolearn/ArmReach-v0", "--algo", "sac", "--no-video"]
DISK_MB = 256                 # the session's filesystem
#: left free while the disk is "nearly full": below the 3.2 MB of a checkpoint's agent.safetensors
#: alone (so every checkpoint fails), above what the episodes of the longest hold take (an episode
#: of the reach session is ~16 KB on the tmpfs: 2.5 MB is ~150 episodes)
FREE_BYTES = 5 << 19
ROUND_S = 600.0               # one round of every fault kind per 10 minutes
STEPS_SHARE = 0.8             # the session's step budget: this share of the window at the control rate
#: (kind, offset in the round as a fraction, duration s); disk_full is held until the learner's
#: next checkpoint fails (at most that long): one comes every 500 updates, which took over 90 s
#: at the ~6 env steps/s of the hard-reality reach session (a 90 s hold saw none)
ROUND = (("bus_corrupt", 0.04, 20.0), ("bus_drop", 0.10, 20.0), ("camera_stall", 0.16, 10.0),
         ("reward_model_kill", 0.25, 0.0), ("learner_kill", 0.34, 0.0), ("actor_kill", 0.46, 0.0),
         ("disk_full", 0.56, 300.0))
CORRUPT_RATE = 0.004          # of replies, during a bus_corrupt burst (5 % ended a session: see docs)
DROP_RATE = 0.0003            # of reply bytes, during a bus_drop burst (~2 % of 6-servo sync reads)
#: the session's reward comes from `robolearn reward serve` (`[reward] where = "server"`), so that
#: reward_model_kill has a process to kill: ArmReach's own rule as a model folder (kind
#: "reach_distance", rewards/reach_distance.py), loaded by the server like any model. timeout_s 1:
#: the server's restart (a new Python process) takes longer, so every kill is seen as a timeout
SERVED_REWARD = {"where": "server", "timeout_s": 1.0}
#: the learner's metrics lines: fine enough to see the server's outage (a restarted server answered
#: 0.79-1.4 s after its kill; at 0.5 s one soak's window held a single line, too few to see growth)
METRICS_EVERY_S = 0.2
#: gradient updates per env step of the soak's learner, unless its launch file sets `utd`: the
#: reach launch file's UTD 1 left 10 faulted minutes too few updates to show learning (true
#: success 0.80 -> 0.85, 0.60, 0.75 in three soaks; training episodes 0.44 -> 0.52 in the last);
#: UTD 4 (~18 000 updates, ~30 a second, well inside one core) gave 0.80 -> 0.95 (docs/runtime.md, Soak)
SOAK_UTD = 4
#: kinds that cannot be injected into a session, with why (said in soak.json, not counted as passed)
NOT_APPLICABLE: dict[str, str] = {}


def served_reward_not_applicable(launch: dict) -> str | None:
    """Why reward_model_kill cannot be injected into this launch file's session (None: it can)."""
    reward = launch.get("reward") or {}
    if reward.get("where") == "server" or (not reward and "ArmReach" in str(launch.get("env", ""))):
        return None
    return (f"the session's reward is not served by a reward server ([reward] where = "
            f"{reward.get('where', 'env')!r} in {launch.get('env')}); the soak adds one only to ArmReach "
            "(reach_distance) sessions: set [reward] where = \"server\" in the launch file")


def parse(argv):
    p = argparse.ArgumentParser(prog="robolearn bench soak", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10.0,
                   help="fine-tuning time under faults (default 10; one round of faults per 10 min)")
    p.add_argument("--out", default="runs/soak", help="output folder (soak.json, soak.md, session/)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", default=None,
                   help="sim-pretrained ArmReach run to fine-tune (default: train one for "
                        "--pretrain-steps, ~30 s)")
    p.add_argument("--launch", default=LAUNCH, help=f"fine-tuning launch file (default {LAUNCH})")
    p.add_argument("--episodes", type=int, default=20,
                   help="zero-shot and final evaluation episodes (default 20)")
    p.add_argument("--pretrain-steps", type=int, default=PRETRAIN_STEPS,
                   help=f"sim steps of the pretraining without --checkpoint (default {PRETRAIN_STEPS}: "
                        "partly trained, so fine-tuning has room to improve)")
    p.add_argument("--recheck", metavar="DIR", default=None,
                   help="run the checks again on a finished soak's files (DIR/soak.json, DIR/session) "
                        "with this version's check code; writes DIR/recheck.json, runs nothing")
    return p.parse_args(argv)


def recheck(out: Path) -> int:
    """The checks of this version on a finished soak's own files (a soak is hours of robot time;
    a check that changed afterwards can be re-read, not re-run). DIR/recheck.json; exit 1 on a fail."""
    from robolearn.errors import ConfigError
    from robolearn.jsonfile import write_json_atomic

    path = out / "soak.json"
    if not path.is_file() or not (out / "session").is_dir():
        raise ConfigError(f"--recheck {out}: no finished soak there (needs {path} and {out / 'session'})")
    result = json.loads(path.read_text())
    got = {"soak": str(path), "checks": checks(result, out / "session")}
    got["passed"] = all(c["pass"] for c in got["checks"].values())
    got["changed"] = {k: {"was": result.get("checks", {}).get(k, {}).get("pass"), "now": v["pass"]}
                      for k, v in got["checks"].items()
                      if result.get("checks", {}).get(k, {}).get("pass") != v["pass"]}
    write_json_atomic(out / "recheck.json", got, indent=1)
    print(json.dumps({"passed": got["passed"], "checks": {k: v["pass"] for k, v in got["checks"].items()},
                      "changed": got["changed"]}), flush=True)
    return 0 if got["passed"] else 1


def _cli() -> list[str]:
    return [sys.executable, "-m", "robolearn.cli"]


def main(argv=None) -> int:
    from robolearn.errors import ConfigError

    args = parse(argv if argv is not None else sys.argv[1:])
    if args.recheck:
        return recheck(Path(args.recheck))
    if args.minutes <= 0:
        raise ConfigError(f"--minutes {args.minutes}: must be > 0")
    out = Path(args.out)
    if (out / "soak.json").exists():
        raise ConfigError(f"{out} already holds a soak (soak.json); choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    result: dict = {"minutes": args.minutes, "seed": args.seed, "launch": args.launch}

    ckpt = args.checkpoint
    if ckpt is None:
        ckpt = str(out / "pretrain")
        pre = [*PRETRAIN, "--steps", str(args.pretrain_steps)]
        print(f"soak: pretraining in sim: robolearn train {' '.join(pre)} --out {ckpt}", flush=True)
        t0 = time.monotonic()
        subprocess.run(_cli() + ["train", *pre, "--out", ckpt, "--seed", str(args.seed)],
                       check=True, stdout=open(out / "pretrain.log", "w"), stderr=subprocess.STDOUT)
        result["pretrain_s"] = round(time.monotonic() - t0, 1)
    elif not Path(ckpt).exists():
        raise ConfigError(f"--checkpoint {ckpt}: not found (a run folder from robolearn train)")
    result["checkpoint"] = ckpt

    disk = Disk(out / "disk")
    result["disk"] = disk.describe()
    print(f"soak: session folder on {result['disk']}", flush=True)
    try:
        soak = Soak(args, out, Path(ckpt), disk)
        result.update(soak.run())
    finally:
        disk.release(out / "session")
    result["checks"] = checks(result, out / "session")
    result["passed"] = all(c["pass"] for c in result["checks"].values())
    result["wall_s"] = round(time.monotonic() - t_start, 1)
    from robolearn.jsonfile import write_json_atomic

    write_json_atomic(out / "soak.json", result, indent=1)
    (out / "soak.md").write_text(markdown(result))
    print(json.dumps({"passed": result["passed"], "wall_s": result["wall_s"],
                      "checks": {k: v["pass"] for k, v in result["checks"].items()}}), flush=True)
    print(f"soak: {out / 'soak.json'}, {out / 'soak.md'}", flush=True)
    return 0 if result["passed"] else 1


class Disk:
    """The session's filesystem: a tmpfs of DISK_MB mounted at `path` (root), else a plain folder
    on which disk_full cannot be injected (said in soak.json, and its check fails)."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        if any(path.iterdir()):
            from robolearn.errors import ConfigError

            raise ConfigError(f"{path} is not empty (an earlier soak's disk?): choose another --out")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(path)],
                           capture_output=True, text=True)
        self.mounted = r.returncode == 0
        self.error = None if self.mounted else (r.stderr.strip() or f"mount exited {r.returncode}")
        if not self.mounted:
            print(f"soak: warning: cannot mount a {DISK_MB} MB tmpfs at {path} ({self.error}); "
                  "disk_full will not be injected", file=sys.stderr, flush=True)
        self.fill = path / "soak_fill.bin"

    def describe(self) -> str:
        return (f"tmpfs {DISK_MB} MB at {self.path}" if self.mounted
                else f"{self.path} (no tmpfs: {self.error})")

    def free(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill_up(self) -> int:
        """Leave FREE_BYTES free; returns the bytes written."""
        n = max(0, self.free() - FREE_BYTES)
        with open(self.fill, "wb") as f:
            chunk = b"\0" * (1 << 20)
            left = n
            while left > 0:
                k = min(left, len(chunk))
                try:
                    f.write(chunk[:k])
                except OSError:
                    break
                left -= k
        return n - max(left, 0)

    def empty(self) -> None:
        self.fill.unlink(missing_ok=True)

    def release(self, keep: Path) -> None:
        """Copy the session out of the tmpfs to `keep`, then unmount."""
        self.empty()
        src = self.path / "session"
        if src.exists():
            if keep.exists():
                shutil.rmtree(keep)
            shutil.copytree(src, keep, symlinks=True)
        if self.mounted:
            subprocess.run(["umount", str(self.path)], check=False)
        else:
            shutil.rmtree(src, ignore_errors=True)


class Soak:
    """The finetune session as a child process, and the fault schedule run beside it."""

    def __init__(self, args, out: Path, ckpt: Path, disk: Disk):
        self.args, self.out, self.ckpt, self.disk = args, out, ckpt, disk
        self.run_dir = disk.path / "session"
        self.lines: list[tuple[float, str]] = []
        self.events: dict[str, threading.Event] = {k: threading.Event()
                                                   for k in ("zero_shot_start", "session_start")}
        self.pids: dict[str, int] = {}
        self.faults: list[dict] = []
        self.baseline: dict | None = None
        self.proc: subprocess.Popen | None = None

    # ------------------------------------------------------------------ the session
    def launch_file(self) -> Path:
        from robolearn.configs import dump_toml, read_toml

        d = read_toml(self.args.launch)
        self.not_applicable = dict(NOT_APPLICABLE)
        why = served_reward_not_applicable(d)
        if why is not None:
            self.not_applicable["reward_model_kill"] = why
        elif not d.get("reward"):  # ArmReach's rule, served: the same path as any model folder
            from robolearn.rewards.reach_distance import save_reach_distance

            d["reward"] = {"model": str(save_reach_distance(self.out / "reach_reward").resolve()), **SERVED_REWARD}
        d.setdefault("learner", {})["metrics_every_s"] = METRICS_EVERY_S
        d["learner"].setdefault("agent", {}).setdefault("utd", SOAK_UTD)
        ft = d.setdefault("finetune", {})
        ft.update(checkpoint=str(self.ckpt), zero_shot_episodes=self.args.episodes,
                  final_episodes=self.args.episodes)
        d["seed"] = self.args.seed
        path = self.out / "soak_launch.toml"
        path.write_text(dump_toml(d))
        return path

    def run(self) -> dict:
        from robolearn.runtime.config import load_launch
        from robolearn.runtime.finetune import control_hz

        launch = self.launch_file()
        hz = control_hz(load_launch(launch))
        self.schedule = [f for f in schedule(self.args.minutes) if f["kind"] not in self.not_applicable]
        steps = int(self.args.minutes * 60 * hz * STEPS_SHARE)  # pauses (restarts) take the rest
        restarts = sum(1 for f in self.schedule
                       if f["kind"] in ("learner_kill", "actor_kill", "reward_model_kill")) + 1
        cmd = _cli() + ["finetune", str(launch), "--out", str(self.run_dir), "--steps", str(steps),
                        "--max-restarts", str(restarts), "--quiet"]
        print(f"soak: {' '.join(cmd[2:])}", flush=True)
        log = open(self.out / "finetune.log", "w")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"))
        reader = threading.Thread(target=self._read, args=(log,), daemon=True)
        reader.start()
        injector = threading.Thread(target=self._inject, daemon=True)
        injector.start()
        rc = self.proc.wait()
        reader.join(timeout=10)
        self.done = True
        injector.join(timeout=120)
        log.close()
        return {"finetune_rc": rc, "session_wall_s": round(time.monotonic() - t0, 1),
                "steps_budget": steps, "control_hz": hz, "faults": self.faults,
                "servo_counts_at_zero_shot": self.baseline, "command": " ".join(cmd[2:])}

    def _read(self, log) -> None:
        for line in self.proc.stdout:
            log.write(line)
            log.flush()
            self.lines.append((time.monotonic(), line))
            m = re.match(r"started (learner|actor|reward_server) pid (\d+)", line)
            if m:
                self.pids[m.group(1)] = int(m.group(2))
                if m.group(1) == "actor":
                    self.events["session_start"].set()
            if line.startswith("zero-shot: ") and "episodes of the pretrained" in line:
                self.events["zero_shot_start"].set()

    def robot(self) -> dict:
        return json.loads((self.run_dir / "robot.json").read_text())

    # ------------------------------------------------------------------ the faults
    def _inject(self) -> None:
        from robolearn.drivers.truth import fetch_truth

        self.done = False
        while not self.events["zero_shot_start"].wait(1.0):
            if self.proc.poll() is not None:
                return
        # calibration presses the joints into their stops on purpose: the servo-side count of
        # unsafe goals starts here, with the policy driving the arm
        self.baseline = fetch_truth(self.robot()["faults"] + ".json")
        while not self.events["session_start"].wait(1.0):
            if self.proc.poll() is not None:
                break
        t0 = time.monotonic()
        for f in self.schedule:
            rec = {"kind": f["kind"], "planned_s": f["at_s"]}
            while time.monotonic() - t0 < f["at_s"] and self.proc.poll() is None:
                time.sleep(0.2)
            if self.proc.poll() is not None or not self.events["session_start"].is_set():
                rec.update(injected=False, observed="the session had ended")
                self.faults.append(rec)
                continue
            rec["t_s"] = round(time.monotonic() - t0, 1)
            try:
                rec.update(getattr(self, "_" + f["kind"])(f["duration_s"]))
                rec.setdefault("injected", True)
            except Exception as exc:  # noqa: BLE001 - a failed injection is a result, said so
                rec.update(injected=False, observed=f"injection failed: {type(exc).__name__}: {exc}")
            print(f"soak: fault {json.dumps(rec)}", flush=True)
            self.faults.append(rec)
        for kind, why in self.not_applicable.items():
            self.faults.append({"kind": kind, "injected": False, "not_applicable": why})
        with open(self.out / "faults.jsonl", "w") as fl:
            for rec in self.faults:
                fl.write(json.dumps(rec) + "\n")

    def _bus(self, key: str, rate: float, seconds: float) -> dict:
        from robolearn.drivers.fault_control import post_faults

        url = self.robot()["faults"]
        before = post_faults(url, {key: rate})
        time.sleep(seconds)
        after = post_faults(url, {key: 0.0})
        counts = ("replies_corrupted",) if key == "corrupt_rate" else ("bytes_dropped", "replies_with_drops")
        return {"rate": rate, "duration_s": seconds,
                "observed": {c: after[c] - before[c] for c in counts}}

    def _bus_corrupt(self, seconds: float) -> dict:
        return self._bus("corrupt_rate", CORRUPT_RATE, seconds)

    def _bus_drop(self, seconds: float) -> dict:
        return self._bus("drop_rate", DROP_RATE, seconds)

    def _camera_stall(self, seconds: float) -> dict:
        from robolearn.drivers.fault_control import post_faults, read_mjpeg_frames

        r = self.robot()
        cam = next(iter(r["cameras"].values()))
        before = read_mjpeg_frames(cam, 1.0)
        post_faults(r["faults"], {"camera_stall": True})
        during = read_mjpeg_frames(cam, min(3.0, seconds))
        time.sleep(max(0.0, seconds - 3.0))
        state = post_faults(r["faults"], {"camera_stall": False})
        after = read_mjpeg_frames(cam, 1.0)
        return {"duration_s": seconds, "observed": {"frames_1s_before": before, "frames_during": during,
                                                    "frames_1s_after": after,
                                                    "emulator_stalls": state["camera_stalls"]}}

    def _latest(self) -> str | None:
        p = self.run_dir / "checkpoints" / "latest.json"
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            return None
        return str(d.get("path") or d.get("checkpoint") or d)

    def _learner_kill(self, _s: float) -> dict:
        pid = self.pids["learner"]
        log = self.run_dir / "logs" / "learner.log"
        n0 = _count(log, "resumed the session from")
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid)
        latest = self._latest()           # what a resume must load: nothing writes it now
        deadline = time.monotonic() + 180
        resumed = None
        while time.monotonic() < deadline and self.proc.poll() is None:
            lines = [ln for ln in _lines(log) if "resumed the session from" in ln]
            if len(lines) > n0:
                resumed = lines[n0].strip()
                break
            time.sleep(0.5)
        return {"pid": pid, "signal": "SIGKILL", "latest_checkpoint_at_kill": latest,
                "observed": {"resume_line": resumed}}

    def _actor_kill(self, _s: float) -> dict:
        pid = self.pids["actor"]
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.pids["actor"] == pid and self.proc.poll() is None:
            time.sleep(0.2)
        return {"pid": pid, "signal": "SIGKILL",
                "observed": {"restarted_pid": self.pids["actor"] if self.pids["actor"] != pid else None}}

    def _reward_model_kill(self, _s: float) -> dict:
        """SIGKILL the reward server; observe its restart and when the new one answers (a probe
        on its socket), so the checks can look at the learner's labels in between."""
        pid = self.pids["reward_server"]
        address = self._reward_address()
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.pids["reward_server"] == pid and self.proc.poll() is None:
            time.sleep(0.1)
        new_pid = self.pids["reward_server"] if self.pids["reward_server"] != pid else None
        answering_at = _probe_reward_server(address, deadline) if new_pid else None
        return {"pid": pid, "signal": "SIGKILL", "address": address, "killed_at": round(killed_at, 3),
                "observed": {"restarted_pid": new_pid, "answering_at": answering_at,
                             "down_s": round(answering_at - killed_at, 2) if answering_at else None}}

    def _reward_address(self) -> str:
        from robolearn.configs import read_toml

        return read_toml(self.run_dir / "finetune_launch.toml")["reward"]["address"]

    def _disk_full(self, seconds: float) -> dict:
        if not self.disk.mounted:
            return {"injected": False, "observed": f"no tmpfs ({self.disk.error})"}
        log = self.run_dir / "logs" / "learner.log"
        n0 = _count(log, "checkpoint at env step", "failed")
        wrote = self.disk.fill_up()
        free = self.disk.free()
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds and self.proc.poll() is None:
            if _count(log, "checkpoint at env step", "failed") > n0:
                break
            time.sleep(0.5)
        held = time.monotonic() - t0
        self.disk.empty()
        return {"filled_bytes": wrote, "free_bytes_while_full": free, "held_s": round(held, 1),
                "observed": {"checkpoint_failures": _count(log, "checkpoint at env step", "failed") - n0}}


def _probe_reward_server(address: str, deadline: float) -> float | None:
    """The time (unix s) the reward server at `address` first answers a request (an empty one:
    any reply, an error included, says it is serving), None if not before `deadline`."""
    import zmq

    from robolearn.runtime import messages as M

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IMMEDIATE, 1)
    sock.connect(address)
    try:
        while time.monotonic() < deadline:
            try:
                sock.send(M.encode(M.SCORE, id=0, next_obs={}), zmq.NOBLOCK)
            except zmq.Again:
                time.sleep(0.05)
                continue
            if sock.poll(500, zmq.POLLIN):
                sock.recv()
                return round(time.time(), 3)
        return None
    finally:
        sock.close()


def schedule(minutes: float) -> list[dict]:
    """One round of every kind per ROUND_S of fine-tuning (at least one round), all inside the
    STEPS_SHARE of the window that the session's step budget lasts at the full control rate: a
    session never trains for less than that, so no fault is planned after its training ended
    (the first 120-minute run at UTD 4 finished its steps at 6780 s of 7200, before its last
    round's kills at 6750-6940 s)."""
    rounds = max(1, round(minutes * 60 / ROUND_S))
    span = minutes * 60 * STEPS_SHARE / rounds
    return [{"kind": k, "at_s": round(r * span + frac * span, 1), "duration_s": d}
            for r in range(rounds) for k, frac, d in ROUND]


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def _count(path: Path, *words: str) -> int:
    return sum(1 for ln in _lines(path) if all(w in ln for w in words))


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


# ---------------------------------------------------------------------- checks afterwards
def checks(result: dict, run_dir: Path) -> dict:
    report_path = run_dir / "session_report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    faults = result.get("faults", [])
    out = {"session_finished": {"pass": result.get("finetune_rc") == 0 and bool(report),
                                "finetune_rc": result.get("finetune_rc"),
                                "session_report": report_path.exists()}}
    out["episodes_lost"] = _check_episodes(run_dir, report)
    out["unsafe_commands"] = _check_unsafe(result.get("servo_counts_at_zero_shot"),
                                           report.get("emulator_faults"))
    out["learner_resumed_from_latest"] = _check_resumes(faults, _lines(run_dir / "metrics.jsonl"))
    out["faults_accounted"] = _check_accounted(faults, report, run_dir)
    zs = (report.get("zero_shot") or {}).get("true_success_rate")
    fin = (report.get("final") or {}).get("true_success_rate")
    truth = [t for t in (report.get("true_success") or []) if t is not None]
    out["still_learning"] = {
        "pass": zs is not None and fin is not None and fin >= zs,
        "true_success_start": zs, "true_success_end": fin,
        "episodes_each": (report.get("zero_shot") or {}).get("episodes"),
        # below the ceiling at the start, the check can see fine-tuning raise it (or not)
        "room_to_improve": zs is not None and zs < 1.0,
        # context, not the criterion: the training episodes (stochastic policy, while learning)
        "training_true_success_first_100": round(sum(truth[:100]) / len(truth[:100]), 3) if truth else None,
        "training_true_success_last_100": round(sum(truth[-100:]) / len(truth[-100:]), 3) if truth else None}
    return out


def _check_episodes(run_dir: Path, report: dict) -> dict:
    """Episodes the actors completed (their logs: written, or said not written) against the disk.

    `lost`: completed, not on disk, and never said so (a silent loss); `not_written`: the
    recorder said it could not write them (disk full, ...). Either fails the check: the issue
    asks for 0 episodes lost, and an episode the disk had no room for is lost, only not silently.
    """
    from robolearn.data.dataset import Dataset
    from robolearn.errors import DatasetError

    recorded, not_written = set(), []   # a refused episode's index is used again by the next one
    dropped_mid_episode = 0
    for ln in _actor_log_lines(run_dir):
        m = re.search(r"recorded episode (\d+) \((\d+) steps\)", ln)
        if m:
            recorded.add(int(m.group(1)))
        m = re.search(r"could not write episode (\d+)", ln)
        if m:
            not_written.append(int(m.group(1)))
        if "recording failed at step" in ln:
            dropped_mid_episode += 1
    loaded, errors = set(), {}
    try:
        ds = Dataset(run_dir / "episodes")
        for i in ds.indices:
            try:
                ep = ds.episode(i)
                ep.observations()
                _ = ep.steps
                loaded.add(int(ep.index))
            except (DatasetError, OSError, ValueError) as exc:
                errors[i] = str(exc)
        errors.update({k: v for k, v in ds.unreadable().items()})
    except (DatasetError, OSError) as exc:
        errors["dataset"] = str(exc)
    completed = len(recorded) + len(not_written) + dropped_mid_episode
    lost = sorted(recorded - loaded)
    return {"pass": bool(recorded) and not lost and not errors and not not_written
            and not dropped_mid_episode,
            "completed_by_actors": completed, "recorded_by_session": len(recorded),
            "loaded_from_disk": len(loaded), "lost": lost, "not_written": len(not_written),
            "dropped_mid_episode": dropped_mid_episode,
            "report_episodes_not_written": report.get("episodes_not_written"),
            "on_disk_not_in_logs": sorted(loaded - recorded), "unreadable": errors}


def _actor_log_lines(run_dir: Path) -> list[str]:
    """Every actor process's log: logs/actor*.log (a restarted actor appends to the same file)."""
    return [ln for p in sorted((run_dir / "logs").glob("actor*.log")) for ln in _lines(p)]


def _check_unsafe(base: dict | None, end: dict | None) -> dict:
    if not base or not end:
        return {"pass": False, "why": "the emulator's goal-write counts were not read"}
    writes = end["goal_writes"] - base["goal_writes"]
    unsafe = end["unsafe_goal_writes"] - base["unsafe_goal_writes"]
    return {"pass": writes > 0 and unsafe == 0, "goal_writes": writes, "unsafe_goal_writes": unsafe,
            "examples": end.get("unsafe_examples", [])[-5:] if unsafe else []}


def _check_resumes(faults: list[dict], metrics_lines: list[str] | None = None) -> dict:
    """Each learner kill: the restarted learner loaded the latest checkpoint and, from its own
    metrics lines, went on from that checkpoint's env-step count and trained on what arrived
    (a learner that zeroed its count owed no updates until the whole session had been re-sent)."""
    kills = [f for f in faults if f["kind"] == "learner_kill" and f.get("injected")]
    recs = [r for r in (_json(ln) for ln in (metrics_lines or [])) if r.get("kind") == "train"]
    each = []
    for f in kills:
        line = (f.get("observed") or {}).get("resume_line") or ""
        latest = f.get("latest_checkpoint_at_kill")
        m = re.search(r"resumed the session from (\S+) \(env step (\d+), (\d+) updates\)", line)
        got = m.group(1) if m else None
        e = {"latest_at_kill": latest, "resumed_from": got,
             "pass": bool(got and latest and Path(got).name == Path(latest).name)}
        if m and metrics_lines is not None:
            e["went_on"] = went_on = _resumed_learner_went_on(recs, f.get("pid"), int(m.group(2)),
                                                              int(m.group(3)))
            e["pass"] = e["pass"] and went_on["pass"]
        each.append(e)
    return {"pass": bool(kills) and all(e["pass"] for e in each), "kills": each}


def _json(line: str) -> dict:
    try:
        rec = json.loads(line)
    except ValueError:
        return {}
    return rec if isinstance(rec, dict) else {}


#: env steps a restarted learner must have received before it is expected to have trained
RESUME_STEPS_TO_TRAIN = 50


def _resumed_learner_went_on(recs: list[dict], killed_pid, step: int, updates: int) -> dict:
    """The metrics of the learner that wrote next after `killed_pid`'s last line: its first
    env-step count is the checkpoint's (`step`) or more, and once it has received
    RESUME_STEPS_TO_TRAIN steps its update count is above the checkpoint's (`updates`)."""
    last = max((i for i, r in enumerate(recs) if r.get("pid") == killed_pid), default=None)
    after = [r for r in recs[(last + 1 if last is not None else 0):] if r.get("pid") != killed_pid]
    if not after:
        return {"pass": False, "why": "no metrics line from the restarted learner"}
    mine = [r for r in after if r.get("pid") == after[0].get("pid")]
    first, end = mine[0], mine[-1]
    received = int(end.get("env_steps", 0)) - int(first.get("env_steps", 0))
    kept = int(first.get("env_steps", 0)) >= step
    trained = received < RESUME_STEPS_TO_TRAIN or int(end.get("updates", 0)) > updates
    return {"pass": kept and trained, "first_env_steps": first.get("env_steps"), "checkpoint_env_steps": step,
            "env_steps_received": received, "updates_after": int(end.get("updates", 0)) - updates}


def _server_ready_times(log_lines: list[str]) -> list[float]:
    """The unix times the reward server's processes said they were ready (their `serving` lines)."""
    out = []
    for ln in log_lines:
        m = re.search(r"reward server: serving .* \(ready at ([0-9.]+)\)", ln)
        if m:
            out.append(float(m.group(1)))
    return out


def _labels_while_down(metrics_lines: list[str], kill: dict, margin_s: float = 0.5,
                       ready_times: list[float] | None = None) -> dict:
    """The learner's reward-server counters on its metrics lines between a kill (+ `margin_s`,
    for a reply already on the wire) and the restarted server's return: `labelled` must not grow
    in that window (no transition got a reward while the server was down), per learner process
    (a restarted learner counts from 0). The return is the soak's probe's first answer, or the
    restarted server's own ready time where that is earlier: the probe only bounds it from above
    (the 2026-11-26 120-minute run's first kill: the learner had its answer 0.10 s before the
    probe, on a loaded machine, and a metrics line in between showed the relabelled transitions)."""
    t0 = kill.get("killed_at")
    t1 = (kill.get("observed") or {}).get("answering_at")
    if t0 is None or t1 is None:
        return {"pass": False, "why": "the kill or the server's return was not observed"}
    ready = min((t for t in (ready_times or []) if t > t0), default=None)
    if ready is not None:
        t1 = min(t1, ready)
    recs = [r for r in (_json(ln) for ln in metrics_lines)
            if isinstance(r.get("reward_server"), dict) and r.get("time") is not None]

    def window(start: float) -> dict:
        by_pid: dict = {}
        for rec in recs:
            if start < rec["time"] < t1:
                by_pid.setdefault(rec.get("pid"), []).append(rec["reward_server"])
        return by_pid

    start = t0 + margin_s
    by_pid = window(start)
    if sum(len(v) for v in by_pid.values()) < 2:
        # a server back within ~one metrics period leaves one line after the margin: widen the
        # window to the kill itself (stricter: a reply already on the wire then counts as growth)
        start = t0
        by_pid = window(start)
    grew = {str(pid): rs[-1]["labelled"] - rs[0]["labelled"] for pid, rs in by_pid.items()}
    lines = sum(len(v) for v in by_pid.values())
    held = {str(pid): rs[-1]["held"] - rs[0]["held"] for pid, rs in by_pid.items()}
    return {"pass": lines >= 2 and not any(grew.values()), "window_s": round(t1 - start, 2),
            "metrics_lines_in_window": lines, "labelled_growth_in_window": grew,
            "held_growth_in_window": held}


def _check_accounted(faults: list[dict], report: dict, run_dir: Path | None = None) -> dict:
    """Each injected fault against what the session's report (and the emulator) counted."""
    inj = [f for f in faults if f.get("injected")]
    n = {k: sum(1 for f in inj if f["kind"] == k) for k, _, _ in ROUND}
    bus = report.get("bus") or {}
    emu = report.get("emulator_faults") or {}
    per = {
        "bus_corrupt": {"injected": n["bus_corrupt"],
                        "emulator_replies_corrupted": emu.get("replies_corrupted"),
                        "driver_bad_checksums": bus.get("bad_checksums"),
                        "pass": n["bus_corrupt"] == 0 or (emu.get("replies_corrupted", 0) > 0
                                                          and bus.get("bad_checksums", 0) > 0)},
        "bus_drop": {"injected": n["bus_drop"], "emulator_bytes_dropped": emu.get("bytes_dropped"),
                     "driver_retries": bus.get("retries"),
                     "pass": n["bus_drop"] == 0 or (emu.get("bytes_dropped", 0) > 0
                                                    and bus.get("retries", 0) > 0)},
        "camera_stall": {"injected": n["camera_stall"], "emulator_stalls": emu.get("camera_stalls"),
                         "pass": emu.get("camera_stalls") == n["camera_stall"] and all(
                             f["observed"]["frames_during"] == 0 and f["observed"]["frames_1s_after"] > 0
                             for f in inj if f["kind"] == "camera_stall")},
        "learner_kill": {"injected": n["learner_kill"], "report_learner_restarts": report.get("learner_restarts"),
                         "pass": report.get("learner_restarts") == n["learner_kill"]},
        "actor_kill": {"injected": n["actor_kill"], "report_actor_restarts": report.get("actor_restarts"),
                       "pass": report.get("actor_restarts") == n["actor_kill"]},
        "disk_full": {"injected": n["disk_full"], "report_checkpoint_failures": report.get("checkpoint_failures"),
                      "pass": (report.get("checkpoint_failures") or 0) >= n["disk_full"] and all(
                          f["observed"]["checkpoint_failures"] >= 1 for f in inj if f["kind"] == "disk_full")},
    }
    served = report.get("reward_server") or {}
    kills = [f for f in inj if f["kind"] == "reward_model_kill"]
    metrics = _lines(run_dir / "metrics.jsonl") if run_dir is not None else []
    ready = _server_ready_times(_lines(run_dir / "logs" / "reward_server.log")) if run_dir is not None else []
    windows = [_labels_while_down(metrics, f, ready_times=ready) for f in kills]
    per["reward_model_kill"] = {
        "injected": n["reward_model_kill"], "report_reward_server_restarts": report.get("reward_server_restarts"),
        "held": served.get("held"), "relabelled": served.get("relabelled"), "dropped": served.get("dropped"),
        "server_timeouts": served.get("server_timeouts"), "down_windows": windows,
        "pass": n["reward_model_kill"] == 0 or (
            report.get("reward_server_restarts") == n["reward_model_kill"]
            and (served.get("held") or 0) > 0 and (served.get("relabelled") or 0) > 0
            and all(w["pass"] for w in windows))}
    missed = [f["kind"] for f in faults if not f.get("injected") and not f.get("not_applicable")]
    return {"pass": all(v["pass"] for v in per.values()) and not missed, "per_kind": per,
            "planned_but_not_injected": missed,
            "not_applicable": {f["kind"]: f["not_applicable"] for f in faults if f.get("not_applicable")}}


def markdown(r: dict) -> str:
    lines = [f"# Soak: {r['minutes']} min of fine-tuning under faults",
             "", f"`robolearn bench soak --minutes {r['minutes']:g} --seed {r['seed']}`; "
             f"wall {r.get('wall_s')} s (pretraining {r.get('pretrain_s', 'reused')}); "
             f"session: `{r.get('command')}` ({r.get('session_wall_s')} s); disk: {r.get('disk')}",
             "", f"**{'PASSED' if r['passed'] else 'FAILED'}**", "", "| check | pass | details |", "|---|---|---|"]
    for k, v in r["checks"].items():
        d = {a: b for a, b in v.items() if a != "pass"}
        lines.append(f"| {k} | {'yes' if v['pass'] else 'NO'} | `{json.dumps(d)[:400]}` |")
    lines += ["", "| t (s) | fault | injected | observed |", "|---|---|---|---|"]
    for f in r.get("faults", []):
        lines.append(f"| {f.get('t_s', '-')} | {f['kind']} | {f.get('injected')} | "
                     f"`{json.dumps(f.get('observed', f.get('not_applicable')))[:300]}` |")
    return "\n".join(lines) + "\n"
