"""The training step's forms (train.step: eager, fused, compiled) give eager's losses and gradients over
20 steps (dropout, GLAT's random glancing and its step schedule included), a run trains under fused (in
bf16-mixed too) and resumes from eager into fused, a bad form is refused by name, and `atnat bench
train` times them side by side."""
from unittest import mock

import pytest
import torch
import torch._dynamo.utils

from atnat.core.errors import AtnatError
from atnat.experiments.bench import spec as bench_spec
from atnat.experiments.bench import train_step as bench_train
from atnat.experiments.bench.spec import make_spec
from atnat.experiments.config.run import ConfigError, run_config_from_dict
from atnat.models.batch import Batch
from atnat.models.losses import total_loss
from atnat.models.seq2seq import Seq2SeqModule

TINY = dict(d_model=32, n_heads=2, ffn_dim=64, encoder_layers=1, decoder_layers=1, dropout=0.1)
DECODERS = [("at", {"scheduled_sampling": "linear"}), ("nat", {"glat": True}), ("cmlm", {}), ("ctc", {"glat": True}),
            ("dag", {"glat": True})]  # the AT with scheduled sampling, the NATs glancing: schedules by step


def twenty_steps(decoder: str, options: dict, form: str, steps: int = 20):
    """Each step's loss and gradients, and the final weights, of a tiny model trained `steps` Adam steps
    on random padded batches whose shapes change from step to step."""
    torch._dynamo.reset()  # every compiled case starts from nothing (the recompile limit is per function)
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(0)
    module = Seq2SeqModule(vocab_size=40, decoder=decoder, model=TINY, decoder_options=options,
                           optim={"weight_decay": 0.01, "schedule": "constant", "lr": 1e-3}).train()
    module.step_form = form
    optimizer = module.configure_optimizers()["optimizer"]
    assert all(bool(g["fused"]) == (form != "eager") for g in optimizer.param_groups)  # the form is in force
    gen = torch.Generator().manual_seed(3)
    losses, grads = [], []
    torch.manual_seed(1)
    for step in range(steps):
        b, s, t = 4, *(int(n) for n in torch.randint(4, 9, (2,), generator=gen))
        src, tgt = torch.randint(5, 40, (b, s), generator=gen), torch.randint(5, 40, (b, t), generator=gen)
        src_len, tgt_len = torch.randint(2, s + 1, (b,), generator=gen), torch.randint(2, t + 1, (b,), generator=gen)
        src_len[0], tgt_len[-1] = s, t  # padded batches, as training's are: each row its own length
        src = src.masked_fill(torch.arange(s)[None, :] >= src_len[:, None], module.special.pad)
        tgt = tgt.masked_fill(torch.arange(t)[None, :] >= tgt_len[:, None], module.special.pad)
        with mock.patch.object(Seq2SeqModule, "global_step", property(lambda self: 100 * step)):  # schedules move
            loss = total_loss(module.loss_parts(Batch(src, tgt, src_len, tgt_len, torch.arange(b))))
        optimizer.zero_grad()
        loss.backward()
        grads.append([p.grad.clone() for p in module.parameters() if p.grad is not None])
        optimizer.step()
        losses.append(loss.item())
    if steps:  # something was compiled, or nothing was
        assert (torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0) == (form == "compiled")
    return losses, grads, [p.detach().clone() for p in module.parameters()]


def assert_equal_to_eager(decoder: str, options: dict, form: str) -> None:
    eager, other = twenty_steps(decoder, options, "eager"), twenty_steps(decoder, options, form)
    assert other[0] == pytest.approx(eager[0], rel=1e-5, abs=1e-5)  # every step's loss
    for step, (a, b) in enumerate(zip(eager[1], other[1])):
        assert len(a) == len(b)
        worst = max(float((x - y).abs().max()) for x, y in zip(a, b))
        assert worst < 1e-4, f"{decoder} {form}: gradients differ by {worst:g} at step {step + 1}"
    # the final weights, by norm against how far training moved them: Adam's normalised update turns the
    # rounding of a near-zero gradient into a step of up to lr, so single weights may differ by that much
    distance = lambda u, v: sum(float(((x - y) ** 2).sum()) for x, y in zip(u, v)) ** 0.5
    moved = distance(eager[2], twenty_steps(decoder, options, "eager", 0)[2])
    assert moved > 0.5 and distance(eager[2], other[2]) < 0.03 * moved


@pytest.mark.parametrize("decoder,options", DECODERS, ids=[d for d, _ in DECODERS])
def test_the_fused_optimizer_step_equals_eager_over_20_steps(decoder, options):
    assert_equal_to_eager(decoder, options, "fused")


