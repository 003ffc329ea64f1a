"""The deep grid's scripts (results/multi30k-deep/*.py: not a package), loaded by path for their tests."""
import importlib.util
from pathlib import Path

DEEP = Path(__file__).resolve().parents[1] / "results" / "multi30k-deep"


def load_deep_script(name: str):
    """results/multi30k-deep/<name>.py as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"deep_{name}", DEEP / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
