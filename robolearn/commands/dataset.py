"""`robolearn dataset info|view|export|import DATASET`: inspect, look at, convert a recorded dataset,
or import a LeRobot dataset as robolearn demonstrations."""
from __future__ import annotations

HELP = ("Inspect a recorded dataset (info), write a contact sheet PNG of an episode with its "
        "actions plotted beside the frames (view), export it to the LeRobot layout (export), or import a "
        "LeRobot dataset (SO-100 joint positions) as a robolearn dataset of demos (import).")


def add_arguments(parser) -> None:
    from robolearn.commands.env_kwargs import add_env_kw_argument

    parser.add_argument("action", choices=("info", "view", "export", "import"), help="what to do")
    parser.add_argument("dataset", help="dataset directory written by `robolearn record` (import: the "
                        "LeRobot dataset directory to read)")
    parser.add_argument("--json", action="store_true", help="info: print the summary as JSON")
    parser.add_argument("--episode", type=int, default=None, help="view: episode index (default: the first)")
    parser.add_argument("--frames", type=int, default=8, help="view: frames per camera on the sheet (default 8)")
    parser.add_argument("--video", action="store_true",
                        help="view: write an MP4 (frames with the action history beside them) instead of a PNG")
    parser.add_argument("--out", default=None,
                        help="view: PNG/MP4 path (default DATASET/view_episode_<n>.png|.mp4); export, import: "
                             "output directory")
    parser.add_argument("--format", choices=("lerobot",), default="lerobot", help="export: target layout")
    parser.add_argument("--task", default=None, help="export: task string (default: the task's description, robolearn/data/feature_names.py)")
    parser.add_argument("--robot-type", default=None, help="export: LeRobot robot_type (default: so100 for the arm, rc_car for the car, else the env name)")
    parser.add_argument("--overwrite", action="store_true", help="export, import: replace a non-empty --out")
    parser.add_argument("--lerobot-version", choices=("v3.0", "v2.1"), default="v3.0",
                        help="export: LeRobot dataset codebase version (v3.0 is what LeRobot >= 0.4 reads; "
                             "v2.1 for older LeRobot installs)")
    parser.add_argument("--from", dest="source_format", choices=("lerobot",), default="lerobot",
                        help="import: source layout (LeRobot v3.0 or v2.1)")
    parser.add_argument("--units", choices=("deg", "m100", "rad"), default=None,
                        help="import (required): units of the LeRobot joint positions: deg (lerobot "
                             "use_degrees=True), m100 (-100..100 over the joint range, lerobot's default), "
                             "rad; the gripper is 0..100 for deg/m100")
    parser.add_argument("--env", default="robolearn/ArmReach-v0",
                        help="import: the task whose state/action/reward the demos get (default ArmReach)")
    add_env_kw_argument(parser, note="import: action_mode=joint|ee_delta, control_hz=HZ (must equal the "
                                     "dataset's fps)")
    parser.add_argument("--goal", default="hindsight",
                        help="import: ArmReach target: hindsight (the episode's final grasp-point position, "
                             "default) or the name of a 3-vector feature holding it (m)")
    parser.add_argument("--state-feature", default="observation.state",
                        help="import: feature with the measured joint positions")
    parser.add_argument("--action-feature", default="action",
                        help="import: feature with the joint targets (the leader arm's positions)")


def run(args) -> int:
    from robolearn.errors import ConfigError

    if args.action == "info":
        return _info(args)
    if args.action == "view":
        return _view(args)
    if args.action == "import":
        return _import(args)
    if args.out is None:
        raise ConfigError("dataset export needs --out DIR (the LeRobot dataset directory to write)")
    from robolearn.data.lerobot_export import export_lerobot
    from robolearn.run_lock import check_writable_dir

    check_writable_dir(args.out, "export folder")

    info = export_lerobot(args.dataset, args.out, task=args.task, robot_type=args.robot_type,
                          overwrite=args.overwrite, version=args.lerobot_version)
    cams = sum(f["dtype"] == "video" for f in info["features"].values())
    print(f"exported {info['total_episodes']} episodes / {info['total_frames']} frames "
          f"({cams} camera stream(s)) to {args.out} (LeRobot {info['codebase_version']}, {info['fps']} fps)")
    return 0


