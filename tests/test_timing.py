"""The timing phase: interleaved, paired speed-ups with intervals, passes, memory, NPD's teacher."""
import json
import mmap
import time
import types
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from atnat.core.errors import AtnatError
from atnat.experiments.config.speed import SpeedSettings
from atnat.experiments.evaluation.timing import System, time_systems

SOURCES = [[7, 8, 9][: 1 + i % 3] for i in range(12)]
FAST = SpeedSettings(latency_sentences=6, throughput_sentences=12, throughput_batch=4, repeats=3, warmup=1,
                     bootstrap=200)


class FakeModule:
    """decode() sleeps `seconds` per sentence, allocates `mb` MiB, logs its calls."""

    def __init__(self, name, seconds, log, mb=0, steps=1, tensor_mb=0):
        self.name, self.seconds, self.log, self.mb, self.steps = name, seconds, log, mb, steps
        self.tensor_mb = tensor_mb
        self.device = torch.device("cpu")

    def decode(self, src, lengths, strategy, **kwargs):
        self.log.append((self.name, src.size(0), torch.is_inference_mode_enabled(), kwargs))
        if "scorer" in kwargs:
            kwargs["scorer"](src[:, :1], src[:, :1].eq(0), torch.arange(src.size(0)))
        if self.mb:  # mb MiB of fresh pages, touched, then unmapped: an allocator that keeps a freed
            block = mmap.mmap(-1, self.mb * 2**20)  # block resident (glibc did, in CI) would hide them
            for offset in range(0, self.mb * 2**20, mmap.PAGESIZE):
                block[offset] = 1
            block.close()
        if self.tensor_mb:  # tensors of 8 MiB from torch's CPU allocator: glibc serves them from its heap
            blocks = [torch.ones(2**21) for _ in range(self.tensor_mb // 8)]  # once one was freed, and keeps
            del blocks  # the freed pages resident for the next call
        time.sleep(self.seconds * src.size(0))
        return SimpleNamespace(n_steps=self.steps)


def system(name, seconds, log, strategy="greedy", teacher=None, **kw):
    search = SimpleNamespace(registered_name=strategy, needs_scorer=strategy == "npd", needs_verifier=False,
                             uses_teacher=strategy == "npd")
    return System(name, "greedy", FakeModule(name, seconds, log, **kw), search, SOURCES, teacher)


def test_systems_are_interleaved_per_sentence_with_rotating_order_in_inference_mode():
    log = []
    time_systems([system("a", 0.0, log), system("b", 0.0, log), system("c", 0.0, log)], FAST, {})
    calls = [name for name, n, *_ in log if n == 1][3 * 6 * (1 + FAST.warmup):]  # after the checked + warm-up calls
    untimed, timed = calls[0::2], calls[1::2]
    assert untimed == timed  # each timed call right after an untimed call of its own system
    rounds = [timed[i: i + 3] for i in range(0, len(timed), 3)]
    assert all(sorted(r) == ["a", "b", "c"] for r in rounds)  # every sentence: each system once
    assert {r[0] for r in rounds} == {"a", "b", "c"}  # the first system changes from call to call
    assert all(inference for _, _, inference, _ in log)


def test_speedup_is_a_paired_ratio_with_an_interval():
    log = []
    table = time_systems([system("at", 0.004, log), system("nat", 0.001, log)], FAST, {"at": ("at", "greedy"),
                                                                                       "nat": ("at", "greedy")})
    nat = table.set_index("cell").loc["nat"]
    assert nat.speedup_vs_at == pytest.approx(4.0, rel=0.35)
    assert nat.speedup_ci_low <= nat.speedup_vs_at <= nat.speedup_ci_high
    assert nat.throughput_speedup_vs_at == pytest.approx(4.0, rel=0.35)
    assert table.set_index("cell").loc["at"].speedup_vs_at == pytest.approx(1.0)
    assert nat.speed_baseline == "at / greedy"
    assert nat.latency_ms_b1 == pytest.approx(1.0, rel=0.6) and nat.throughput_sents_s > 0


def test_decode_memory_is_each_systems_own_peak():
    log = []
    table = time_systems([system("big", 0.0, log, mb=64), system("small", 0.0, log)], FAST, {}).set_index("cell")
    if pd.isna(table.loc["big"].decode_memory_mb):
        pytest.skip("no /proc/self/clear_refs on this system")
    assert table.loc["big"].decode_memory_mb > 40  # its 64 MiB block
    assert table.loc["small"].decode_memory_mb < 20  # not the process's peak since start


def test_decode_memory_counts_what_the_allocator_reuses():
    """A decode's tensors come from the allocator, which keeps the memory a previous call freed: the
    resident size does not grow on a repeat, yet the decode needs that memory each time."""
    log = []
    table = time_systems([system("big", 0.0, log, tensor_mb=48), system("small", 0.0, log)], FAST, {}).set_index("cell")
    if pd.isna(table.loc["big"].decode_memory_mb):
        pytest.skip("no /proc/self/clear_refs on this system")
    assert table.loc["big"].decode_memory_mb > 40  # its six 8 MiB tensors, live at once
    assert table.loc["small"].decode_memory_mb < 20


def test_npd_runs_its_teacher_once_per_call_and_counts_its_pass():
    log, encodes = [], []
    teacher = SimpleNamespace(encode=lambda src: encodes.append(src.size(0)) or SimpleNamespace(
        index_select=lambda i: None), decoder=SimpleNamespace(score_sequences=lambda m, t, p: torch.zeros(t.size(0)), max_output_length=100))
    npd = system("npd", 0.0, log, strategy="npd", teacher=teacher)
    table = time_systems([npd], FAST, {})
    calls = sum(1 for name, *_ in log if name == "npd")
    assert len(encodes) == calls  # the teacher's encoder runs once per decode call, not twice
    assert table.decoder_passes.iloc[0] == 2  # one NAT pass + one teacher pass


def test_speedups_over_a_reference_at_are_paired_ratios_too():
    """speed.reference_at: a second AT (e.g. deep-encoder/shallow-decoder) each system is also compared with."""
    log = []
    systems = [system("at", 0.004, log), system("fast-at", 0.002, log), system("nat", 0.001, log)]
    table = time_systems(systems, FAST, {c: ("at", "greedy") for c in ("at", "fast-at", "nat")},
                         {"ref_at": {c: ("fast-at", "greedy") for c in ("at", "fast-at", "nat")}}).set_index("cell")
    assert table.loc["nat"].speedup_vs_ref_at == pytest.approx(2.0, rel=0.35)
    assert table.loc["at"].speedup_vs_ref_at == pytest.approx(0.5, rel=0.35)
    assert table.loc["nat"].speedup_vs_ref_at_ci_low <= table.loc["nat"].speedup_vs_ref_at
    assert table.loc["nat"].throughput_speedup_vs_ref_at == pytest.approx(2.0, rel=0.35)
    assert table.loc["nat"].ref_at_baseline == "fast-at / greedy"
    assert table.loc["nat"].speedup_vs_at == pytest.approx(4.0, rel=0.35)


def test_speculative_systems_report_verifier_passes_and_tokens_per_pass():
    log = []
    spec = system("spec", 0.0, log)
    spec.module.decode = lambda src, lengths, strategy, **kw: SimpleNamespace(
        n_steps=6, passes={"drafter": 3, "verifier": 3}, accepted=(9, 3))
    table = time_systems([spec, system("at", 0.0, log)], FAST, {}).set_index("cell")
    assert table.loc["spec"].decoder_passes == 6 and table.loc["spec"].verifier_passes == 3
    assert table.loc["spec"].acceptance_length == 3.0
    assert pd.isna(table.loc["at"].verifier_passes) and pd.isna(table.loc["at"].acceptance_length)


def fake_timed_cells(tmp_path, monkeypatch, names):
    """Cells of one task and seed with a checkpoint each (a file `best.ckpt`), and time_grid's model
    loading and timing replaced by fakes: -> (cells, the cells each timing timed, how many cells
    each timing loaded). Cell `at-s1` is the baseline (variant `at`)."""
    from pathlib import Path

    from atnat.experiments.evaluation import timing
    from atnat.experiments.modelfiles import loading as runs
    from atnat.experiments.modelfiles.loading import checkpoint_stamp

    cells = [SimpleNamespace(name=n, variant=n.rsplit("-", 1)[0], labels={"task": "t"},
                             config=SimpleNamespace(output_dir=str(tmp_path / n), task_name="t",
                                                    decoder_name=n.split("-")[0], decoder={"name": n.split("-")[0]},
                                                    distill=None, loss=None, eval=SimpleNamespace(strategies=["greedy"])))
             for n in names]
    for c in cells:
        (tmp_path / c.name).mkdir()
        (tmp_path / c.name / "best.ckpt").write_text("w")
    monkeypatch.setattr(runs, "evaluation_checkpoint", lambda run: run / "best.ckpt")
    monkeypatch.setattr(timing, "evaluation_checkpoint", lambda run: run / "best.ckpt")
    timed, built = [], []

    def fake_grid_systems(alive, device, speed, baseline=None):  # models would be loaded here
        built.append(len(alive))
        return [SimpleNamespace(cell=c.name, strategy="greedy", fingerprint=checkpoint_stamp(Path(c.config.output_dir)))
                for c in alive], {}, {}

    def fake_time_systems(systems, speed, baselines, references=None):
        timed.append(sorted(s.cell for s in systems))
        return pd.DataFrame([{"cell": s.cell, "strategy": s.strategy, "fingerprint": s.fingerprint,
                              "latency_ms_b1": 1.0} for s in systems]).reindex(columns=timing.COLUMNS)

    monkeypatch.setattr(timing, "grid_systems", fake_grid_systems)
    monkeypatch.setattr(timing, "time_systems", fake_time_systems)
    return cells, timed, built


def test_a_timing_is_kept_only_for_the_same_weights_and_settings_and_old_rows_are_named(tmp_path, monkeypatch, capsys):
    """A resumed grid reuses its timing; other speed settings time everything anew; a cell whose
    checkpoints are gone keeps its earlier row, stamped with that earlier session. Each session says when it
    starts (a grid's timing phase printed nothing for hours)."""
    from atnat.experiments.evaluation import timing

    cells, timed, built = fake_timed_cells(tmp_path, monkeypatch, ("at-s1", "nat-s1"))
    eager = partial(SpeedSettings, aa_control=False, engine="eager")
    fast = eager(repeats=1)
    first = timing.time_grid(cells, tmp_path, fast, "cpu")
    assert timed == [["at-s1", "nat-s1"]] and first["timing_session"].notna().all()
    from atnat.experiments.provenance import code_version, label
    assert set(first["timed_with"]) == {label(code_version())} != {""}  # the code that timed each row
    assert "atnat: timing 1 of 1 (" in capsys.readouterr().err
    timing.time_grid(cells, tmp_path, fast, "cpu")
    assert len(timed) == 1 and len(built) == 1  # same systems, weights and settings: kept, nothing loaded
    timing.time_grid(cells, tmp_path, eager(repeats=2), "cpu")
    assert len(timed) == 2  # other settings: timed anew
    assert "engine" not in json.loads((tmp_path / "timing.json").read_text())["speed"]  # eager, as before engines
    timing.time_grid(cells, tmp_path, eager(repeats=2, engine="static"), "cpu")
    assert len(timed) == 3  # another engine: timed anew
    timing.time_grid(cells, tmp_path, SpeedSettings(repeats=2, aa_control=False), "cpu")
    assert len(timed) == 4  # the default engine (auto) is another engine again, and recorded by name
    assert json.loads((tmp_path / "timing.json").read_text())["speed"]["engine"] == "auto"
    timing.time_grid(cells, tmp_path, eager(repeats=2), "cpu")
    assert len(timed) == 5
    (tmp_path / "nat-s1" / "best.ckpt").unlink()
    assert len(timing.time_grid(cells, tmp_path, eager(repeats=2), "cpu")) == 2 and len(timed) == 5
    (tmp_path / "at-s1" / "best.ckpt").write_text("retrained")  # timed again, alone, beside nat's earlier row
    monkeypatch.setattr(timing.time, "strftime", lambda fmt, t=None: "2099-01-01 00:00:00 UTC")
    table = timing.time_grid(cells, tmp_path, eager(repeats=2), "cpu").set_index("cell")
    assert timed[-1] == ["at-s1"]  # only what can still be loaded is timed
    assert table.loc["at-s1", "timing_session"] == "2099-01-01 00:00:00 UTC"
    assert table.loc["nat-s1", "timing_session"] != "2099-01-01 00:00:00 UTC"  # its earlier timing, named


def test_a_commit_that_reads_like_a_number_stays_a_commit(tmp_path, monkeypatch):
    """About 4% of short commit hashes are all digits or read as a float (12e4567): timing.csv read back by
    pandas turned them into 9945357.0 or inf, which then went into results.csv and the collected copies."""
    from atnat.experiments.evaluation import timing
    from atnat.experiments.evaluation.columns import read_timing

    cells, timed, _ = fake_timed_cells(tmp_path, monkeypatch, ("at-s1", "nat-s1"))
    speed = SpeedSettings(aa_control=False, engine="eager", repeats=1)
    for commit in ("12e4567", "9945357"):
        monkeypatch.setattr(timing, "code_version", lambda: {"git_commit": commit, "git_dirty": False})
        timing.time_grid(cells, tmp_path, speed, "cpu", anew=True)
        kept = timing.time_grid(cells, tmp_path, speed, "cpu")  # read back from timing.csv, nothing timed again
        assert list(kept["timed_with"]) == [commit, commit]
        assert list(read_timing(tmp_path / "timing.csv")["timed_with"]) == [commit, commit]
    assert len(timed) == 2


def test_a_new_student_is_timed_beside_its_baseline_and_students_timed_before_keep_their_rows(tmp_path, monkeypatch):
    """The deep grid times each student when it finishes (`atnat time --partial`, the grid paused
    meanwhile). Timing the whole seed again at every new student cost the grid hours (a seed of 4
    students: 4+5+7+10 systems' timings instead of 10 and the baseline's each time): a student already
    timed with its present weights keeps its rows, and the new one is timed beside its baseline, which
    is timed again with it. A changed baseline times the seed anew as a whole."""
    from atnat.experiments.evaluation import timing

    cells, timed, built = fake_timed_cells(tmp_path, monkeypatch, ("at-s1", "nat-s1", "cmlm-s1"))
    at, nat, cmlm = cells
    speed = SpeedSettings(aa_control=False, engine="eager", repeats=1)
    sessions = iter(f"2099-01-0{d} 00:00:00 UTC" for d in range(1, 10))
    monkeypatch.setattr(timing.time, "strftime", lambda fmt, t=None: next(sessions))

    def session_of(table):
        return table.set_index("cell")["timing_session"].to_dict()

    first = timing.time_grid([at, nat], tmp_path, speed, "cpu", "at", keep_others=True)
    assert timed == [["at-s1", "nat-s1"]]
    second = timing.time_grid([at, nat, cmlm], tmp_path, speed, "cpu", "at", keep_others=True)
    assert timed[-1] == ["at-s1", "cmlm-s1"] and built[-1] == 2  # nat-s1 is neither loaded nor timed again
    assert session_of(second) == {"at-s1": "2099-01-02 00:00:00 UTC", "nat-s1": "2099-01-01 00:00:00 UTC",
                                  "cmlm-s1": "2099-01-02 00:00:00 UTC"}
    pd.testing.assert_frame_equal(second.query("cell == 'nat-s1'").reset_index(drop=True),  # the same values; its
                                  first.query("cell == 'nat-s1'").reset_index(drop=True),  # label columns read back
                                  check_dtype=False)  # as text (an empty one: object, not float)
    timing.time_grid([at, nat, cmlm], tmp_path, speed, "cpu", "at", keep_others=True)
    assert len(timed) == 2  # nothing new: nothing timed
    (tmp_path / "cmlm-s1" / "best.ckpt").write_text("trained on")  # a student's weights changed: it alone, beside at
    timing.time_grid([at, nat, cmlm], tmp_path, speed, "cpu", "at", keep_others=True)
    assert timed[-1] == ["at-s1", "cmlm-s1"]
    (tmp_path / "at-s1" / "best.ckpt").write_text("retrained")  # the baseline changed: the seed anew, as a whole
    table = timing.time_grid([at, nat, cmlm], tmp_path, speed, "cpu", "at")
    assert timed[-1] == ["at-s1", "cmlm-s1", "nat-s1"] and table.timing_session.nunique() == 1


def test_anew_times_a_seed_whole_in_one_session_even_where_its_cells_were_timed_before(tmp_path, monkeypatch):
    """The deep grid timed its seed-2 teacher in three sessions (results/multi30k-deep/session_drift.csv): its
    beam-5 ratio moved by 12% between them, against about ±3% within each. Students timed in different
    sessions are then not side by side. `anew` (`atnat time --anew`) times every cell of a chosen seed again
    in one session, weights unchanged or not; a cell whose checkpoints are gone still keeps its row."""
    from atnat.experiments.evaluation import timing

    cells, timed, _ = fake_timed_cells(tmp_path, monkeypatch, ("at-s1", "nat-s1", "cmlm-s1", "ctc-s1"))
    at, nat, cmlm, ctc = cells
    speed = SpeedSettings(aa_control=False, engine="eager", repeats=1)
    sessions = iter(f"2099-01-0{d} 00:00:00 UTC" for d in range(1, 10))
    monkeypatch.setattr(timing.time, "strftime", lambda fmt, t=None: next(sessions))
    timing.time_grid([at, nat], tmp_path, speed, "cpu", "at", keep_others=True)
    timing.time_grid([at, nat, cmlm, ctc], tmp_path, speed, "cpu", "at", keep_others=True)
    assert timed == [["at-s1", "nat-s1"], ["at-s1", "cmlm-s1", "ctc-s1"]]  # two sessions in one seed
    (tmp_path / "ctc-s1" / "best.ckpt").unlink()  # its weights are gone: its row stays as it was
    table = timing.time_grid([at, nat, cmlm, ctc], tmp_path, speed, "cpu", "at", keep_others=True, anew=True)
    assert timed[-1] == ["at-s1", "cmlm-s1", "nat-s1"]
    sessions_of = table.set_index("cell")["timing_session"].to_dict()
    assert sessions_of == {"at-s1": "2099-01-03 00:00:00 UTC", "nat-s1": "2099-01-03 00:00:00 UTC",
                           "cmlm-s1": "2099-01-03 00:00:00 UTC", "ctc-s1": "2099-01-02 00:00:00 UTC"}


def test_the_aa_control_times_the_baseline_twice_and_gives_every_ratio_its_noise_floor():
    """The baseline's speed-up is 1 by construction; its twin, the same computation timed
    as another system, measures how far apart two identical systems land - the noise floor."""
    import dataclasses

    log = []
    at = system("at", 0.002, log)
    twin = dataclasses.replace(at, strategy="greedy-aa")
    nat = system("nat", 0.0005, log)
    table = time_systems([at, twin, nat], FAST, {"at": ("at", "greedy"), "nat": ("at", "greedy")})
    rows = table.set_index(["cell", "strategy"])
    assert rows.loc[("at", "greedy-aa"), "control"] == "A/A" and rows.loc[("at", "greedy"), "control"] == ""
    low, high = rows.loc[("at", "greedy"), ["speed_noise_low", "speed_noise_high"]]
    assert 0.5 < low <= high < 2.0  # identical systems: a ratio near 1 (its width is the noise; wide under load)
    assert (table.speed_noise_low == low).all()  # every row of the task carries it
    base = rows.loc[("at", "greedy")]
    assert (base.speedup_ci_low, base.speedup_ci_high) == (min(low, 1), max(high, 1))  # its spread: the noise, around 1
    assert (table.timing_threads == torch.get_num_threads()).all()


def test_timing_with_more_threads_than_the_process_may_use_says_so(monkeypatch, capsys):
    import dataclasses
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    at = system("at", 0.0001, [])
    time_systems([at], dataclasses.replace(FAST, threads=2), {})
    assert "speed.threads 2 where this process may use 1 CPU core(s)" in capsys.readouterr().err
    time_systems([at], dataclasses.replace(FAST, threads=1), {})
    assert "speed.threads" not in capsys.readouterr().err


def test_the_timing_phase_defaults_to_one_thread_per_system():
    assert SpeedSettings().threads == 1 and SpeedSettings().aa_control


class CacheClock:
    """A virtual perf_counter: a call costs 1 when the previous call ran the same weights (warm
    caches) and 1.5 when it ran other weights - what a CPU's caches do to back-to-back decodes."""

    def __init__(self):
        self.now, self.last = 0.0, None

    def __call__(self):
        return self.now

    def run(self, weights):
        self.now += 1.0 if weights == self.last else 1.5
        self.last = weights


def test_no_system_is_timed_on_caches_another_system_warmed(monkeypatch):
    """The A/A twin ran right after the baseline at every call (a rotation keeps who follows whom),
    on caches the baseline had warmed: it came out 4-17% faster than the baseline on every quickstart
    task and seed, a bias, not noise. Every timed call now follows an untimed call of its own."""
    import dataclasses

    from atnat.experiments.evaluation import timing

    clock = CacheClock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)

    def timed(weights):
        sys = system(weights, 0.0, [])
        sys.module.decode = lambda src, lengths, strategy, **kw: clock.run(weights) or SimpleNamespace(n_steps=1)
        return sys

    at, nat, other = timed("at"), timed("nat"), timed("other")
    twin = dataclasses.replace(at, strategy="greedy-aa")  # the same weights, timed as another system
    table = time_systems([at, twin, nat, other], FAST, {c: ("at", "greedy") for c in ("at", "nat", "other")})
    rows = table.set_index(["cell", "strategy"])
    assert rows.loc[("at", "greedy-aa"), "speedup_vs_at"] == pytest.approx(1.0)  # was 1.2: the twin ran warm
    assert rows.loc[("nat", "greedy"), "speedup_vs_at"] == pytest.approx(1.0)  # equal work, equal time
    assert rows.speed_noise_low.tolist() == pytest.approx([1.0] * 4) and rows.speed_noise_high.tolist() == pytest.approx([1.0] * 4)


def test_each_row_names_the_engine_its_system_decoded_with():
    log = []
    packed = system("packed", 0.0, log)
    packed.module.engine_info = SimpleNamespace(label="packed+onednn")
    table = time_systems([system("at", 0.0, log), packed], FAST, {}).set_index("cell")
    assert table.loc["at", "timing_engine"] == "eager" and table.loc["packed", "timing_engine"] == "packed+onednn"


def test_each_row_names_the_weight_shapes_auto_packed_at_the_timing_threads(monkeypatch):
    """auto's measured layers pack only where the packed product measured faster: the row says for which shapes,
    as measured at the timing's thread count (FAST.threads), "none" where no shape paid, "" for other engines."""
    from atnat.experiments.modelfiles import packed

    layer = packed.PackedLinear(torch.randn(24, 16), None, backend="onednn", measured=True)
    monkeypatch.setattr(packed, "compare_products", lambda layer, x: (1.0, 0.5 if x.size(0) >= 64 else 1.0))
    packed.forget_measurements()
    threads = torch.get_num_threads()
    try:
        auto, plain = system("auto", 0.0, []), system("plain", 0.0, [])
        auto.module.modules = lambda: iter([layer])
        for count in (FAST.threads, FAST.threads + 1):  # packed from 64 rows at the timing's count, never at another
            torch.set_num_threads(count)
            packed.packed_from_rows(16, 24, "onednn")
            monkeypatch.setattr(packed, "compare_products", lambda layer, x: (1.0, 1.0))  # the next: never pays
        torch.set_num_threads(threads)
        table = time_systems([plain, auto], FAST, {}).set_index("cell")
        assert table.loc["auto", "timing_engine_packed"] == "16->24 from 64 rows"
        assert table.loc["plain", "timing_engine_packed"] == ""
        torch.set_num_threads(FAST.threads + 1)
        assert packed.packing_summary(SimpleNamespace(modules=lambda: iter([layer]))) == "none"
    finally:
        torch.set_num_threads(threads)
        packed.forget_measurements()


def test_the_speed_engine_is_checked_and_spelled_one_way():
    from atnat.core.errors import AtnatError

    assert SpeedSettings().engine == "auto" and SpeedSettings().record()["engine"] == "auto"
    assert "engine" not in SpeedSettings(engine="eager").record()  # as timings before engines recorded it
    assert SpeedSettings(engine="aoti+fused+autotune").record()["engine"] == "aoti+autotune+fused"
    with pytest.raises(AtnatError, match="speed.engine 'fast': unknown engine 'fast'; valid: engines eager"):
        SpeedSettings(engine="fast")


def test_the_aa_control_gives_throughput_ratios_a_floor_of_their_own(monkeypatch):
    """Review D7: the A/A floor was the batch-1 latency ratio alone, yet it was applied to the
    throughput ratios too (quickstart: throughput A/A ratios 1.02-1.06, outside the latency floor).
    Here the twin runs as fast as the baseline at batch 1 and 25% slower in batches."""
    from atnat.experiments.evaluation import timing

    clock = CacheClock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)

    def timed(name, batched):
        module = SimpleNamespace(device=torch.device("cpu"))
        module.decode = lambda src, lengths, strategy, **kw: (
            setattr(clock, "now", clock.now + (1.0 if src.size(0) == 1 else batched)) or SimpleNamespace(n_steps=1))
        return System(name, "greedy", module, SimpleNamespace(needs_scorer=False, uses_teacher=False), SOURCES)

    at, nat = timed("at", 1.0), timed("nat", 1.0)
    twin = timed("at", 1.25)
    twin.strategy = "greedy-aa"
    table = time_systems([at, twin, nat], FAST, {c: ("at", "greedy") for c in ("at", "nat")})
    rows = table.set_index(["cell", "strategy"])
    assert table.speed_noise_low.tolist() == pytest.approx([1.0] * 3)
    assert table.speed_noise_high.tolist() == pytest.approx([1.0] * 3)
    assert table.throughput_noise_low.tolist() == pytest.approx([0.8] * 3)  # every row carries it
    assert table.throughput_noise_high.tolist() == pytest.approx([0.8] * 3)
    base = rows.loc[("at", "greedy")]
    assert (base.throughput_speedup_ci_low, base.throughput_speedup_ci_high) == pytest.approx((0.8, 1.0))  # holds 1
    assert (base.speedup_ci_low, base.speedup_ci_high) == pytest.approx((1.0, 1.0))


