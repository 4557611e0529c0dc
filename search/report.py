"""What a search leaves to read: every trial, every configuration's spread, and a plot.

- `trials.tsv`: one row per trial (a configuration and a seed): its settings, seed, state (finished,
  pruned, failed, running), best dev score and the step it was reached at, steps trained of the
  steps planned, wall time (all attempts), attempts and the worker (host:pid) of the last one;
- `configurations.tsv`: per configuration, its finished trials' count, mean, standard deviation,
  lowest and highest dev score, and the expected best dev score of k runs, k = 1..n
  (`search.statistics`);
- `report.md`: the chosen trial, the cost (steps trained against the steps of running every trial
  to its end), both tables, and `expected_validation_performance.png`: the expected best dev score
  against the number of trials, for the search's first-phase trials and for the chosen
  configuration's seeds, each with one standard deviation shaded.
"""
from __future__ import annotations

import os

from bert_tf2.process.atomic_files import atomic_path, write_text
from bert_tf2.search.statistics import expected_best_curve, spread

PLOT_FILE = "expected_validation_performance.png"
STATES = {"COMPLETE": "finished", "PRUNED": "pruned", "FAIL": "failed", "RUNNING": "running",
          "WAITING": "waiting"}


def rows(trials, names: list) -> list[dict]:
    """One row per slot (its latest attempt, with the attempts' count)."""
    latest, counts = {}, {}  # slots in the order of their first attempt (dicts keep it)
    for trial in sorted(trials, key=lambda t: t.number):
        slot = trial.user_attrs.get("slot")
        if slot:
            counts[slot] = counts.get(slot, 0) + 1
            latest[slot] = trial
    table = []
    for slot, trial in latest.items():
        attrs = trial.user_attrs
        state = STATES.get(trial.state.name, trial.state.name.lower())
        score = trial.value if trial.state.name == "COMPLETE" else attrs.get("best_score")
        planned = attrs.get("num_train_steps")
        table.append({
            "trial": slot, "phase": {1: "search", 2: "restart"}.get(attrs.get("phase"), "?"),
            **{name: (attrs.get("settings") or {}).get(name, "") for name in names},
            "seed": attrs.get("seed"), "state": state, "dev_score": score,
            "best_step": attrs.get("best_step"),
            "steps_trained": planned if state == "finished" else attrs.get("steps_trained"),
            "num_train_steps": planned,
            "wall_s": None if attrs.get("wall_s") is None else round(attrs["wall_s"]),
            "attempts": counts[slot], "worker": attrs.get("worker"),
            "config": attrs.get("config"), "_trial": trial})
    return table


def configurations(table: list, names: list, lower: bool) -> list[dict]:
    groups = {}
    for row in table:
        if row["state"] == "finished" and row["dev_score"] is not None:
            groups.setdefault(row["config"], []).append(row)
    result = []
    for config, members in groups.items():
        s = spread([m["dev_score"] for m in members], lower)
        result.append({**{name: members[0][name] for name in names}, "n": s.n, "mean": s.mean,
                       "std": s.std, "min": s.low, "max": s.high,
                       "expected_best_of_k": s.expected_best, "config": config})
    result.sort(key=lambda c: c["mean"], reverse=not lower)
    return result


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    return str(value)


def tsv(table: list, columns: list) -> str:
    return "\t".join(columns) + "\n" + "".join(
        "\t".join(_text(row.get(c)) for c in columns) + "\n" for row in table)


def markdown(table: list, columns: list) -> str:
    return ("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n" + "".join(
        "| " + " | ".join(_text(row.get(c)) for c in columns) + " |\n" for row in table))


def write(search_dir: str, trials, metric: str, lower: bool, names: list, chosen) -> list[str]:
    """Write the tables, the report and the plot; returns their paths."""
    table = rows(trials, names)
    configs = configurations(table, names, lower)
    trial_columns = ["trial", "phase", *names, "seed", "state", "dev_score", "best_step",
                     "steps_trained", "num_train_steps", "wall_s", "attempts", "worker"]
    config_columns = [*names, "n", "mean", "std", "min", "max", "expected_best_of_k"]
    paths = [os.path.join(search_dir, "trials.tsv"),
             os.path.join(search_dir, "configurations.tsv"),
             os.path.join(search_dir, "report.md")]
    write_text(paths[0], tsv(table, trial_columns))
    write_text(paths[1], tsv(configs, config_columns))
    plotted = plot(os.path.join(search_dir, PLOT_FILE), table, metric, lower, chosen)
    trained = sum(r["steps_trained"] or 0 for r in table)
    planned = sum(r["num_train_steps"] or 0 for r in table)
    counts = {state: sum(r["state"] == state for r in table) for state in STATES.values()}
    lines = [f"# Search in {search_dir}", "",
             f"Dev metric: `{metric}` ({'lower' if lower else 'higher'} is better). Trials: "
             + ", ".join(f"{n} {state}" for state, n in counts.items() if n) + ".", ""]
    if chosen is not None:
        attrs = chosen.user_attrs
        flags = " ".join(f"--{k}={v}" for k, v in attrs["settings"].items())
        lines += [f"Chosen: trial `{attrs['slot']}` ({flags} --random_seed={attrs['seed']}), "
                  f"{metric} = {chosen.value:.4f}; its weights are in `best/`.", ""]
    wall = sum(r["wall_s"] or 0 for r in table)
    lines += [f"Cost: {trained} training steps of the {planned} that running every started trial "
              f"to its end takes ({trained / planned:.0%}); {wall / 60:.1f} minutes of trials."
              if planned else "Cost: no training step recorded.", "",
              "## Configurations (finished trials)", "", markdown(configs, config_columns),
              "## Trials", "", markdown(table, trial_columns)]
    if plotted:
        lines += [f"![expected validation performance]({PLOT_FILE})", ""]
        paths.append(plotted)
    write_text(paths[2], "\n".join(lines))
    return paths


def plot(path: str, table: list, metric: str, lower: bool, chosen) -> str | None:
    """Expected best dev score against the number of trials (None without finished trials)."""
    search = [r["dev_score"] for r in table if r["phase"] == "search" and r["state"] == "finished"]
    if not search:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    configs = {r["config"] for r in table if r["phase"] == "search" and r["state"] == "finished"}
    curves = [(f"first-phase trials, {len(search)} finished", search)]
    if chosen is not None:
        seeds = [r["dev_score"] for r in table if r["config"] == chosen.user_attrs["config"]
                 and r["state"] == "finished"]
        if len(seeds) > 1 and configs != {chosen.user_attrs["config"]}:  # not the same curve
            curves.append((f"chosen configuration, {len(seeds)} seeds", seeds))
    figure, axes = plt.subplots(figsize=(6, 4), dpi=100)
    for label, scores in curves:
        curve = expected_best_curve(scores, lower)
        k = [c[0] for c in curve]
        mean = [c[1] for c in curve]
        std = [c[2] for c in curve]
        axes.plot(k, mean, marker="o", label=label)
        axes.fill_between(k, [m - s for m, s in zip(mean, std)],
                          [m + s for m, s in zip(mean, std)], alpha=0.2)
    axes.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    axes.set_xlabel("trials (k)")
    axes.set_ylabel(f"expected best {metric} of k")
    axes.set_title("Expected validation performance (Dodge et al. 2019)")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    with atomic_path(path, ".png") as tmp:
        figure.savefig(tmp, format="png")
    plt.close(figure)
    return path
