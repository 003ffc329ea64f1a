"""`python -m atnat.experiments.cli ...` runs the `atnat` command (the local launcher starts its workers so)."""
import sys

from atnat.experiments.cli.commands import main

sys.exit(main())
