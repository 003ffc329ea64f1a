"""Test-suite settings: one intra-op thread. The models under test are tiny, and OpenMP threads
that spin while another process holds the second core slowed training 10x or more (measured:
300 AT steps, 9.6 s with 1 thread vs > 120 s with 2 threads next to a busy process). The suite
runs in one single-threaded process per core (pytest-xdist, `-n auto` in pyproject.toml; `-n 0`
runs it in this process)."""
import atexit
import os
import shutil
import tempfile

import torch

torch.set_num_threads(1)

# The suite's tokenizers, prepared splits, digests and distillation caches go to a folder of its own, removed at
# the end (each xdist worker has one; the commands the tests start inherit it): never into the user's
# ~/.cache/atnat, which a grid running beside the tests reads. ATNAT_TEST_CACHE names a folder to keep instead.
if not os.environ.get("ATNAT_TEST_CACHE"):
    _cache = tempfile.mkdtemp(prefix="atnat-test-cache-")
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
os.environ["ATNAT_CACHE"] = os.environ.get("ATNAT_TEST_CACHE") or _cache
