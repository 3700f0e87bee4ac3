"""`robolearn finetune LAUNCH.toml`: carry a sim-pretrained policy to the robot and fine-tune it.

One session: (emulator, when the launch file names a reality) -> zero-shot evaluation of the
pretrained policy on the robot -> learner + actor processes (the learner starts from the
pretrained checkpoint with the chosen warm start; the actor records every episode) -> final
evaluation of the fine-tuned policy on the robot -> session_report.json/.png. A learner that
dies is restarted from the session's last checkpoint while the actor holds the robot; with
`[reward] where = "server"` the session starts `robolearn reward serve` too and restarts it when
it dies (the learner holds transitions meanwhile); Ctrl-C stops them all, which checkpoints the
learner and commits the episode in progress.
"""
from __future__ import annotations

import argparse

HELP = ("Fine-tune a sim-pretrained policy on the robot (or the emulated robot): zero-shot eval, "
        "learner + recording actor, final eval, session report. See docs/finetune.md.")

LEARNER_RESTARTS = 3
GRACE_S = 20.0


def add_arguments(parser) -> None:
    parser.add_argument("launch", help="launch TOML with a [finetune] table "
                                       "(e.g. launch/finetune_arm_reach_real.toml)")
    parser.add_argument("--out", help="run folder (overrides out)")
    parser.add_argument("--steps", type=int, help="robot env steps to fine-tune for "
                                                   "(overrides learner.total_env_steps)")
    parser.add_argument("--checkpoint", help="sim-pretrained run folder (overrides finetune.checkpoint)")
    parser.add_argument("--reality", help="emulate the robot with this reality file "
                                          "(overrides finetune.reality)")
    parser.add_argument("--load", choices=("agent", "policy", "none"),
                        help="what to take from the checkpoint (overrides finetune.load; none: the "
                             "from-scratch baseline with the same networks)")
    parser.add_argument("--calibrate-arm", action=argparse.BooleanOptionalAction, default=None,
                        help="run the stop calibration on the arm first (overrides finetune.calibrate_arm)")
    parser.add_argument("--calibrate-perception", action=argparse.BooleanOptionalAction, default=None,
                        help="fine-tune the camera localisers on frames the arm labels, before the "
                             "zero-shot (overrides finetune.calibrate_perception)")
    parser.add_argument("--zero-shot-only", action="store_true",
                        help="only the zero-shot evaluation of the pretrained policy on the robot (and "
                             "the arm calibration, if on): no learner, no actor")
    parser.add_argument("--quiet", action="store_true", help="no periodic progress lines")
    parser.add_argument("--max-restarts", type=int, default=LEARNER_RESTARTS,
                        help=f"restarts allowed for a killed learner, and for an actor killed by a "
                             f"signal, each (default {LEARNER_RESTARTS}; a soak kills them on purpose)")
    parser.add_argument("--overwrite", action="store_true",
                        help="delete an earlier session in the run folder and start again")
    parser.add_argument("--resume", action="store_true",
                        help="continue an unfinished session in the run folder from its last checkpoint")
    from robolearn.commands.env_kwargs import add_env_kw_argument

    add_env_kw_argument(parser, over="the launch file's [env_kwargs] (the robot's env)")
    rec = parser.add_argument_group("recording reward-model data on the robot (no learner, no actor)")
    rec.add_argument("--record", metavar="DIR", default=None,
                     help="record teleoperated episodes on the session's robot (its calibration, "
                          "cameras, perception and resets) into dataset DIR, with camera frames and "
                          "the device's success labels (no reward model yet): the data `robolearn "
                          "reward train DIR --kind classifier` learns from")
    rec.add_argument("--episodes", type=int, default=40, help="--record: episodes to save (default 40)")
    rec.add_argument("--device", default=None,
                     help="--record: teleop device (keyboard, spacemouse, gamepad, leader; default "
                          "operator, the emulated person, on an emulated robot, else keyboard)")
    rec.add_argument("--operator-mode", choices=("demo", "fail", "alternate"), default="alternate",
                     help="--device operator: successes, near misses, or both in turn (default)")
    rec.add_argument("--record-seed", type=int, default=None,
                     help="--record: reset seed of the first episode (default: after the dataset's last)")


