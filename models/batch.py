"""The batch every decoder trains on."""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class Batch:
    """A padded batch of parallel sentences, batch-first.

    src (B, S) and tgt (B, T) hold token ids without BOS/EOS, padded with `pad`; decoders add
    the symbols they need. ids (B,) are the sentences' indices in their split (to restore order).
    """

    src: Tensor
    tgt: Tensor
    src_lengths: Tensor
    tgt_lengths: Tensor
    ids: Tensor

    def to(self, device) -> "Batch":
        return Batch(*(t.to(device, non_blocking=True) for t in
                       (self.src, self.tgt, self.src_lengths, self.tgt_lengths, self.ids)))

    def pin_memory(self) -> "Batch":
        """The batch in page-locked host memory (a DataLoader with pin_memory=True calls this), so that
        `to(cuda)` copies without blocking the host."""
        return Batch(*(t.pin_memory() for t in (self.src, self.tgt, self.src_lengths, self.tgt_lengths, self.ids)))

    def __len__(self) -> int:
        return self.src.size(0)
