"""Seaborn figures of a grid's results, one function per figure, each writing one PNG.

Every function takes tidy frames read from the results folder and a target path, and returns
the path, or None when its data holds nothing to draw (the report then writes a note instead).
Figures are built on bare ``Figure`` objects with an Agg canvas, never through pyplot's global
state, so nothing opens a window and nothing leaks between figures.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

# curves/<name>.csv read by the figures: the columns each needs (past the labels, all numeric)
CURVE_COLUMNS = {
    "position_accuracy": ("cell", "strategy", "mode", "position", "accuracy"),
    "prefix_corruption": ("cell", "corrupted", "distance", "relative_accuracy"),
    "bleu_by_length": ("cell", "strategy", "bucket", "bleu"),
    "iterations": ("cell", "strategy", "iteration", "bleu"),
    "attention": ("cell", "sentence", "target_pos", "source_pos", "weight"),
    "validation": ("cell", "step", "val_loss", "val_bleu"),
}
LABEL_COLUMNS = {"cell", "strategy", "mode", "bucket"}  # the non-numeric curve columns
DPI = 100  # PNG resolution; modest so that the base64-embedded HTML stays small
NCOLS = 3  # panels per row in small-multiple figures
MIN_SENTENCES = 10  # a position's accuracy is drawn only when at least this many sentences reach it


def pareto_front(df: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Rows of df not dominated when maximising both x and y, sorted by x ascending.

    A row is dominated when another row is >= in both columns and > in one; rows with NaN in x
    or y are ignored. Exact duplicates of a front point all stay on the front.
    """
    valid = df.dropna(subset=[x, y])
    xs = valid[x].to_numpy(dtype=float)
    ys = valid[y].to_numpy(dtype=float)
    ge = (xs[None, :] >= xs[:, None]) & (ys[None, :] >= ys[:, None])  # (N, N): j covers i
    gt = (xs[None, :] > xs[:, None]) | (ys[None, :] > ys[:, None])  # (N, N): j beats i somewhere
    dominated = (ge & gt).any(axis=1)
    return valid[~dominated].sort_values([x, y], ascending=[True, False], kind="stable")


