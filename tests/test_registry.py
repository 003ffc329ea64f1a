

def test_a_new_module_in_a_builtin_package_is_imported_without_an_import_line(tmp_path, monkeypatch):
    """The README said a decoder or strategy is "one file"; a built-in one also needed its import added
    to models/decoders/__init__.py or decoding/__init__.py, or it never registered ("unknown decoder").
    Both packages now import every module they hold."""
    import sys

    pkg = tmp_path / "toypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from atnat.core.registry import import_package_modules\n"
                                     "import_package_modules(__name__, __path__)\n")
    (pkg / "new_decoder.py").write_text("LOADED = True\n")
    (pkg / "_private.py").write_text("raise RuntimeError('a private helper is not imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import toypkg  # noqa: F401
    assert sys.modules["toypkg.new_decoder"].LOADED and "toypkg._private" not in sys.modules
    monkeypatch.delitem(sys.modules, "toypkg")
    monkeypatch.delitem(sys.modules, "toypkg.new_decoder")
    (pkg / "beam copy.py").write_text("raise RuntimeError('an editor copy is not a module')\n")
    import toypkg  # noqa: F401,F811  (imported again: the copy's name is no identifier, so it is skipped)


def test_importing_the_decoder_strategy_metric_and_task_packages_imports_every_module_they_hold():
    """The wiring itself, in a fresh interpreter: after importing the decoder, strategy, metric and task packages
    every module file of the four is loaded (its registrations made). The data guide said a task saved as a
    new file in experiments/data/ is a task of every grid; it was never imported ("unknown task")."""
    import subprocess
    import sys

    code = ("import pkgutil, sys, atnat.decoding, atnat.models.decoders, atnat.experiments.evaluation.metrics as m\n"
            "import atnat.experiments.data as d\n"
            "for p in (atnat.decoding, atnat.models.decoders, m, d):\n"
            "    names = [m.name for m in pkgutil.iter_modules(p.__path__) if not m.name.startswith('_')]\n"
            "    missing = [n for n in names if f'{p.__name__}.{n}' not in sys.modules]\n"
            "    assert names and not missing, (p.__name__, missing)\n")
    subprocess.run([sys.executable, "-c", code], check=True)
