"""A package of plugins - built from the extension guides' code as written - installed into a
temporary folder and used the way a user would, in new processes: `atnat run --workers 2` on
README's grid and `atnat evaluate`, with no source file of atnat touched."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDES = (ROOT / "models" / "decoders" / "README.md", ROOT / "decoding" / "README.md",
          ROOT / "experiments" / "evaluation" / "metrics" / "README.md", ROOT / "experiments" / "data" / "README.md",
          ROOT / "experiments" / "config" / "README.md")


def blocks(kind: str) -> list[str]:
    """The code blocks of one kind in the extension guides, as written."""
    return [code for guide in GUIDES for code in re.findall(rf"```{kind}\n(.*?)```", guide.read_text(), re.S)]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """README's package, pip-installed (no dependencies, no build isolation) into site/."""
    root = tmp_path_factory.mktemp("plugins")
    package = root / "src" / "my_package"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for code in blocks("python"):
        path = re.match(r"# my_package/(\w+\.py)\n", code)
        assert path, f"a README code block without its file name: {code[:60]!r}"
        (package / path.group(1)).write_text(code)
    (toml,) = blocks("toml")
    (root / "src" / "pyproject.toml").write_text(toml)
    site = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(root / "src")], check=True, capture_output=True)
    (grid,) = blocks("yaml")
    (root / "my-grid.yaml").write_text(grid)
    return root, site


def atnat(args, cwd, site, **env):
    return subprocess.run([sys.executable, "-m", "atnat.experiments.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                               "OMP_NUM_THREADS": "1", **env})


@pytest.mark.slow
def test_readme_plugins_run_through_a_parallel_grid_and_evaluate(installed, tmp_path):
    root, site = installed
    run = atnat(["run", str(root / "my-grid.yaml"), "--smoke", "--workers", "2", "--results", str(tmp_path)],
                root, site)
    assert run.returncode == 0, run.stderr[-3000:]
    out = tmp_path / "my-plugins-smoke"
    table = pd.read_csv(out / "results.csv")
    assert set(table.strategy) == {"greedy", "sample-t0.7", "parallel", "source-length"}
    assert (table.status == "ok").all() and table.unk_rate.between(0, 1).all()  # the plugin metric's column
    shallow = table[table.decoder == "shallow-at"]
    assert shallow.autoregressive.all() and not table[table.decoder == "half-mask"].autoregressive.any()
    assert table.speedup_vs_at.notna().all()  # shallow-at steps: it is the baseline, whatever its name
    assert (table.speed_baseline.dropna() == "shallow-s1 / greedy").all()
    report = (out / "report.md").read_text()
    assert "there is no AT baseline" not in report and "| Unk % |" in report
    assert "Share of output tokens that are the unknown symbol." in report  # the column explains itself
    env = json.loads((out / "environment.json").read_text())
    assert {(p["distribution"], p["version"]) for p in env["plugins"]} == {("my-atnat-plugins", "0.1.0")}
    assert "with the plugins my-atnat-plugins 0.1.0" in report
    evaluated = atnat(["evaluate", "--checkpoint", str(out / "runs" / "half-mask-s1"),
                       "--src", str(out / "runs" / "half-mask-s1" / "references.txt"),
                       "--ref", str(out / "runs" / "half-mask-s1" / "references.txt"),
                       "--strategy", "source-length", "--also", "source-length:shift=1", "--no-speed",
                       "--json", str(tmp_path / "scores.json")], root, site)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    rows = json.loads((tmp_path / "scores.json").read_text())["rows"]
    assert [r["strategy"] for r in rows] == ["source-length", "source-length-shift=1"] and "unk_rate" in rows[0]


def loose_plugin_grid(installed, tmp_path):
    """A grid naming a plugin module that is not installed, only importable from tmp_path/loose."""
    root, site = installed
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "loose_strategy.py").write_text(
        "from dataclasses import dataclass\n"
        "from atnat.decoding.base import register_strategy\n"
        "from atnat.decoding.greedy import Greedy\n\n\n"
        "@register_strategy('greedy-copy')\n@dataclass(frozen=True)\nclass GreedyCopy(Greedy):\n"
        "    \"\"\"Greedy by another name.\"\"\"\n")
    grid = (root / "my-grid.yaml").read_text().replace("half-mask: {", "half-mask-unused: {")
    grid = grid.replace("eval: {strategies: [greedy, {name: sample, temperature: 0.7}]}",
                        "eval: {strategies: [greedy, greedy-copy]}")
    (tmp_path / "grid.yaml").write_text("plugins: [loose_strategy]\n" + grid)
    return site, loose


def test_every_entry_point_of_the_guides_package_names_a_module_the_guides_write(installed):
    """The package's pyproject.toml named my_package.rotate_task, which no guide it was built from wrote (the task
    is in the data guide): its entry point could not load."""
    root, site = installed
    (toml,) = blocks("toml")
    modules = re.findall(r'^[\w-]+ = "my_package\.(\w+)"$', toml, re.M)
    assert "rotate_task" in modules and len(modules) >= 6
    for module in modules:
        assert (site / "my_package" / f"{module}.py").is_file(), module


def test_a_plugin_module_that_cannot_be_imported_stops_the_grid_before_anything_runs(installed, tmp_path):
    site, _ = loose_plugin_grid(installed, tmp_path)
    without = atnat(["run", str(tmp_path / "grid.yaml"), "--smoke", "--workers", "2", "--results", str(tmp_path),
                     "--only", "shallow-s1"], tmp_path, site)
    assert without.returncode == 2 and "cannot import plugin 'loose_strategy'" in without.stderr
    assert not (tmp_path / "my-plugins-smoke" / "runs").exists()


@pytest.mark.slow  # a parallel grid in subprocesses (~27 s); test_readme_plugins_run_through_a_parallel_grid stays
def test_a_module_named_by_plugins_reaches_the_workers(installed, tmp_path):
    """Not installed, only importable: named in the grid (plugins:) and on the command line."""
    site, loose = loose_plugin_grid(installed, tmp_path)
    run = atnat(["run", str(tmp_path / "grid.yaml"), "--smoke", "--workers", "2", "--results", str(tmp_path),
                 "--only", "shallow-s1"], tmp_path, site, PYTHONPATH=f"{site}{os.pathsep}{loose}")
    assert run.returncode == 0, run.stderr[-3000:]
    table = pd.read_csv(tmp_path / "my-plugins-smoke" / "results.csv")
    ran = table[table.cell == "shallow-s1"]
    assert set(ran.strategy) == {"greedy", "greedy-copy"} and (ran.status == "ok").all()