def _import(args) -> int:
    from robolearn.commands.env_kwargs import parse_env_kwargs
    from robolearn.data.lerobot_import import import_lerobot
    from robolearn.errors import ConfigError

    if args.out is None:
        raise ConfigError("dataset import needs --out DIR (the robolearn dataset directory to write)")
    if args.units is None:
        raise ConfigError("dataset import needs --units deg|m100|rad: LeRobot does not record the units of "
                          "its joint positions (lerobot 0.4: deg with use_degrees=True, else m100)")
    rep = import_lerobot(args.dataset, args.out, units=args.units, env_id=args.env,
                         env_kwargs=parse_env_kwargs(args.env_kw), goal=args.goal,
                         state_feature=args.state_feature, action_feature=args.action_feature,
                         overwrite=args.overwrite)
    for w in rep.warnings:
        print(f"warning: {w}")
    print(rep.line())
    return 0


def _info(args) -> int:
    import json

    from robolearn.data.dataset import Dataset

    s = Dataset(args.dataset).summary()
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    print(f"dataset:      {s['path']}")
    print(f"env:          {s['env_id']} at {s['control_hz']:g} Hz")
    print(f"episodes:     {s['episodes']}")
    print(f"steps:        {s['steps']} ({s['duration_s']:.1f} s at {s['control_hz']:g} Hz; "
          f"recorded in {s['recording_s']:.1f} s)")
    print(f"success rate: {100 * s['success_rate']:.1f}%")
    print(f"cameras:      {', '.join(s['cameras']) or '-'}")
    print(f"state keys:   {', '.join(s['state_keys']) or '-'}; action dim {s['action_dim']}")
    print(f"devices:      {', '.join(d for d in s['devices'] if d) or '-'}; intervention steps {s['interventions']}")
    if s["unreadable"]:
        print(f"unreadable:   {len(s['unreadable'])} episode(s) skipped by loaders:")
        for name, why in s["unreadable"].items():
            print(f"  {name}: {why}")
    if s["stale_tmp"]:
        print(f"unfinished:   {len(s['stale_tmp'])} interrupted episode(s) ignored ({', '.join(s['stale_tmp'])}); "
              "the next `robolearn record` into this dataset removes them")
    return 0


