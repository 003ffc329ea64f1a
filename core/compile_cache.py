"""A compiler cache this process can trust (the `inductor`, `aoti` and `auto` engines, `--compile`).

torch.compile and AOTInductor keep an on-disk cache (by default /tmp/torchinductor_<user>: pickled
graphs, compiled shared libraries, autotuning results) and load what they find there. A file
planted in that folder would then run as code, which atnat's rule forbids: nothing read from disk
runs code. So before the first compilation of a process, `private_compile_cache` points inductor
(and Triton, on a GPU) at a fresh folder of its own (mode 0700, removed at exit); worker processes
of the same `atnat run` inherit it. A user who sets TORCHINDUCTOR_CACHE_DIR themselves chooses
to trust that folder, and it is kept; remote caches are switched off either way.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

OURS = "ATNAT_PRIVATE_COMPILE_CACHE"  # the folder this process (or its atnat parent) made


def private_compile_cache() -> str:
    """The cache folder compilations of this process use; a fresh private one unless the user gave one."""
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    inductor_config.fx_graph_remote_cache = False
    inductor_config.autotune_remote_cache = False
    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    ours = os.environ.get(OURS)
    if current and (current == ours or os.path.abspath(current) != os.path.abspath(default_cache_dir())):
        return current  # ours (this process's or its parent's), or the user's own choice
    folder = tempfile.mkdtemp(prefix="atnat-compile-")  # 0700
    atexit.register(shutil.rmtree, folder, True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.environ[OURS] = folder
    if "TRITON_CACHE_DIR" not in os.environ:
        os.environ["TRITON_CACHE_DIR"] = os.path.join(folder, "triton")
    if current:  # inductor ran on the shared default folder earlier in this process: forget what it read
        from torch._inductor.utils import clear_caches

        clear_caches()
    return folder
