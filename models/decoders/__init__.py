"""Decoder families; importing this package imports each of its modules, which registers the built-in
decoders ("at", "cmlm", "ctc", "dag", "nat"): a new decoder is one new file here (register_decoder)."""
from atnat.core.registry import import_package_modules
from atnat.models.decoders.base import DECODERS, Decoder, register_decoder  # noqa: F401

import_package_modules(__name__, __path__)
