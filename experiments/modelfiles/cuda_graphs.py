"""CUDA graphs of whole-sequence passes (the `auto` engine on a GPU; see engines.py): the encoder and a
NAT decoder's pass (parallel, CTC, DAG) replayed from a graph captured once per exact input shape.

At batch 1 a pass of a small model is a few dozen short kernels, and launching them costs more than
running them; a replayed graph launches them all at once. One graph per shape (batch, lengths, dtype)
runs the very kernels eager runs at that shape, so its outputs are eager's, bit for bit: no padding
to length buckets (which would change the reductions, and with them the last bits). The first call
at a shape runs the pass eagerly once on a side stream (lazy initialisation; any read of a value on
the host fails there, before a capture) and captures it on that stream; later calls copy their inputs
into the graph's buffers, replay, and return copies of its outputs (a later replay writes over the
graph's own). Graphs share one memory pool per device, which is safe because every replay's outputs
are copied before the next replay. Under autocast the casts are captured too (not cached: a cached
cast would be freed when the caller's autocast block ends).

What runs eager, the part's own method: calls with more rows than `max_rows`; a decoder pass whose
decode began with an encoder call of more than the encoder's `max_rows` (a batch: launches are
amortised and shapes rarely repeat); calls with gradients on; calls that record attention maps;
new shapes once the pass holds `max_graphs` graphs or `max_bytes` of their buffers (inputs and outputs); every
call after the pass failed to capture (with a warning naming why; its graphs are freed). A call whose input is
at fault (eager fails on it too, e.g. a source longer than the positions) raises eager's error and leaves the
pass as it was.

A graph reads the weights where they were at capture: apply the engine to a model whose weights stay
where they are (no `.to()`, `.half()` or reassigned parameters afterwards). The graphs' memory is
allocated at each shape's first call and kept; the timing phase's memory column is a large-batch
decode's (eager), counted above what was allocated before it.
"""
from __future__ import annotations

import warnings
from typing import Callable

import torch
from torch import Tensor

from atnat.experiments.modelfiles.aoti import TensorPass

MAX_GRAPHS = 1024  # shapes per pass; the Multi30k test sets at batch 1 need a few hundred
MAX_BYTES = 2 << 30  # the graphs' input and output buffers per pass (a pass's output of 16 rows x 100 slots x a
# 40k vocabulary in float32 is 256 MB; at Multi30k's sizes a graph holds a few MB)
_STREAMS: dict[int, torch.cuda.Stream] = {}  # one side stream per device, for warm-ups and captures


def _side_stream(device: torch.device) -> torch.cuda.Stream:
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _STREAMS:
        _STREAMS[index] = torch.cuda.Stream(device=index)
    return _STREAMS[index]


class CudaGraph:
    """A callable captured once on static input buffers, on their device: copy in, replay, copy out."""

    def __init__(self, run: Callable, tensors: tuple[Tensor, ...], pool):
        self.device = tensors[0].device
        self.inputs = tuple(t.clone() for t in tensors)
        autocast, dtype = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")

        def call():
            with torch.autocast("cuda", dtype=dtype, enabled=autocast, cache_enabled=False):
                return run(*self.inputs)

        with torch.cuda.device(self.device):
            side = _side_stream(self.device)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                mode = torch.cuda.get_sync_debug_mode()
                torch.cuda.set_sync_debug_mode("error")  # a read on the host cannot be captured: fail here
                try:
                    call()
                finally:
                    torch.cuda.set_sync_debug_mode(mode)
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, pool=pool, stream=side):
                self.outputs = call()

    @staticmethod
    def new_pool():
        return torch.cuda.graph_pool_handle()

    def __call__(self, tensors: tuple[Tensor, ...]):
        with torch.cuda.device(self.device):
            for static, t in zip(self.inputs, tensors):
                static.copy_(t)
            self.graph.replay()
            return _copy(self.outputs)


class Rerun:
    """CudaGraph's contract without a GPU (tests): static buffers in and out, each call runs `run` on the
    input buffers and writes its results over the output buffers, as a replay does."""

    def __init__(self, run: Callable, tensors: tuple[Tensor, ...], pool=None):
        self.run, self.inputs = run, tuple(t.clone() for t in tensors)
        self.outputs = run(*self.inputs)

    @staticmethod
    def new_pool():
        return None

    def __call__(self, tensors: tuple[Tensor, ...]):
        for static, t in zip(self.inputs, tensors):
            static.copy_(t)
        fresh = self.run(*self.inputs)
        for static, t in zip(_flat(self.outputs), _flat(fresh)):
            static.copy_(t)
        return _copy(self.outputs)


