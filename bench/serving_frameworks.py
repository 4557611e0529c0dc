"""Which model-server framework `serve.py` is built on, by measurement: the same model (MRPC
MiniLM's LiteRT int8 fast path) behind KServe's ModelServer (`serve.py` itself) and behind
LitServe (its own dynamic batching), on loopback, under the same load.

    python bench/serving_frameworks.py [--work_dir /tmp/bench-serving] [--clients 1,16]

Both answer TF Serving's predict route with the fast path's outputs, batching up to 32 rows: our
batcher on KServe takes whatever has arrived while the model was busy
(`--batch_timeout_micros=0`); LitServe's `batch_timeout` is the smallest it takes meaningfully
(1 ms; at 0 it waits for nothing and never batches). Requests: one MRPC pair each, from
`bench/serving_load.py`'s generator. LitServe runs its model in a worker process of its own and
passes requests to it through queues; `serve.py` runs the model on a thread of the server's
process. LitServe is installed into `bench/.venv-litserve` on first use (never a project
dependency).

Prints a Markdown table and writes bench/results/serving_frameworks.json.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from backends import cpu_kind  # noqa: E402
from finetune_vs_pytorch import peer_python  # noqa: E402
from serving import finetune, read_tsv  # noqa: E402
from serving_load import RESULTS, bodies_of, free_port, run_load, server  # noqa: E402

# LitServe and what the fast path needs without TensorFlow (bench/_litserve_side.py).
LITSERVE_VENV = REPO / "bench" / ".venv-litserve"
LITSERVE_PACKAGES = ["litserve==0.2.19", "ai-edge-litert==2.3.0", "numpy>=2,<3"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default="/tmp/bench-serving")
    parser.add_argument("--shared", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--clients", default="1,16")
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    work = pathlib.Path(args.work_dir)
    shared = pathlib.Path(args.shared)
    export = finetune("mrpc", shared / "glue" / "MRPC", work,
                      ["--task_name=MRPC", "--num_train_epochs=3", "--max_seq_length=128"])
    rows = read_tsv(shared / "glue" / "MRPC" / "train.tsv")[1:]
    pairs = [(r[3], r[4]) for r in rows]
    results = {"cpu": cpu_kind(), "sides": {}}
    for side in ("kserve", "litserve"):
        port = free_port()
        if side == "kserve":
            command = [sys.executable, str(REPO / "serve.py"), f"--export_dir={export}",
                       "--model_name=m", "--host=127.0.0.1", f"--port={port}",
                       "--runtime=int8", "--max_batch_size=32", "--batch_timeout_micros=0"]
        else:
            command = [peer_python(LITSERVE_VENV, LITSERVE_PACKAGES),
                       str(REPO / "bench" / "_litserve_side.py"), str(export), str(port)]
        measured = {}
        with server(command, port, work / f"framework-{side}.log", measured,
                    ready_path="/v1/models/m" if side == "kserve" else "/health",
                    ready_word=b"AVAILABLE" if side == "kserve" else b"ok"):
            run_load(port, bodies_of(pairs[-64:]), 4, 60)  # warm-up, untimed
            offset = 0
            for clients in (int(c) for c in args.clients.split(",")):
                part = pairs[offset:offset + args.requests]
                offset += args.requests
                result = run_load(port, bodies_of(part), clients, 120)
                measured.setdefault("levels", []).append(result)
                print(f"{side:8} {clients:3} clients: {result['per_s']:6.1f} pairs/s  p50 "
                      f"{result['p50_ms']:6.1f} ms  p99 {result['p99_ms']:6.1f} ms  failures "
                      f"{result['failures'] or 0}", flush=True)
        results["sides"][side] = measured
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "serving_frameworks.json").write_text(json.dumps(results, indent=1))
    print(f"\nMRPC pairs on loopback, LiteRT int8 behind each framework; {results['cpu']}\n")
    print("| framework | clients | pairs/s | p50 ms | p99 ms | peak memory MB |")
    print("|---|---|---|---|---|---|")
    for side, measured in results["sides"].items():
        for r in measured["levels"]:
            print(f"| {side} | {r['clients']} | {r['per_s']:.0f} | {r['p50_ms']:.1f} | "
                  f"{r['p99_ms']:.1f} | {measured['peak_rss_mb']:.0f} |")


if __name__ == "__main__":
    main()
