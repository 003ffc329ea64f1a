"""The README and the guides beside the code: short, every link resolves, no tracker numbers, and the grid
guide's complete example runs as written on files made here."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = list(dict.fromkeys([ROOT / "README.md", ROOT / "results" / "README.md", ROOT / "tests" / "README.md",
        ROOT / "experiments" / "grids" / "REFERENCE.md", *sorted((ROOT / "results").glob("*/README.md")),
        *sorted((ROOT / "results" / "bench").glob("*.md")),
        *sorted(p for d in ("models", "decoding", "experiments") for p in (ROOT / d).rglob("README.md"))]))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_the_readme_is_short_and_its_lines_are_readable():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200 and max(len(line) for line in lines) <= 200
    assert lines[3].startswith("bash experiments/env.sh atnat run") and lines[4].startswith("bash experiments/env.sh python -m pytest")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves_and_no_tracker_number_is_named(doc):
    text = doc.read_text(encoding="utf-8")
    assert not re.search(r"\bissues? \d+", text, re.I), "product text names tracker issues"
    assert not re.search(r"(?<![\w&/`])#\d{1,4}\b", text), "product text names tracker numbers (#52)"
    for target in re.findall(r"\]\(([^)#\s]*)(#[^)\s]*)?\)", text):
        path, anchor = target
        if path.startswith(("http", "mailto")):
            continue
        file = (doc.parent / path).resolve() if path else doc
        assert file.exists(), f"{doc.relative_to(ROOT)} links to {path}, which does not exist"
        if anchor and file.suffix == ".md":
            headings = {slug(h) for h in re.findall(r"^#+ (.*)$", file.read_text(encoding="utf-8"), re.M)}
            assert anchor[1:] in headings, f"{doc.relative_to(ROOT)} links to {path}{anchor}: no such heading"


def grid_example(tmp_path: Path) -> Path:
    """The grid guide's annotated grid, written as it stands, beside parallel files made up here."""
    guide = (ROOT / "experiments" / "grids" / "README.md").read_text(encoding="utf-8")
    (grid,) = re.findall(r"```yaml\n(.*?)```", guide, re.S)
    data = tmp_path / "my-data"
    data.mkdir()
    words = "the a cat dog sees likes red small house tree runs".split()
    for split, n in (("train", 300), ("valid", 20), ("test", 20)):
        src = [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(2 + i % 5)) for i in range(n)]
        (data / f"{split}.en").write_text("".join(s + "\n" for s in src))
        (data / f"{split}.de").write_text("".join(s.upper() + "\n" for s in src))
    (tmp_path / "my-grid.yaml").write_text(grid)
    return tmp_path / "my-grid.yaml"


def atnat(args, cwd):
    return subprocess.run([sys.executable, "-m", "atnat.experiments.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=900)


def test_the_grid_guides_example_is_a_valid_grid(tmp_path):
    grid = grid_example(tmp_path)
    done = atnat(["run", str(grid), "--dry-run"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert all(cell in done.stdout for cell in ("at-s1", "at-s2", "ctc-kd-s1", "ctc-kd-s2"))


@pytest.mark.slow
def test_the_grid_guides_example_runs_end_to_end(tmp_path):
    grid = grid_example(tmp_path)
    done = atnat(["run", str(grid), "--smoke", "--results", str(tmp_path / "out")], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = (tmp_path / "out" / "my-en-de-smoke" / "report.md").read_text()
    assert report.splitlines()[2] == "## Verdict" and "ctc-kd / ctc" in report
