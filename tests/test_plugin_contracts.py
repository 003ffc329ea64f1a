"""A plugin that breaks its kind's contract is named where it does: at registration (a metric column that would
overwrite BLEU, a strategy that is no dataclass, a class left abstract, an AT decoder's options without the AT's)
or where its output is first used (a metric's values, a strategy's Hypotheses, a decoder's loss parts, a task's
targets), never by a shape error elsewhere or a silently wrong number."""
import re
import sys
from dataclasses import dataclass

import pytest
import torch

from atnat.core.errors import AtnatError
from atnat.core.registry import RegistryError
from atnat.decoding.base import STRATEGIES, Hypotheses, Strategy
from atnat.decoding.greedy import Greedy
from atnat.experiments.evaluation.metrics.row import METRICS, Metric, score
from atnat.experiments.evaluation.schema import Column
from atnat.models.decoders.base import DECODERS, Decoder
from atnat.models.losses import Loss


def _metric(columns, values=None):
    return type("M", (Metric,), {"columns": columns, "compute": lambda self, out: values, "__module__": "my_metrics"})


@pytest.fixture
def unregistered():
    names: list[tuple] = []
    yield names
    for registry, name in names:
        registry.unregister(name)


def test_a_metric_column_that_would_overwrite_bleu_or_another_metrics_is_refused(unregistered):
    bleu_again = _metric((Column("bleu", "number", "mine"),))
    with pytest.raises(RegistryError, match=r"cannot register my_metrics.M as metric 'clash': its column names must "
                                            r"be its own: 'bleu' is a column of metric 'sacrebleu'"):
        METRICS.register("clash")(bleu_again)
    with pytest.raises(RegistryError, match=r"'cell' is a built-in column of results.csv"):
        METRICS.register("clash")(_metric((Column("cell", "label", "mine"),)))
    with pytest.raises(RegistryError, match=r"declares the column\(s\) x more than once"):
        METRICS.register("twice")(_metric((Column("x", "number", "a"), Column("x", "number", "b"))))
    with pytest.raises(RegistryError, match=r"its `columns` must be a non-empty tuple of .*Column"):
        METRICS.register("none")(_metric(()))
    assert "clash" not in METRICS.names() and "twice" not in METRICS.names()
    own = _metric((Column("len_ratio", "number", "mine"),))
    unregistered.append((METRICS, "len-ratio"))
    assert METRICS.register("len-ratio")(own) is own
    assert METRICS.register("len-ratio")(own) is own  # the same class again (a module imported twice)


def test_a_metrics_values_must_be_its_declared_columns_of_their_kinds():
    from atnat.experiments.evaluation.metrics.row import checked_values

    columns = (Column("ratio", "number", "r"), Column("note", "label", "n"))
    metric = _metric(columns)()
    assert checked_values("m", metric, {"ratio": 0.5, "note": "ok"}) == {"ratio": 0.5, "note": "ok"}
    assert checked_values("m", metric, {"ratio": float("nan"), "note": None})  # NaN / None: does not apply
    for values, message in (({"ratio": "0.5", "note": "ok"}, r"column 'ratio' is declared 'number' but compute\(\) "
                                                               r"returned str '0.5'"),
                            ({"ratio": torch.tensor(0.5), "note": "ok"}, r"returned Tensor"),
                            ({"ratio": [1], "note": "ok"}, r"returned list \[1\]"),
                            ({"ratio": True, "note": "ok"}, r"returned bool True"),
                            ({"ratio": 0.5}, r"missing note"),
                            ({"ratio": 0.5, "note": "ok", "rate": 1}, r"undeclared rate"),
                            ([0.5], r"returned list, not a dict")):
        with pytest.raises(AtnatError, match=r"metric 'm' \(my_metrics.M\): .*" + message):
            checked_values("m", metric, values)


def test_score_names_the_metric_whose_values_break_the_contract(unregistered):
    from types import SimpleNamespace

    from atnat.experiments.evaluation.metrics.row import Outputs

    out = Outputs(hyps=[[1, 2, 3, 4]], hyp_txt=["w1 w2 w3 w4"], refs=[[1, 2, 3, 4]], ref_txt=[["w1 w2 w3 w4"]],
                  task=SimpleNamespace(bleu_tokenize="none", lang="en", token_variant=None), n_bootstrap=10)
    assert score(out)["bleu"] == pytest.approx(100.0)
    broken = _metric((Column("hyp_words", "number", "words"),), {"hyp_words": "many"})
    unregistered.append((METRICS, "hyp-words"))
    METRICS.register("hyp-words")(broken)
    with pytest.raises(AtnatError, match=r"metric 'hyp-words' \(my_metrics.M\): column 'hyp_words' is declared "
                                         r"'number' but compute\(\) returned str 'many'"):
        score(out)


