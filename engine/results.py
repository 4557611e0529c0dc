"""`eval_results.txt`: the original's `key = value` lines, written and read back.

Every evaluation (fine-tuning at each epoch's end, pretraining's `--do_eval`) writes its results
there in sorted key order, as the original does; `best/eval_results.txt` holds the best one.
"""
from __future__ import annotations

import os

from modeling.atomic_files import write_text

RESULTS_FILE = "eval_results.txt"


def write_eval_results(path: str, results: dict) -> None:
    """`key = value` lines in sorted order, as the original writes eval_results.txt."""
    write_text(path, "".join(f"{key} = {results[key]}\n" for key in sorted(results)))


def read_eval_results(path: str) -> dict:
    """`key = value` lines back into a dict of floats (empty when the file is absent)."""
    results = {}
    if not os.path.isfile(path):
        return results
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, sep, value = line.partition(" = ")
            if sep:
                results[key.strip()] = float(value)
    return results


def format_results(results: dict) -> str:
    return ", ".join(f"{k} = {v:.4f}" if isinstance(v, float) else f"{k} = {v}"
                     for k, v in sorted(results.items()))


def lower_is_better(metric: str) -> bool:
    return "loss" in metric or "error" in metric
