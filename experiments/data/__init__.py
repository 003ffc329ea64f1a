"""Data and tasks: what a run learns from. `tasks.py` (built-in synthetic tasks and parallel text
files, registered by name; plugins through the entry-point group `atnat.tasks`), `tokenize.py`
(symbols and sentencepiece, cached and checked), `batching.py` (token-budget batches that resume
mid-epoch). May import: files.py.

Importing this package imports each of its modules, which registers the built-in tasks: a new task is
one new file here (register_task).
"""
from atnat.core.registry import import_package_modules

import_package_modules(__name__, __path__)
