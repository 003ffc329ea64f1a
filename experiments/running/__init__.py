"""Running grids: `grid.py` (a grid file expanded into cells, teachers resolved), `cell.py` (one
cell's life: distil, train, evaluate, record; what `atnat cell` and `atnat train` run),
`scheduler.py` (`atnat run`: which cells, in what order, where; then timing, table and report),
`stale.py` (cells whose settings changed since they ran), `launchers/` (local worker processes,
SLURM through submitit), `locks.py`, `status.py` (`atnat status`). May import every package but cli/."""
