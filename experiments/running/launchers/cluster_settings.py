"""The options of the cluster launcher (`atnat run --launcher slurm ...`): declared on the command
line and gathered into ClusterSettings, which launchers/slurm.py submits the jobs with. Kept apart
from slurm.py so that declaring them imports nothing heavy (the command line starts fast)."""
from __future__ import annotations

from dataclasses import dataclass

from atnat.core.errors import AtnatError

EXECUTORS = {"slurm": "slurm", "submitit-local": "local"}  # --launcher -> submitit executor


@dataclass(frozen=True)
class ClusterSettings:
    """Where and how a grid's cluster jobs run (the `atnat run --launcher slurm` options)."""

    executor: str = "slurm"  # submitit executor: slurm, or local (jobs on this machine, no queue)
    partition: str | None = None  # SLURM partition
    gpus_per_cell: int | None = None  # GPUs per node of one cell's job (None: the cell's train.devices; 0: none)
    cpus_per_task: int | None = None  # CPU cores per task (one task per device)
    mem_gb: float | None = None  # memory per node in GB
    time_min: int = 240  # wall-clock limit of one job; a job that reaches it requeues and resumes
    array_parallelism: int = 64  # most jobs of one array that run at once
    account: str | None = None  # SLURM account
    qos: str | None = None  # SLURM quality of service
    constraint: str | None = None  # SLURM node features
    options: tuple = ()  # more sbatch options as (key, value) pairs, e.g. (("reservation", "x"),)
    wait: bool = False  # stay until every job has ended, then write the table and report
    poll_s: float = 30.0  # seconds between two looks at the queue while waiting


def add_cluster_args(p) -> None:
    g = p.add_argument_group("cluster launcher (--launcher slurm)")
    g.add_argument("--launcher", choices=["local", "slurm", "submitit-local"], default="local",
                   help="local: worker processes here (default); slurm: one job per cell through submitit; "
                        "submitit-local: the slurm code path on this machine")
    g.add_argument("--wait", action="store_true", help="wait for the jobs, then write the table and report")
    g.add_argument("--partition", help="SLURM partition")
    g.add_argument("--gpus-per-cell", type=int, help="GPUs per node of a cell's job (default: its train.devices)")
    g.add_argument("--cpus-per-task", type=int, help="CPU cores per task (one task per device)")
    g.add_argument("--mem-gb", type=float, help="memory per node in GB")
    g.add_argument("--time", type=int, metavar="MINUTES",
                   help=f"time limit of one job; one that reaches it requeues and resumes (default {DEFAULT_TIME_MIN})")
    g.add_argument("--array-parallelism", type=int,
                   help=f"most jobs of one array running at once (default {DEFAULT_ARRAY_PARALLELISM})")
    g.add_argument("--account", help="SLURM account")
    g.add_argument("--qos", help="SLURM quality of service")
    g.add_argument("--constraint", help="SLURM node features")
    g.add_argument("--slurm-option", action="append", metavar="KEY=VALUE", help="any other sbatch option")


CLUSTER_FLAGS = ("wait", "partition", "gpus_per_cell", "cpus_per_task", "mem_gb", "time", "array_parallelism",
                 "account", "qos", "constraint", "slurm_option")  # what only a cluster launcher reads
DEFAULT_TIME_MIN, DEFAULT_ARRAY_PARALLELISM = 240, 64


def refuse_cluster_flags_without_cluster(args) -> None:
    """--partition, --time and the other job settings with --launcher local: refused, not ignored (the user
    meant a cluster run, or is told that these cells run here)."""
    given = [f"--{name.replace('_', '-')}" for name in CLUSTER_FLAGS
             if (value := getattr(args, name, None)) is not None and value is not False and value != []]
    if args.launcher == "local" and given:
        raise AtnatError(f"{', '.join(given)}: settings of a cluster job, but --launcher is local (cells run here, as "
                         "worker processes): add --launcher slurm, or drop them")


def settings_from_args(args) -> ClusterSettings:
    options = []
    for item in args.slurm_option or []:
        if "=" not in item:
            raise AtnatError(f"--slurm-option {item!r}: expected KEY=VALUE, e.g. reservation=mine")
        options.append(tuple(item.split("=", 1)))
    time_min = DEFAULT_TIME_MIN if args.time is None else args.time
    parallelism = DEFAULT_ARRAY_PARALLELISM if args.array_parallelism is None else args.array_parallelism
    for flag, value in (("--time", time_min), ("--array-parallelism", parallelism)):
        if value < 1:
            raise AtnatError(f"{flag} {value}: expected a positive number")
    return ClusterSettings(executor=EXECUTORS[args.launcher], partition=args.partition,
                           gpus_per_cell=args.gpus_per_cell, cpus_per_task=args.cpus_per_task,
                           mem_gb=args.mem_gb, time_min=time_min, array_parallelism=parallelism,
                           account=args.account, qos=args.qos, constraint=args.constraint,
                           options=tuple(options), wait=args.wait or args.launcher == "submitit-local")
