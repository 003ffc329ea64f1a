"""Everything that turns configs into results, in packages named after what a user does. Each package may
import the packages above it in this list (lower rank), never those below or beside it
(tests/test_layering.py checks every import):

0. files.py, console.py, provenance.py  atomic writes and checksums; terminal output that ends quietly
                in a pipe; the code (git commit) a result was made by
1. locks.py     one process per results folder, run folder, cell and export target
1. data/        tasks (synthetic and parallel text), tokenizers, token-budget batches
2. config/      run and grid settings read and checked, a run's resolved settings, devices, precision
2. modelfiles/  checkpoints (checksummed, tensors-only), exports, CTranslate2, int8, loading a model
3. evaluation/  decoding a split, the metrics of a results row and its columns, probes, timing
4. training/    training one run (resume, divergence guard, logs, progress), distillation
4. reporting/   results.csv from the runs, seed aggregation, goals, the report (markdown, html, figures)
4. bench/       `atnat bench`: speed against Hugging Face and CTranslate2 on random weights
5. running/     grid files expanded into cells, one cell's life, scheduling, launchers, status
6. cli/         the `atnat` command line
"""
