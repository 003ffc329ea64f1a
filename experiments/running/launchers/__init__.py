"""Where a grid's cells run. Every launcher runs the same unit, `atnat cell GRID CELL`, and leaves
its state in the cell's run folder (`metrics.json`, `job.json`), which `atnat status` reads.

- `local.py`: the default, worker processes on this machine (one per device lane).
- `slurm.py`: one cluster job per cell (job arrays), submitted through submitit; students wait
  for their teacher's job.
"""
