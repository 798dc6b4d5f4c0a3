"""The Fig. 2a-style figure, ``frozenlake_study.png``: success rate and good-move ratio vs
iteration, one line per method, retry dashed grey, the held-out test after the last iteration."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

METHOD_STYLES = {
    "retry": {"color": "grey", "linestyle": "--"},
    "trajectory": {"color": "tab:blue", "linestyle": "-"},
    "stateful_root": {"color": "tab:orange", "linestyle": "-"},
    "stateful_bootstrap": {"color": "tab:red", "linestyle": "-"},
}


def plot_results(results: dict[str, Any], path: str | Path) -> Path:
    """Fig. 2a-style figure: success rate and good-move ratio vs iteration, test after the last one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = results["config"]
    iterations = cfg["iterations"]
    test_x = iterations + 1
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    panels = (("success_rate", "Success rate"), ("good_move_ratio", "Good-move ratio"))
    for ax, (metric, title) in zip(axes, panels):
        names = list(results["methods"])
        for i, (name, data) in enumerate(results["methods"].items()):
            style = METHOD_STYLES[name]
            jitter = (i - (len(names) - 1) / 2) * 0.12  # keep equal test values visible side by side
            xs = [row["iteration"] for row in data["train"]]
            ys = [row[metric] for row in data["train"]]
            ax.plot(xs, ys, marker="o", markersize=3.5, label=data["label"], **style)
            if data["test"] is not None and data["test"][metric] is not None:
                ax.plot([test_x + jitter], [data["test"][metric]], marker="D", markersize=7, linestyle="none",
                        color=style["color"], markeredgecolor="black")
            if name == "retry" and metric == "success_rate" and data["train"]:
                once = data["train"][-1]["success_at_least_once"]
                ax.axhline(once, color="grey", linestyle=":", linewidth=1.2,
                           label=f"retry x{data['train'][-1]['iteration']}, success at least once")
        ax.axvline(iterations + 0.5, color="black", linewidth=0.6, alpha=0.4)
        ax.set_xticks([*range(1, iterations + 1), test_x], [*map(str, range(1, iterations + 1)), "test"])
        ax.set_xlim(0.5, test_x + 0.5)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("iteration (train maps); test = held-out maps")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="best")
    slip = ", ".join(str(Fraction(p).limit_denominator(12)) for p in cfg["slip"])
    fig.suptitle(f"Slippery FrozenLake {cfg['size']}x{cfg['size']}, slip (left, right) = ({slip}), "
                 f"{cfg['train_maps']} train / {cfg['test_maps']} test maps")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