def system_label(df: pd.DataFrame) -> pd.Series:
    """'cell / strategy' label naming one decoding system in legends and axes."""
    return df["cell"].astype(str) + " / " + df["strategy"].astype(str)


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _facets(n: int, width: float = 4.0, height: float = 3.0) -> tuple[Figure, list]:
    """A figure with n panels on a NCOLS-wide grid; unused trailing axes are hidden."""
    ncols = min(n, NCOLS)
    nrows = -(-n // ncols)
    fig = _figure(width * ncols, height * nrows)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _save(fig: Figure, path: Path) -> Path:
    """The figure as a PNG, written whole or not at all (files.atomic_write_bytes)."""
    import io

    from atnat.experiments.files import atomic_write_bytes

    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def with_family(curve: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """The curve with a `family` column (the cell without its seed): small multiples show one panel
    per system family, averaged over seeds, so every family gets a panel."""
    families = table.drop_duplicates("cell").set_index("cell")["family"] if "family" in table else pd.Series(dtype=str)
    return curve.assign(family=curve["cell"].astype(str).map(families).fillna(curve["cell"].astype(str)))


def seed_band(data: pd.DataFrame, keys: list[str]):
    """seaborn's errorbar for curves averaged over seeds: the full range over the seeds' cells
    where a point has several, none where every point has one."""
    several = data.groupby(keys, observed=True)["cell"].nunique().max() > 1 if len(data) else False
    return ("pi", 100) if several else None


SPEED_PANELS = (("speedup_vs_at", "speed-up over our AT greedy, batch 1 (×)"),
                ("throughput_speedup_vs_at", "speed-up over our AT greedy, large-batch throughput (×)"))


PANEL_WIDTH = 5.6  # inches: one BLEU-vs-speed panel of the quality-vs-speed figure
LABEL_SIZE = 8  # points: the names in its label columns


def quality_vs_speed(table: pd.DataFrame, path: Path) -> Path | None:
    """Mean BLEU against mean speed-up over our AT greedy, one row of panels per task: batch-1
    latency and large-batch throughput. Error bars: the 95% intervals of the means (aggregate.interval:
    Student's t over seeds with the test-sentence variance added, one seed its bootstrap interval; speed
    widened to the A/A noise floor); systems not clearly beaten ringed (the summary's front: judging.py).
    BLEU is the mean over all of a system's seeds, as in the tables, and speed the mean over the seeds timed.
    Every point is named in plain words (headline.py) in a column of labels beside its panel, in the order
    of its BLEU, with a line to it, each name a line of its own (the panels grow with the systems), so no
    two names overlap however close the points lie (CTranslate2 rows included)."""
    fig = quality_vs_speed_figure(table)
    return None if fig is None else _save(fig, path)


def label_column_width(names) -> float:
    """Inches a column needs for the longest of `names` at LABEL_SIZE points, plus its lead-in: the
    column is as wide as its longest name, so that no name runs into the next panel or off the figure."""
    from matplotlib.textpath import TextPath

    widest = max((TextPath((0, 0), str(n), size=LABEL_SIZE).get_extents().width for n in names), default=0.0)
    return 0.6 + 1.06 * widest / 72.0  # the name starts 4% in; constrained layout's pads take the rest


def quality_vs_speed_figure(table: pd.DataFrame) -> Figure | None:
    """The figure quality_vs_speed saves (None without a point to draw)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    from atnat.experiments.reporting.aggregate import aggregate_seeds, interval, robust_front
    from atnat.experiments.reporting.names import plain_names

    data = table.dropna(subset=["bleu"])  # means over every seed with a score, as in the tables; speed over
    if data["speedup_vs_at"].isna().all():  # the seeds timed (a seed whose weights were lost has none)
        return None
    tasks = list(dict.fromkeys(data.loc[data["speedup_vs_at"].notna(), "task"]))  # a task never timed: no panel
    aggs = {}
    for task in tasks:
        agg = aggregate_seeds(data[data["task"] == task])
        agg = agg.assign(system=agg["family"].astype(str) + " / " + agg["strategy"].astype(str))
        aggs[task] = agg.assign(name=agg["system"].map(plain_names(agg)))
    systems = list(dict.fromkeys(n for agg in aggs.values() for n in agg["name"]))
    palette = dict(zip(systems, sns.color_palette("tab20", n_colors=max(len(systems), 1))))
    markers = dict(zip(dict.fromkeys(data["decoder"]), "oXs^Dv<>Pp*h" * 4))
    label_width = label_column_width(systems)
    heights = [max(5.0, 0.2 * len(agg) + 1.2) for agg in aggs.values()]  # a line of 8 pt type per name, at least
    fig = _figure((PANEL_WIDTH + label_width) * len(SPEED_PANELS), sum(heights))
    grid = fig.add_gridspec(len(tasks), 2 * len(SPEED_PANELS), width_ratios=[PANEL_WIDTH, label_width] * len(SPEED_PANELS),
                            height_ratios=heights)
    for t, task in enumerate(tasks):
        agg = aggs[task]
        for k, (col, xlabel) in enumerate(SPEED_PANELS):
            ax, names_ax = fig.add_subplot(grid[t, 2 * k]), fig.add_subplot(grid[t, 2 * k + 1])
            names_ax.axis("off")
            part = agg.dropna(subset=[col])
            if part.empty:
                ax.set_visible(False)
                continue
            for _, r in part.iterrows():
                (x_lo, x_hi), (y_lo, y_hi) = interval(r, col), interval(r, "bleu")
                x_lo, x_hi = (r[col], r[col]) if pd.isna(x_lo) else (x_lo, x_hi)
                y_lo, y_hi = (r["bleu"], r["bleu"]) if pd.isna(y_lo) else (y_lo, y_hi)
                x, y = r[col], r["bleu"]  # a bootstrap interval need not contain the estimate
                ax.errorbar(x, y, xerr=[[max(x - x_lo, 0)], [max(x_hi - x, 0)]], yerr=[[max(y - y_lo, 0)], [max(y_hi - y, 0)]],
                            fmt=markers.get(r["decoder"], "o"), color=palette[r["name"]], ms=7, lw=0.9, capsize=2)  # fmt: skip
            front = robust_front(part, col, "bleu")
            ax.scatter(front[col], front["bleu"], s=190, facecolors="none", edgecolors="0.3", lw=1.0)
            _name_points(ax, names_ax, part, col)
            ax.axvline(1.0, color="0.7", lw=0.8)
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set(title=f"{task}: {'batch 1' if col == 'speedup_vs_at' else 'throughput'} (ringed: not clearly beaten)",
                   xlabel=xlabel, ylabel="BLEU")
    return fig


def _name_points(ax, names_ax, part: pd.DataFrame, col: str) -> None:
    """Each point's name in the label column `names_ax` beside its panel, spaced evenly in BLEU order
    and joined to its point by a thin line: names never overlap, whatever the points do."""
    ordered = part.sort_values("bleu", ascending=False, kind="stable")
    n = len(ordered)
    for k, (_, r) in enumerate(ordered.iterrows()):
        note = names_ax.annotate(r["name"], xy=(r[col], r["bleu"]), xycoords=ax.transData,
                                 xytext=(0.04, 1.0 - (k + 0.5) / max(n, 1)), textcoords=names_ax.transAxes,
                                 fontsize=LABEL_SIZE, va="center", ha="left", color="0.15",
                                 arrowprops=dict(arrowstyle="-", color="0.65", lw=0.6, shrinkA=1, shrinkB=4))
        # the column is sized to its longest name (label_column_width); the lines may cross into the panel
        note.set_in_layout(False)


def position_accuracy(curve: pd.DataFrame, table: pd.DataFrame, path: Path) -> Path | None:
    """Token accuracy by target position, teacher-forced vs free-running, one panel per system
    family (mean over seeds); positions fewer than MIN_SENTENCES sentences reach are cut, and the
    grey bars (right axis) show how many sentences each position rests on."""
    data = with_family(curve, table)
    if "count" in data:  # small test sets keep positions at least half their sentences reach
        data = data[data["count"] >= min(MIN_SENTENCES, data["count"].max() / 2)]
    families = list(dict.fromkeys(data["family"]))
    if not families:
        return None
    fig, axes = _facets(len(families))
    for ax, family in zip(axes, families):
        part = data[data["family"] == family]
        if "count" in part:
            counts = part[part["mode"] == part["mode"].iloc[0]].groupby("position")["count"].mean()
            twin = ax.twinx()
            twin.bar(counts.index, counts.to_numpy(), color="0.85", width=0.8, zorder=0)
            twin.set_ylabel("sentences", fontsize=7, color="0.5")
            twin.tick_params(labelsize=6, colors="0.5")
            ax.set_zorder(twin.get_zorder() + 1)
            ax.patch.set_visible(False)
        style = "strategy" if part["strategy"].nunique() > 1 else None
        sns.lineplot(part, x="position", y="accuracy", hue="mode", style=style, marker="o",
                     errorbar=seed_band(part, ["strategy", "mode", "position"]), ax=ax)  # fmt: skip
        ax.set(title=family, xlabel="target position", ylabel="token accuracy", ylim=(0, 1.05))
        ax.legend(fontsize=7)
    return _save(fig, path)


def prefix_corruption(curve: pd.DataFrame, table: pd.DataFrame, path: Path) -> Path | None:
    """Accuracy d tokens after k corrupted prefix tokens, relative to a clean prefix; one panel per
    AT system family (mean over seeds)."""
    data = with_family(curve, table)
    families = list(dict.fromkeys(data["family"]))
    fig, axes = _facets(len(families))
    for ax, family in zip(axes, families):
        part = data[data["family"] == family].assign(k=lambda d: d["corrupted"].astype(str))
        sns.lineplot(part, x="distance", y="relative_accuracy", hue="k", marker="o",
                     errorbar=seed_band(part, ["k", "distance"]), ax=ax)
        ax.axhline(1.0, color="0.7", lw=0.8)
        ax.set(title=family, xlabel="distance d after the corruption", ylabel="relative accuracy")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(title="k corrupted", fontsize=7)
    return _save(fig, path)


def _bucket_start(label: str) -> float:
    """Lower bound of a length-bucket label such as '1-10' or '31+', for ordering."""
    match = re.search(r"\d+", str(label))
    return float(match.group()) if match else float("inf")


def bleu_by_length(curve: pd.DataFrame, table: pd.DataFrame, path: Path) -> Path | None:
    """BLEU per reference-length bucket, one line per system, one panel per task."""
    data = with_family(curve, table).merge(table[["cell", "task"]].drop_duplicates("cell"), on="cell", how="left")
    data = data.assign(task=data["task"].fillna("(unknown task)"),
                       system=data["family"] + " / " + data["strategy"].astype(str))  # seeds averaged
    order = sorted(data["bucket"].astype(str).unique(), key=_bucket_start)
    data["bucket"] = pd.Categorical(data["bucket"].astype(str), categories=order, ordered=True)
    tasks = list(dict.fromkeys(data["task"]))
    fig, axes = _facets(len(tasks), width=5.5, height=3.5)
    for ax, task in zip(axes, tasks):
        part = data[data["task"] == task].sort_values("bucket")
        sns.pointplot(part, x="bucket", y="bleu", hue="system", errorbar=seed_band(part, ["system", "bucket"]),
                      markersize=4, linewidth=1, ax=ax)  # fmt: skip
        ax.set(title=task, xlabel="reference length (tokens)", ylabel="BLEU")
        ax.legend(fontsize=6)
    return _save(fig, path)


def iterations(curve: pd.DataFrame, table: pd.DataFrame, path: Path) -> Path | None:
    """BLEU after each mask-predict iteration, one line per system (mean over seeds)."""
    data = with_family(curve, table)
    data = data.assign(system=data["family"] + " / " + data["strategy"].astype(str))
    fig = _figure(6.0, 4.0)
    ax = fig.subplots()
    sns.lineplot(data, x="iteration", y="bleu", hue="system", marker="o",
                 errorbar=seed_band(data, ["system", "iteration"]), ax=ax)
    ax.set(xlabel="mask-predict iteration", ylabel="BLEU", title="BLEU per refinement iteration")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=7)
    return _save(fig, path)


def validation(curve: pd.DataFrame, table: pd.DataFrame, path: Path) -> Path | None:
    """Validation BLEU (or loss, where no BLEU was computed) by training step, one panel per task,
    one line per system family (mean over seeds, band: their range)."""
    data = with_family(curve, table)
    tasks = table.drop_duplicates("cell").set_index("cell")["task"]
    data = data.assign(task=data["cell"].astype(str).map(tasks).fillna(""))
    y = "val_bleu" if data["val_bleu"].notna().any() else "val_loss"
    data = data.dropna(subset=[y])
    if data.empty:
        return None
    panels = list(dict.fromkeys(data["task"]))
    fig, axes = _facets(len(panels), width=5.0, height=3.6)
    for ax, task in zip(axes, panels):
        part = data[data["task"] == task]
        sns.lineplot(part, x="step", y=y, hue="family", marker=".", errorbar=seed_band(part, ["family", "step"]),
                     ax=ax)
        ax.set(xlabel="training step", ylabel="validation BLEU" if y == "val_bleu" else "validation loss",
               title=str(task))
        ax.legend(fontsize=7)
    return _save(fig, path)


def _attention_order(curve: pd.DataFrame, table: pd.DataFrame) -> list[tuple[str, str]]:
    """(cell, title) pairs, one cell (the first seed) per system family: AT before NAT, unguided
    before guided, as far as the table knows."""
    info = table.drop_duplicates("cell").set_index("cell")
    data = with_family(curve, table)
    keyed = []
    for family, part in data.groupby("family", sort=False):
        cell = str(part["cell"].iloc[0])
        decoder = str(info["decoder"].get(cell, "?"))
        guided = bool(info["guided_attention"].get(cell, False))
        title = f"{family}\n{decoder}, {'guided' if guided else 'unguided'} attention"
        keyed.append(((decoder != "at", guided, family), cell, title))
    return [(cell, title) for _, cell, title in sorted(keyed)]


def attention_maps(curve: pd.DataFrame, table: pd.DataFrame, path: Path) -> Path | None:
    """Last-layer cross-attention heat map (target x source) of one sample sentence per family."""
    panels = _attention_order(curve, table)
    fig, axes = _facets(len(panels), width=3.6, height=3.4)
    for ax, (cell, title) in zip(axes, panels):
        part = curve[curve["cell"].astype(str) == cell]
        part = part[part["sentence"] == part["sentence"].min()]
        part = part.dropna(subset=["target_pos", "source_pos"]).astype({"target_pos": int, "source_pos": int})
        grid = part.pivot_table(index="target_pos", columns="source_pos", values="weight",
                                aggfunc="mean")  # (T, S) fmt: skip
        sns.heatmap(grid, ax=ax, cmap="viridis", vmin=0, cbar=False, square=False)
        ax.set(title=title, xlabel="source position", ylabel="target position")
        ax.title.set_fontsize(8)
    return _save(fig, path)


def speed_bars(table: pd.DataFrame, path: Path) -> Path | None:
    """Batch-1 latency and large-batch throughput per system, bars grouped by task."""
    data = table.dropna(subset=["latency_ms_b1", "throughput_sents_s"], how="all")
    if data.empty:
        return None
    data = data.assign(system=data["task"].astype(str) + ": " + system_label(data))
    fig = _figure(11.0, 1.2 + 0.32 * len(data))
    left, right = fig.subplots(1, 2, sharey=True)
    sns.barplot(data, y="system", x="latency_ms_b1", hue="decoder", dodge=False, errorbar=None, ax=left)
    sns.barplot(data, y="system", x="throughput_sents_s", hue="decoder", dodge=False, errorbar=None, ax=right,
                legend=False)  # fmt: skip
    left.set(xlabel="latency at batch 1 (ms / sentence, lower is better)", ylabel="")
    right.set(xlabel="throughput at large batch (sentences / s, higher is better)", ylabel="")
    left.legend(title="decoder", fontsize=7)
    return _save(fig, path)


def _ok(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["status"] == "ok"]


# stem (file name and curve name), caption, source file, draw(results table, curve, path);
# the first is the report's headline figure, shown under the summary
FIGURES = (
    ("quality_vs_speed", "BLEU vs speed-up over our AT greedy, at batch 1 (left) and in large-batch throughput "
     "(right); means over seeds with their 95% intervals (Student's t over seeds, the test-sentence variance "
     "added; one seed: its bootstrap interval; speed: at least the A/A noise floor); ringed: not clearly beaten "
     "in both", "results.csv",
     lambda table, _, path: quality_vs_speed(_ok(table), path)),
    ("position_accuracy", "Token accuracy by target position: teacher-forced vs free-running (grey: sentences "
     f"per position; positions fewer than {MIN_SENTENCES} sentences reach are cut)",
     "curves/position_accuracy.csv", lambda table, curve, path: position_accuracy(curve, table, path)),
    ("prefix_corruption", "Accuracy d tokens after k corrupted prefix tokens, relative to a clean prefix",
     "curves/prefix_corruption.csv", lambda table, curve, path: prefix_corruption(curve, table, path)),
    ("bleu_by_length", "BLEU by reference length bucket", "curves/bleu_by_length.csv",
     lambda table, curve, path: bleu_by_length(curve, table, path)),
    ("iterations", "BLEU after each mask-predict iteration", "curves/iterations.csv",
     lambda table, curve, path: iterations(curve, table, path)),
    ("validation", "Validation score by training step (greedy / one-pass BLEU on the validation split; its "
     "loss where no BLEU was computed)", "curves/validation.csv",
     lambda table, curve, path: validation(curve, table, path)),
    ("attention", "Last-layer cross-attention (mean over heads) of one sample sentence per system",
     "curves/attention.csv", lambda table, curve, path: attention_maps(curve, table, path)),
    ("speed", "Latency at batch 1 and throughput at a large batch per system", "results.csv",
     lambda table, _, path: speed_bars(_ok(table), path)),
)  # fmt: skip


def remove_figures(out_dir: Path) -> None:
    """Remove the PNGs draw_figures writes, so that none outlives the tables it was drawn from."""
    for stem, *_ in FIGURES:
        (out_dir / f"{stem}.png").unlink(missing_ok=True)


def draw_figures(
    table: pd.DataFrame, curves: dict[str, pd.DataFrame | None], out_dir: Path
) -> list[tuple[str, str, Path | None]]:
    """Draw every figure whose data is present: (caption, source file, PNG path or None) each.

    A figure that is not drawn has its old PNG removed, so a stale one never outlives its data.
    """
    drawn = []
    for stem, caption, source, draw in FIGURES:
        path = out_dir / f"{stem}.png"
        path.unlink(missing_ok=True)
        curve = curves.get(stem)
        needs_curve = source.startswith("curves/")
        result = None if needs_curve and curve is None else draw(table, curve, path)
        drawn.append((caption, source, result))
    return drawn
