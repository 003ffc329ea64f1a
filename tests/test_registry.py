

def test_a_new_module_in_a_builtin_package_is_imported_without_an_import_line(tmp_path, monkeypatch):
    """The README said a decoder or strategy is "one file"; a built-in one also needed its import added
    to models/decoders/__init__.py or decoding/__init__.py, or it never registered ("unknown decoder").
    Both packages now import every module they hold."""
    import sys

    from atnat.core.registry import import_package_modules

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
    import atnat.decoding
    import atnat.models.decoders
    for package in (atnat.decoding, atnat.models.decoders):  # the real packages: every module imported
        for name in import_package_modules(package.__name__, package.__path__):
            assert f"{package.__name__}.{name}" in sys.modules
