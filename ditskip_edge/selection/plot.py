"""Score vs split, one line per budget, the chosen split marked: a PNG (matplotlib, Agg backend, no display)."""

from __future__ import annotations

from pathlib import Path


def plot_scores(results: list[dict], path: str | Path, title: str) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for r in results:
        ns = [row["n_front"] for row in r["splits"]]
        scores = [row["score"] for row in r["splits"]]
        label = f"k = {r['budget']}" + (f" (ratio {r['skip_ratio']:g})" if r.get("skip_ratio") is not None else "")
        line, = ax.plot(ns, scores, marker="o", label=label)
        n_best = r["chosen"][0]
        ax.plot([n_best], [scores[ns.index(n_best)]], marker="*", markersize=14, color=line.get_color())
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("n front blocks masked (m = k - n back blocks)")
    ax.set_ylabel("score D(x_g, x_hat_n) + D(x_g, x_tilde_m)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
