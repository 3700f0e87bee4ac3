"""Check the layer contract and that the project's modules import in no circle.

    python scripts/check_layers.py          # exit 1 and the offending imports if either fails

Run in a process of its own (as tests/test_layers.py does): the copy must be what `robolearn`
imports as, not an already imported checkout.

Why a copy of the tree: `drivers/`, `sim/` and `policies/` are top-level folders that import as
`robolearn.drivers`, ... (pyproject package-dir), and import-linter's graph builder (grimp)
finds a package's modules by walking its folder, so it would not see them. The check copies
the sources into one `robolearn/` folder in a temporary directory and runs import-linter there
with the contract of pyproject.toml `[tool.importlinter]`; grimp, on the same copy, finds
import cycles (imports inside functions count: they hide a cycle, they do not remove it).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPED = ("drivers", "sim", "policies")  # folders that import as robolearn.<name>


def build_tree(dest: Path, root: Path = ROOT) -> Path:
    """Copy the project's Python sources into `dest/robolearn/` as they import; return `dest`."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "assets", "firmware")
    shutil.copytree(root / "robolearn", dest / "robolearn", ignore=ignore)
    for name in MAPPED:
        shutil.copytree(root / name, dest / "robolearn" / name, ignore=ignore)
    shutil.copy(root / "pyproject.toml", dest / "pyproject.toml")
    return dest


def layer_modules(pyproject: Path) -> list[str]:
    """Every module named in the contract's layers."""
    conf = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]
    names = []
    for contract in conf["contracts"]:
        for layer in contract.get("layers", ()):
            names += [m.strip() for part in layer.split("|") for m in part.split(":")]
    return names


def unassigned(tree: Path) -> list[str]:
    """Top-level modules and packages of `robolearn` that no layer names: a new module must
    say where it sits, or the contract would not check it."""
    listed = set(layer_modules(tree / "pyproject.toml"))
    pkg = tree / "robolearn"
    found = {f"robolearn.{p.stem}" for p in pkg.glob("*.py") if p.stem != "__init__"}
    found |= {f"robolearn.{p.name}" for p in pkg.iterdir() if (p / "__init__.py").is_file()}
    return sorted(found - listed)


def cycles(tree: Path) -> list[list[str]]:
    """Strongly connected components (size > 1) of the module import graph, largest first."""
    sys.path.insert(0, str(tree))
    try:
        import grimp

        graph = grimp.build_graph("robolearn", cache_dir=None)
    finally:
        sys.path.remove(str(tree))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph.modules):  # Tarjan, iterative (no recursion limit on big graphs)
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return sorted(found, key=len, reverse=True)


def lint(tree: Path) -> int:
    """import-linter on the copy; its report goes to stdout; 0 when every contract is kept."""
    from importlinter.cli import lint_imports

    cwd = os.getcwd()
    os.chdir(tree)  # import-linter puts the working directory first on sys.path
    sys.path.insert(0, str(tree))
    try:
        return lint_imports(config_filename=str(tree / "pyproject.toml"), no_cache=True, no_logo=True)
    finally:
        os.chdir(cwd)
        sys.path.remove(str(tree))
        for name in [m for m in sys.modules if m == "robolearn" or m.startswith("robolearn.")]:
            if str(tree) in str(getattr(sys.modules[name], "__file__", "") or ""):
                del sys.modules[name]  # the copy's modules must not shadow the installed ones


def check(tree: Path) -> list[str]:
    """Problems found in a prepared tree (empty: the layering holds)."""
    problems = []
    missing = unassigned(tree)
    if missing:
        problems.append(f"modules in no layer of pyproject [tool.importlinter]: {', '.join(missing)}")
    if lint(tree) != 0:
        problems.append("import-linter: a contract is broken (its report is above)")
    for comp in cycles(tree):
        problems.append(f"import cycle among {len(comp)} modules: {', '.join(comp)}")
    return problems


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", help="check this prepared copy (made by build_tree) instead of the checkout")
    args = ap.parse_args(argv)
    if args.tree:
        problems = check(Path(args.tree))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            problems = check(build_tree(Path(tmp)))
    for p in problems:
        print(p, file=sys.stderr)
    print("layers: ok, 0 import cycles" if not problems else f"layers: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
