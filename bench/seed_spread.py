"""How much one fine-tuning recipe moves with the seed alone: mean and spread over N seeds.

Runs `run_search.py --seeds=N` (no dimension: one configuration, N seeds) for `run_classifier.py`
from the MiniLM weights with the original recipe (learning rate 2e-5, batch 32, 3 epochs,
sequence 128), on data of the small GLUE tasks' sizes:
- `rte`: MRPC's training set cut to RTE's size (2,490 pairs, seeded), MRPC dev;
- `cola`: CoLA (8,551 sentences), its dev;
- `mrpc`: MRPC (3,668 pairs), its dev.
Prints each one's mean, sample standard deviation, range and expected best of k, from the
search's `configurations.tsv`, and writes `WORK_DIR/seed_spread.json`.

    python bench/seed_spread.py --sets rte,cola --seeds 5 --work_dir /tmp/bench-seeds
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # import from the checkout, not from bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import random  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

from bench.glue import minilm_dir  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
RTE_TRAIN = 2490


def data_for(name: str, glue: pathlib.Path, work: pathlib.Path) -> tuple[str, pathlib.Path]:
    """(task name, data folder) of a set."""
    if name == "cola":
        return "CoLA", glue / "CoLA"
    if name == "mrpc":
        return "MRPC", glue / "MRPC"
    folder = work / "data_rte_sized"
    folder.mkdir(parents=True, exist_ok=True)
    lines = (glue / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig").splitlines(True)
    keep = sorted(random.Random(0).sample(range(1, len(lines)), RTE_TRAIN))
    (folder / "train.tsv").write_text(lines[0] + "".join(lines[i] for i in keep),
                                      encoding="utf-8")
    (folder / "dev.tsv").write_text((glue / "MRPC" / "dev.tsv").read_text(encoding="utf-8-sig"),
                                    encoding="utf-8")
    return "MRPC", folder


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="rte,cola")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--work_dir", default="/tmp/bench-seeds")
    args = parser.parse_args()
    work = pathlib.Path(args.work_dir)
    glue = pathlib.Path(os.environ.get("BERT_DATA_DIR", REPO.parent / "shared" / "data")) / "glue"
    results = {}
    for name in args.sets.split(","):
        task, data = data_for(name, glue, work)
        search = work / name
        command = [sys.executable, str(REPO / "run_search.py"), "--runner=run_classifier",
                   f"--search_dir={search}", f"--seeds={args.seeds}", "--",
                   f"--task_name={task}", f"--data_dir={data}",
                   f"--init_checkpoint={minilm_dir()}", "--learning_rate=2e-5",
                   "--train_batch_size=32", "--num_train_epochs=3", "--eval_batch_size=64"]
        start = time.time()
        with open(work / f"{name}.log", "a") as log:
            subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True, cwd=REPO)
        with open(search / "configurations.tsv", encoding="utf-8") as f:
            (config,) = list(csv.DictReader(f, delimiter="\t"))
        with open(search / "trials.tsv", encoding="utf-8") as f:
            trials = list(csv.DictReader(f, delimiter="\t"))
        results[name] = {"task": task, "data": str(data), "wall_s": round(time.time() - start),
                         "metric": json.loads((search / "best" / "trial.json").read_text())[
                             "metric"], **config,
                         "scores": [float(t["dev_score"]) for t in trials]}
        print(f"{name}: {config['n']} seeds, mean {float(config['mean']):.4f}, std "
              f"{float(config['std']):.4f}, range {config['min']}-{config['max']}, expected best "
              f"of k {config['expected_best_of_k']}", flush=True)
    (work / "seed_spread.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