def children_config(cfg) -> dict:
    """The launch file the session's learner and actor read: the calibrations are done, and
    their results are already in it (`[env_kwargs]` calibration/perception/cube_finder, the
    `[reward]` model), so they are marked off; left on, the children would refuse the
    calibrated `[reward]` (calibrate_reward makes it) or look as if they had to calibrate."""
    from robolearn.runtime.config import to_dict

    d = to_dict(cfg)
    d["finetune"].update(calibrate_arm=False, calibrate_perception=False, calibrate_reward=False)
    return d


def run(args) -> int:

    from robolearn.commands.env_kwargs import parse_env_kwargs
    from robolearn.errors import ConfigError
    from robolearn.runtime import finetune as F
    from robolearn.runtime.config import load_launch

    cfg = load_launch(args.launch)
    if cfg.finetune is None:
        raise ConfigError(f"{args.launch} has no [finetune] table: a fine-tuning session needs at "
                          "least finetune.checkpoint (see launch/finetune_arm_reach_real.toml)")
    ft = cfg.finetune
    cfg.env_kwargs.update(parse_env_kwargs(args.env_kw))  # CLI wins over the launch file
    if args.out:
        cfg.out = args.out
    if args.steps is not None:
        cfg.learner.total_env_steps = args.steps
    if args.checkpoint:
        ft.checkpoint = args.checkpoint
    if args.reality:
        ft.reality = args.reality
    if args.load:
        ft.load = args.load
    if args.calibrate_arm is not None:
        ft.calibrate_arm = args.calibrate_arm
    if args.calibrate_perception is not None:
        ft.calibrate_perception = args.calibrate_perception
    if args.calibrate_arm is not None or args.calibrate_perception is not None:
        cfg.validate()
    if args.max_restarts < 0:
        raise ConfigError(f"--max-restarts {args.max_restarts}: must be >= 0")
    if args.record and args.episodes < 1:
        raise ConfigError(f"--episodes {args.episodes}: record at least 1 episode")
    if args.zero_shot_only and (ft.load == "none" or not ft.zero_shot_episodes):
        raise ConfigError("--zero-shot-only evaluates the pretrained policy: it needs finetune.load "
                          "\"agent\" or \"policy\" and zero_shot_episodes > 0")
    F.resolve_agent(cfg)
    run_dir = cfg.run_dir()
    from robolearn.commands.run_owner import take_run_folder

    if args.overwrite and args.resume:
        raise ConfigError("--resume continues the session in the run folder; --overwrite would "
                          "delete it: pass one")
    if args.record:
        lock = take_run_folder(run_dir, overwrite=False, keep_existing=True)
        try:
            return _record(cfg, args, run_dir)
        finally:
            lock.release()
    if (run_dir / "session_report.json").exists() and not args.overwrite:
        raise ConfigError(f"{run_dir} already holds a finished session; choose another --out, or "
                          "pass --overwrite to delete it (nothing was deleted)")
    # the session's learner and actor write here: this process holds the folder's lock for the
    # whole session; the learner it (re)starts gets --owned-by and takes no lock of its own
    lock = take_run_folder(run_dir, overwrite=args.overwrite, keep_existing=args.resume,
                           resume=f"robolearn finetune {args.launch} --resume")
    try:
        return _session(args, cfg, run_dir)
    finally:
        lock.release()


