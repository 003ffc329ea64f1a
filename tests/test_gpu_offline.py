"""experiments/gpu_offline.sh, the parts that run without a GPU: what a step brings back from the
machine (the grid's results, never its checkpoints), and its usage."""
import subprocess
import tarfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "gpu_offline.sh"


def offline(*args, env_extra, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env_extra}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def test_wait_brings_back_the_results_without_checkpoints(tmp_path):
    results, out = tmp_path / "res", tmp_path / "out"
    cell = results / "multi30k" / "runs" / "at-s1"
    (cell / "checkpoints").mkdir(parents=True)
    (cell / "checkpoints" / "last.ckpt").write_bytes(b"x" * 100)
    (cell / "averaged.safetensors").write_bytes(b"x" * 100)
    (cell / "metrics.json").write_text("{}")
    (cell / "distill" / "beam5-1a2b").mkdir(parents=True)  # a teacher's distilled targets
    (cell / "distill" / "beam5-1a2b" / "train.txt").write_text("targets\n")
    (results / "multi30k" / "report.md").write_text("# report\n")
    (results / "grid.log").write_text("grid done\n")
    (results / "grid.rc").write_text("0\n")
    done = offline("wait", "0", env_extra={"OFFLINE_RESULTS": str(results), "OUT": str(out)}, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "grid finished (exit 0)" in done.stdout and not (out / "failed.txt").exists()
    with tarfile.open(out / "multi30k.tgz") as tar:
        names = tar.getnames()
    assert "multi30k/report.md" in names and "multi30k/runs/at-s1/metrics.json" in names
    assert not [n for n in names if n.endswith((".ckpt", ".safetensors")) or "checkpoints" in n or "distill" in n]
    assert (out / "grid.log").read_text() == "grid done\n"


def test_wait_fails_when_the_grid_failed_or_left_no_status(tmp_path):
    """`wait` said "grid finished" and exited 0 after the grid had crashed (its exit status was never kept)."""
    results, out = tmp_path / "res", tmp_path / "out"
    (results / "multi30k").mkdir(parents=True)
    (results / "grid.log").write_text("RuntimeError: CUDA error: out of memory\n")
    env = {"OFFLINE_RESULTS": str(results), "OUT": str(out)}
    for status, said in (("1\n", "exit 1"), (None, "exit none recorded")):
        if status is not None:
            (results / "grid.rc").write_text(status)
        else:
            (results / "grid.rc").unlink()
        done = offline("wait", "0", env_extra=env, tmp_path=tmp_path)
        assert done.returncode == 1 and f"grid finished ({said}): RuntimeError" in done.stdout
        assert (out / "failed.txt").read_text() == f"failed: the grid ({said})\n"


def test_an_unknown_step_prints_the_usage_and_fails(tmp_path):
    done = offline("train", env_extra={"OUT": str(tmp_path / "out")}, tmp_path=tmp_path)
    assert done.returncode == 2
    assert "gpu_offline.sh start" in done.stdout and "gpu_offline.sh wait" in done.stdout
    assert "gpu_offline.sh checks" in done.stdout and "a fresh machine starts the grid again" in done.stdout  # all of it
    assert not (tmp_path / "out").exists()  # usage writes nothing


def test_the_checks_step_selects_the_gpu_tests_it_names():
    """`checks` runs the GPU tier's graph, step-form and validation tests by keyword: a renamed test must not drop out."""
    import ast
    import re

    from _pytest.mark.expression import Expression  # pytest's own -k evaluator, without a pytest run

    keyword = re.search(r'-k "([^"]+)"', SCRIPT.read_text().split("checks() {")[1]).group(1)
    tree = ast.parse((SCRIPT.parents[1] / "tests" / "test_gpu.py").read_text())
    names = [f.name for f in tree.body if isinstance(f, ast.FunctionDef) and f.name.startswith("test_")]
    expression = Expression.compile(keyword)
    selected = {n for n in names if expression.evaluate(lambda word, n=n, **_: word.lower() in n.lower())}
    assert selected == {"test_cuda_graph_static_step_gives_the_eager_tokens",
                        "test_the_auto_engine_graphs_single_sentence_at_steps_with_the_eager_tokens",
                        "test_the_auto_engine_graphs_every_nat_pass_with_the_eager_tokens",
                        "test_graphed_passes_capture_on_the_models_own_gpu",
                        "test_an_eager_optimizer_state_resumed_under_fused_keeps_its_step_counters_on_the_gpu",
                        "test_validation_on_a_gpu_leaves_trainings_random_state_and_repeats_its_loss"}


def test_pack_leaves_ctranslate2_out_unless_asked(tmp_path):
    """`pack` by default carries no CTranslate2 wheel (41 MB: with it the copy grew too large to send, and its
    wheel cannot decode on a CUDA-13-only machine); `pack --ct2` adds it. A stand-in python3
    records the wheels asked of pip."""
    import os
    import shutil

    root = tmp_path / "repo"
    (root / "experiments").mkdir(parents=True)
    shutil.copy(SCRIPT, root / "experiments" / "gpu_offline.sh")
    data = tmp_path / "multi30k"
    data.mkdir()
    (data / "train.en").write_text("a\n")
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "python3").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "asked"}\n')
    os.chmod(stub / "python3", 0o755)
    for extra, ct2 in (([], False), (["--ct2"], True)):
        done = subprocess.run(["bash", str(root / "experiments" / "gpu_offline.sh"), "pack", *extra], capture_output=True,
                              text=True, timeout=60, env={"PATH": f"{stub}:/usr/bin:/bin", "MULTI30K": str(data),
                                                          "OUT": str(tmp_path / "out")})
        assert done.returncode == 0, done.stderr
        asked = (tmp_path / "asked").read_text().splitlines()[-1]
        assert "sacremoses==" in asked and "submitit==" in asked and ("ctranslate2==" in asked) == ct2
        assert "weigh" in done.stdout and "MiB together" in done.stdout
    assert (root / ".data" / "multi30k" / "train.en").read_text() == "a\n"
    refused = subprocess.run(["bash", str(root / "experiments" / "gpu_offline.sh"), "pack", "--no-ct2"],
                             capture_output=True, text=True, timeout=60, env={"PATH": f"{stub}:/usr/bin:/bin"})
    assert refused.returncode == 2 and "pack: unknown argument '--no-ct2' (only --ct2)" in refused.stderr


