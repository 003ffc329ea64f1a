"""The suite keeps its caches out of the user's: a grid running beside the tests reads ~/.cache/atnat."""
from pathlib import Path


def test_the_suites_caches_are_not_the_users():
    from atnat.experiments.data.tokenize import CACHE_DIR

    assert not CACHE_DIR.is_relative_to(Path.home() / ".cache" / "atnat"), CACHE_DIR