@pytest.mark.parametrize("schedule", ["linear", "exponential", "inverse_sigmoid"])
def test_a_schedule_by_step_compiles_once_not_at_every_step(schedule):
    """A compiled training step reads the training step (scheduled sampling, GLAT's annealing): where a schedule
    made dynamo specialise on its value, every step compiled again, until the recompile limit sent the step back to
    eager mode without a word (the inverse sigmoid's math.exp did)."""
    from atnat.models.decoders.autoregressive import sampling_probability
    from atnat.models.decoders.glancing import GlancingOptions, glancing_ratio

    def scaled(x, step):
        p = sampling_probability(schedule, step, 500.0, 0.25)
        return x * (1 - p) * glancing_ratio(GlancingOptions(glat_anneal_steps=300), step)

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    step_fn, x = torch.compile(scaled), torch.ones(3)
    for step in range(0, 1200, 100):
        assert torch.allclose(step_fn(x, step), scaled(x, step), rtol=1e-6)
    frames = torch._dynamo.utils.counters["frames"]
    assert frames["total"] == frames["ok"] <= 2  # static, then dynamic in the step: two compiles, none left to eager


@pytest.mark.slow  # compiling takes a minute or more per decoder on a CPU
@pytest.mark.parametrize("decoder,options", DECODERS, ids=[d for d, _ in DECODERS])
def test_the_compiled_step_equals_eager_over_20_steps(decoder, options):
    # GLAT's random glancing positions compile too, drawing what eager mode draws
    assert_equal_to_eager(decoder, options, "compiled")


def test_a_form_is_refused_by_name_where_it_is_set():
    with pytest.raises(ConfigError, match="train: step must be one of eager, fused, compiled, got .jit."):
        run_config_from_dict({"name": "x", "task": {"name": "copy"}, "decoder": "at", "train": {"step": "jit"}}, "cfg")
    module = Seq2SeqModule(vocab_size=40, decoder="at", model=TINY)
    with pytest.raises(AtnatError, match="train.step: 'jit' is not one of eager, fused, compiled"):
        module.step_form = "jit"


def test_a_run_trains_under_fused_and_resumes_from_eager_into_fused(tmp_path, monkeypatch):
    from atnat.experiments.config.settings import settings_change
    from atnat.experiments.training import train as train_module
    from atnat.models import step_forms
    from tests.test_resume import RUN, Kill, run_training, weights, with_callbacks

    eager = weights(run_training(tmp_path, "eager", monkeypatch) / "checkpoints" / "last.ckpt")  # 28 steps
    fused = weights(run_training(tmp_path, "fused", monkeypatch, step="fused") / "checkpoints" / "last.ckpt")
    assert close(eager, fused)  # fused from the start

    run = tmp_path / "mixed"  # eager until a kill at step 17, then resumed under fused
    make = with_callbacks(monkeypatch, Kill(17))
    with pytest.raises(SystemError, match="killed"):
        train_module.train(run_config_from_dict(RUN, "test"), run)
    monkeypatch.setattr(train_module, "make_trainer", make)
    cfg = run_config_from_dict({**RUN, "train": {**RUN["train"], "step": "fused"}}, "test")
    assert not settings_change(run, cfg).training  # the form changes rounding, not what is trained
    seen = []

    def recording(optimizer, form):
        seen.append([g["fused"] for g in optimizer.param_groups])  # as loaded from the eager checkpoint
        step_forms.apply_to_optimizer(optimizer, form)
        seen.append([g["fused"] for g in optimizer.param_groups])

    monkeypatch.setattr("atnat.models.seq2seq.apply_to_optimizer", recording)
    train_module.train(cfg, run)
    assert seen == [[None], [True]]  # loaded as the eager run saved it, then fused
    assert close(eager, weights(run / "checkpoints" / "last.ckpt"))


def close(a: dict, b: dict) -> bool:
    """Two runs' weights agree to 1% of their norm (rounding, amplified by Adam, moves single weights)."""
    keys = [k for k in a if a[k].is_floating_point()]
    diff = sum(float(((a[k] - b[k]) ** 2).sum()) for k in keys) ** 0.5
    return diff < 0.01 * sum(float((a[k] ** 2).sum()) for k in keys) ** 0.5


def test_a_fused_run_trains_in_bf16_mixed_with_its_gradients_clipped(tmp_path, monkeypatch):
    # Lightning's mixed-precision plugin refuses to clip for a fused optimizer; the module clips itself
    from tests.test_resume import run_training, weights

    seen = []
    real = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, norm, *a, **k: seen.append(norm) or
                        real(params, norm, *a, **k))
    run = run_training(tmp_path, "bf16", monkeypatch, step="fused", precision="bf16-mixed", max_steps=6)
    assert seen and set(seen) == {1.0} and weights(run / "checkpoints" / "last.ckpt")
    with pytest.raises(ConfigError, match="train: step must be eager with precision 16-mixed"):
        run_config_from_dict({"name": "x", "task": {"name": "copy"}, "decoder": "at",
                              "train": {"step": "fused", "precision": "16-mixed"}}, "cfg")