def test_each_task_and_seed_is_timed_as_its_own_group_and_an_unchanged_group_is_kept(tmp_path, monkeypatch):
    """A seed's systems are timed side by side with that seed's baseline, apart from the other seeds:
    a seed whose cells are all done can be timed while the rest of the grid trains (`atnat time`),
    and is not timed again when a later seed is; `keep_others` keeps rows of cells not asked about."""
    from pathlib import Path

    from atnat.experiments.evaluation import timing
    from atnat.experiments.modelfiles import loading
    from atnat.experiments.modelfiles.loading import checkpoint_stamp

    def cell(name, seed):
        (tmp_path / name).mkdir()
        (tmp_path / name / "best.ckpt").write_text("w")
        return SimpleNamespace(name=name, seed=seed, variant=name.split("-")[0], labels={"task": "t"}, config=SimpleNamespace(
            output_dir=str(tmp_path / name), task_name="t", eval=SimpleNamespace(strategies=["greedy"])))

    s1, s2 = [cell("at-s1", 1), cell("nat-s1", 1)], [cell("at-s2", 2), cell("nat-s2", 2)]
    for module in (timing, loading):
        monkeypatch.setattr(module, "evaluation_checkpoint", lambda run: run / "best.ckpt")
    timed = []
    monkeypatch.setattr(timing, "grid_systems", lambda alive, device, speed, baseline=None: (
        [SimpleNamespace(cell=c.name, strategy="greedy", fingerprint=checkpoint_stamp(Path(c.config.output_dir)))
         for c in alive], {}, {}))

    def fake_time_systems(systems, speed, baselines, references=None):
        timed.append(sorted(s.cell for s in systems))
        return pd.DataFrame([{"cell": s.cell, "strategy": s.strategy, "fingerprint": s.fingerprint}
                             for s in systems]).reindex(columns=timing.COLUMNS)

    monkeypatch.setattr(timing, "time_systems", fake_time_systems)
    fast = SpeedSettings(repeats=1, aa_control=False, engine="eager")
    timing.time_grid(s1, tmp_path, fast, "cpu", "at")
    assert timed == [["at-s1", "nat-s1"]]
    table = timing.time_grid(s1 + s2, tmp_path, fast, "cpu", "at")
    assert timed == [["at-s1", "nat-s1"], ["at-s2", "nat-s2"]] and len(table) == 4  # seed 1 kept, seed 2 alone
    (tmp_path / "nat-s2" / "best.ckpt").write_text("retrained")
    timing.time_grid(s1 + s2, tmp_path, fast, "cpu", "at")
    assert timed[-1] == ["at-s2", "nat-s2"] and len(timed) == 3  # the changed seed's student, beside its baseline
    assert len(timing.time_grid(s2, tmp_path, fast, "cpu", "at", keep_others=True)) == 4 and len(timed) == 3
    with pytest.raises(AtnatError, match="timing only some seeds would drop the others' rows"):
        timing.time_grid(s2, tmp_path, SpeedSettings(repeats=2, aa_control=False, engine="eager"), "cpu", "at",
                         keep_others=True)  # other settings: a partial timing refuses rather than wipe
    assert len(pd.read_csv(tmp_path / "timing.csv")) == 4 and len(timed) == 3
    assert sorted(timing.time_grid(s2, tmp_path, fast, "cpu", "at").cell) == ["at-s2", "nat-s2"]  # the others dropped


