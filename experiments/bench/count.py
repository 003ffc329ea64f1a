"""`atnat bench count`: instructions per decode call of each system, counted by valgrind's callgrind.

Wall-clock times need a quiet machine; instruction counts do not: callgrind counts the instructions
a process executes, the same on a loaded machine as on an idle one (within a fraction of a percent).
They are no stand-in for time where memory is the bottleneck (a GEMV at batch 1 reads every weight
per step) or where vector widths differ: valgrind knows no AVX-512, so every system runs its AVX2
code here (torch, MKL, oneDNN, inductor and CTranslate2 alike; pinned through ISA_ENV, which
inductor follows too: a compiled engine is compiled inside the counted process, never loaded from
disk, and its compiler reads /proc/cpuinfo, which valgrind does not hide). What they show is overhead: how many
instructions a system spends beside its matrix products, and where (column `*_share` by code:
matmul kernels, Python, the rest of torch, compiled engine code, CTranslate2, other).

Each system runs in its own process under valgrind, uninstrumented (--instr-atstart=no: model
building and compilation run several times faster than counted code): built, its checked first
call and one warm call, then `calls` timed-equivalent calls inside callgrind's instrumented
collection window (opened and closed through a 6-line C helper compiled with gcc against
valgrind/callgrind.h). The counts include Python's interpretation of our decoding loop.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from atnat.core.errors import AtnatError

ISA_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
           "CT2_FORCE_CPU_ISA": "AVX2",
           "TORCHINDUCTOR_CPP_MARCH": "x86-64-v3"}  # inductor's C++ compiles with -march=native otherwise
HELPER = """#include <valgrind/callgrind.h>
void atnat_collect_on(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; CALLGRIND_TOGGLE_COLLECT; }
void atnat_collect_off(void) { CALLGRIND_TOGGLE_COLLECT; CALLGRIND_DUMP_STATS_AT("measured"); CALLGRIND_STOP_INSTRUMENTATION; }
"""
KINDS = [("matmul", re.compile(r"gemm|gemv|mkl_blas|dnnl|brg|CppMicroGemm|fbgemm|xbyak|ruy|\?\?\?:0x\w+ \[\?\?\?\]|"
                                r"\?\?\?:\?\?\? \[\?\?\?\]", re.I)),  # libraries, templates, JIT code
         ("python", re.compile(r"libpython|/bin/python")),
         ("compiled", re.compile(r"torchinductor|\.pt2|aoti|engines/|/data/aotinductor")),
         ("ctranslate2", re.compile(r"ctranslate2", re.I)),
         ("torch", re.compile(r"libtorch|libc10|libgomp|libiomp|libshm"))]
CT2_NOT_COUNTED = ("CTranslate2 decodes on its own worker thread, which callgrind's collection window (toggled per "
                   "thread) does not see")
COLUMNS = ["system", "strategy", "batch", "out_len", "calls", "instructions_per_call", "passes",
           "instructions_per_pass", *[f"{k}_share" for k, _ in KINDS], "other_share", "error"]


def helper_library(folder: Path) -> Path:
    """Compile the collection helper (needs gcc and valgrind's headers)."""
    src, lib = folder / "collect.c", folder / "libatnatcollect.so"
    src.write_text(HELPER)
    done = subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(lib), str(src)], capture_output=True, text=True)
    if done.returncode:
        raise AtnatError(f"bench count needs gcc and valgrind's headers (apt-get install valgrind): {done.stderr.strip()}")
    return lib