def test_the_train_bench_times_the_forms_side_by_side_at_each_size():
    spec = make_spec(tiny=True, threads=1, warmup=0)
    df = bench_train.run_train(spec, steps=2, tokens=120, precisions=("fp32",), forms=("eager", "fused"),
                               decoders=("at", "ctc"), log=lambda *_: None)
    assert list(zip(df.decoder, df.form)) == [("at", "eager"), ("at", "fused"), ("ctc", "eager"), ("ctc", "fused")]
    assert (df[df.form == "eager"].speedup_vs_eager == 1).all() and (df.speedup_vs_eager > 0).all()
    assert set(df["size"]) == {"bench"}
    eager, fused = (df[df.form == f].set_index("decoder").last_loss for f in ("eager", "fused"))
    assert ((eager - fused).abs() < 1e-4).all()  # the same model and batch: the same losses
    grid = bench_train.sized(spec, "grid").model
    assert (grid["d_model"], grid["encoder_layers"], grid["decoder_layers"]) == (512, 5, 5)
    assert bench_spec.SIZES["base"][1] == 25000
    with pytest.raises(AtnatError, match="--forms among eager, fused, compiled"):
        bench_train.run_train(spec, steps=1, tokens=120, forms=("jit",), log=lambda *_: None)
    with pytest.raises(AtnatError, match="--size huge"):
        bench_train.run_train(spec, steps=1, size="huge", log=lambda *_: None)


def test_the_train_bench_trains_the_hugging_face_peer_on_the_same_batch():
    pytest.importorskip("transformers")
    spec = make_spec(tiny=True, threads=1, warmup=0)
    df = bench_train.run_train(spec, steps=2, tokens=120, precisions=("fp32",), decoders=("at",), peer=True,
                               log=lambda *_: None).set_index("decoder")
    assert list(df.index) == ["at", "hf-marian"] and (df.tokens_per_s > 0).all()
    assert df.flops_per_step["hf-marian"] == df.flops_per_step["at"]  # the same dimensions and batch
    assert 0.5 * df.params["at"] < df.params["hf-marian"] < 2 * df.params["at"]
    # both start near the loss of a uniform guess over the vocabulary, label smoothing included
    assert abs(df.last_loss["hf-marian"] - df.last_loss["at"]) < 0.25 * df.last_loss["at"]


def test_the_alignments_and_the_dag_likelihood_are_not_compiled_once_per_length():
    """CTC's Viterbi alignment (GLAT) and the DA-Transformer's dynamic programmes loop over slots and target positions
    in Python: inside a compiled training step, every new length compiled them again, until the recompile limit sent
    the step to eager mode. They run eagerly inside it; the step around them compiles for dynamic shapes."""
    from atnat.models.decoders.dag_paths import dag_best_alignment, dag_log_likelihood
    from atnat.models.decoders.glancing import ctc_viterbi

    def both(log_probs, targets, links):
        B, T, _ = log_probs.shape
        lengths, target_lengths = torch.full((B,), T), torch.full((B,), targets.size(1))
        aligned, _ = ctc_viterbi(log_probs, lengths, targets, target_lengths, blank=4)
        match = log_probs.gather(2, targets[:, None, :].expand(B, T, -1)).transpose(1, 2)  # (B, M, L)
        path, _ = dag_best_alignment(match, links, lengths, target_lengths)
        return aligned.sum() + path.sum() + dag_log_likelihood(match, links, lengths, target_lengths).sum()

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    step_fn, gen = torch.compile(both), torch.Generator().manual_seed(0)
    for T in (6, 9, 7, 12, 8, 10, 11, 13, 14, 15):
        log_probs = torch.randn(2, T, 8, generator=gen).log_softmax(-1)
        targets = torch.randint(5, 8, (2, T // 3), generator=gen)
        links = torch.randn(2, T, T, generator=gen).triu(1).masked_fill(torch.ones(T, T, dtype=torch.bool).tril(), -1e9)
        assert torch.allclose(step_fn(log_probs, targets, links), both(log_probs, targets, links))
    frames = torch._dynamo.utils.counters["frames"]
    assert frames["total"] == frames["ok"] and torch._dynamo.utils.counters["stats"]["unique_graphs"] <= 8  # static, then dynamic
