"""The README's "Adding a decoder" example, run as written: a decoder defined outside the
package, registered, trained on copy and decoded; plus entry-point discovery."""
import importlib
import re
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from atnat.decoding.greedy import Greedy
from atnat.experiments.config import run_config_from_dict
from atnat.core import registry as registry_module
from atnat.models.decoders.base import DECODERS
from atnat.core.registry import Registry

from tests.training import decode_split, exact_match, fit

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_example() -> str:
    text = README.read_text()
    section = text.split("## Adding a decoder", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    (tmp_path / "my_plugin_shallow.py").write_text(readme_example())
    monkeypatch.syspath_prepend(str(tmp_path))
    DECODERS.unregister("shallow-at")
    module = importlib.import_module("my_plugin_shallow")
    yield module
    DECODERS.unregister("shallow-at")
    sys.modules.pop("my_plugin_shallow", None)


def test_readme_decoder_registers_configures_trains_and_decodes(plugin):
    assert DECODERS.get("shallow-at") is plugin.ShallowAT
    cfg = run_config_from_dict({"name": "p", "task": {"name": "copy"},
                                "decoder": {"name": "shallow-at", "temperature": 0.8},
                                "eval": {"strategies": ["greedy", {"name": "beam", "beam_size": 3}]}}, "plugin.yaml")
    assert cfg.decoder_name == "shallow-at"
    module, task = fit("shallow-at", "copy", steps=400, lr=2e-3, warmup=60, max_tokens=768,
                       decoder_options={"temperature": 0.8}, vocab=8, min_len=3, max_len=6,
                       n_train=3000, n_test=100)
    assert isinstance(module.decoder, plugin.ShallowAT)
    hyps, refs, _ = decode_split(module, task, Greedy())
    assert exact_match(hyps, refs) >= 0.9  # measured 1.0 after 400 steps


def test_entry_point_plugins_are_loaded_on_first_unknown_lookup(tmp_path, monkeypatch):
    (tmp_path / "ep_plugin_mod.py").write_text(
        "from tests.test_plugin import LOCAL\n@LOCAL.register('from-entry-point')\nclass X(LOCAL.base):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [EntryPoint(name="from-entry-point", value="ep_plugin_mod", group="atnat.test")]
    monkeypatch.setattr(registry_module, "entry_points", lambda group: eps if group == "atnat.test" else [])
    assert "from-entry-point" in LOCAL.names()
    assert LOCAL.get("from-entry-point").__name__ == "X"


class _Base:
    pass


LOCAL = Registry("widget", _Base, entry_point_group="atnat.test")


def test_a_broken_plugin_hides_neither_the_built_ins_nor_a_misspelling(monkeypatch, capsys):
    from atnat.experiments.cli import main

    eps = [EntryPoint(name="broken-dec", value="no_such_module_xyz", group="atnat.decoders")]
    monkeypatch.setattr(registry_module, "entry_points", lambda group: eps if group == "atnat.decoders" else [])
    monkeypatch.setattr(DECODERS, "_plugins_loaded", False)
    monkeypatch.setattr(DECODERS, "plugin_errors", {})
    with pytest.raises(Exception, match=r"unknown decoder 'cmlmm'; known decoders: at, cmlm, ctc, nat.*"
                                        r"\(plugins that failed to load: broken-dec\)"):
        DECODERS.get("cmlmm")
    with pytest.raises(Exception, match="plugin 'broken-dec' .* failed to load .*ModuleNotFoundError"):
        DECODERS.get("broken-dec")
    capsys.readouterr()
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "cmlm" in out and "ctc" in out and "plugin 'broken-dec'" in out
