"""Decoder families; importing this package registers the built-in ones."""
from atnat.models.decoders import autoregressive  # noqa: F401  (registers "at")
from atnat.models.decoders import cmlm, ctc, nat  # noqa: F401  (registers "cmlm", "ctc", "nat")
from atnat.models.decoders.base import DECODERS, Decoder, register_decoder  # noqa: F401
