"""`atnat export` and safe loading: an export (safetensors + config + tokenizer file) decodes
exactly as the checkpoint it came from, tied embeddings stay tied, a real training run's checkpoint
loads under torch.load(weights_only=True), and a truncated, altered or pickle-carrying file is one
AtnatError naming it."""
import io
import json
import random

import pytest
import torch

import atnat.decoding  # noqa: F401  (registers strategies)
from atnat.core.errors import AtnatError
from atnat.decoding.beam import Beam
from atnat.decoding.greedy import Greedy
from atnat.experiments.cli.commands import main
from atnat.experiments.config.run import run_config_from_dict
from atnat.experiments.data.batching import collate
from atnat.experiments.modelfiles.checkpoints import read_checkpoint
from atnat.experiments.modelfiles.export import export_safetensors, is_export_dir
from atnat.experiments.modelfiles.loading import attach_tokenizer, load_module
from atnat.experiments.training.train import train
from tests.training import fit

WORDS = "the a small big red blue cat dog sees likes runs sleeps house tree".split()


def parallel_files(root):
    """A tiny word-for-word 'translation' task (sentencepiece tokenizer) in root/."""
    rng = random.Random(0)
    upper = {w: w.upper()[::-1] for w in WORDS}
    for split, n in (("train", 300), ("valid", 12), ("test", 12)):
        src = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(n)]
        (root / f"{split}.xx").write_text("".join(s + "\n" for s in src))
        (root / f"{split}.yy").write_text("".join(" ".join(upper[w] for w in s.split()) + "\n" for s in src))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A real (short) `atnat train` run: Lightning checkpoint with callback, loop and scheduler
    states and a sentencepiece tokenizer (bytes)."""
    root = tmp_path_factory.mktemp("export")
    parallel_files(root)
    raw = {"name": "tiny", "seed": 1,
           "task": {"name": "parallel", "data_dir": str(root), "src": "xx", "tgt": "yy", "valid": "valid",
                    "test": "test", "vocab_size": 60},
           "decoder": {"name": "at"},
           "model": {"d_model": 16, "n_heads": 2, "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 1,
                     "dropout": 0.0},
           "train": {"max_steps": 8, "max_tokens": 256, "val_every_steps": 4, "progress_bar": False,
                     "num_threads": 1, "early_stop_patience": 3}}
    train(run_config_from_dict(raw, "test"), root / "run")
    return root / "run"


def decode(module, tokenizer, strategy):
    lines = ["the cat sees a dog", "red tree", "a big blue house sleeps"]
    batch = collate([(i, tokenizer.encode(s), []) for i, s in enumerate(lines)])
    return module.decode(batch.src, batch.src_lengths, strategy)


def test_a_real_checkpoint_loads_with_weights_only(run):
    best = run / "checkpoints" / "best.ckpt"
    checkpoint = torch.load(best, map_location="cpu", weights_only=True)  # raises on any other pickle
    assert isinstance(checkpoint["atnat_tokenizer"]["model_proto"], bytes)
    assert any(k.startswith("EarlyStopping") for k in checkpoint["callbacks"])
    assert any(k.startswith("ModelCheckpoint") for k in checkpoint["callbacks"])
    assert checkpoint["lr_schedulers"] and checkpoint["optimizer_states"]
    module, tokenizer = load_module(run)
    assert tokenizer.kind == "sentencepiece" and not module.training
    assert module.tokenizer_state["model_proto"] == checkpoint["atnat_tokenizer"]["model_proto"]


def test_export_round_trip_decodes_identically(run, tmp_path):
    module, tokenizer = load_module(run)
    out = export_safetensors(module, tmp_path / "exp")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "sentencepiece.model"]
    config = json.loads((out / "config.json").read_text())
    assert config["format_version"] == 4 and config["hyper_parameters"]["decoder"] == "at"
    assert config["bleu_tokenize"] == "13a" and len(config["weights"]["sha256"]) == 64
    again, tok2 = load_module(out)
    assert is_export_dir(out) and tok2.proto == tokenizer.proto
    assert again.encoder.embed.tokens.weight is again.decoder.output.weight  # tied after loading
    for key, value in module.state_dict().items():
        assert torch.equal(value, again.state_dict()[key]), key
    for strategy in (Greedy(), Beam(beam_size=3, n_best=2)):
        a, b = decode(module, tokenizer, strategy), decode(again, tok2, strategy)
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.scores, b.scores)
    export_safetensors(again, out)  # re-exporting into an export directory overwrites it
    third, _ = load_module(out)
    assert all(torch.equal(v, third.state_dict()[k]) for k, v in module.state_dict().items())


def test_symbol_tokenizer_exports_as_json(tmp_path):
    module, task = fit("at", "copy", steps=2, vocab=5, n_train=50, n_test=5)
    attach_tokenizer(module, task.tokenizer, task.bleu_tokenize)
    out = export_safetensors(module, tmp_path / "exp")
    assert json.loads((out / "symbols.json").read_text()) == task.tokenizer.symbols[6:]
    loaded, tokenizer = load_module(out)
    assert tokenizer.symbols == task.tokenizer.symbols and loaded.bleu_tokenize == "none"


def test_truncated_or_altered_weights_are_refused_by_name(run, tmp_path):
    out = export_safetensors(load_module(run)[0], tmp_path / "exp")
    weights = out / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(AtnatError, match="model.safetensors does not match the sha256 recorded in "
                                         r"config.json: modified after export\?"):
        load_module(out)
    flipped = bytearray(data)
    flipped[-5] ^= 0xFF  # same size, one weight byte changed
    weights.write_bytes(bytes(flipped))
    with pytest.raises(AtnatError, match="does not match the sha256"):
        load_module(out)
    garbled = b"\x00" * 64  # a garbled file whose hash was recorded anyway
    weights.write_bytes(garbled)
    config = json.loads((out / "config.json").read_text())
    import hashlib

    config["weights"]["sha256"] = hashlib.sha256(garbled).hexdigest()
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(AtnatError, match=r"model.safetensors: not a readable safetensors file"):
        load_module(out)
    (out / "config.json").write_text("{not json")
    with pytest.raises(AtnatError, match="config.json: not a readable atnat export config"):
        load_module(out)


def test_truncated_checkpoint_and_pickled_objects_are_refused(run, tmp_path):
    best = run / "checkpoints" / "best.ckpt"
    data = best.read_bytes()
    for n in (len(data) // 2, 100):
        cut = tmp_path / f"cut{n}.ckpt"
        cut.write_bytes(data[:n])
        with pytest.raises(AtnatError, match=f"checkpoint {cut} is truncated or corrupt"):
            load_module(cut)
    checkpoint = torch.load(best, weights_only=True)
    checkpoint["extra"] = io.StringIO("not a tensor")  # any class the safe unpickler does not allow
    evil = tmp_path / "evil.ckpt"
    torch.save(checkpoint, evil)
    with pytest.raises(AtnatError, match=f"checkpoint {evil} holds a pickled object .* that tensors-only loading refuses"):
        read_checkpoint(evil)


def test_cli_export_then_translate_and_errors(run, tmp_path, monkeypatch, capsys):
    out = tmp_path / "exp"
    assert main(["export", str(run), str(out)]) == 0
    assert "model.safetensors" in capsys.readouterr().out
    texts = []
    for source in (run, out):
        monkeypatch.setattr("sys.stdin", io.StringIO("the cat\nred dog sleeps\n"))
        assert main(["translate", "--checkpoint", str(source), "--strategy", "beam", "--beam", "2"]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] and len(texts[0].split("\n")) == 3
    from atnat.experiments.training.distill import distilled_targets  # an export directory as a teacher

    lines, meta = distilled_targets(out, ["the cat", "red dog"], ["x", "y"], {"name": "greedy"})
    assert len(lines) == 2 and meta["checkpoint"].startswith("sha256-")
    assert main(["distill", "--teacher", str(out), "--output", str(tmp_path / "kd.txt")]) == 2
    assert "export directory (no training data)" in capsys.readouterr().err
    (out / "model.safetensors").write_bytes(b"x")
    monkeypatch.setattr("sys.stdin", io.StringIO("the cat\n"))
    assert main(["translate", "--checkpoint", str(out)]) == 2
    assert "does not match the sha256 recorded in config.json" in capsys.readouterr().err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert main(["export", str(run), str(tmp_path / "busy")]) == 2
    assert "holds other things than an export (notes.txt)" in capsys.readouterr().err


def rewrite_config(out, change):
    """config.json of an export edited by `change(config)`, its own sha256 left as it was."""
    config = json.loads((out / "config.json").read_text())
    change(config)
    (out / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("key,value,message", [
    ("vocab_size", 10**9, r"vocab_size must be an integer from 1 to"),
    ("vocab_size", -3, r"vocab_size must be an integer from 1 to"),
    ("model.d_model", 10**6, r"d_model must be an integer from 1 to 16,384"),
    ("model.decoder_layers", 10**5, r"decoder_layers must be an integer from 1 to 256"),
    ("model.decoder_layers", 5, r"is not what the weights \(model.safetensors\) were exported with"),
])
def test_an_export_config_is_checked_against_ranges_and_the_weights_before_allocating(run, tmp_path, key, value,
                                                                                         message):
    """A planted or edited config.json (sizes of 128 GB, 5 GB, a layer count that is not the weights') is one
    error naming config.json, with no model built: sizes have declared ranges, and the weights record the
    hyper-parameters they were exported with."""
    out = export_safetensors(load_module(run)[0], tmp_path / "exp")

    def change(config):
        section = config["hyper_parameters"]
        *path, last = key.split(".")
        for part in path:
            section = section.setdefault(part, {})
        section[last] = value
    rewrite_config(out, change)
    import resource
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(AtnatError, match=message) as err:
        load_module(out)
    assert "config.json" in str(err.value)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB: nothing large allocated


@pytest.mark.parametrize("value", ["bogus", 13, None])
def test_an_export_configs_bleu_tokenizer_is_checked_when_loaded(run, tmp_path, value):
    """An edited bleu_tokenize in config.json loaded, decoded a whole test set, then failed in sacrebleu
    (KeyError): one error naming config.json and the field when the model is loaded."""
    out = export_safetensors(load_module(run)[0], tmp_path / "exp")
    rewrite_config(out, lambda config: config.update(bleu_tokenize=value))
    with pytest.raises(AtnatError, match=r"config\.json: bleu_tokenize .* is none of sacrebleu's tokenizers \(13a, "):
        load_module(out)


def test_a_format_1_export_is_checked_against_the_weights_shapes(run, tmp_path):
    """An export written before the weights recorded their hyper-parameters: the safetensors header's
    shapes against the model the config describes (built on the meta device) are the check."""
    from safetensors.torch import save_model

    module = load_module(run)[0]
    out = export_safetensors(module, tmp_path / "exp")
    save_model(module, str(out / "model.safetensors"), metadata={"format": "atnat-export", "format_version": "1"})
    import hashlib

    def old_format(config, ffn=None):
        config["format_version"] = 1
        config["weights"]["sha256"] = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
        if ffn:
            config["hyper_parameters"]["model"]["ffn_dim"] = ffn
    rewrite_config(out, old_format)
    assert load_module(out)[0].model_cfg == module.model_cfg  # an old export still loads
    rewrite_config(out, lambda c: old_format(c, ffn=7))
    with pytest.raises(AtnatError, match=r"describe another model than the weights: .*ffn.* in model.safetensors, \(7,"):
        load_module(out)


def test_a_killed_export_leaves_nothing_that_blocks_the_next_and_exports_are_byte_identical(run, tmp_path, monkeypatch):
    """The export is written into a hidden sibling and renamed into place: killed half way (here: the
    tokenizer write fails), the target keeps its previous export, and the next export goes through. Two
    exports of one run are the same bytes."""
    from atnat.experiments.modelfiles import export as export_module

    module = load_module(run)[0]
    first = export_safetensors(module, tmp_path / "a")
    second = export_safetensors(module, tmp_path / "b")
    for name in ("config.json", "model.safetensors", "sentencepiece.model"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    monkeypatch.setattr(export_module, "atomic_write_bytes", lambda path, data: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        export_safetensors(module, first)
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before  # the old export, untouched
    (tmp_path / ".a.staged-999").mkdir()  # what a SIGKILL'd export leaves
    (tmp_path / ".a.staged-999" / "model.safetensors").write_bytes(b"half")
    monkeypatch.undo()
    export_safetensors(module, first)
    assert not list(tmp_path.glob(".a.staged-*")) and load_module(first)[0] is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]  # nothing hidden beside the exports
    legacy = tmp_path / "legacy"  # an older atnat's half-written export in place
    legacy.mkdir()
    (legacy / "model.safetensors.tmp").write_bytes(b"half")
    export_safetensors(module, legacy)
    assert sorted(p.name for p in legacy.iterdir()) == ["config.json", "model.safetensors", "sentencepiece.model"]
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(AtnatError, match="holds other things than an export"):
        export_safetensors(module, tmp_path / "foreign")


def test_an_export_never_replaces_a_users_folder_that_holds_files_of_an_exports_names(run, tmp_path):
    """A project folder with its own config.json (or, for CTranslate2, a vocabulary.txt) was taken for an
    earlier export and deleted by the export into it."""
    module = load_module(run)[0]
    mine = tmp_path / "myproj"
    mine.mkdir()
    (mine / "config.json").write_text('{"my": "settings"}')
    with pytest.raises(AtnatError, match="holds other things than an export"):
        export_safetensors(module, mine)
    assert (mine / "config.json").read_text() == '{"my": "settings"}'
    export_safetensors(module, tmp_path / "mine-exported")
    export_safetensors(module, tmp_path / "mine-exported")  # an export is replaced by the next one
    assert load_module(tmp_path / "mine-exported")[0] is not None


def test_an_export_to_dot_through_a_link_or_over_the_other_formats_export_replaces_it(run, tmp_path, monkeypatch,
                                                                                        capsys):
    """`atnat export RUN .` in an empty folder was refused over its own lock file (`..export.lock`) (the
    current folder is now refused for what it is: replaced whole, it would vanish under the shell); a
    CTranslate2 export and a safetensors one did not replace each other (one refusal named nothing); an
    export through a symbolic link left the link, renamed, as a hidden sibling for good."""
    pytest.importorskip("ctranslate2")
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    for target in (".", "..", "sub/.."):  # replaced whole, it would pull the folder from under the shell
        assert main(["export", str(run), target]) == 2
        assert "is the current folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"] and not any(here.iterdir())  # nothing made
    out = tmp_path / "out"
    assert main(["export", str(run), str(out), "--format", "ctranslate2"]) == 0
    assert main(["export", str(run), str(out)]) == 0 and is_export_dir(out)  # safetensors over CTranslate2
    assert main(["export", str(run), str(out), "--format", "ctranslate2"]) == 0  # and back
    assert (out / "model.bin").is_file() and not is_export_dir(out)
    real = tmp_path / "real"
    assert main(["export", str(run), str(real)]) == 0
    (tmp_path / "link").symlink_to(real)
    for _ in range(2):
        assert main(["export", str(run), str(tmp_path / "link")]) == 0
    assert (tmp_path / "link").is_symlink() and is_export_dir(tmp_path / "link") and is_export_dir(real)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here", "link", "out", "real"]
    capsys.readouterr()


def resealed(out, change):
    """config.json edited by `change(config)` and every sha256 config.json holds brought up to date: what an
    edit that knows the format leaves (the weights' own record is what still tells)."""
    import hashlib

    rewrite_config(out, change)
    config = json.loads((out / "config.json").read_text())
    for entry in (config["tokenizer"], config["weights"]):
        entry["sha256"] = hashlib.sha256((out / entry["file"]).read_bytes()).hexdigest()
    (out / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("edit, message", [
    (lambda c: c.update(format_version=1), r"config.json says format version 1, its weights \(model.safetensors\) "
                                           r"were written as version 4"),  # turned the check off: edits loaded
    (lambda c: c.update(format_version=2), "says format version 2"),
    (lambda c: c.update(format_version=3), "says format version 3"),
    (lambda c: c.update(target_lang="fr"), "is not what the weights"),
    (lambda c: c.update(target_lang="../x"), r"target_lang '\.\./x' is not a target language's name"),
    (lambda c: c.update(bleu_tokenize="char"), r"config.json: what it says of the model .* is not what the weights "
                                               r"\(model.safetensors\) were exported with"),  # BLEU 2.75 for 1.31
    (lambda c: c.update(plugins=["evil"]), "is not what the weights"),
])
def test_an_export_config_edited_outside_its_hyper_parameters_is_refused(run, tmp_path, edit, message):
    """A trial's findings: with format_version set to 1, an edited config.json loaded silently (max_positions 4:
    one-token outputs); bleu_tokenize, the plugins and the tokenizer's record were protected by config.json
    alone. The weights now record all of it, and their own format version."""
    out = export_safetensors(load_module(run)[0], tmp_path / "exp")
    assert json.loads((out / "config.json").read_text())["format_version"] == 4
    rewrite_config(out, edit)
    with pytest.raises(AtnatError, match=message):
        load_module(out)


def test_an_edited_tokenizer_file_is_refused_even_with_its_sha256_brought_up_to_date(tmp_path):
    """A trial's finding: symbols.json edited (a newline inside a symbol, or a symbol twice) and its new sha256
    written into config.json passed every check: 30 output lines for 2 input lines, or every w1 printed as w0."""
    module, task = fit("at", "copy", steps=2, vocab=5, n_train=50, n_test=5)
    attach_tokenizer(module, task.tokenizer, task.bleu_tokenize)
    out = export_safetensors(module, tmp_path / "exp")
    symbols = json.loads((out / "symbols.json").read_text())
    (out / "symbols.json").write_text(json.dumps([symbols[0], symbols[0] + "x", *symbols[2:]]))
    resealed(out, lambda c: None)
    with pytest.raises(AtnatError, match="is not what the weights"):
        load_module(out)


@pytest.mark.parametrize("symbols, message", [
    (["w0", "w1\nX"], r"symbol 'w1\\nX' \(number 2\) holds white space"),
    (["w0", "w0"], r"symbol 'w0' comes twice"),
    (["w0", ""], r"symbol '' \(number 2\) is empty"),
])
def test_a_symbol_list_that_cannot_round_trip_is_refused(symbols, message):
    from atnat.experiments.data.tokenize import SymbolTokenizer

    with pytest.raises(AtnatError, match=message):
        SymbolTokenizer(symbols)


def test_a_decoded_line_never_holds_a_line_break():
    """One output line per input line, whatever a tokenizer's pieces hold."""
    from atnat.experiments.data.tokenize import one_line

    assert one_line("a\nb\r\nc\x0bd\u2028e\x85f") == "a b c d e f" and one_line("x y") == "x y"


def test_a_file_planted_in_an_export_is_refused_and_no_export_is_written_inside_another(run, tmp_path, capsys):
    """A trial's findings: evil.py or a model.bin beside an export's files was ignored (the guide says a planted
    file is refused); `atnat export RUN EXPORT/inner` wrote an export inside an export (which then could not be
    replaced)."""
    out = export_safetensors(load_module(run)[0], tmp_path / "exp")
    (out / "evil.py").write_text("print('x')")
    with pytest.raises(AtnatError, match=r"exp: evil.py is not a file of an atnat export \(config.json, "
                                         r"model.safetensors, sentencepiece.model\): planted\?"):
        load_module(out)
    (out / "evil.py").unlink()
    assert main(["export", str(run), str(out / "inner")]) == 2
    assert f"{out / 'inner'} is inside the export {out}" in capsys.readouterr().err
    assert not (out / "inner").exists() and load_module(out)
    assert main(["export", str(run), str(out / "ct2"), "--format", "ctranslate2"]) == 2  # nor another format
    assert f"{out / 'ct2'} is inside the export {out}" in capsys.readouterr().err and not (out / "ct2").exists()


def test_an_export_never_replaces_a_ctranslate2_model_that_atnat_did_not_write(run, tmp_path, capsys):
    """A trial's finding: a folder holding a model.bin (any file of that name, or another tool's CTranslate2
    model) was taken for an earlier export and deleted by `atnat export` into it, in either format."""
    others = {"only-bin": {"model.bin": b"\x00" * 64},
              "other-tools": {"model.bin": b"\x01" * 64, "config.json": b'{"decoder_start_token": "<s>"}',
                              "shared_vocabulary.json": b'["<s>", "</s>"]'}}
    for name, files in others.items():
        folder = tmp_path / name
        folder.mkdir()
        for file, data in files.items():
            (folder / file).write_bytes(data)
        for form in ([], ["--format", "ctranslate2"] if _has_ct2() else []):
            assert main(["export", str(run), str(folder), *form]) == 2
            assert f"export target {folder.resolve()} holds" in capsys.readouterr().err
            assert {p.name: p.read_bytes() for p in folder.iterdir()} == files  # untouched
    if _has_ct2():  # atnat's own CTranslate2 export is still replaced by the next, of either format
        out = tmp_path / "ct2"
        for form in (["--format", "ctranslate2"], ["--format", "ctranslate2"], [], ["--format", "ctranslate2"]):
            assert main(["export", str(run), str(out), *form]) == 0
        assert (out / "model.bin").is_file() and not is_export_dir(out)


def _has_ct2() -> bool:
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return False
    return True


def test_no_export_is_written_inside_a_ctranslate2_export(run, tmp_path, capsys):
    """A trial's finding: `atnat export RUN CT2_EXPORT/inner` wrote a safetensors export inside a CTranslate2
    export, which then could no longer be replaced."""
    pytest.importorskip("ctranslate2")
    out = tmp_path / "ct2"
    assert main(["export", str(run), str(out), "--format", "ctranslate2"]) == 0
    for form in ([], ["--format", "ctranslate2"]):
        assert main(["export", str(run), str(out / "inner"), *form]) == 2
        assert f"{out / 'inner'} is inside the export {out}" in capsys.readouterr().err
        assert not (out / "inner").exists()
    assert main(["export", str(run), str(out), "--format", "ctranslate2"]) == 0


def test_no_output_of_evaluate_or_distill_goes_among_a_models_files(run, tmp_path, capsys):
    """A trial's findings: `evaluate --json EXPORT/scores.json` wrote a file into an export (which then refused to
    load: a planted file); `distill --input F --output` could replace the teacher's own weights with text (the
    teacher's files were guarded only without --input). Each refused before any model is read."""
    out = export_safetensors(load_module(run)[0], tmp_path / "exp")
    src = tmp_path / "src.txt"
    src.write_text("the cat\nred dog\n")
    before = {p: p.read_bytes() for p in [*out.iterdir(), *(run / "checkpoints").iterdir()]}
    cases = [["evaluate", "--checkpoint", str(out), "--src", str(src), "--ref", str(src), "--no-speed",
              "--json", str(out / "scores.json")],
             ["evaluate", "--checkpoint", str(out), "--src", str(src), "--ref", str(src), "--no-speed",
              "--hyps", str(out / "hyps.txt")]]
    for teacher, target in ((out, out / "model.safetensors"), (out, out / "new.txt"),
                            (run, next((run / "checkpoints").iterdir())), (run, run / "metrics.json")):
        cases.append(["distill", "--teacher", str(teacher), "--input", str(src), "--output", str(target),
                      "--strategy", "greedy"])
    for argv in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "is a file of the model given to" in err or "is inside the export" in err, (argv, err)
    assert {p: p.read_bytes() for p in [*out.iterdir(), *(run / "checkpoints").iterdir()]} == before
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "sentencepiece.model"]
    assert load_module(out)[0] is not None


def test_an_export_through_a_link_is_not_written_inside_another_export(run, tmp_path, capsys):
    """The check looked at the path as named; the export was written where the link leads: inside an export,
    which then refused to load (a planted folder)."""
    out = export_safetensors(load_module(run)[0], tmp_path / "exp")
    (out / "inner").mkdir()
    (tmp_path / "link").symlink_to(out / "inner")
    (out / "inner").rmdir()
    assert main(["export", str(run), str(tmp_path / "link")]) == 2
    assert f"{tmp_path / 'link'} is inside the export {out}" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "sentencepiece.model"]


def test_an_export_stopped_between_its_two_renames_keeps_the_previous_export(run, tmp_path, monkeypatch):
    """The previous export was moved aside before the new one went in: a failure of the second rename lost it, and
    a kill there left it hidden, where the next export's clean-up deleted it (and with it the last copy)."""
    import os

    from atnat.experiments.modelfiles import export as export_module

    module = load_module(run)[0]
    target = export_safetensors(module, tmp_path / "a")
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    real = os.replace

    def second_rename_fails(src, dst):
        if str(dst) == str(target) and not str(src).endswith("-old"):  # the new export into place
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(export_module.os, "replace", second_rename_fails)
    with pytest.raises(OSError, match="No space left"):
        export_safetensors(module, target)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    os.replace(target, tmp_path / ".a.staged-999-old")  # what a kill between the two renames leaves
    monkeypatch.setattr(export_module, "atomic_write_bytes", lambda path, data: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):  # the next export fails too: the previous one is back in place
        export_safetensors(module, target)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert not list(tmp_path.glob(".a.staged-*"))


def test_an_export_name_with_wildcards_leaves_other_targets_staging_folders_alone(run, tmp_path):
    """`.{name}.staged-*` was a glob pattern: exporting to `m?` removed `.m1.staged-99999`, another export's."""
    other = tmp_path / ".m1.staged-99999"
    other.mkdir()
    export_safetensors(load_module(run)[0], tmp_path / "m?")
    assert other.is_dir() and (tmp_path / "m?" / "config.json").is_file()


def test_evaluate_writes_no_output_over_a_checkpoints_own_sha256(run, tmp_path, capsys):
    """A checkpoint file outside a run's checkpoints/ folder: only the file itself was guarded, and `--json
    CKPT.sha256` replaced its checksum, after which the checkpoint was refused."""
    import shutil

    folder = tmp_path / "ck"
    folder.mkdir()
    best = next(p for p in (run / "checkpoints").iterdir() if p.suffix == ".ckpt")
    for path in (best, best.with_name(best.name + ".sha256")):
        shutil.copy(path, folder / path.name)
    src = tmp_path / "src.txt"
    src.write_text("the cat\n")
    checksum = folder / (best.name + ".sha256")
    before = checksum.read_bytes()
    assert main(["evaluate", "--checkpoint", str(folder / best.name), "--src", str(src), "--ref", str(src),
                 "--no-speed", "--json", str(checksum)]) == 2
    assert "is a file of the model given to --checkpoint" in capsys.readouterr().err
    assert checksum.read_bytes() == before and load_module(folder / best.name)[0] is not None


def test_an_export_keeps_the_target_language_its_bleu_is_tokenised_for(run, tmp_path):
    """An export did not record the model's target language: `evaluate` on an export scored tokenised BLEU with
    English rules for a German model (70.16 where the run scored 76.92 on the same sentences)."""
    module = load_module(run)[0]
    module.target_lang = "de"
    out = export_safetensors(module, tmp_path / "exp")
    assert json.loads((out / "config.json").read_text())["target_lang"] == "de"
    assert load_module(out)[0].target_lang == "de"
    module.target_lang = "target"  # a task's target suffix that is no language code (train.source / train.target)
    assert load_module(export_safetensors(module, tmp_path / "exp2"))[0].target_lang == "target"


def test_a_format_3_export_without_a_target_language_still_loads(run, tmp_path, monkeypatch):
    from atnat.experiments.modelfiles import export as export_module

    monkeypatch.setattr(export_module, "FORMAT_VERSION", 3)  # as the version before wrote it: no target_lang
    out = export_safetensors(load_module(run)[0], tmp_path / "exp")
    rewrite_config(out, lambda c: c.pop("target_lang"))
    monkeypatch.undo()
    assert load_module(out)[0].target_lang == "en"


def test_an_export_config_whose_special_ids_no_model_can_hold_is_one_error(run, tmp_path):
    """special.pad: 500 beyond the vocabulary gave a bare AssertionError from torch's Embedding."""
    out = export_safetensors(load_module(run)[0], tmp_path / "exp")
    rewrite_config(out, lambda c: c["hyper_parameters"].update(special={"pad": 500}))
    with pytest.raises(AtnatError, match=r"config.json: hyper_parameters describe no model that can be built "
                                         r"\(AssertionError"):
        load_module(out)
