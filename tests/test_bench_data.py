"""`atnat bench data`: its synthetic corpus, and one small run of every phase."""
from __future__ import annotations

import pytest

from atnat.experiments.bench.data_bench import bench_data, synthetic_corpus


def test_the_synthetic_corpus_is_seeded_sized_and_kept(tmp_path):
    folder = synthetic_corpus(tmp_path / "c", 500, seed=3, log=lambda _: None)
    src = (folder / "train.en").read_text().splitlines()
    tgt = (folder / "train.de").read_text().splitlines()
    assert len(src) == len(tgt) == 500 and len((folder / "test2016.de").read_text().splitlines()) == 1000
    assert all(8 <= len(s.split()) <= 40 and len(s.split()) == len(t.split()) for s, t in zip(src, tgt))
    assert len({w for s in src for w in s.split()}) > 5000  # drawn from 20,000 words
    again = synthetic_corpus(tmp_path / "d", 500, seed=3, log=lambda _: None)
    assert (again / "train.de").read_bytes() == (folder / "train.de").read_bytes()
    stamp = (folder / "train.en").stat().st_mtime_ns
    synthetic_corpus(tmp_path / "c", 500, seed=3, log=lambda _: None)
    assert (folder / "train.en").stat().st_mtime_ns == stamp  # kept, not written again


def test_a_synthetic_corpus_changed_since_it_was_written_is_written_again(tmp_path):
    """A trial's finding: the corpus was kept on its settings alone, so one cut short (both sides alike) or edited
    was benchmarked under its stamp's pair count."""
    folder = synthetic_corpus(tmp_path / "c", 300, seed=3, log=lambda _: None)
    whole = {p.name: p.read_bytes() for p in folder.iterdir()}
    for change in (lambda f: f.write_text("".join(f.read_text().splitlines(keepends=True)[:20])),
                   lambda f: f.write_bytes(f.read_bytes().replace(b" ", b"_", 1)),
                   lambda f: f.unlink()):
        for name in ("train.en", "train.de"):
            change(folder / name)
        said = []
        synthetic_corpus(tmp_path / "c", 300, seed=3, log=said.append)
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == whole
        assert any("not as written" in line for line in said), said
    (folder / "corpus.json").write_text("{not json")
    synthetic_corpus(tmp_path / "c", 300, seed=3, log=lambda _: None)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == whole


@pytest.mark.slow
def test_every_phase_runs_and_reports_its_numbers(tmp_path):
    df = bench_data([400], tmp_path, log=lambda _: None)
    assert list(df["phase"]) == ["prepare", "train 2 steps", "loader epoch"]
    assert (df["seconds"] > 0).all() and (df["peak_rss_mb"] > 50).all()
    train = df.set_index("phase").loc["train 2 steps"]
    assert 0 < train["first_step_s"] < train["seconds"]
    loader = df.set_index("phase").loc["loader epoch"]
    assert loader["target_tokens_per_s"] > 0 and loader["tokens"] > 400 * 8
