"""CUDA graphs of whole-sequence passes (the `auto` engine on a GPU; see engines.py): the encoder and a
NAT decoder's pass (parallel, CTC, DAG) replayed from a graph captured once per exact input shape.

At batch 1 a pass of a small model is a few dozen short kernels, and launching them costs more than
running them; a replayed graph launches them all at once. One graph per shape (batch, lengths, dtype)
runs the very kernels eager runs at that shape, so its outputs are eager's, bit for bit: no padding
to length buckets (which would change the reductions, and with them the last bits). The first call
at a shape runs the pass eagerly once (lazy initialisation) and captures it; later calls copy their
inputs into the graph's buffers, replay, and return copies of its outputs (a later replay writes
over the graph's own). Graphs share one memory pool, which is safe because every replay's outputs
are copied before the next replay.

Calls with more rows than `max_rows` (batches, where launches are amortised and shapes rarely
repeat), calls with gradients on, calls that record attention maps, and calls after `max_graphs`
shapes run the part's own method.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from atnat.core.errors import AtnatError
from atnat.experiments.modelfiles.aoti import TensorPass

MAX_GRAPHS = 1024  # shapes per pass; the Multi30k test sets at batch 1 need a few hundred


class CudaGraph:
    """A callable captured once on static input buffers: copy in, replay, copy out."""

    def __init__(self, run: Callable, tensors: tuple[Tensor, ...], pool):
        self.inputs = tuple(t.clone() for t in tensors)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # lazy initialisation (cuBLAS workspaces, kernels) outside the capture
            run(*self.inputs)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.outputs = run(*self.inputs)

    @staticmethod
    def new_pool():
        return torch.cuda.graph_pool_handle()

    def __call__(self, tensors: tuple[Tensor, ...]):
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


class GraphedPass:
    """A model part's pass (aoti.TensorPass's kinds: encoder, parallel, ctc, dag) replayed from one graph per
    input shape; set on the part in place of that method (`install`), as aoti.CompiledPass is."""

    def __init__(self, part, kind: str, *, max_rows: int, max_graphs: int = MAX_GRAPHS, graph=None):
        self.module = TensorPass(part, kind)
        self.kind, self.max_rows, self.max_graphs = kind, max_rows, max_graphs
        self.make = graph or CudaGraph  # or Rerun (tests)
        self.graphs: dict[tuple, CudaGraph | Rerun] = {}
        self.pool = None  # the graphs' memory pool, made at the first capture
        self.replays = 0  # calls answered by a graph (captures included)

    def install(self) -> None:
        part = self.module.part
        object.__setattr__(part, TensorPass.METHODS[self.kind], self)  # nn.Module.__call__ finds forward here

    def key(self, tensors: tuple[Tensor, ...]) -> tuple | None:
        """The graph a call replays: its shapes, strides, dtypes and autocast state; None where it runs eager."""
        if (tensors[0].size(0) > self.max_rows or torch.is_grad_enabled()
                or getattr(self.module.part, "record_attention", False)):
            return None
        device = tensors[0].device.type
        autocast = (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)) if device != "cpu" else ()
        return (tuple((tuple(t.shape), t.stride(), t.dtype, t.device) for t in tensors), autocast,
                torch.is_inference_mode_enabled())

    def __call__(self, *args):
        part = self.module.part
        if part.training:
            raise AtnatError(f"the graphed {self.kind} pass is for inference; the model was put back in "
                             "training mode (train a model without an engine)")
        tensors = self.module.tensors(*args)
        key = self.key(tensors)
        graph = self.graphs.get(key) if key is not None else None
        if graph is None and key is not None and len(self.graphs) < self.max_graphs:
            if self.pool is None:
                self.pool = self.make.new_pool()
            graph = self.graphs[key] = self.make(self.module, tensors, self.pool)
        if graph is None:
            return self.module.method()(part, *args)
        out = graph(tensors)
        self.replays += 1
        if self.kind == "encoder":
            from atnat.models.encoder import EncoderOut

            return EncoderOut(out, args[1])
        return out
