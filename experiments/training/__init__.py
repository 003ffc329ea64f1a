"""Training: one run from data to the checkpoint it is judged by. `train.py` (the Lightning
Trainer, checkpoint selection and averaging, settings checked on resume), `resume.py` (exact
resume, damaged checkpoints set aside), `divergence.py` (the loss guard), `logs.py`, `progress.py`
(progress.json and a line per validation), `distill.py` (sequence-level distillation targets from
a teacher). May import: evaluation/, config/, modelfiles/, data/, files.py."""