def _session(args, cfg, run_dir) -> int:
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    from robolearn.commands.launch import _last_metrics, _stop
    from robolearn.configs import dump_toml
    from robolearn.runtime import finetune as F
    from robolearn.processes import die_with_parent
    from robolearn.runtime.finetune_calibration import calibrate_robot_arm, calibrate_robot_perception
    from robolearn.runtime.finetune_report import session_report
    from robolearn.runtime.transport import free_port

    ft = cfg.finetune
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "logs").mkdir(exist_ok=True)

    emulator = None
    budget = F.RobotBudget(ft.robot_minutes, ft.final_episodes, margin=ft.final_time_margin)   # robot time counts from here
    try:
        if ft.reality:
            emulator = F.start_emulator(cfg, run_dir / "logs" / "emulator.log")
            cfg.env_kwargs.update(emulator.env_kwargs())
            ft.truth_url = emulator.truth_url
            print(f"emulated robot: {emulator.describe()}", flush=True)
            from robolearn.jsonfile import write_json_atomic

            write_json_atomic(run_dir / "robot.json", emulator.info())  # where a soak injects faults
        arm_calibration = None
        if ft.calibrate_arm:
            print("calibrating the arm against its mechanical stops (robolearn calibrate-arm)", flush=True)
            arm_calibration = calibrate_robot_arm(cfg, run_dir)
            print(f"arm calibration: {json.dumps(arm_calibration)}", flush=True)
        perception_calibration = None
        if ft.calibrate_perception:
            print("calibrating the camera localisers with frames the arm labels", flush=True)
            perception_calibration = calibrate_robot_perception(cfg, run_dir)
            print(f"perception calibration: {json.dumps(perception_calibration)}", flush=True)
        retrainer = None
        if ft.label_successes and not args.zero_shot_only:  # the operator's labels retrain the classifier, off the loop
            from robolearn.runtime.finetune_labels import start_labelling

            retrainer = start_labelling(cfg, run_dir)
            print(f"reward labels: the operator confirms the classifier's successes; retrain every "
                  f"{ft.retrain_every} labels (model: {cfg.reward['model']})", flush=True)
        car_extra, teleports_before = {}, None
        if "CarLap" in cfg.env:  # the reference lap and the demonstrations (runtime/finetune_car.py)
            teleports_before = _car_before_learning(cfg, run_dir, emulator, car_extra)
        # the actor records, holds still until the pretrained weights arrive, and pauses
        # (holds the robot) while the learner is away
        cfg.actor.random_until_weights = False
        cfg.actor.on_learner_lost = "pause"
        if ft.record:
            cfg.actor.record = str(run_dir / "episodes")
        cfg.learner.eval_episodes = 0  # evaluation happens on the robot, below
        if not cfg.learner.checkpoint_every:
            cfg.learner.checkpoint_every = 500
        if ft.final_policy == "reward":  # snapshots to choose the final policy from
            cfg.learner.policy_snapshot_every = ft.snapshot_every
        lc = cfg.learner
        lc.port = lc.port or free_port(lc.host)
        lc.weights_port = lc.weights_port or free_port(lc.host)
        while lc.weights_port == lc.port:
            lc.weights_port = free_port(lc.host)
        reward_server = None
        if cfg.reward and cfg.reward.get("where") == "server":  # its own process, restarted like the others
            from robolearn.reward_config import reward_config
            from robolearn.runtime.reward_server import RewardServerProcess

            cfg.reward.setdefault("address", f"tcp://{lc.host}:{free_port(lc.host)}")
            reward_server = RewardServerProcess(reward_config(cfg.reward), cfg.reward["address"],
                                                run_dir / "logs" / "reward_server.log", args.max_restarts)
        resolved = run_dir / "finetune_launch.toml"
        resolved.write_text(dump_toml(children_config(cfg)))
        hz = F.control_hz(cfg)
        report_extra = {"launch": str(args.launch), "warm_start": ft.warm_start, "load": ft.load,
                        "checkpoint": ft.checkpoint, "reality": ft.reality or None,
                        "budget_env_steps": lc.total_env_steps,
                        "budget_robot_minutes": round(lc.total_env_steps / hz / 60.0, 2)}
        report_extra.update(car_extra)
        if arm_calibration is not None:
            report_extra["arm_calibration"] = arm_calibration
        if perception_calibration is not None:
            report_extra["perception_calibration"] = perception_calibration

        if ft.zero_shot_episodes and ft.load == "none":
            print("finetune.load = \"none\" (from scratch): no zero-shot evaluation of a pretrained policy",
                  flush=True)
        elif ft.zero_shot_episodes:
            print(f"zero-shot: {ft.zero_shot_episodes} episodes of the pretrained policy on the robot",
                  flush=True)
            report_extra["zero_shot"] = F.evaluate_checkpoint(cfg, ft.checkpoint, ft.zero_shot_episodes)
            budget.timed_evaluation(report_extra["zero_shot"])
            print_evaluation("zero-shot", report_extra["zero_shot"])
        if args.zero_shot_only:
            report_extra["zero_shot_only"] = True
            if emulator is not None and emulator.truth_url:
                report_extra["emulator_hand_moves"] = F.hand_moves(emulator.truth_url)
            report = session_report(run_dir, hz, report_extra)
            print(f"session report: {run_dir / 'session_report.json'}", flush=True)
            print(json.dumps({k: report.get(k) for k in ("zero_shot", "arm_calibration",
                                                         "perception_calibration")}), flush=True)
            return 0

        if ft.robot_demos:  # the emulated operator's demos on the robot: RLPD prior data (HIL-SERL)
            print(f"robot demos: the emulated operator records {ft.robot_demos} lifts on the robot "
                  f"(teleop path) into {run_dir / F.ROBOT_DEMOS}", flush=True)
            report_extra["robot_demos"] = F.record_robot_demos(cfg, run_dir, ft.robot_demos)
            print(f"robot demos: {json.dumps(report_extra['robot_demos'])}", flush=True)

        stopping = {"signal": None}
        old = {s: signal.signal(s, lambda signum, frame: stopping.__setitem__("signal", signum))
               for s in (signal.SIGINT, signal.SIGTERM)}
        base = [sys.executable, "-m", "robolearn.cli"]
        logs = run_dir / "logs"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        files, restarts, actor_restarts = [], 0, 0
        restart_log: list[dict] = []  # every restart, for the report (a soak matches its kills)
        t_session = time.monotonic()

        def start(name, cmd):
            f = open(logs / f"{name}.log", "a")
            files.append(f)
            p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                 env=env, preexec_fn=die_with_parent())
            print(f"started {name} pid {p.pid} (log {logs / (name + '.log')})", flush=True)
            return p

        learner_cmd = base + ["learner", str(resolved), "--out", str(run_dir),
                              "--owned-by", str(os.getpid())]
        actor_cmd = base + ["actor", str(resolved), "--id", "robot0", "--out", str(run_dir)]
        if reward_server is not None:
            reward_server.t0 = t_session
            reward_server.start()
        if budget.training_over():
            from robolearn.errors import ConfigError

            raise ConfigError(
                f"finetune.robot_minutes = {ft.robot_minutes:g} leaves no robot time for training: "
                f"{budget.used_s() / 60:.1f} min went to calibration and the zero-shot evaluation, and "
                f"the final evaluation needs ~{budget.final_reserve_s / 60:.1f}; raise the budget or "
                "lower final_episodes")
        learner = start("learner", learner_cmd)
        time.sleep(0.2)
        actor = start("actor", actor_cmd)
        last_print = time.monotonic()
        failed: dict[str, int] = {}
        if budget.budget_s:
            print(f"robot-time budget: {ft.robot_minutes:g} min; {budget.used_s() / 60:.1f} used before "
                  f"training, {budget.final_reserve_s / 60:.1f} kept for the final evaluation", flush=True)
        try:
            while True:
                if budget.training_over():
                    print(f"robot-time budget: training ends at {budget.used_s() / 60:.1f} robot-min "
                          f"(learner checkpoints, actor commits its episode); "
                          f"{budget.final_reserve_s / 60:.1f} min kept for the final evaluation", flush=True)
                    _stop([actor, learner], grace=GRACE_S)
                    report_extra["training_ended_by_budget"] = True
                    break
                if stopping["signal"] is not None:
                    print("stopping: learner checkpoints, actor commits the episode in progress",
                          flush=True)
                    _stop([actor, learner], grace=GRACE_S)
                    break
                rc = learner.poll()
                if rc is not None and rc != 0:
                    if restarts >= args.max_restarts:
                        failed["learner"] = rc
                        _stop([actor], grace=GRACE_S)
                        break
                    restarts += 1
                    print(f"learner exited with code {rc}: the actor holds the robot; restarting "
                          f"the learner from the session's last checkpoint ({restarts}/"
                          f"{args.max_restarts})", flush=True)
                    learner = start("learner", learner_cmd)
                    restart_log.append({"process": "learner", "rc": rc, "pid": learner.pid,
                                        "t_s": round(time.monotonic() - t_session, 1)})
                elif rc == 0:  # budget reached: the actor is told to stop by the learner
                    try:
                        actor.wait(timeout=GRACE_S)
                    except subprocess.TimeoutExpired:
                        _stop([actor], grace=5.0)
                    break
                if reward_server is not None:  # killed or crashed: restarted; the learner holds meanwhile
                    why = reward_server.check()
                    if why is not None:
                        print(f"{why}: stopping the session", flush=True)
                        failed["reward_server"] = reward_server.proc.returncode
                        _stop([actor, learner], grace=GRACE_S)
                        break
                arc = actor.poll()
                if arc is not None and arc < 0 and actor_restarts < args.max_restarts:
                    # killed by a signal (SIGKILL, the OOM killer): not a bus or device fault,
                    # which exits with an error code and ends the session below. The new actor
                    # holds still until the learner's weights arrive and appends to the
                    # recording; the killed one's episode in progress was never completed.
                    actor_restarts += 1
                    summary_file = run_dir / "actor_robot0.json"  # its counts, up to ~5 s old
                    if summary_file.exists():
                        summary_file.rename(run_dir / f"actor_robot0.killed{actor_restarts}.json")
                    print(f"actor killed by signal {-arc}: restarting it ({actor_restarts}/"
                          f"{args.max_restarts}); its episode in progress is not recorded", flush=True)
                    actor = start("actor", actor_cmd)
                    restart_log.append({"process": "actor", "rc": arc, "pid": actor.pid,
                                        "t_s": round(time.monotonic() - t_session, 1)})
                elif arc is not None:
                    if actor.returncode != 0:
                        failed["actor"] = actor.returncode
                    print(f"actor exited with code {actor.returncode}: stopping the learner", flush=True)
                    _stop([learner], grace=600.0)
                    break
                if not args.quiet and time.monotonic() - last_print > 10:
                    last_print = time.monotonic()
                    m = _last_metrics(run_dir / "metrics.jsonl")
                    if m:
                        print(f"robot steps {m.get('env_steps')} ({m.get('env_steps', 0) / hz / 60:.1f} "
                              f"robot-min)  updates {m.get('updates')}  train success "
                              f"{m.get('train_success_rate')}", flush=True)
                time.sleep(0.1)
        finally:
            _stop([p for p in (learner, actor) if p.poll() is None], grace=5.0)
            if reward_server is not None:  # after the learner: its last labels came from it
                reward_server.stop()
            for f in files:
                f.close()
            for s, h in old.items():
                signal.signal(s, h)
        if retrainer is not None:  # no new retrain; one under way finishes beside the final evaluation
            retrainer.stop()     # (waiting for it here held the robot idle 3 min on the clock: session 33)
        report_extra["learner_restarts"] = restarts
        report_extra["actor_restarts"] = actor_restarts
        if reward_server is not None:
            report_extra["reward_server_restarts"] = reward_server.restarts
            restart_log = sorted(restart_log + reward_server.restart_log, key=lambda r: r["t_s"])
        report_extra["restarts"] = restart_log
        report_extra["failed"] = failed
        report_extra["stopped_by_signal"] = stopping["signal"]
        if stopping["signal"] is None and not failed and ft.final_episodes:
            print(f"final: {ft.final_episodes} episodes of the fine-tuned policy on the robot", flush=True)
            final_policy = run_dir
            if ft.final_policy == "reward":
                from robolearn.runtime.policy_selection import choose_policy

                final_policy, report_extra["policy_selection"] = choose_policy(run_dir, ft.snapshot_every)
                sel = report_extra["policy_selection"]
                print(f"final policy: the snapshot at env step {sel['chosen_env_step']} (last "
                      f"{sel['last_env_step']}), chosen by the reward's successes without the operator "
                      "(their Wilson lower bound): "
                      + ", ".join(f"{r['env_step']}: {r['alone_successes']}/{r['episodes']}"
                                  + ("" if r["actor_trained"] else " (pretrained actor)")
                                  for r in sel["candidates"]), flush=True)
            report_extra["final"] = F.evaluate_checkpoint(cfg, final_policy, ft.final_episodes)
            print_evaluation("final", report_extra["final"])
        # the robot's wall time from the first motion to here, budget or not (the report's parts
        # sum the robot-busy pieces; this one also counts the robot idle while the learner starts)
        report_extra["robot_time_session_s"] = round(budget.used_s(), 1)
        if budget.budget_s:
            report_extra["robot_budget"] = budget.as_dict()
        if retrainer is not None:  # the robot is done; the last retrain is logged before the report reads it
            retrainer.join(timeout=900.0)
        summary = run_dir / "summary.json"
        if summary.exists():
            report_extra["learner_summary"] = {k: v for k, v in json.loads(summary.read_text()).items()
                                               if k in ("env_steps", "updates", "wall_s", "finetune",
                                                        "exit_reason", "utd", "updates_per_env_step",
                                                        "updates_behind_max", "updates_owed", "reward_server",
                                                        "prior_takeovers", "takeover_penalty")}
        if emulator is not None and emulator.truth_url:
            report_extra["emulator_hand_moves"] = F.hand_moves(emulator.truth_url)
        if emulator is not None:
            report_extra["emulator_faults"] = emulator.fault_state()
        if "CarLap" in cfg.env:
            from robolearn.runtime.finetune_car import car_report_entries

            report_extra.update(car_report_entries(run_dir, hz, teleports_before,
                                                   (report_extra.get("emulator_faults") or {}).get("teleports")))
        report = session_report(run_dir, hz, report_extra)
    finally:
        if emulator is not None:
            emulator.stop()
    print(f"session report: {run_dir / 'session_report.json'} and session_report.png", flush=True)
    summary_line = {k: report.get(k) for k in ("episodes", "robot_time_s", "zero_shot", "final",
                                               "interventions", "intervention_rate_by_block", "resets",
                                               "learner_restarts", "reward_server_restarts",
                                               "reward_server")}
    summary_line.update({k: report[k] for k in ("pure_pursuit_lap_time_s", "teleports", "human_prompts")
                         if "CarLap" in cfg.env and k in report})
    print(json.dumps(summary_line), flush=True)
    ls = report.get("learner_summary") or {}
    if ls.get("updates_per_env_step") is not None:
        print(f"learner: {ls['updates']} updates for {ls['env_steps']} robot steps, "
              f"{ls['updates_per_env_step']:g} per control step (configured {ls.get('utd')}; at worst "
              f"{ls['updates_behind_max']} behind, {ls['updates_owed']} owed when training stopped)", flush=True)
    if failed:
        print(f"robolearn finetune: failed: {failed} (logs in {logs})", file=sys.stderr)
        return 1
    return 130 if stopping["signal"] is not None else 0


