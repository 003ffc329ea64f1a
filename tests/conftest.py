"""Test-suite settings: one intra-op thread. The models under test are tiny, and OpenMP threads
that spin while another process holds the second core slowed training 10x or more (measured:
300 AT steps, 9.6 s with 1 thread vs > 120 s with 2 threads next to a busy process). The suite
runs in one single-threaded process per core (pytest-xdist, `-n auto` in pyproject.toml; `-n 0`
runs it in this process)."""
import torch

torch.set_num_threads(1)
