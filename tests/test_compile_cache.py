"""Compilers read nothing from before the process (core/compile_cache.py): the first compilation of a
process points inductor at a fresh private folder instead of the shared /tmp/torchinductor_<user>,
where a planted pickle or shared library would be loaded as a cache hit; a folder the user named is
kept; worker processes inherit the parent's."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

SCRIPT = """
import os, json
from atnat.core.compile_cache import private_compile_cache
from torch._inductor.runtime.cache_dir_utils import cache_dir
import torch._inductor.config as c
first = private_compile_cache()
print(json.dumps({"first": first, "again": private_compile_cache(), "inductor": cache_dir(),
                  "remote": [c.fx_graph_remote_cache, c.autotune_remote_cache],
                  "triton": os.environ.get("TRITON_CACHE_DIR"), "exists": os.path.isdir(first),
                  "mode": oct(os.stat(first).st_mode & 0o777), "empty": os.listdir(first) == []}))
"""


def run(env_extra: dict, drop=("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "ATNAT_PRIVATE_COMPILE_CACHE")):
    import json

    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_process_compiles_into_a_fresh_private_folder_not_the_shared_default():
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    got = run({})
    assert got["first"] == got["again"] == got["inductor"] != os.path.abspath(default_cache_dir())
    assert got["mode"] == oct(stat.S_IRWXU) and got["empty"]  # only this user, nothing in it from before
    assert got["triton"].startswith(got["first"]) and got["remote"] == [False, False]
    assert not os.path.exists(got["first"])  # removed at exit
    # the shared default named explicitly (as inductor itself sets it after a first use) is not trusted
    assert run({"TORCHINDUCTOR_CACHE_DIR": default_cache_dir()})["first"] != os.path.abspath(default_cache_dir())


@pytest.mark.slow
def test_a_folder_the_user_named_is_kept_and_a_worker_reuses_its_parents(tmp_path):
    mine = str(tmp_path / "my-cache")
    assert run({"TORCHINDUCTOR_CACHE_DIR": mine})["first"] == mine
    parent = str(tmp_path / "parent")
    os.mkdir(parent, 0o700)
    got = run({"TORCHINDUCTOR_CACHE_DIR": parent, "ATNAT_PRIVATE_COMPILE_CACHE": parent})
    assert got["first"] == parent


def test_the_compiled_training_step_compiles_into_the_private_folder_too():
    """The compiled training step (train.step: compiled, `atnat bench train --forms compiled`) ran torch.compile
    on the shared /tmp/torchinductor_<user>: a second process loaded the first one's pickled graph and library."""
    import json

    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    code = ("import os, json\nfrom atnat.models.step_forms import compiled\ncompiled(lambda x: x + 1)\n"
            "print(json.dumps([os.environ.get('TORCHINDUCTOR_CACHE_DIR'), os.environ.get('ATNAT_PRIVATE_COMPILE_CACHE')]))")
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "ATNAT_PRIVATE_COMPILE_CACHE")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    inductor, ours = json.loads(done.stdout.strip().splitlines()[-1])
    assert inductor == ours and ours is not None and inductor != os.path.abspath(default_cache_dir())
