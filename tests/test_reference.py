"""The configuration reference (experiments/grids/REFERENCE.md) is generated from the code: it holds every
key a grid file and a run config accept and every built-in option, and cannot drift from them."""
from pathlib import Path

from atnat.experiments.cli.reference import reference_markdown

REFERENCE = Path(__file__).resolve().parent.parent / "experiments" / "grids" / "REFERENCE.md"


def test_the_committed_reference_is_the_generated_one():
    assert REFERENCE.read_text(encoding="utf-8") == reference_markdown(), (
        "experiments/grids/REFERENCE.md is out of date: atnat list --markdown > experiments/grids/REFERENCE.md")


def test_the_reference_names_every_key_and_option():
    import dataclasses

    from atnat.decoding.base import STRATEGIES
    from atnat.experiments.config.run import TrainSettings
    from atnat.experiments.running.grid import GRID_KEYS

    text = reference_markdown()
    assert all(f"| `{key}` |" in text for key in GRID_KEYS)
    assert all(f"| `{f.name}` |" in text for f in dataclasses.fields(TrainSettings))
    assert all(f"### `{name}`" in text for name in STRATEGIES.names() if STRATEGIES.get(name).__module__.startswith("atnat."))
    assert "| `block` | `int` | `5` |" in text  # the speculative strategy's option, with its default
