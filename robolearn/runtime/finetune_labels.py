"""A fine-tuning session's reward that keeps learning from the operator (`[finetune] label_successes`).

The pieces are in robolearn/rewards (labelling, label_store, retrain, model_versions); this
module puts them into a session:
- the session process (`start_labelling`): the classifier is copied to `RUN/reward_models/v0000`
  with the pointer `CURRENT`, the `[reward]` model becomes that folder (so every robot env of
  the session follows CURRENT between episodes), and a `RetrainWorker` thread retrains from
  `RUN/reward_labels/` every `retrain_every` labels;
- the actor (`label_successes`): its env asks the operator about the reward's successes;
- the report (`label_report`): precision and recall of the reward against the truth per 10
  minutes of robot time, labels used, flagged labels, retrains.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from robolearn.errors import ConfigError

log = logging.getLogger("robolearn.runtime.finetune")

LABELS_DIR = "reward_labels"
MODELS_DIR = "reward_models"
BLOCK_S = 600.0


def _retrain_config(ft):
    from robolearn.rewards.retrain import RetrainConfig

    return RetrainConfig(every_labels=ft.retrain_every, every_s=float(ft.retrain_every_s),
                         epochs=ft.retrain_epochs or None).validate()


def base_data(cfg, run_dir: Path, model_dir: Path) -> dict | None:
    """The first classifier's training frames: the camera calibration's (calibrate_reward) or
    the dataset its reward.json names; None when neither is on disk (labels only)."""
    from robolearn.rewards.checkpoint import read_meta

    meta = read_meta(model_dir, "classifier")
    calib = Path(run_dir) / "perception_calibration" / "frames.npz"
    if cfg.finetune.calibrate_reward and calib.is_file():
        from robolearn.runtime.perception_calibration import (PerceptionCalibrationConfig, load_frames_npz,
                                                               success_classifier_data)

        data = success_classifier_data(load_frames_npz(calib), cfg.env,
                                       PerceptionCalibrationConfig().label_margin, meta["cameras"][0])
        data.pop("keep")
        return data
    dataset = meta.get("dataset")
    if dataset and Path(dataset).is_dir():
        from robolearn.rewards.classifier import load_frames

        return load_frames(dataset, meta["cameras"])
    log.warning("reward retrains: the classifier's own training frames are not on disk (%s); "
                "retraining from operator labels only", dataset)
    return None


def start_labelling(cfg, run_dir: Path):
    """Versioned reward model + label store + retraining thread (started). Returns the worker."""
    from robolearn.rewards.label_store import LabelStore
    from robolearn.rewards.model_versions import start_versions
    from robolearn.rewards.retrain import RetrainWorker

    ft = cfg.finetune
    model = cfg.reward.get("model")
    if not model:
        raise ConfigError("finetune.label_successes: no [reward] model to retrain")
    root = Path(run_dir) / MODELS_DIR
    first = Path(model)
    start_versions(root, first)
    initial = root / "v0000"
    cfg.reward["model"] = str(root)
    store = LabelStore(Path(run_dir) / LABELS_DIR, confidence=ft.label_confidence)
    worker = RetrainWorker(root, store, _retrain_config(ft), base=lambda: base_data(cfg, run_dir, initial))
    worker.start()
    return worker


def label_successes(env, cfg, out_dir: Path | None):
    """The actor's env with the operator's labels, when the launch file asks for them."""
    ft = cfg.finetune
    if ft is None or not ft.label_successes:
        return env
    from robolearn.rewards.label_store import LabelStore
    from robolearn.rewards.labelling import DeviceOperator, EmulatedOperator, SuccessLabelling

    if out_dir is None:
        raise ConfigError("finetune.label_successes needs the run folder (actor --out RUN)")
    store = LabelStore(Path(out_dir) / LABELS_DIR, confidence=ft.label_confidence)
    if ft.truth_url:  # emulated robot: the emulated operator's eyes are the emulator's truth
        operator = EmulatedOperator(ft.operator_error_rate, seed=cfg.seed * 100_003 + len(store))
    else:
        device = getattr(env, "device", None)  # the intervention device ([actor] intervene)
        if device is None:
            raise ConfigError("finetune.label_successes on a physical robot: the operator answers on the "
                              "teleop device; set [actor] intervene = \"keyboard\" (Enter = success, x = not)")
        operator = DeviceOperator(device, timeout_s=ft.label_timeout_s)
    return SuccessLabelling(env, store, operator, sample_others=ft.label_others, seed=cfg.seed + len(store))


def _lines(path: Path) -> list[dict]:
    out = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def label_report(run_dir: str | Path, control_hz: float) -> dict:
    """The report's reward-label keys ({} when the session did not label)."""
    from robolearn.rewards.session_metrics import precision_by_block

    root = Path(run_dir) / LABELS_DIR
    if not root.is_dir():
        return {}
    from robolearn.rewards.label_store import LabelStore

    episodes = _lines(root / "episodes.jsonl")
    labels = LabelStore(root).records()
    retrains = _lines(root / "retrains.jsonl")
    blocks = precision_by_block(episodes, control_hz, BLOCK_S)
    precisions = [b["precision"] for b in blocks if b["precision"] is not None]
    with_truth = [r for r in labels if r.get("truth") is not None]
    return {
        "reward_precision_by_block": blocks,
        "reward_precision_min_block": min(precisions) if precisions else None,
        "operator_labels": len(labels),
        "operator_labels_flagged": sum(1 for r in labels if r.get("flagged")),
        "operator_labels_wrong": sum(1 for r in with_truth if bool(r["label"]) != bool(r["truth"])),
        "reward_grasp_vetoes": int(sum(e.get("vetoes", 0) for e in episodes)),
        "reward_retrains": {"ok": sum(1 for r in retrains if r.get("ok")),
                            "failed": sum(1 for r in retrains if not r.get("ok")),
                            "versions": [r.get("version") for r in retrains if r.get("ok")],
                            "failures": [r.get("reason") for r in retrains if not r.get("ok")]},
    }