def print_evaluation(label: str, res: dict) -> None:
    """An evaluation's result as one JSON line (its episodes summed), then the seeds of the
    episodes that failed by the truth (or by the reward, with no truth): the ones to trace."""
    import json

    print(f"{label}: {json.dumps({k: v for k, v in res.items() if k != 'per_episode'})}", flush=True)
    rows = res.get("per_episode") or []
    key = "true_success" if any(r["true_success"] is not None for r in rows) else "success"
    failed = [r["seed"] for r in rows if not r[key]]
    if rows:
        print(f"{label}: {len(failed)} of {len(rows)} episodes failed ({key.replace('_', ' ')})"
              + (f", seeds {failed}" if failed else ""), flush=True)


def _car_before_learning(cfg, run_dir, emulator, extra: dict):
    """The car's steps before the learner starts: the reference lap of pure pursuit on the
    emulator's true pose, and the demonstration laps the emulated operator drives through the
    gamepad (finetune.demo_episodes; prior_data = "demos" keeps them). Returns the emulator's
    teleport count before them (the report's `teleports` is the session's difference)."""
    import json

    from robolearn.runtime import finetune_car as C

    ft = cfg.finetune
    before = (emulator.fault_state() or {}).get("teleports") if emulator is not None else None
    if ft.truth_url:
        print("reference: pure pursuit on the emulator's true pose", flush=True)
        ref = C.pure_pursuit_true_pose(cfg, seed=cfg.seed)
        extra["pure_pursuit"] = ref
        extra["pure_pursuit_lap_time_s"] = ref["best_lap_time_s"]
        print(f"reference: {json.dumps({k: ref[k] for k in ('lap_times_s', 'collisions', 'wall_s')})}",
              flush=True)
    if ft.demo_episodes:
        print(f"demonstrations: {ft.demo_episodes} episodes by the emulated operator on the gamepad",
              flush=True)
        demos = C.record_demo_laps(cfg, run_dir / "demos", ft.demo_episodes, seed=cfg.seed + 5_000)
        extra["demos"] = demos
        print(f"demonstrations: {json.dumps(demos)}", flush=True)
        if ft.prior_data == "demos":
            ft.prior_data = demos["npz"]
    return before