def test_a_metric_whose_compute_raises_is_named_with_its_error(unregistered):
    """A plugin trial's finding: every cell failed with a bare "ZeroDivisionError: division by zero", the metric
    named only in the traceback of error.log."""
    from types import SimpleNamespace

    from atnat.experiments.evaluation.metrics.row import Outputs

    out = Outputs(hyps=[[1, 2]], hyp_txt=["w1 w2"], refs=[[1, 2]], ref_txt=[["w1 w2"]],
                  task=SimpleNamespace(bleu_tokenize="none", lang="en", token_variant=None), n_bootstrap=10)
    raising = type("Raiser", (Metric,), {"columns": (Column("ratio", "number", "r"),), "__module__": "my_metrics",
                                         "compute": lambda self, out: {"ratio": 1 / 0}})
    unregistered.append((METRICS, "raiser"))
    METRICS.register("raiser")(raising)
    with pytest.raises(AtnatError, match=r"metric 'raiser' \(my_metrics.Raiser\): compute\(\) raised "
                                         r"ZeroDivisionError: division by zero"):
        score(out)


def test_a_strategy_must_be_a_dataclass_that_names_what_it_drives(unregistered):
    class NoDataclass(Strategy):
        requires = "parallel"

        def search(self, model, memory, *, src_lengths, special):
            raise NotImplementedError

    with pytest.raises(RegistryError, match=r"NoDataclass as strategy 'nodc': a strategy is a dataclass whose fields "
                                            r"are its options: decorate it with @dataclass\(frozen=True\), written "
                                            r"below @register_strategy"):
        STRATEGIES.register("nodc")(NoDataclass)

    @dataclass(frozen=True)
    class NoRequires(Strategy):
        def search(self, model, memory, *, src_lengths, special):
            raise NotImplementedError

    with pytest.raises(RegistryError, match=r"its `requires` must name the decoder capability it drives"):
        STRATEGIES.register("noreq")(NoRequires)

    @dataclass(frozen=True)
    class NoSearch(Strategy):
        requires = "step"

    with pytest.raises(RegistryError, match=r"NoSearch as strategy 'nosearch': it does not define search "
                                            r"\(abstract in Strategy\)"):
        STRATEGIES.register("nosearch")(NoSearch)
    assert not {"nodc", "noreq", "nosearch"} & set(STRATEGIES.names())


def test_a_decoder_without_its_loss_is_refused_when_it_registers():
    bare = type("NoLoss", (Decoder,), {"capabilities": frozenset({"step"}), "__module__": "my_decoders"})
    with pytest.raises(RegistryError, match=r"cannot register my_decoders.NoLoss as decoder 'no-loss': it does not "
                                            r"define loss \(abstract in Decoder\)"):
        DECODERS.register("no-loss")(bare)
    assert "no-loss" not in DECODERS.names()


def test_an_at_decoders_options_must_carry_the_ats():
    from atnat.models.decoders.autoregressive import AutoregressiveDecoder

    @dataclass(frozen=True)
    class Own:
        temperature: float = 1.0

    with pytest.raises(TypeError, match=r"BadAT.Options must subclass atnat.models.decoders.autoregressive.ATOptions: "
                                        r"it keeps the AT's loss"):
        type("BadAT", (AutoregressiveDecoder,), {"Options": Own})
    own_loss = type("OwnLoss", (AutoregressiveDecoder,), {"Options": Own, "loss": lambda self, b, m, step=0: {}})
    assert own_loss.Options is Own  # its own loss reads only its own options (the guide's shallow-at)


def _hyps(b=2, n=1, t=4, **change):
    fields = dict(tokens=torch.zeros(b, n, t, dtype=torch.long), positional_scores=torch.zeros(b, n, t),
                  scores=torch.zeros(b, n), lengths=torch.full((b, n), t), n_steps=1)
    return Hypotheses(**{**fields, **change})