class _Sleeper:
    """A stand-in model whose decode sleeps in proportion to its batch (no weights, no engine)."""

    def __init__(self, name):
        self.name, self.device = name, torch.device("cpu")

    def decode(self, src, lengths, strategy, **kw):
        import time as clock

        clock.sleep((0.002 if self.name.startswith("at") else 0.0005) * src.size(0))
        return types.SimpleNamespace(n_steps=1)


def _stand_in_grid(tmp_path, monkeypatch, *names):
    import hashlib

    from atnat.experiments.evaluation import timing

    class Tok:
        def encode(self, line):
            return [5, 6, 7]

    sources = [f"s{i}" for i in range(8)]
    monkeypatch.setattr(timing, "load_module", lambda path, map_location=None: (_Sleeper(Path(path).parent.name), Tok()))
    monkeypatch.setattr(timing, "evaluation_checkpoint", lambda run: run / "best.ckpt")
    monkeypatch.setattr(timing, "load_task", lambda cfg: types.SimpleNamespace(splits={"test": (sources, sources)}))
    monkeypatch.setattr(timing, "checkpoint_stamp", lambda run: hashlib.md5((run / "best.ckpt").read_bytes()).hexdigest())
    monkeypatch.setattr(timing, "apply_engine", lambda module, engine: None)
    cells = {}
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "best.ckpt").write_text("w")
        cfg = types.SimpleNamespace(output_dir=str(tmp_path / name), task_name="t", decoder_name="at",
                                    decoder={"name": "at"}, loss=None, distill=None, train=types.SimpleNamespace(max_len=10),
                                    eval=types.SimpleNamespace(split="test", strategies=["greedy"]))
        cells[name] = types.SimpleNamespace(name=name, variant=name.rsplit("-s", 1)[0], seed=1, labels={"task": "t"},
                                            config=cfg)
    speed = SpeedSettings(latency_sentences=4, throughput_sentences=8, throughput_batch=4, repeats=1, warmup=0,
                          bootstrap=50, engine="eager", reference_at="at-deep", aa_control=True)
    return timing, cells, speed


