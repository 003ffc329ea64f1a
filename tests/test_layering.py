"""The package layers stay apart: core/ imports no other layer; models/ and decoding/ import core/
but never each other (nor experiments/); experiments/ is the only place that joins them."""
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