def _view(args) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from robolearn.data.dataset import Dataset
    from robolearn.data.dataset_format import episode_dirname
    from robolearn.errors import ConfigError, DatasetError

    ds = Dataset(args.dataset)
    if not ds.indices:
        raise DatasetError(f"{ds.root}: has no episodes to view")
    idx = ds.indices[0] if args.episode is None else args.episode
    if args.frames < 1:
        raise ConfigError(f"--frames {args.frames}: show at least 1 frame")
    ep = ds.episode(idx)
    n = ep.steps
    from robolearn.run_lock import check_writable_file

    if args.out:
        check_writable_file(args.out, "view file")
    if args.video:
        return _view_video(ds, ep, args.out or str(ds.root / f"view_{episode_dirname(idx)}.mp4"))
    picks = np.unique(np.linspace(0, n, min(args.frames, n + 1)).round().astype(int))
    rows = len(ep.cameras) + 2
    fig = plt.figure(figsize=(max(8, 1.6 * len(picks)), 1.8 * len(ep.cameras) + 5))
    gs = fig.add_gridspec(rows, len(picks), height_ratios=[1.0] * len(ep.cameras) + [1.4, 1.0])
    for r, cam in enumerate(ep.cameras):
        frames = ep.frames(cam)
        for c, t in enumerate(picks):
            ax = fig.add_subplot(gs[r, c])
            ax.imshow(frames[t])
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(f"t={t}", fontsize=8)
            if c == 0:
                ax.set_ylabel(cam, fontsize=8)
    ax = fig.add_subplot(gs[len(ep.cameras), :])
    acts = ep.data["action"]
    for d in range(acts.shape[1]):
        ax.plot(np.arange(n), acts[:, d], label=f"a[{d}]")
    inter = np.flatnonzero(ep.data["intervention"])
    if inter.size:
        ax.scatter(inter, np.full(inter.size, 1.05), marker="|", color="red", label="intervention")
    for t in picks:
        ax.axvline(t, color="gray", lw=0.5, ls=":")
    ax.set_ylim(-1.1, 1.15)
    ax.set_ylabel("action")
    ax.legend(fontsize=7, ncol=min(8, acts.shape[1] + 1), loc="lower right")
    ax2 = fig.add_subplot(gs[len(ep.cameras) + 1, :], sharex=ax)
    ax2.plot(np.arange(n), ep.data["reward"], color="k", label="reward")
    succ = np.flatnonzero(ep.data["success"])
    if succ.size:
        ax2.scatter(succ, ep.data["reward"][succ], color="green", s=12, label="success")
    ax2.set_xlabel("step")
    ax2.set_ylabel("reward")
    ax2.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{ds.env_id} episode {idx}: {n} steps, {'success' if ep.meta.get('success') else 'failure'}, "
                 f"device {ep.meta.get('device')}, seed {ep.meta.get('seed')}", fontsize=10)
    out = args.out or str(ds.root / f"view_{episode_dirname(idx)}.png")
    fig.savefig(out, dpi=80)
    plt.close(fig)
    print(f"wrote {out}")
    return 0


def _view_video(ds, ep, out: str) -> int:
    """One video frame per observation: the cameras on the left, the actions so far on the right."""
    import matplotlib.pyplot as plt
    import numpy as np

    from robolearn.data.video import PORTABLE, VideoWriter

    n = ep.steps
    acts = ep.data["action"]
    cams = {c: ep.frames(c) for c in ep.cameras}
    fig = plt.figure(figsize=(8, 4), dpi=80)  # 640x320 px: even sizes for yuv420p
    gs = fig.add_gridspec(max(1, len(cams)), 2, width_ratios=[1, 1.6])
    img_axes = {}
    for r, c in enumerate(cams):
        ax = fig.add_subplot(gs[r, 0])
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_ylabel(c, fontsize=8)
        img_axes[c] = ax.imshow(cams[c][0])
    ax = fig.add_subplot(gs[:, 1])
    lines = [ax.plot([], [], label=f"a[{d}]")[0] for d in range(acts.shape[1])]
    ax.set_xlim(0, max(n, 1))
    ax.set_ylim(-1.1, 1.1)
    ax.set_xlabel("step")
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    title = fig.suptitle("")
    writer = None
    try:
        for t in range(n + 1):
            for c, im in img_axes.items():
                im.set_data(cams[c][t])
            for d, line in enumerate(lines):
                line.set_data(np.arange(t), acts[:t, d])
            r = float(ep.data["reward"][t - 1]) if t else 0.0
            title.set_text(f"{ds.env_id} episode {ep.index}  t={t}/{n}  reward {r:+.3f}"
                           + ("  INTERVENTION" if t and ep.data["intervention"][t - 1] else ""))
            fig.canvas.draw()
            frame = np.asarray(fig.canvas.buffer_rgba())[..., :3]
            if writer is None:
                writer = VideoWriter(out, frame.shape, ds.control_hz, PORTABLE)
            writer.write(np.ascontiguousarray(frame))
    finally:
        if writer is not None:
            writer.close()
        plt.close(fig)
    print(f"wrote {out} ({n + 1} frames at {ds.control_hz:g} fps)")
    return 0