def test_a_step_that_fails_fails_the_call_and_says_which(tmp_path):
    """Each measurement's status was lost in its pipe (| tail): `bench` with every command failing exited 0."""
    import os

    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "python3").write_text("#!/bin/sh\nexit 3\n")  # every python3 command fails
    os.chmod(stub / "python3", 0o755)
    results, out = tmp_path / "res", tmp_path / "out"
    results.mkdir()
    (results / ".installed").write_text("")
    done = offline("bench", env_extra={"PATH": f"{stub}:/usr/bin:/bin", "OFFLINE_RESULTS": str(results),
                                       "OUT": str(out)}, tmp_path=tmp_path)
    assert done.returncode == 1, done.stdout
    failed = (out / "failed.txt").read_text()
    assert "bench decode sweep (exit 3)" in failed and "bench train (exit 3)" in failed and "latency" in failed


def test_every_steps_time_limits_fit_one_call_with_its_install():
    """`bench` capped its commands at 630 s and `train-forms` at 580 s, past a call's 600 s once the install is
    counted: a call killed mid-step lost that step's CSV, written at its end."""
    import re

    text = SCRIPT.read_text()
    for step in ("bench", "train_forms", "checks"):
        body = text.split(f"\n{step}() {{")[1].split("\n}\n")[0]
        caps = [int(n) for n in re.findall(r"timeout (\d+) ", body)]
        total = sum(caps) * (2 if step == "train_forms" else 1)  # train-forms runs its two commands for two sizes
        assert caps and total <= 540, (step, caps)
