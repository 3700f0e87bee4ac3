"""The ArmPush RaE table (docs/bench/rae/README.md, "own batch share") from `robolearn bench simba --json` files.

usage: python docs/bench/rae/push_own_share_table.py WITH.json [WITH.json ...] -- WITHOUT.json [...]
Prints one markdown row per run and a mean row per arm. "first >= 0.8" is the first evaluation at
or above 80 %; "3-eval >= 0.8" the first step where the mean of three consecutive evaluations
is (less sensitive to one lucky evaluation of 10 episodes); "mean success" averages every
evaluation of the run (area under the learning curve)."""
import json
import sys


def runs(paths):
    out = []
    for p in paths:
        out += json.load(open(p))["runs"]
    return sorted(out, key=lambda r: r["seed"])


def first(steps, values, thr=0.8):
    return next((s for s, v in zip(steps, values) if v >= thr - 1e-9), None)


def row(r):
    ev = r["evals"]
    steps, sr = [e["step"] for e in ev], [e["success_rate"] for e in ev]
    ma = [sum(sr[i - 2:i + 1]) / 3 for i in range(2, len(sr))]
    return {"seed": r["seed"], "curve": sr, "first": first(steps, sr), "first3": first(steps[2:], ma),
            "final": sr[-1], "last3": sum(sr[-3:]) / 3, "auc": sum(sr) / len(sr), "return": r["eval_return"]}


def table(name, rows):
    fmt = lambda v: "never" if v is None else str(v)  # noqa: E731
    for x in rows:
        print(f"| {name} | {x['seed']} | {' '.join(f'{v:.1f}' for v in x['curve'])} | {fmt(x['first'])} | "
              f"{fmt(x['first3'])} | {x['final']:.1f} | {x['last3']:.2f} | {x['auc']:.3f} | {x['return']:.1f} |")


def summary(name, rows):
    reached = [x["first"] for x in rows if x["first"] is not None]
    reached3 = [x["first3"] for x in rows if x["first3"] is not None]
    n = len(rows)
    mean = lambda k: sum(x[k] for x in rows) / n  # noqa: E731
    print(f"| {name} | {n} | {len(reached)} of {n}, mean {sum(reached) / max(len(reached), 1):.0f} | "
          f"{len(reached3)} of {n}, mean {sum(reached3) / max(len(reached3), 1):.0f} | {mean('final'):.2f} | "
          f"{mean('last3'):.2f} | {mean('auc'):.3f} | {mean('return'):.1f} |")


if __name__ == "__main__":
    cut = sys.argv.index("--")
    arms = {"with": [row(r) for r in runs(sys.argv[1:cut])], "without": [row(r) for r in runs(sys.argv[cut + 1:])]}
    print("| arm | seed | eval success at 1k ... 20k | first >= 0.8 | 3-eval >= 0.8 | final | last 3 | mean success | final return |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k, v in arms.items():
        table(k, v)
    print()
    print("| arm | seeds | reached 80 % (first evaluation) | reached 80 % (3-eval mean) | final | last 3 | mean success (all evals) | final return |")
    print("|---|---|---|---|---|---|---|---|")
    for k, v in arms.items():
        summary(k, v)
