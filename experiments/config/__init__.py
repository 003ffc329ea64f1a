"""Configuration: what a run or grid file may say, read and checked before anything trains.
`run.py` (RunConfig and its sections, every value's type and range; building a task or a strategy
from its spec), `settings.py` (a run's resolved settings, defaults filled in, and what changed since
it recorded them), `speed.py` (a grid's `speed:` section), `precision.py` (`train.precision: auto`),
`devices.py` (where a run decodes; DDP ranks). May import: data/, files.py."""
