"""The figure of `atnat bench decode --sweep`: latency against output length and throughput
against batch size, one line per system and strategy."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from atnat.experiments.bench.spec import OUT_LEN


def plot_sweep(csv: str | Path) -> Path:
    """Latency vs output length (batch 1) and throughput vs batch (length 30) per system and
    strategy, as one PNG next to the CSV; -> its path."""
    import seaborn as sns
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    csv, fig = Path(csv), Figure(figsize=(13, 5))
    df = pd.read_csv(csv).assign(label=lambda d: d.system + " / " + d.strategy)
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    sns.lineplot(data=df[df.batch == 1], x="out_len", y="median_s", hue="label",
                 marker="o", ax=left, legend=False)
    left.set(yscale="log", xlabel="output tokens", ylabel="latency per batch-1 call (s)",
             title="latency vs output length (batch 1)")
    sns.lineplot(data=df[df.out_len == OUT_LEN], x="batch", y="sents_per_s", hue="label",
                 marker="o", ax=right)
    right.set(xscale="log", yscale="log", xlabel="batch size", ylabel="sentences / s",
              title=f"throughput vs batch size (length {OUT_LEN})")
    right.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(csv.with_suffix(".png"), dpi=100)
    return csv.with_suffix(".png")