def _flat(out) -> tuple[Tensor, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _copy(out):
    return tuple(t.clone() for t in out) if isinstance(out, (tuple, list)) else out.clone()


class Decode:
    """One model's decode as its passes see it: whether it began with an encoder call that replayed a
    graph (set by the encoder's GraphedPass, read by the decoder's)."""

    single = False


class GraphedPass:
    """A model part's pass (aoti.TensorPass's kinds: encoder, parallel, ctc, dag) replayed from one graph per
    input shape; set on the part in place of that method (`install`), as aoti.CompiledPass is. With a
    `decode` shared by the model's passes, a decoder pass replays only within a decode whose encoder call
    did."""

    def __init__(self, part, kind: str, *, max_rows: int, max_graphs: int = MAX_GRAPHS, max_bytes: int = MAX_BYTES,
                 graph=None, decode: Decode | None = None):
        self.module = TensorPass(part, kind)
        self.kind, self.max_rows, self.max_graphs, self.max_bytes, self.decode = kind, max_rows, max_graphs, max_bytes, decode
        self.make = graph or CudaGraph  # or Rerun (tests)
        self.graphs: dict[tuple, CudaGraph | Rerun] = {}
        self.pools: dict[torch.device, object] = {}  # the graphs' memory pool per device, made at its first capture
        self.bytes = 0  # the graphs' input and output buffers
        self.replays = 0  # calls answered by a graph (captures included)
        self.broken = ""  # why this pass could not be captured: it runs eager from then on

    def install(self) -> None:
        self.module.install(self)

    def key(self, tensors: tuple[Tensor, ...]) -> tuple | None:
        """The graph a call replays: its shapes, strides, dtypes and autocast state; None where it runs eager."""
        single = tensors[0].size(0) <= self.max_rows and not torch.is_grad_enabled()
        if self.decode is not None and self.kind == "encoder":
            self.decode.single = single
        elif self.decode is not None and not self.decode.single:
            return None
        if not single or self.broken or getattr(self.module.part, "record_attention", False):
            return None
        device = tensors[0].device.type
        autocast = (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)) if device != "cpu" else ()
        return (tuple((tuple(t.shape), t.stride(), t.dtype, t.device) for t in tensors), autocast,
                torch.is_inference_mode_enabled())

    def capture(self, key: tuple, tensors: tuple[Tensor, ...]):
        """-> (a new graph for `key`, None), or (None, the exception) where the capture failed."""
        device = tensors[0].device
        try:
            if device not in self.pools:
                self.pools[device] = self.make.new_pool()
            graph = self.make(self.module, tensors, self.pools[device])
        except Exception as err:  # noqa: BLE001  (the input's fault or the pass's: the eager call tells)
            return None, err
        self.graphs[key] = graph
        self.bytes += sum(t.nbytes for t in graph.inputs + _flat(graph.outputs))
        return graph, None

    def give_up(self, err: Exception) -> None:
        """The pass cannot be captured (eager ran where the capture failed): eager from now on, graphs freed."""
        self.broken = f"{type(err).__name__}: {err}"
        self.graphs.clear()
        self.pools.clear()
        self.bytes = 0
        warnings.warn(f"the {self.kind} pass of {type(self.module.part).__qualname__} cannot be replayed from a "
                      f"CUDA graph; it runs eager ({self.broken})", stacklevel=3)

    def __call__(self, *args):
        self.module.refuse_training("graphed")
        tensors = self.module.tensors(*args)
        key = self.key(tensors)
        graph = self.graphs.get(key) if key is not None else None
        failed = None
        if graph is None and key is not None and len(self.graphs) < self.max_graphs and self.bytes < self.max_bytes:
            graph, failed = self.capture(key, tensors)
        if graph is None:
            out = self.module.method()(self.module.part, *args)  # an input eager refuses raises here, as eager
            if failed is not None:
                self.give_up(failed)
            return out
        self.replays += 1
        return self.module.outputs(graph(tensors), args)
