"""The command line on top of every package: `atnat` (commands.py: the parser and each command) and
`atnat list` (catalog.py: what is registered, with every option). May import every package below it;
nothing imports it."""
from atnat.experiments.cli.commands import main, parser

__all__ = ["main", "parser"]
