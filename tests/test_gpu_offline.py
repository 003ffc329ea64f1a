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
    (results / "multi30k" / "report.md").write_text("# report\n")
    (results / "grid.log").write_text("grid done\n")
    done = offline("wait", "0", env_extra={"OFFLINE_RESULTS": str(results), "OUT": str(out)}, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "grid finished" in done.stdout
    with tarfile.open(out / "multi30k.tgz") as tar:
        names = tar.getnames()
    assert "multi30k/report.md" in names and "multi30k/runs/at-s1/metrics.json" in names
    assert not [n for n in names if n.endswith((".ckpt", ".safetensors")) or "checkpoints" in n]
    assert (out / "grid.log").read_text() == "grid done\n"


def test_an_unknown_step_prints_the_usage_and_fails(tmp_path):
    done = offline("train", env_extra={"OUT": str(tmp_path / "out")}, tmp_path=tmp_path)
    assert done.returncode == 2
    assert "gpu_offline.sh start" in done.stdout and "gpu_offline.sh wait" in done.stdout
