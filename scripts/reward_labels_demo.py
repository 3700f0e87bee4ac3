"""Operator labels + retraining against a deliberately weak lift classifier, in sim (no learner).

A classifier trained without hard negatives (no hover, no low-lift episodes) is fooled by them
(docs/rewards.md). Episodes cycle through successes and those fooling kinds; the emulated
operator (truth + 2 % flips) labels the reward's successes and 20 % of the others; the
classifier is retrained every K labels in a thread and swapped in between episodes. The same
episodes are also run with the classifier fixed, and with the grasp check. Per-block precision
against the sim's truth (block = 1 robot-minute here, 10 in a session).

    python scripts/reward_labels_demo.py OUT [EPISODES]
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

ENV = "robolearn/ArmLift-v0"
KW = {"camera": "front", "image_size": [32, 32]}
KINDS = ("scripted", "hover", "low_lift", "scripted", "no_grasp", "hover")


class TrueSuccess(gym.Wrapper):
    """info["true_success"] from the sim's cube height (the emulator's truth.json stands in)."""

    def step(self, action):
        from robolearn.sim.arm_workspace import CUBE_HALF, LIFT_HEIGHT

        obs, r, term, trunc, info = self.env.step(action)
        info["true_success"] = bool(self.env.unwrapped.task.cube_pose()[0][2] - CUBE_HALF >= LIFT_HEIGHT)
        return obs, r, term, trunc, info


def act(kind, env, ctrl, obs, t, rng, state):
    from robolearn.sim.arm_workspace import EE_STEP

    base = env.unwrapped
    if kind == "hover":
        if t % 25 == 0:
            cube = base.task.cube_pose()[0]
            state["wp"] = np.array([cube[0] + rng.uniform(-0.1, 0.1), cube[1] + rng.uniform(-0.1, 0.1),
                                    rng.uniform(0.05, 0.14)])
            state["grip"] = float(rng.choice([-1.0, 1.0]))
        return np.clip(ctrl.toward(state["wp"], state["grip"]), -1, 1).astype(np.float32)
    a = np.asarray(ctrl.act(obs), np.float64)
    if kind == "no_grasp":
        a[-1] = 1.0
    elif kind == "low_lift" and getattr(ctrl, "phase", "") == "lift":
        a[2] = min(a[2], (0.045 - base.task.ee_cmd[2]) / EE_STEP)
    return np.clip(a, -1, 1).astype(np.float32)


def session(out: Path, first_model: Path, base_ds: Path, episodes: int, label: bool, grasp: bool,
            retrain_every: int = 8) -> dict:
    from robolearn.policies.env_building import make_env
    from robolearn.rewards.classifier import load_frames
    from robolearn.rewards.grasp_check import GripperHoldCheck
    from robolearn.rewards.label_store import LabelStore
    from robolearn.rewards.labelling import EmulatedOperator, SuccessLabelling
    from robolearn.rewards.model_versions import ReloadingReward, start_versions
    from robolearn.rewards.retrain import RetrainConfig, RetrainWorker
    from robolearn.rewards.serving import GuardedReward
    from robolearn.rewards.session_metrics import precision_by_block

    root = out / "reward_models"
    start_versions(root, first_model)
    source = ReloadingReward(root)
    source = GripperHoldCheck(source) if grasp else source
    env = make_env(ENV, "state", None, 80, {**KW, "reward_source": GuardedReward(source)}, {})
    store = LabelStore(out / "reward_labels")
    env = SuccessLabelling(TrueSuccess(env), store, EmulatedOperator(0.02, seed=0),
                           sample_others=0.2 if label else 0.0, seed=0)
    if not label:
        env.operator = type("Silent", (), {"name": "none", "label": staticmethod(lambda seen: None)})()
    worker = None
    if label:
        worker = RetrainWorker(root, store, RetrainConfig(every_labels=retrain_every, epochs=8, poll_s=0.5),
                               base=lambda: load_frames(base_ds, ["front"]))
        worker.start()
    rng = np.random.default_rng(0)
    t0 = time.monotonic()
    try:
        for ep in range(episodes):
            kind = KINDS[ep % len(KINDS)]
            obs, _ = env.reset(seed=1000 + ep)
            ctrl = env.unwrapped.scripted_controller()
            ctrl.reset()
            state, t = {}, 0
            while True:
                obs, r, term, trunc, info = env.step(act(kind, env, ctrl, obs, t, rng, state))
                t += 1
                if term or trunc:
                    break
    finally:
        if worker is not None:
            worker.stop()
            worker.join()
        env.close()
    lines = [json.loads(x) for x in (out / "reward_labels" / "episodes.jsonl").read_text().splitlines()]
    retrains = [json.loads(x) for x in (out / "reward_labels" / "retrains.jsonl").read_text().splitlines()] \
        if (out / "reward_labels" / "retrains.jsonl").exists() else []
    return {"blocks": precision_by_block(lines, 10.0, 60.0), "labels": len(store.records()),
            "flagged": sum(1 for r in store.records() if r["flagged"]),
            "retrains_ok": sum(1 for r in retrains if r.get("ok")),
            "retrains_failed": [r.get("reason") for r in retrains if not r.get("ok")],
            "vetoes": sum(x["vetoes"] for x in lines), "wall_s": round(time.monotonic() - t0, 1)}


def main(argv):
    from robolearn.rewards.classifier import ClassifierConfig, train_classifier
    from robolearn.rewards.sim_episodes import record_dataset

    out = Path(argv[0])
    episodes = int(argv[1]) if len(argv) > 1 else 120
    out.mkdir(parents=True, exist_ok=True)
    base_ds = out / "base"
    if not base_ds.exists():  # no hover / low-lift negatives: a classifier they can fool
        record_dataset(ENV, str(base_ds), [("scripted", 4), ("random", 2), ("no_grasp", 2)], seed=0,
                       env_kwargs=KW, log=lambda m: None)
    first = out / "first_model"
    if not first.exists():
        train_classifier(base_ds, ClassifierConfig(cameras=["front"], epochs=8), out=first, log=lambda m: None)
    results = {}
    for name, label, grasp in (("fixed", False, False), ("labels", True, False), ("labels+grasp", True, True)):
        results[name] = session(out / name, first, base_ds, episodes, label, grasp)
        print(name, json.dumps({k: v for k, v in results[name].items() if k != "blocks"}),
              [(b["precision"], b["recall"]) for b in results[name]["blocks"]], flush=True)
    (out / "labels_demo.json").write_text(json.dumps(results, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, res in results.items():
        x = [b["end_min"] for b in res["blocks"]]
        axes[0].plot(x, [np.nan if b["precision"] is None else b["precision"] for b in res["blocks"]], "o-",
                     label=f"{name} ({res['labels']} labels, {res['retrains_ok']} retrains)")
        axes[1].plot(x, [np.nan if b["recall"] is None else b["recall"] for b in res["blocks"]], "o-", label=name)
    axes[0].axhline(0.95, ls="--", color="grey")
    for ax, what in zip(axes, ("precision", "recall")):
        ax.set_xlabel("robot time (min), 1-minute blocks")
        ax.set_ylabel(f"reward {what} vs truth")
        ax.set_ylim(-0.05, 1.05)
        ax.legend(fontsize=7)
    fig.suptitle("weak lift classifier (no hover/low-lift negatives): fixed vs operator labels + retrains")
    fig.tight_layout()
    fig.savefig(out / "labels_demo.png", dpi=100)


if __name__ == "__main__":
    main(sys.argv[1:])
