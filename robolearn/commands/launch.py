"""`robolearn launch LAUNCH.toml`: learner + actor(s) as separate local processes.

Why separate processes (not threads): the actor's control loop must not share an interpreter
(GIL, GC pauses) with gradient updates. The launcher picks free ports when the file says
`port = 0`, prints the addresses, writes each child's log to RUN/logs/, stops every child on
Ctrl-C / SIGTERM (SIGTERM to each child's process group, SIGKILL after a grace period), and
exits non-zero if any child failed. Each child also asks the kernel for SIGTERM when the
launcher dies (Linux `PR_SET_PDEATHSIG`), so even a SIGKILLed launcher leaves no orphans.
"""
HELP = ("Start the learner and the actor(s) of a launch TOML as local processes (or Ray actors on a "
        "Ray cluster with --engine ray); print their addresses; Ctrl-C stops all of them.")

GRACE_S = 20.0


def add_arguments(parser) -> None:
    parser.add_argument("launch", help="launch TOML (e.g. launch/sim_arm_reach_async.toml)")
    parser.add_argument("--out", help="run folder (overrides out)")
    parser.add_argument("--steps", type=int, help="total env steps (overrides learner.total_env_steps)")
    parser.add_argument("--actors", type=int, help="number of actors (overrides actors)")
    parser.add_argument("--engine", choices=("local", "ray"),
                        help="local child processes, or Ray actors (overrides [cluster] engine; "
                             "needs pip install 'robolearn[ray]')")
    parser.add_argument("--quiet", action="store_true", help="no periodic progress lines")
    parser.add_argument("--overwrite", action="store_true",
                        help="delete an earlier run in the run folder and start again (refused without it)")


def validate_launch(cfg, build_env: bool = True) -> None:
    """Everything a child would trip over, checked before any child starts (so the real error
    is here, not in a child's log): the algo name, the env ID, the env built (and closed) once
    with its env_kwargs."""
    from robolearn.errors import ConfigError, RobolearnError
    from robolearn.policies.registry import ALGOS
    from robolearn.runtime.actor import _make_env

    if cfg.algo not in ALGOS:
        raise ConfigError(f"unknown algo {cfg.algo!r}; choose one of: {', '.join(ALGOS)} "
                          "(see `robolearn algos`)")
    if not build_env:
        return
    try:
        env = _make_env(cfg)
    except RobolearnError:
        raise
    except Exception as exc:  # noqa: BLE001 - gymnasium / the env's own errors, in one line
        raise ConfigError(f"env {cfg.env!r} with env_kwargs {cfg.env_kwargs} cannot be built: "
                          f"{type(exc).__name__}: {exc} (see `robolearn envs`)") from None
    env.close()


def _stop(procs, grace=GRACE_S):
    import os
    import signal
    import time

    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def _last_metrics(path):
    import json

    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 8192))
            lines = f.read().decode(errors="replace").strip().splitlines()
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def run(args) -> int:
    from robolearn.commands.learner import apply_overrides
    from robolearn.runtime.config import load_launch

    cfg = load_launch(args.launch)
    if args.actors is not None:
        cfg.actors = args.actors
    if getattr(args, "engine", None):
        cfg.cluster.engine = args.engine
    cfg = apply_overrides(cfg, args)
    if cfg.cluster.engine == "ray":  # before anything else: without Ray, one line saying so
        from robolearn.runtime.ray_cluster import require_ray

        require_ray()
    from robolearn.commands.run_owner import take_run_folder
    from robolearn.run_lock import check_writable_dir

    check_writable_dir(cfg.run_dir(), "run folder")
    # under Ray a robot's env exists only on the robot's node: it is built (and checked) there
    validate_launch(cfg, build_env=not (cfg.cluster.engine == "ray" and cfg.drives_hardware()))
    lock = take_run_folder(cfg.run_dir(), overwrite=args.overwrite)
    try:
        if cfg.cluster.engine == "ray":
            return _launch_ray(args, cfg)
        return _launch(args, cfg)
    finally:
        lock.release()