def test_a_student_timed_in_a_later_session_gets_its_speed_over_the_reference_at(tmp_path, monkeypatch):
    timing, c, speed = _stand_in_grid(tmp_path, monkeypatch, "at-s1", "at-deep-s1", "nat-s1", "cmlm-s1")
    timing.time_grid([c["at-s1"], c["at-deep-s1"], c["nat-s1"]], tmp_path, speed, "cpu", "at", keep_others=True)
    later = timing.time_grid(list(c.values()), tmp_path, speed, "cpu", "at", keep_others=True).set_index("cell")
    assert later.loc["cmlm-s1", "ref_at_baseline"] == "at-deep-s1 / greedy"
    assert later.loc["cmlm-s1", "speedup_vs_ref_at"] > 0
    assert later.loc["cmlm-s1", "timing_session"] == later.loc["at-deep-s1", "timing_session"]  # side by side


def test_a_group_whose_baseline_lost_its_checkpoint_keeps_its_speed_ups(tmp_path, monkeypatch):
    timing, c, speed = _stand_in_grid(tmp_path, monkeypatch, "at-s1", "nat-s1", "cmlm-s1")
    first = timing.time_grid([c["at-s1"], c["nat-s1"]], tmp_path, speed, "cpu", "at", keep_others=True)
    before = first.set_index(["cell", "strategy"]).loc[("nat-s1", "greedy"), "speedup_vs_at"]
    (tmp_path / "at-s1" / "best.ckpt").unlink()
    after = timing.time_grid(list(c.values()), tmp_path, speed, "cpu", "at", keep_others=True)
    assert after.set_index(["cell", "strategy"]).loc[("nat-s1", "greedy"), "speedup_vs_at"] == before


