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
process.

Prints a Markdown table and writes bench/results/serving_frameworks.json.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from backends import cpu_kind  # noqa: E402
from serving import finetune, read_tsv  # noqa: E402
from serving_load import RESULTS, bodies_of, free_port, load, server  # noqa: E402


def litserve_api(export_dir: str):
    import litserve as ls

    class FastPath(ls.LitAPI):
        def setup(self, device):
            from tasks.classification.litert_serving import LiteRTClassifier

            self.fast = LiteRTClassifier.load(export_dir, "int8")
            self.fast.warm_up((1, 2, 4, 8))

        def decode_request(self, request):
            return request["instances"][0]

        def batch(self, inputs):
            return inputs

        def predict(self, rows):
            out = self.fast([r["text_a"] for r in rows], [r["text_b"] for r in rows])
            return [{"label": out["label"][i], "label_id": int(out["label_id"][i]),
                     "probabilities": out["probabilities"][i].tolist(),
                     "logits": out["logits"][i].tolist()} for i in range(len(rows))]

        def unbatch(self, outputs):
            return outputs

        def encode_response(self, output):
            return {"predictions": [output]}

    return FastPath(max_batch_size=32, batch_timeout=0.001, api_path="/v1/models/m:predict")


def run_litserve(export_dir: str, port: int) -> None:
    import litserve as ls

    ls.LitServer(litserve_api(export_dir), accelerator="cpu", workers_per_device=1,
                 timeout=60).run(host="127.0.0.1", port=port, generate_client_file=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default="/tmp/bench-serving")
    parser.add_argument("--shared", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--clients", default="1,16")
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--litserve_worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.litserve_worker:
        run_litserve(args.litserve_worker, args.port)
        return
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
            command = [sys.executable, str(REPO / "bench" / "serving_frameworks.py"),
                       f"--litserve_worker={export}", f"--port={port}"]
        measured = {}
        with server(command, port, work / f"framework-{side}.log", measured,
                    ready_path="/v1/models/m" if side == "kserve" else "/health",
                    ready_word=b"AVAILABLE" if side == "kserve" else b"ok"):
            asyncio.run(load(port, bodies_of(pairs[-64:]), 4, 60))  # warm-up, untimed
            offset = 0
            for clients in (int(c) for c in args.clients.split(",")):
                part = pairs[offset:offset + args.requests]
                offset += args.requests
                result = asyncio.run(load(port, bodies_of(part), clients, 120))
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