def _record(cfg, args, run_dir) -> int:
    """`--record DIR`: the session's robot (emulator, calibration) + a teleop device -> dataset."""
    import json

    from robolearn.runtime import finetune as F
    from robolearn.runtime.finetune_calibration import calibrate_robot_arm, calibrate_robot_perception

    ft = cfg.finetune
    run_dir.mkdir(parents=True, exist_ok=True)
    emulator = None
    try:
        if ft.reality:
            emulator = F.start_emulator(cfg, run_dir / "emulator.log")
            cfg.env_kwargs.update(emulator.env_kwargs())
            ft.truth_url = emulator.truth_url
            print(f"emulated robot: {emulator.describe()}", flush=True)
        if ft.calibrate_arm:
            print("calibrating the arm against its mechanical stops (robolearn calibrate-arm)", flush=True)
            print(f"arm calibration: {json.dumps(calibrate_robot_arm(cfg, run_dir))}", flush=True)
        if ft.calibrate_perception:
            print("calibrating the camera localisers with frames the arm labels", flush=True)
            print(f"perception calibration: {json.dumps(calibrate_robot_perception(cfg, run_dir))}",
                  flush=True)
        device = args.device or ("operator" if ft.truth_url else "keyboard")
        config = {}
        if device == "operator":
            config = {"truth_url": ft.truth_url, "mode": args.operator_mode, "seed": cfg.seed}
        res = F.record_on_robot(cfg, args.record, args.episodes, device, config, seed=args.record_seed)
    finally:
        if emulator is not None:
            emulator.stop()
    print(json.dumps(res), flush=True)
    return 0
