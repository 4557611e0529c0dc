"""A search on PostgreSQL by one worker and by two, the same work: trials per hour, and what each
scheduling decision costs on the database.

Why: docs/search.md tells users who outgrow one machine to give several workers one PostgreSQL
database. This bench runs that recipe on a throwaway server (tests/postgres_cluster.py): a seeds
search of `run_classifier.py` (MiniLM on an MRPC slice, one epoch, `--trials` seeds) by one worker,
then the same search by two workers, each in its own folder as on two machines, started together.
On this 2-core machine the two workers share the cores, so the figure says what the coordination
costs and how two runner processes share two cores, not what two machines give. Each search logs
its scheduling decisions (the lock taken on the server, the study read, a trial created): their
count and mean time.

    python bench/search_workers.py                # 8 trials
    python bench/search_workers.py --trials 4 --train_rows 200

Prints a Markdown table and writes bench/results/search_workers.json.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # postgres_cluster
sys.path.insert(0, str(REPO / "bench"))

import postgres_cluster  # noqa: E402
from backends import cpu_kind  # noqa: E402
from glue import minilm_dir  # noqa: E402

RESULTS = REPO / "bench" / "results"


def mrpc_slice(data: pathlib.Path, out: pathlib.Path, train_rows: int, dev_rows: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for split, rows in (("train", train_rows), ("dev", dev_rows), ("test", 8)):
        lines = (data / f"{split}.tsv").read_bytes().split(b"\n")
        (out / f"{split}.tsv").write_bytes(b"\n".join(lines[:1 + rows]) + b"\n")


def command(search_dir, url, data, args) -> list:
    return [sys.executable, str(REPO / "run_search.py"), "--runner=run_classifier",
            f"--search_dir={search_dir}", f"--seeds={args.trials}", "--noprune",
            f"--storage={url}", "--", "--task_name=MRPC", f"--data_dir={data}",
            f"--init_checkpoint={minilm_dir()}", "--max_seq_length=128",
            "--train_batch_size=32", "--learning_rate=2e-5", "--num_train_epochs=1"]


def decisions(log: str) -> tuple:
    found = re.findall(r"(\d+) scheduling decisions, (\d+) ms each on average", log)
    return (int(found[-1][0]), int(found[-1][1])) if found else (None, None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--train_rows", type=int, default=480)
    parser.add_argument("--dev_rows", type=int, default=100)
    parser.add_argument("--data_dir", default=os.environ.get(
        "BERT_DATA_DIR", str(REPO.parent / "shared" / "data")))
    args = parser.parse_args()
    why = postgres_cluster.missing()
    if why:
        raise SystemExit(why)
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-search-workers-"))
    data = work / "MRPC"
    mrpc_slice(pathlib.Path(args.data_dir) / "glue" / "MRPC", data, args.train_rows,
               args.dev_rows)
    rows = []
    with postgres_cluster.Cluster() as cluster:
        for workers in (1, 2):
            database = f"workers{workers}"
            cluster.sql(f"CREATE DATABASE {database} OWNER {postgres_cluster.USER}")
            url = cluster.url(database=database)
            start = time.perf_counter()
            processes = [subprocess.Popen(command(work / f"w{workers}-{i}", url, data, args),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          text=True, cwd=REPO) for i in range(workers)]
            logs = [p.communicate()[1] for p in processes]
            wall = time.perf_counter() - start
            if any(p.returncode for p in processes):
                raise SystemExit("a worker failed:\n" + "\n".join(log[-2000:] for log in logs))
            counted = [decisions(log) for log in logs]
            ran = [len([p for p in (work / f"w{workers}-{i}" / "trials").iterdir() if p.is_dir()])
                   for i in range(workers)]
            rows.append({"workers": workers, "trials": args.trials, "wall_s": wall,
                         "trials_per_hour": 3600 * args.trials / wall,
                         "trials_by_worker": ran,
                         "decisions": [c[0] for c in counted],
                         "decision_ms": [c[1] for c in counted]})
            print(json.dumps(rows[-1]), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "search_workers.json").write_text(json.dumps({"cpu": cpu_kind(), "rows": rows},
                                                            indent=1))
    print(f"\nseeds search, {args.trials} trials of run_classifier (MiniLM, MRPC "
          f"{args.train_rows} pairs, 1 epoch), PostgreSQL on loopback; {cpu_kind()}\n")
    print("| workers | wall time (s) | trials per hour | trials each | scheduling decisions "
          "(each worker) | mean ms per decision |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workers']} | {r['wall_s']:.0f} | {r['trials_per_hour']:.0f} | "
              f"{', '.join(map(str, r['trials_by_worker']))} | "
              f"{', '.join(map(str, r['decisions']))} | "
              f"{', '.join(map(str, r['decision_ms']))} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