def test_a_speed_timed_on_other_weights_than_the_cells_now_is_not_reported(tmp_path):
    """A cell trained again after its timing: its old speed must not stand beside its new BLEU."""
    from atnat.experiments.modelfiles.checkpoints import write_checksum
    from atnat.experiments.modelfiles.loading import checkpoint_stamp
    from atnat.experiments.reporting.table import add_timing

    for cell in ("a-s1", "b-s1"):
        weights = tmp_path / cell / "checkpoints" / "best.ckpt"
        weights.parent.mkdir(parents=True)
        weights.write_bytes(cell.encode())
        write_checksum(weights)
    results = pd.DataFrame({"cell": ["a-s1", "b-s1"], "strategy": ["greedy", "greedy"], "bleu": [30.0, 31.0]})
    timing = pd.DataFrame({"cell": ["a-s1", "b-s1"], "strategy": ["greedy", "greedy"], "speedup_vs_at": [1.0, 3.0],
                           "fingerprint": [checkpoint_stamp(tmp_path / "a-s1"), "sha256-" + "0" * 64]})
    merged = add_timing(results, timing, tmp_path).set_index("cell")
    assert merged.loc["a-s1", "speedup_vs_at"] == 1.0 and pd.isna(merged.loc["b-s1", "speedup_vs_at"])