def plot_labels(ax, report: dict) -> None:
    """Per-block precision / recall bars and the cumulative operator labels (right axis)."""
    import numpy as np

    blocks = report.get("reward_precision_by_block") or []
    if not blocks:
        ax.set_visible(False)
        return
    x = np.array([(b["start_min"] + b["end_min"]) / 2 for b in blocks])
    w = (blocks[0]["end_min"] - blocks[0]["start_min"]) * 0.35
    prec = [np.nan if b["precision"] is None else b["precision"] for b in blocks]
    rec = [np.nan if b["recall"] is None else b["recall"] for b in blocks]
    for bars in (ax.bar(x - w / 2, prec, w, label="reward precision vs truth"),
                 ax.bar(x + w / 2, rec, w, label="reward recall vs truth")):
        ax.bar_label(bars, fmt="%.3f", fontsize=8)   # 3 digits: 0.949 must not read as the 0.95 line met
    ax.axhline(0.95, ls="--", color="grey", lw=0.8)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("robot time (min), 10-minute blocks")
    ax.set_ylabel("per block")
    right = ax.twinx()
    # from 0 at the session's start, so a one-block session still draws its line
    right.plot([blocks[0]["start_min"]] + [b["end_min"] for b in blocks],
               [0] + [b["labels_total"] for b in blocks], marker="o",
               color="black", label="operator labels (cumulative, at each block's end)")
    right.set_ylabel("operator labels")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = right.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="lower right", fontsize=8)
    rt = report.get("reward_retrains") or {}
    ax.set_title(f"reward: {report.get('operator_labels', 0)} operator labels "
                 f"({report.get('operator_labels_flagged', 0)} flagged), "
                 f"{rt.get('ok', 0) + rt.get('failed', 0)} retrains ({rt.get('ok', 0)} published, "
                 f"{rt.get('failed', 0)} refused), {report.get('interventions', 0)} intervention steps",
                 fontsize=9)
