"""Search strategies. They drive a model through a narrow protocol and never touch parameters.

Importing this package registers the built-in strategies.
"""
from atnat.decoding import beam, ctc, greedy, length_beam, mask_predict, npd, parallel  # noqa: F401
from atnat.decoding.base import STRATEGIES, Hypotheses, Strategy, register_strategy  # noqa: F401