def test_hypotheses_that_break_the_contract_name_their_strategy():
    from atnat.decoding.base import checked_hypotheses

    greedy = Greedy()
    assert checked_hypotheses(_hyps(), greedy, 2).tokens.shape == (2, 1, 4)
    assert checked_hypotheses(_hyps(lengths=torch.zeros(2, 1, dtype=torch.long)), greedy, 2)  # empty outputs
    for hyps, message in ((_hyps(tokens=torch.zeros(2, 4, dtype=torch.long)), r"tokens must be \(B, N, T\) with B = "
                                                                               r"2 sentences, not \(2, 4\)"),
                          (_hyps(b=3), r"B = 2 sentences, not \(3, 1, 4\)"),
                          (_hyps(scores=torch.zeros(2)), r"scores must be \(2, 1\) beside tokens \(2, 1, 4\), not \(2,\)"),
                          (_hyps(positional_scores=None), r"positional_scores must be \(2, 1, 4\) .* not NoneType"),
                          (_hyps(lengths=torch.full((2, 1), 100)), r"lengths must lie in 0..T = 4"),
                          (_hyps(lengths=torch.full((2, 1), -1)), r"lengths must lie in 0..T = 4"),
                          (torch.zeros(2, 1, 4), r"search\(\) returned Tensor, not atnat.decoding.base.Hypotheses")):
        with pytest.raises(AtnatError, match=r"strategy 'greedy' \(atnat.decoding.greedy\): .*" + message):
            checked_hypotheses(hyps, greedy, 2)


def test_a_model_decodes_through_the_check(monkeypatch):
    from tests.training import decode_split, fit

    module, task = fit("at", "copy", steps=1, vocab=5, n_train=20, n_test=4)
    assert len(decode_split(module, task, Greedy())[0]) == 4
    monkeypatch.setattr(Greedy, "search", lambda self, model, memory, *, src_lengths, special: _hyps(
        b=len(src_lengths), tokens=torch.zeros(len(src_lengths), 4, dtype=torch.long)))
    with pytest.raises(AtnatError, match=r"strategy 'greedy' \(atnat.decoding.greedy\): search\(\) returned Hypotheses "
                                         r"whose tokens must be \(B, N, T\)"):
        decode_split(module, task, Greedy())


def test_loss_parts_that_are_not_named_scalar_losses_are_named():
    from atnat.models.losses import loss_parts_problem

    one = torch.tensor(1.0)
    assert loss_parts_problem({"nll": Loss(one)}) is None
    for parts, message in ((one, r"must return a non-empty dict .* not Tensor"), ({}, r"non-empty dict"),
                           ({"nll": one}, r"part 'nll' as Tensor; wrap it: Loss\(value, weight\)"),
                           ({"nll": Loss(torch.ones(3))}, r"'nll' must hold a 0-dim tensor \(a mean\), not \(3,\)"),
                           ({1: Loss(one)}, r"a part named 1")):
        assert re.search(message, loss_parts_problem(parts)), (parts, loss_parts_problem(parts))


def test_training_names_the_decoder_whose_loss_breaks_the_contract(monkeypatch):
    from atnat.experiments.data.batching import encode_split, make_loader
    from atnat.models.decoders.autoregressive import AutoregressiveDecoder
    from tests.training import fit

    module, task = fit("at", "copy", steps=1, vocab=5, n_train=20, n_test=4)
    batch = next(iter(make_loader(encode_split(task.tokenizer, *task.splits["train"], name="train"), 400,
                                  shuffle=False)))
    module.train()
    assert module.training_step(batch, 0).dim() == 0
    monkeypatch.setattr(AutoregressiveDecoder, "loss", lambda self, batch, memory, step=0: torch.tensor(1.0))
    with pytest.raises(AtnatError, match=r"decoder 'at' \(atnat.models.decoders.autoregressive.AutoregressiveDecoder\): "
                                         r"loss\(\) must return a non-empty dict"):
        module.training_step(batch, 0)


def test_a_task_whose_targets_are_not_symbol_strings_is_named(tmp_path):
    from atnat.experiments.data.tasks import SyntheticTask

    class Indices(SyntheticTask):
        registered_name = "indices"

        def transform(self, src, rng):
            return src

    class OneString(Indices):
        def transform(self, src, rng):
            return " ".join(f"w{i}" for i in src)

    options = SyntheticTask.Options(vocab=4, n_train=5, n_valid=2, n_test=2)
    with pytest.raises(AtnatError, match=r"task 'indices' \(.*Indices\): transform\(\) must return the target as a "
                                         r"list of symbol strings \(e.g. \['w3', 'w1'\]\); it returned int"):
        Indices(options, cache_dir=tmp_path).load()
    with pytest.raises(AtnatError, match=r"task 'indices' \(.*OneString\): .* not str 'w"):
        OneString(options, cache_dir=tmp_path).load()