def _launch(args, cfg) -> int:
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    from robolearn.processes import die_with_parent
    from robolearn.runtime.transport import endpoint, free_port

    lc = cfg.learner
    port = lc.port or free_port(lc.host)
    wport = lc.weights_port or free_port(lc.host)
    while wport == port:
        wport = free_port(lc.host)
    run_dir = cfg.run_dir()
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "robolearn.cli"]
    common = ["--port", str(port), "--weights-port", str(wport), "--out", str(run_dir)]
    learner_extra = ["--steps", str(args.steps)] if args.steps is not None else []
    children = [("learner", base + ["learner", args.launch] + common + learner_extra
                 + ["--owned-by", str(os.getpid())])]
    for i in range(cfg.actors):
        children.append((f"actor{i}", base + ["actor", args.launch, "--id", f"actor{i}",
                                              "--seed", str(cfg.seed + 1000 * (i + 1))] + common))
    print(f"run folder: {run_dir}", flush=True)
    print(f"learner data    {endpoint(lc.host, port)}", flush=True)
    print(f"learner weights {endpoint(lc.host, wport)}", flush=True)

    stopping = {"signal": None}

    def _on_signal(signum, frame):
        stopping["signal"] = signum

    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    procs = {}
    files = []
    try:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        for name, cmd in children:
            f = open(logs / f"{name}.log", "w")
            files.append(f)
            procs[name] = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                                           start_new_session=True, env=env,
                                           preexec_fn=die_with_parent())
            print(f"started {name} pid {procs[name].pid} (log {logs / (name + '.log')})", flush=True)
            if name == "learner":
                time.sleep(0.2)
        # written now (and again at the end) so a supervisor can find the children if this
        # launcher itself is killed hard
        (run_dir / "launch.json").write_text(json.dumps(
            {"data_endpoint": endpoint(lc.host, port), "weights_endpoint": endpoint(lc.host, wport),
             "children": {n: {"pid": p.pid, "returncode": None} for n, p in procs.items()},
             "running": True}, indent=1))
        failed: dict[str, int] = {}
        last_print = time.monotonic()
        learner = procs["learner"]
        while True:
            if stopping["signal"] is not None:
                print("stopping all processes ...", flush=True)
                _stop(list(procs.values()))
                break
            rc = learner.poll()
            if rc is not None:
                if rc != 0:
                    failed["learner"] = rc
                _stop([p for n, p in procs.items() if n != "learner"])
                break
            for name, p in procs.items():
                if name != "learner" and p.poll() not in (None, 0) and name not in failed:
                    failed[name] = p.returncode
                    print(f"{name} exited with code {p.returncode}; training continues from "
                          f"the other actors (see {logs / (name + '.log')})", flush=True)
            actors_running = [n for n, p in procs.items() if n != "learner" and p.poll() is None]
            if not actors_running:
                if any(n != "learner" and p.returncode != 0 for n, p in procs.items()):
                    print("no actor is running any more: stopping the learner", flush=True)
                    _stop([learner])
                else:  # actors ended cleanly: a finishing learner ignores SIGTERM, and
                    _stop([learner], grace=600.0)  # one still training stops and saves
                if learner.returncode not in (0, None, -signal.SIGTERM):
                    failed["learner"] = learner.returncode
                break
            if not args.quiet and time.monotonic() - last_print > 10:
                last_print = time.monotonic()
                m = _last_metrics(run_dir / "metrics.jsonl")
                if m:
                    print(f"env_steps {m.get('env_steps')}  updates {m.get('updates')}  "
                          f"updates/s {m.get('updates_per_s')}  actors {m.get('actors_alive')}  "
                          f"train success {m.get('train_success_rate')}", flush=True)
            time.sleep(0.1)
        for name, p in procs.items():
            if name not in failed and p.returncode not in (0, None, -signal.SIGTERM):
                failed[name] = p.returncode
    finally:
        _stop([p for p in procs.values() if p.poll() is None], grace=5.0)
        for f in files:
            f.close()
        for s, h in old.items():
            signal.signal(s, h)
    record = {"data_endpoint": endpoint(lc.host, port), "weights_endpoint": endpoint(lc.host, wport),
              "children": {n: {"pid": p.pid, "returncode": p.returncode} for n, p in procs.items()},
              "failed": failed, "signal": stopping["signal"]}
    (run_dir / "launch.json").write_text(json.dumps(record, indent=1))
    summary = run_dir / "summary.json"
    if summary.exists():
        s = json.loads(summary.read_text())
        print(f"summary: env_steps {s.get('env_steps')}  updates {s.get('updates')}  "
              f"eval_success_rate {s.get('eval_success_rate')}  ({summary})", flush=True)
    if failed:
        print(f"robolearn launch: failed children: {failed} (logs in {logs})", file=sys.stderr)
        return 1
    if stopping["signal"] is not None:
        return 130
    return 0


def _launch_ray(args, cfg) -> int:
    """The same run as `_launch`, with Ray placing, supervising and restarting the workers
    (robolearn/runtime/ray_cluster.py). Ctrl-C / SIGTERM stops the learner, which saves."""
    import json
    import signal
    import sys

    from robolearn.runtime.ray_cluster import RayRun

    run_dir = cfg.run_dir()
    print(f"run folder: {run_dir} (engine ray, cluster {cfg.cluster.address or 'local'})", flush=True)
    run = RayRun(cfg, run_dir, quiet=args.quiet, printer=lambda m: print(m, flush=True))
    stopping = {"signal": None}

    def _on_signal(signum, frame):
        stopping["signal"] = signum
        run.stop()

    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        run.start()
        print(f"learner data    {run.endpoints[0]}", flush=True)
        print(f"learner weights {run.endpoints[1]}", flush=True)
        record = run.wait()
    finally:
        run.shutdown()
        for s, h in old.items():
            signal.signal(s, h)
    record["signal"] = stopping["signal"]
    (run_dir / "launch.json").write_text(json.dumps(record, indent=1, default=str))
    s = record.get("summary") or {}
    if s:
        print(f"summary: env_steps {s.get('env_steps')}  updates {s.get('updates')}  "
              f"eval_success_rate {s.get('eval_success_rate')}  restarts {record['restarts']}  "
              f"({run_dir / 'summary.json'})", flush=True)
    if "learner" in record["failed"] or (record["failed"] and len(record["failed"]) == cfg.actors):
        print(f"robolearn launch: failed on Ray: {record['failed']}", file=sys.stderr)
        return 1
    if stopping["signal"] is not None:
        return 130
    return 0
