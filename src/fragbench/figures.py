"""The report's figures, as PNG and SVG, drawn by matplotlib without a browser or a screen.

Both formats are written with fixed metadata, so that the same tables give the same files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

REASON_COLORS = {
    "valid": "#1b7837",
    "misattributed": "#f1a340",
    "not_verbatim": "#d73027",
    "not_supplied": "#762a83",
    "unknown_id": "#4d4d4d",
    "empty_extract": "#bababa",
}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "fragbench"
    matplotlib.rcParams["font.size"] = 9
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, stem: Path) -> list[Path]:
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    fig.savefig(paths[0], dpi=110, bbox_inches="tight", metadata={"Software": None})
    fig.savefig(paths[1], bbox_inches="tight", metadata={"Date": None, "Creator": None})
    return paths


def availability_heatmap(availability: pl.DataFrame, stem: Path) -> list[Path]:
    """Case x language x variant against every retrieval setting (and the full passage):
    how many of the case's condition IDs were supplied."""
    plt = _pyplot()
    table = availability.with_columns(
        pl.when(pl.col("mode") == "full").then(pl.lit("full"))
        .otherwise(pl.format("size {} · top {}", "chunk_size", "top_k")).alias("setting"),
        pl.format("{} {} {}", "case", "lang", "variant").alias("passage"),
    )
    from fragbench.report import setting_order

    settings = setting_order(table)
    passages = table["passage"].unique(maintain_order=True).to_list()
    value = {(r["passage"], r["setting"]): (r["n_conditions_supplied"], r["n_conditions"])
             for r in table.to_dicts()}
    grid = [[value[(p, s)][0] / max(value[(p, s)][1], 1) for s in settings] for p in passages]
    fig, ax = plt.subplots(figsize=(1.3 * len(settings) + 2, 0.35 * len(passages) + 1.2))
    image = ax.imshow(grid, cmap="Greens", vmin=0, vmax=1, aspect="auto")
    for i, p in enumerate(passages):
        for j, s in enumerate(settings):
            n, total = value[(p, s)]
            ax.text(j, i, f"{n}/{total}", ha="center", va="center",
                    color="white" if grid[i][j] > 0.6 else "black")
    ax.set_xticks(range(len(settings)), settings)
    ax.set_yticks(range(len(passages)), passages)
    ax.set_title("Condition IDs supplied before the model")
    fig.colorbar(image, ax=ax, label="share of the case's condition IDs")
    paths = _save(fig, stem)
    plt.close(fig)
    return paths


def citation_outcomes(citations: pl.DataFrame, per_call: pl.DataFrame, stem: Path) -> list[Path]:
    """One bar per call (the repetitions stay separate), stacked by citation reason (exact
    level); calls without a parsed answer are marked, not drawn as zero."""
    plt = _pyplot()
    calls = per_call.sort("case", "lang", "mode", "variant", "rep")
    labels = [f"{r['case']} {r['lang']} {r['mode']} {r['variant']} r{r['rep']}"
              for r in calls.to_dicts()]
    counts = (citations.group_by("call_id", "reason").len()
              .pivot(on="reason", index="call_id", values="len"))
    by_call = {r["call_id"]: r for r in counts.to_dicts()}
    fig, ax = plt.subplots(figsize=(8, 0.17 * len(labels) + 1.4))
    left = [0.0] * len(labels)
    for reason, color in REASON_COLORS.items():
        widths = [float((by_call.get(cid) or {}).get(reason) or 0)
                  for cid in calls["call_id"].to_list()]
        ax.barh(range(len(labels)), widths, left=left, color=color, label=reason, height=0.8)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for i, row in enumerate(calls.to_dicts()):
        if not row["parsed"]:
            ax.text(0.1, i, "no parsed answer", va="center", fontsize=7, color="#b2182b")
    ax.set_yticks(range(len(labels)), labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlim(0, max([*left, 1.0]) + 0.5)
    ax.set_xlabel("citations (exact level)")
    ax.set_title("Citation outcomes per call")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    paths = _save(fig, stem)
    plt.close(fig)
    return paths
