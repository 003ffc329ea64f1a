"""The package layers stay apart: core/ imports no other layer; models/ and decoding/ import core/
but never each other (nor experiments/); experiments/ is the only place that joins them. Inside
experiments/, each part imports only parts below it, and no module imports itself in a circle."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "core": ("atnat.models", "atnat.decoding", "atnat.experiments"),
    "models": ("atnat.decoding", "atnat.experiments"),
    "decoding": ("atnat.models", "atnat.experiments"),
}


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, relative imports resolved against its package."""
    package = ["atnat", *path.relative_to(root).parent.parts]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            found.append((node.lineno, module))
    return found


def violations(layer: str, root: Path = ROOT) -> list[str]:
    return [f"{path.relative_to(root)}:{line} imports {module}"
            for path in sorted((root / layer).rglob("*.py"))
            for line, module in imported_modules(path, root)
            if module.startswith(FORBIDDEN[layer])]


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_only_what_lies_below_it(layer):
    assert violations(layer) == []


def test_the_check_sees_a_forbidden_import(tmp_path):
    """The scan itself: absolute and relative imports across layers are both found."""
    (tmp_path / "decoding").mkdir()
    (tmp_path / "decoding" / "bad.py").write_text("import torch\nfrom atnat.models.layers import x\n"
                                                  "from ..models import y\nfrom .base import z\n")
    assert violations("decoding", tmp_path) == ["decoding/bad.py:2 imports atnat.models.layers",
                                                "decoding/bad.py:3 imports atnat.models"]


# experiments/ in parts: a part may import parts of a lower rank, and itself; parts of one
# rank are siblings that never import each other. experiments/__init__.py states the same order.
RANKS = {"files": 0, "console": 0, "provenance": 0, "locks": 1, "data": 1, "config": 2, "modelfiles": 2, "evaluation": 3,
         "training": 4, "reporting": 4, "bench": 4, "running": 5, "cli": 6}


def part_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["atnat", "experiments"] else None


def part_imports(root: Path = ROOT) -> list[tuple[str, str, str]]:
    """(file:line, importing part, imported part) of every import between modules of experiments/."""
    base = root / "experiments"
    found = []
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(root / "experiments")
        own = rel.parts[0][:-3] if len(rel.parts) == 1 else rel.parts[0]
        if own == "__init__":
            continue
        for line, module in imported_modules(path, root):
            other = part_of(module)
            if other is not None:
                found.append((f"{path.relative_to(root)}:{line}", own, other))
    return found


def upward(root: Path = ROOT) -> list[str]:
    return [f"{where} ({own}, rank {RANKS.get(own)}) imports {other} (rank {RANKS.get(other)})"
            for where, own, other in part_imports(root)
            if other != own and (own not in RANKS or other not in RANKS or RANKS[other] >= RANKS[own])]


def test_every_part_of_experiments_is_ranked_and_imports_only_lower_parts():
    parts = {p.name if p.is_dir() else p.stem for p in (ROOT / "experiments").iterdir()
             if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.stem != "__init__")}
    assert parts == set(RANKS), "a part without a rank (add it to RANKS and experiments/__init__.py)"
    assert upward() == []
    assert max(RANKS.values()) + 1 <= 7  # levels of the part graph


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """experiments' modules -> the experiments modules they import (a `from pkg import sub` of a
    submodule counts as importing the submodule)."""
    base = root / "experiments"
    names = {".".join(("atnat", *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__"): p
             for p in base.rglob("*.py")}
    graph = {}
    for name, path in names.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                subs = {f"{node.module}.{a.name}" for a in node.names} & names.keys()
                deps |= subs or ({node.module} & names.keys())
        graph[name] = deps - {name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph, or None."""
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep] if dep in path else [node, dep]
            if dep not in state and (found := visit(dep, path + [dep])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_experiments_has_no_import_circle():
    assert cycle(module_graph()) is None


def test_the_part_check_sees_an_upward_import_and_the_cycle_check_a_circle(tmp_path):
    (tmp_path / "experiments" / "data").mkdir(parents=True)
    (tmp_path / "experiments" / "data" / "__init__.py").write_text("")
    (tmp_path / "experiments" / "data" / "bad.py").write_text("from atnat.experiments.running.cell import x\n")
    assert upward(tmp_path) == ["experiments/data/bad.py:1 (data, rank 1) imports running (rank 5)"]
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_reading_the_command_line_and_a_config_imports_no_lightning():
    """`atnat --help`, `atnat list`, `atnat status`, `atnat run --dry-run` and reading a config need no
    Lightning, plotting or Hugging Face: the command line used to import all three through the cluster
    launcher and the bench commands, seconds before it printed anything; a dry run, through the scheduler
    and the stale check's reading of checkpoint stamps."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from atnat.experiments.cli.commands import parser\n"
            "parser().parse_args(['list'])\n"
            "import atnat.experiments.config.run, atnat.experiments.reporting.records, atnat.experiments.running.status\n"
            "import atnat.experiments.running.stale, atnat.experiments.running.plan, atnat.experiments.modelfiles.loading\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'pytorch_lightning', 'lightning_fabric', "
            "'matplotlib', 'seaborn', 'transformers'})\n"
            "print(','.join(heavy))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ""
