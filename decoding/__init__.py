"""Search strategies. They drive a model through a narrow protocol and never touch parameters.

Importing this package imports each of its modules, which registers the built-in strategies: a new
strategy is one new file here (register_strategy).
"""
from atnat.core.registry import import_package_modules
from atnat.decoding.base import STRATEGIES, Hypotheses, Strategy, register_strategy  # noqa: F401

import_package_modules(__name__, __path__)