def test_time_systems_itself_times_at_the_speed_settings_threads():
    """The grid's timing phase set speed.threads around time_systems, but a single run's evaluation (atnat
    train with speed:) timed at the training's thread count and recorded that instead."""
    seen = []

    class Counting(FakeModule):
        def decode(self, src, lengths, strategy, **kwargs):
            seen.append(torch.get_num_threads())
            return super().decode(src, lengths, strategy, **kwargs)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        search = SimpleNamespace(registered_name="greedy", needs_scorer=False, needs_verifier=False, uses_teacher=False)
        table = time_systems([System("a", "greedy", Counting("a", 0.0, []), search, SOURCES, None)],
                             FAST.__class__(**{**FAST.__dict__, "threads": 1}), {})
        assert set(seen) == {1} and (table.timing_threads == 1).all()
        assert torch.get_num_threads() == 2  # given back
    finally:
        torch.set_num_threads(before)


def test_the_runner_never_drops_a_timing_it_cannot_take_again(tmp_path, monkeypatch):
    """A review's finding: under other speed settings, or only another spelling of the same GPU (`atnat time
    --devices 0` records cuda:0, the runner cuda), the runner's timing phase threw the whole table away, the rows
    of cells whose checkpoints were gone with it, after saying that their earlier timings were kept."""
    from atnat.experiments.evaluation import timing

    monkeypatch.setattr(timing, "device_name", lambda device: "NVIDIA H200" if device.startswith("cuda") else "cpu")
    cells, timed, _ = fake_timed_cells(tmp_path, monkeypatch, ("at-s1", "nat-s1", "at-s2", "nat-s2"))
    for c in cells:
        c.seed = int(c.name[-1])
    fast = SpeedSettings(aa_control=False, engine="eager", repeats=1)
    timing.time_grid(cells[:2], tmp_path, fast, "cuda:0", keep_others=True)  # seed 1, while its weights exist
    for name in ("at-s1", "nat-s1"):
        (tmp_path / name / "best.ckpt").unlink()
    table = timing.time_grid(cells, tmp_path, fast, "cuda")  # the same card, spelled as the runner does
    assert sorted(set(table.cell)) == ["at-s1", "at-s2", "nat-s1", "nat-s2"]
    with pytest.raises(AtnatError, match=r"(?s)other speed settings .*at-s1, nat-s1 have no checkpoint left"):
        timing.time_grid(cells, tmp_path, SpeedSettings(aa_control=False, engine="eager", repeats=2), "cuda")
    assert sorted(set(timing.read_timing(tmp_path / "timing.csv").cell)) == ["at-s1", "at-s2", "nat-s1", "nat-s2"]