def test_a_report_says_which_recorded_plugin_modules_it_did_not_import():
    from atnat.experiments.reporting.report import plugins_not_loaded

    env = {"plugins": [{"plugin": "my_absent_plugin_xyz", "group": "module", "module": "my_absent_plugin_xyz"},
                       {"plugin": "pytest", "group": "module", "module": "pytest"},
                       {"plugin": "x", "group": "atnat.metrics", "module": "pkg.x"}]}
    assert "pytest" in sys.modules
    assert plugins_not_loaded(env) == ["my_absent_plugin_xyz"]  # entry points load themselves where installed
    assert plugins_not_loaded(None) == [] and plugins_not_loaded({"plugins": "junk"}) == []


def test_the_command_line_prints_a_plugin_metrics_columns(unregistered, capsys):
    from atnat.experiments.cli.commands import print_rows

    unregistered.append((METRICS, "len-ratio"))
    METRICS.register("len-ratio")(_metric((Column("len_ratio", "number", "mine", fmt=".3f"),)))
    print_rows([{"strategy": "greedy", "bleu": 12.345, "len_ratio": 0.98765}])
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["strategy", "bleu", "len_ratio"] and row.split() == ["greedy", "12.35", "0.988"]


def test_a_decoder_gets_a_validation_strategy_for_each_built_in_capability_and_a_clear_error_otherwise():
    """A DAG decoder built on Decoder without overriding validation_strategy failed with KeyError: 'dag' at its
    first validation (and in translate without --strategy)."""
    from atnat.core.errors import AtnatError
    from atnat.models.decoders.base import Decoder

    expected = {"step": "greedy", "parallel": "parallel", "ctc": "ctc", "dag": "dag-lookahead"}
    for capability, name in expected.items():
        plugin = type(f"Plugin{capability.title()}", (Decoder,), {"capabilities": frozenset({capability})})
        assert plugin.validation_strategy(None) == {"name": name}
    odd = type("OddDecoder", (Decoder,), {"capabilities": frozenset({"tree"})})
    with pytest.raises(AtnatError, match=r"OddDecoder .*capabilities tree.*override validation_strategy"):
        odd.validation_strategy(None)


def test_a_run_of_a_decoder_without_a_default_validation_strategy_says_to_override_it_or_name_strategies():
    """The grid/train path fell back to greedy and then said "strategy 'greedy' cannot drive decoder ...",
    hiding why."""
    from atnat.experiments.config.run import ConfigError, run_config_from_dict
    from atnat.models.decoders.base import DECODERS, Decoder

    odd = type("TreeDecoder", (Decoder,), {"capabilities": frozenset({"tree"}), "loss": lambda self, *a, **k: {}})
    DECODERS.register("tree-test")(odd)
    try:
        with pytest.raises(ConfigError, match=r"run\.yaml: no eval\.strategies given, and decoder TreeDecoder "
                                              r"\(capabilities tree\).*override validation_strategy.*or name eval\.strategies"):
            run_config_from_dict({"name": "x", "task": {"name": "copy"}, "decoder": "tree-test"}, "run.yaml")
    finally:
        DECODERS.unregister("tree-test")


def test_a_decoder_declaring_a_capability_without_its_methods_is_refused_when_registered():
    """A plugin trial's finding: a Decoder declaring `parallel` without predict_length and reorder_memory registered
    and trained, then failed at its first validation with a traceback ("Did you mean: 'predicts_length'?")."""
    import inspect

    from atnat.core.registry import RegistryError
    from atnat.decoding import base as protocols
    from atnat.models.decoders.base import CAPABILITY_METHODS, DECODERS, Decoder

    class NoPredict(Decoder):
        capabilities = frozenset({"parallel"})

        def loss(self, batch, memory, *, step=0):
            return {}

        def forward_parallel(self, tokens, memory, padding_mask):
            return tokens

    with pytest.raises(RegistryError, match=r"cannot register .*NoPredict as decoder 'no-predict': it declares the "
                                            r"capability 'parallel' but does not define predict_length, reorder_memory"):
        DECODERS.register("no-predict")(NoPredict)
    assert "no-predict" not in DECODERS.names()
    for capability, protocol in {"step": protocols.StepModel, "parallel": protocols.ParallelModel,
                                 "ctc": protocols.CTCModel, "dag": protocols.DAGModel}.items():
        methods = {n for n, v in vars(protocol).items() if inspect.isfunction(v) and not n.startswith("_")}
        assert set(CAPABILITY_METHODS[capability]) == methods, capability  # the names follow the protocols