def count(systems: list[str], strategies: list[str], batches: list[int], *, calls: int = 2, tiny: bool = False,
          out_len: int = 30, log=print) -> pd.DataFrame:
    """Instructions per call of every (system, strategy, batch); systems as the decode rows name
    them: ours, ours-int8, ours-ENGINE, ours-int8-ENGINE, ct2-f32, ct2-int8."""
    if subprocess.run(["valgrind", "--version"], capture_output=True).returncode:
        raise AtnatError("bench count needs valgrind (apt-get install valgrind)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="atnat-count-") as tmp:
        folder = Path(tmp)
        lib = helper_library(folder)
        env = {**os.environ, **ISA_ENV}
        for system in systems:
            for strategy in strategies:
                for batch in batches:
                    if system.startswith("ct2-"):
                        rows.append(dict(system=system, strategy=strategy, batch=batch, out_len=out_len, calls=calls,
                                         error=CT2_NOT_COUNTED))
                        log(f"  {system:22s} {strategy:8s} batch {batch:3d}: not counted ({CT2_NOT_COUNTED})")
                        continue
                    args = [sys.executable, "-m", "atnat.experiments.bench.count", system, strategy, str(batch),
                            str(out_len), str(calls), str(lib), "tiny" if tiny else "full"]
                    out = folder / f"cg-{len(rows)}.out"
                    run = subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no", "--instr-atstart=no",
                                          f"--callgrind-out-file={out}", *args], env=env, capture_output=True, text=True)
                    if run.returncode:  # a row saying why, and on with the others
                        error = failure(run.stderr)
                        rows.append(dict(system=system, strategy=strategy, batch=batch, out_len=out_len, calls=calls,
                                         error=error))
                        log(f"  {system:22s} {strategy:8s} batch {batch:3d}: failed under valgrind: {error}")
                        continue
                    passes = json.loads(run.stdout.strip().splitlines()[-1])["passes"]
                    total, shares = breakdown(measured_dump(out))
                    rows.append(dict(system=system, strategy=strategy, batch=batch, out_len=out_len, calls=calls,
                                     instructions_per_call=total / calls, passes=passes,
                                     instructions_per_pass=total / calls / passes if passes == passes else float("nan"),
                                     **{f"{k}_share": v for k, v in shares.items()}, error=""))
                    log(f"  {system:22s} {strategy:8s} batch {batch:3d}: {total / calls / 1e6:9.1f} M instructions "
                        f"per call (matmul {shares['matmul']:.0%}, python {shares['python']:.0%})")
    return pd.DataFrame(rows, columns=COLUMNS)


def failure(stderr: str) -> str:
    """The line that says why a counted process failed: valgrind's own, else the Python error's."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for marker in ("Unrecognised instruction", "Process terminating", "Error"):
        found = [line for line in lines if marker in line]
        if found:
            return found[-1][:300]
    return (lines[-1] if lines else "no output")[:300]


def measured_dump(out: Path) -> Path:
    for path in sorted(out.parent.glob(out.name + "*")):
        with open(path, errors="replace") as f:
            if any("Client Request: measured" in next(f, "") for _ in range(20)):
                return path
    raise AtnatError(f"callgrind wrote no 'measured' dump next to {out}")


def breakdown(dump: Path) -> tuple[int, dict[str, float]]:
    """Total instructions of a dump and the share of each kind of code (self cost per function; --auto=no:
    no annotated source after the function list, whose lines would read as more functions)."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", str(dump)],
                          capture_output=True, text=True).stdout
    total = int(re.search(r"^\s*([\d,]+) \S*\s*PROGRAM TOTALS", text, re.M).group(1).replace(",", ""))
    by_kind = dict.fromkeys([k for k, _ in KINDS] + ["other"], 0)
    for value, where in re.findall(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(.+)$", text, re.M):
        n = int(value.replace(",", ""))
        if n >= total or "PROGRAM TOTALS" in where:  # callers shown with the whole cost: not self cost
            continue
        by_kind[next((k for k, pattern in KINDS if pattern.search(where)), "other")] += n
    return total, {k: v / total for k, v in by_kind.items()}


def child(system: str, strategy: str, batch: int, out_len: int, calls: int, lib: str, size: str) -> None:
    """One system's decode calls inside the collection window; prints {"passes": ...}."""
    import ctypes

    import torch

    from atnat.experiments.bench import ct2_peer as ct2
    from atnat.experiments.bench.spec import FIRST_ORDINARY, HF_BEAMS, make_spec
    from atnat.experiments.bench.systems import Models, our_system

    collect = ctypes.CDLL(lib)
    spec = make_spec(tiny=size == "tiny", threads=1, hf=False)
    torch.set_num_threads(1)
    models = Models(spec)
    src = torch.randint(FIRST_ORDINARY, spec.vocab, (batch, spec.src_len), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        if system.startswith("ct2-"):
            fn, first = ct2.Peer(models.get("at"), device="cpu", threads=1).peer(system, HF_BEAMS[strategy], src, out_len)
        else:
            int8 = system.startswith("ours-int8")
            engine = system[len("ours-int8-" if int8 else "ours-"):] if system not in ("ours", "ours-int8") else None
            s = our_system(models, strategy, src, out_len, spec, int8=int8, engine=engine or None)
            fn, first = s.fn, s.first
        passes = first()["passes"]
        if calls:
            fn()
            collect.atnat_collect_on()
            for _ in range(calls):
                fn()
            collect.atnat_collect_off()
    print(json.dumps({"passes": passes}))


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7])