def test_collected_cells_timed_on_one_gpu_spelled_two_ways_share_one_table(tmp_path):
    """Copies timed by `atnat time --devices 0` (cuda:0) and by the runner (cuda) on the same GPU model were refused
    as "timed on different devices" when an interim report joined them."""
    from atnat.experiments.running.collect import stage_timing

    for cell, device in (("at-s1", "cuda:0"), ("at-s2", "cuda")):
        (tmp_path / "src" / cell).mkdir(parents=True)
        pd.DataFrame([{"cell": cell, "strategy": "greedy", "fingerprint": "f"}]).to_csv(tmp_path / "src" / cell / "timing.csv",
                                                                                       index=False)
        (tmp_path / "src" / cell / "timing.json").write_text(json.dumps({"speed": {"repeats": 3}, "device": device,
                                                                          "device_name": "NVIDIA H200"}))
    (tmp_path / "out").mkdir()
    stage_timing(tmp_path / "src", ["at-s1", "at-s2"], tmp_path / "out")
    assert sorted(pd.read_csv(tmp_path / "out" / "timing.csv")["cell"]) == ["at-s1", "at-s2"]
    (tmp_path / "src" / "at-s2" / "timing.json").write_text(json.dumps({"speed": {"repeats": 3}, "device": "cuda",
                                                                        "device_name": "NVIDIA H100"}))
    with pytest.raises(AtnatError, match="different speed settings or on different devices"):
        stage_timing(tmp_path / "src", ["at-s1", "at-s2"], tmp_path / "out")


