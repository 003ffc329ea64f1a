"""The FLOPs of a training step (bench/flops.py): the formula on a case computed by hand, and the
GPU peak that MFU divides by, taken from the card's exact model."""
import pytest

from atnat.experiments.bench.flops import decoder_positions, forward_flops, peak_tflops, train_step_flops
from atnat.experiments.bench.train_step import device_peak

TINY = dict(d_model=4, ffn_dim=8, encoder_layers=1, decoder_layers=1)


def test_a_training_step_counted_by_hand():
    # D=4, F=8, V=10, one layer each, B=1, S=2, T=3 decoder positions:
    # encoder  2*1*2*(4*16 + 2*4*8) + 4*1*4*4                    = 512 + 64 = 576
    # decoder  2*1*3*(6*16 + 2*4*8) + 2*1*2*2*16 + 4*1*9*4 + 4*1*3*2*4 = 960 + 128 + 144 + 96 = 1328
    #          + output projection 2*1*3*4*10 = 240               -> 1568
    assert forward_flops(d_model=4, ffn_dim=8, vocab=10, encoder_layers=1, decoder_layers=1, batch=1, src_len=2,
                         dec_len=3) == (576, 1568)
    # NAT on a 3-token target: 3 x (576 + 1568) = 6432; GLAT adds one decoder forward: 8000
    assert train_step_flops(TINY, vocab=10, decoder="nat", batch=1, src_len=2, tgt_len=3) == 6432
    assert train_step_flops(TINY, vocab=10, decoder="nat", batch=1, src_len=2, tgt_len=3, extra_passes=1) == 8000
    # AT runs on BOS y (T+1 = 3 for a 2-token target); CTC on its k S slots (3 x 1 = 3) whatever the target
    assert train_step_flops(TINY, vocab=10, decoder="at", batch=1, src_len=2, tgt_len=2) == 6432
    assert train_step_flops(TINY, vocab=10, decoder="ctc", batch=1, src_len=1, tgt_len=2, upsample=3) < 6432
    assert decoder_positions("ctc", 7, 5, upsample=3) == 15 and decoder_positions("cmlm", 7, 5) == 7
    # DAG on its floor(lambda S) + 2 = 3 vertices (S = 1, lambda = 1) whatever the target: encoder 2*1*1*(64 + 64)
    # + 4*1*1*4 = 272; decoder 2*1*3*(96 + 64) + 2*1*1*2*16 + 4*1*9*4 + 4*1*3*1*4 + 240 = 1456, links' query and
    # key 2*(2*1*3*8*4) = 384 and their product 2*1*9*4 = 72 -> 1912; 3 x (272 + 1912) = 6552, glancing +1912
    assert decoder_positions("dag", 40, 1, upsample=1.0) == 3 and decoder_positions("dag", 7, 5, upsample=8.0) == 42
    assert train_step_flops(TINY, vocab=10, decoder="dag", batch=1, src_len=1, tgt_len=2, upsample=1.0) == 6552
    assert train_step_flops(TINY, vocab=10, decoder="dag", batch=1, src_len=1, tgt_len=2, upsample=1.0,
                            extra_passes=1) == 8464
    # the source side counts: 6 x params x target tokens ignores it
    longer = train_step_flops(TINY, vocab=10, decoder="nat", batch=1, src_len=20, tgt_len=3)
    assert longer > 6432 * 5


@pytest.mark.parametrize("name, peak", [
    ("NVIDIA H100 80GB HBM3", 989.0), ("NVIDIA H100 PCIe", 756.0), ("NVIDIA H100 NVL", 835.0),
    ("NVIDIA H200", 989.0), ("NVIDIA H200 NVL", 835.0), ("NVIDIA GH200 480GB", 989.0),
    ("NVIDIA A100-SXM4-80GB", 312.0), ("NVIDIA A100 80GB PCIe", 312.0), ("NVIDIA H100", None), ("Tesla T4", None)])
def test_the_peak_is_the_exact_cards(name, peak):
    assert peak_tflops(name) == peak


def test_an_unknown_card_leaves_mfu_empty_with_a_note(monkeypatch):
    import math

    import torch

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100")
    notes = []
    assert math.isnan(device_peak("cuda", None, notes.append))
    assert "no bf16 peak known for 'NVIDIA H100'" in notes[0] and "--peak-tflops" in notes[0]
    assert device_peak("cuda", 700.0, notes.append) == 700.0 and math.isnan(device_peak("cpu", None))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 PCIe")
    assert device_peak("cuda", None, notes.append) == 756.0 and "756 TFLOPS" in notes[-1]
