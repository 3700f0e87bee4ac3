"""Reading a run's metrics.jsonl and drawing its learning curve (learning_curve.png)."""
from __future__ import annotations

import json
import math
from pathlib import Path


def read_metrics(path: str | Path, kind: str) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for ln in path.read_text().splitlines():
        try:
            rec = json.loads(ln)
        except json.JSONDecodeError:
            continue
        if rec.get("kind") == kind:
            out.append(rec)
    return out


def plot_learning_curve(metrics: str | Path, png: str | Path, title: str = "") -> Path:
    """Eval return and success rate against env steps (plus training-episode returns)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evals = read_metrics(metrics, "eval")
    eps = read_metrics(metrics, "episode")
    fig, ax = plt.subplots(figsize=(7, 4))
    if eps:
        ax.plot([e["step"] for e in eps], [e["return"] for e in eps], ".", ms=2, alpha=0.3,
                color="gray", label="training episode return")
    if evals:
        ax.plot([e["step"] for e in evals], [e["return"] for e in evals], "o-", label="eval return")
    ax.set_xlabel("env steps")
    ax.set_ylabel("return")
    ax.grid(alpha=0.3)
    if evals and not all(math.isnan(e["success_rate"]) for e in evals):
        ax2 = ax.twinx()
        ax2.plot([e["step"] for e in evals], [e["success_rate"] for e in evals], "s--", color="tab:green",
                 label="eval success rate")
        ax2.set_ylim(-0.05, 1.05)
        ax2.set_ylabel("success rate")
        ax2.legend(loc="lower right")
    ax.legend(loc="upper left")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return Path(png)