def test_every_speed_ratio_of_a_seed_is_over_one_baseline_cell(monkeypatch):
    """A review's finding: with two plain AT cells in a task and no `baseline:`, speedup_vs_at was over the first
    cell's greedy and speedup_vs_at_beam over the last cell's beam."""
    from types import SimpleNamespace as NS

    from atnat.experiments.evaluation import timing

    monkeypatch.setattr(timing, "load_module", lambda path, map_location=None: (NS(device="cpu"), NS(encode=lambda s: [5, 6])))
    monkeypatch.setattr(timing, "evaluation_checkpoint", lambda run: Path(run) / "best.ckpt")
    monkeypatch.setattr(timing, "checkpoint_stamp", lambda run: "stamp-" + Path(run).name)
    monkeypatch.setattr(timing, "load_task", lambda cfg: NS(splits={"test": (["a b", "c d"], ["x", "y"])}))

    def cell(name, variant, decoder, strategies):
        cfg = NS(output_dir=f"/nonexistent/{name}", task_name="t", decoder_name=decoder, decoder={"name": decoder},
                 distill=None, loss=None, eval=NS(split="test", strategies=strategies), train=NS(max_len=100))
        return NS(name=name, variant=variant, seed=1, labels={"task": "t"}, config=cfg)

    beam = {"name": "beam", "beam_size": 5}
    cells = [cell("at-s1", "at", "at", ["greedy", beam]), cell("at-big-s1", "at-big", "at", ["greedy", beam]),
             cell("nat-s1", "nat", "nat", ["greedy"])]
    _, baselines, references = timing.grid_systems(cells, "cpu", None, None)
    assert baselines["nat-s1"][0] == references["at_beam"]["nat-s1"][0] == "at-s1"


def test_the_runners_timing_phase_says_which_finished_cells_it_left_without_speed(tmp_path, monkeypatch, capsys):
    """A review's finding: a finished student whose baseline's checkpoint was gone got no timing row, and `atnat run`
    exited 0 (its cluster path exits 1 for the same grid)."""
    from types import SimpleNamespace as NS

    from atnat.experiments.running import timing_phase

    cells = [NS(name="at-s1"), NS(name="nat-s1")]
    grid = NS(speed={}, baseline=None)
    monkeypatch.setattr(timing_phase, "finished", lambda g: cells)
    monkeypatch.setattr(timing_phase, "time_grid", lambda done, out, speed, device, baseline: pd.DataFrame({"cell": ["at-s1"]}))
    monkeypatch.setattr(timing_phase, "score_exported_twins", lambda done, device, speed: None)
    why = timing_phase.timing_phase(grid, tmp_path, "cpu")
    assert "no speed for nat-s1" in why and "no speed for nat-s1" in capsys.readouterr().err
    monkeypatch.setattr(timing_phase, "time_grid", lambda *a: pd.DataFrame({"cell": ["at-s1", "nat-s1"]}))
    assert timing_phase.timing_phase(grid, tmp_path, "cpu") == ""


def test_the_aa_twin_is_not_timed_beside_its_baseline_every_time():
    """A review's finding: systems took turns in one fixed cycle, the A/A twin always next to the baseline, so the
    pair shared the machine's load more closely than the baseline and any other system did, and the noise floor
    they give came out narrower than the noise of the ratios it bounds (0.033 against 0.048 wide, simulated)."""
    from atnat.experiments.evaluation.timing import _call_orders

    orders = list(_call_orders(8, repeats=3, n_calls=32))
    assert len(orders) == 96 and all(sorted(o) == list(range(8)) for o in orders)
    distance = lambda a, b: np.mean([abs(o.index(a) - o.index(b)) for o in orders])
    assert distance(0, 1) > 2.0 and abs(distance(0, 1) - distance(0, 5)) < 1.0  # as far apart as any pair, on average
    assert orders == list(_call_orders(8, repeats=3, n_calls=32))  # the same orders each time (seeded)
    from atnat.experiments.evaluation.timing import _interleaved

    ran = []  # the timing takes its turns in these orders: each timed call follows its untimed twin
    calls = [[(lambda s=s: ran.append(s)) for _ in range(4)] for s in range(8)]
    _interleaved(calls, SpeedSettings(repeats=2, warmup=0), torch.device("cpu"))
    assert ran[::2] == ran[1::2] == [s for order in _call_orders(8, repeats=2, n_calls=4) for s in order]


def test_a_ratio_interval_over_few_calls_still_covers_about_95_percent():
    """A review's finding: with the throughput's few batches (the quickstart times 4: 64, 64, 64, 8 sentences) the
    percentile bootstrap's "95%" interval held the true ratio in 75% of simulated timings."""
    from atnat.experiments.evaluation.timing import _ratio_ci

    rng = np.random.default_rng(0)
    for sizes in ([64, 64, 64, 8], [64] * 15 + [40]):
        sizes = np.array(sizes, float)
        hits = 0
        for t in range(300):
            a, b = sizes * rng.lognormal(0, 0.05, len(sizes)), sizes * rng.lognormal(0, 0.05, len(sizes))
            _, low, high = _ratio_ci(a, b, 500, seed=t)
            hits += low <= 1.0 <= high
        assert hits / 300 >= 0.9, (len(sizes), hits / 300)  # the bootstrap alone: 0.75 over 4 batches


def test_a_ratio_interval_over_two_calls_stays_above_zero():
    """The t widening was symmetric: over 2 batches (t at 1 df is 12.7) a ratio of 2.03 got [-0.21, 4.26]."""
    from atnat.experiments.evaluation.timing import _ratio_ci

    ratio, low, high = _ratio_ci(np.array([0.64, 0.09]), np.array([0.30, 0.06]), 500)
    assert 0 < low < ratio < high
