"""A learning curve of `run_pretraining.py` from scratch on this CPU, beside what guessing scores.

Why: issue 5 asks to show that pretraining actually learns, not only that it runs: a BERT-Tiny-sized
model (2 layers, 128 hidden, 2 heads, 512 intermediate; the real uncased vocabulary of 30,522;
sequence 128, 20 predictions) trained from random weights on the shared corpus for a few thousand
steps, its held-out masked_lm_accuracy / masked_lm_loss / next_sentence_accuracy /
next_sentence_loss every few hundred steps, and the scores of the trivial guesses next to them:
always the most frequent masked token (its accuracy, and the loss of the eval set's own unigram
distribution), and always the majority next-sentence label.

How, with the project's own tools only:
1. records (`bench/_records.py`, made once under /tmp, never in the repository): training from
   WikiText-2 valid (format `wikitext`) and the 13 NLTK Gutenberg books with Tiny Shakespeare
   (format `prose`), `--dupe_factor` 5 by default, 2 workers; evaluation from WikiText-2 test,
   text the training never sees, dupe_factor 1;
2. one `run_pretraining.py --do_train` process (AdamWeightDecay, warmup then linear decay),
   keeping a checkpoint every `--eval_every` steps;
3. one `run_pretraining.py --do_eval --init_checkpoint=<checkpoint>` process per checkpoint on the
   first `--eval_examples` eval records (their `eval_results.txt` is the table);
4. the baselines counted from the same eval records (`masked_lm_ids` weighted by
   `masked_lm_weights`; `next_sentence_labels`).

Training batch: the defaults (batch 8, 3,000 steps) fit the ~20-25 minute budget on this shared
2-core machine, where BERT-Tiny trains at roughly 20 examples/s under load whatever the batch (see
`bench/pretraining_step.py`); batch 32 for 3,000 steps would take over an hour here.

    python bench/pretraining_curve.py --json_out /tmp/curve.json
    python bench/pretraining_curve.py --train_batch_size 32 --num_train_steps 5000 --plot curve.png
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # import from the checkout, not from bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from bench import _records  # noqa: E402

SEQ_LENGTH = 128
MAX_PREDICTIONS = 20
TINY_CONFIG = {"vocab_size": 30522, "hidden_size": 128, "num_hidden_layers": 2,
               "num_attention_heads": 2, "intermediate_size": 512, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
               "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02}
METRICS = ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy", "next_sentence_loss")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- records

def record_specs(dupe_factor: int) -> tuple[_records.RecordSpec, _records.RecordSpec]:
    train = _records.RecordSpec((_records.wikitext("valid"), _records.prose()), SEQ_LENGTH,
                                MAX_PREDICTIONS, dupe_factor=dupe_factor, shards_per_source=2)
    held_out = _records.RecordSpec((_records.wikitext("test"),), SEQ_LENGTH, MAX_PREDICTIONS)
    return train, held_out


# ---------------------------------------------------------------- run_pretraining.py

def run_pretraining(flags: list[str], log_path: Path) -> float:
    """Run `run_pretraining.py` with `flags`, its output into `log_path` (progress lines echoed);
    return the wall seconds. Fails loudly with the log's tail."""
    command = [sys.executable, str(_records.REPO / "run_pretraining.py"), *flags]
    start = time.time()
    with open(log_path, "w", encoding="utf-8") as out:
        process = subprocess.Popen(command, cwd=_records.REPO, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        for line in process.stdout:
            out.write(line)
            if " step " in line and "examples/s" in line:
                log("  " + line.split("] ", 1)[-1].rstrip())
    if process.wait():
        raise RuntimeError(f"run_pretraining.py failed ({' '.join(command)}):\n"
                           + log_path.read_text()[-3000:])
    return time.time() - start


def train(args, files: list[str], config: Path, out: Path) -> float:
    return run_pretraining([
        f"--input_file={','.join(files)}", f"--output_dir={out}", f"--bert_config_file={config}",
        f"--max_seq_length={SEQ_LENGTH}", f"--max_predictions_per_seq={MAX_PREDICTIONS}",
        "--do_train", f"--train_batch_size={args.train_batch_size}",
        f"--learning_rate={args.learning_rate}", f"--num_train_steps={args.num_train_steps}",
        f"--num_warmup_steps={args.num_warmup_steps}",
        f"--save_checkpoints_steps={args.eval_every}",
        f"--keep_checkpoint_max={args.num_train_steps // args.eval_every + 1}",
        f"--steps_per_loop={min(100, args.eval_every)}", f"--random_seed={args.seed}",
        "--jit_compile" if args.jit_compile else "--nojit_compile"], out / "train.log")


def checkpoints(out: Path) -> list[tuple[int, Path]]:
    """(step, prefix) of every training checkpoint in `out`, by step."""
    found = [(int(m.group(2)), out / m.group(1)) for p in out.glob("*ckpt-*.index")
             if (m := re.fullmatch(r"((?:model\.)?ckpt-(\d+))\.index", p.name))]
    return sorted(found)


def evaluate(prefix: Path, step: int, eval_file: str, config: Path, out: Path, args) -> dict:
    folder = out / "eval" / f"step-{step}"
    folder.mkdir(parents=True, exist_ok=True)
    seconds = run_pretraining([
        f"--input_file={eval_file}", f"--output_dir={folder}", f"--bert_config_file={config}",
        f"--init_checkpoint={prefix}", f"--max_seq_length={SEQ_LENGTH}",
        f"--max_predictions_per_seq={MAX_PREDICTIONS}", "--do_eval",
        f"--eval_batch_size={args.eval_batch_size}", f"--max_eval_steps={eval_steps(args)}"],
        folder / "eval.log")
    results = read_eval_results(folder / "eval_results.txt")
    return {"step": step, **{k: results[k] for k in METRICS}, "eval_s": seconds}


def read_eval_results(path: Path) -> dict:
    pairs = (line.split(" = ", 1) for line in path.read_text().splitlines() if " = " in line)
    return {key: float(value) for key, value in pairs}


def eval_steps(args) -> int:
    return max(1, args.eval_examples // args.eval_batch_size)


# ---------------------------------------------------------------- baselines

def masked_token_counts(files: list[str], examples: int | None = None):
    """Weighted counts of the masked-LM targets of the first `examples` records of `files`."""
    import numpy as np

    from bert_tf2.process import environment
    environment.configure()  # before Keras and TensorFlow
    from bert_tf2.data_gen.pretraining.dataset import load_records

    records = load_records(files, SEQ_LENGTH, MAX_PREDICTIONS)
    ids = records["masked_lm_ids"][:examples].ravel()
    weights = records["masked_lm_weights"][:examples].ravel()
    labels = records["next_sentence_labels"][:examples]
    return np.bincount(ids, weights=weights, minlength=TINY_CONFIG["vocab_size"]), labels


def baselines(eval_file: str, examples: int, train_files: list[str], vocab_file: str) -> dict:
    """What guessing scores on the first `examples` eval records (the ones evaluated).

    Two frequency guesses: the eval records' own (the issue's "always the most frequent token",
    and the entropy of their masked-token distribution, an in-sample bound that no model without
    the answers can be sure to beat on few records), and the training records' (their most
    frequent masked token, and the cross-entropy of their add-one unigram on the eval targets)."""
    import numpy as np

    from bert_tf2.data_gen.tokenization import load_vocab

    counts, labels = masked_token_counts([eval_file], examples)
    train_counts, _ = masked_token_counts(train_files)
    total = counts.sum()
    frequencies = counts[counts > 0] / total
    train_unigram = (train_counts + 1) / (train_counts.sum() + len(train_counts))
    words = {i: w for w, i in load_vocab(vocab_file).items()}
    top = np.argsort(counts)[::-1][:8]
    rate = float(labels.mean())
    return {
        "eval_examples": int(len(labels)),
        "masked_tokens": float(total),
        "most_frequent_tokens": [[words[int(i)], float(counts[i] / total)] for i in top],
        "masked_lm_accuracy": float(counts.max() / total),
        "masked_lm_loss_unigram": float(-(frequencies * np.log(frequencies)).sum()),
        "masked_lm_loss_uniform": math.log(len(train_counts)),
        "train_most_frequent_token": words[int(train_counts.argmax())],
        "masked_lm_accuracy_train_top": float(counts[train_counts.argmax()] / total),
        "masked_lm_loss_train_unigram": float(-(counts * np.log(train_unigram)).sum() / total),
        "next_sentence_random_fraction": rate,
        "next_sentence_accuracy": max(rate, 1 - rate),
        "next_sentence_loss": float(-(rate * math.log(rate) + (1 - rate) * math.log(1 - rate))),
    }


# ---------------------------------------------------------------- report

def table(rows: list[dict], base: dict) -> str:
    lines = ["| step | MLM acc | MLM loss | NSP acc | NSP loss |", "|---|---|---|---|---|"]
    lines += [f"| {r['step']} | {r['masked_lm_accuracy']:.4f} | {r['masked_lm_loss']:.3f} | "
              f"{r['next_sentence_accuracy']:.4f} | {r['next_sentence_loss']:.4f} |" for r in rows]
    word = base["most_frequent_tokens"][0][0]
    lines.append(f"| guess from the eval records: always '{word}'; their unigram entropy; majority "
                 f"label; its entropy | {base['masked_lm_accuracy']:.4f} | "
                 f"{base['masked_lm_loss_unigram']:.3f} | {base['next_sentence_accuracy']:.4f} | "
                 f"{base['next_sentence_loss']:.4f} |")
    if "masked_lm_loss_train_unigram" in base:
        lines.append(f"| guess from the training records: always "
                     f"'{base['train_most_frequent_token']}'; their unigram | "
                     f"{base['masked_lm_accuracy_train_top']:.4f} | "
                     f"{base['masked_lm_loss_train_unigram']:.3f} | | |")
    return "\n".join(lines)


def plot(rows: list[dict], base: dict, path: str) -> bool:
    """A PNG of the two accuracies and the baselines, if matplotlib is importable."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not importable here: no plot (the table and JSON have the figures)")
        return False
    steps = [r["step"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    word = base["most_frequent_tokens"][0][0]
    for ax, metric, title, guess in (
            (axes[0], "masked_lm_accuracy", "masked LM accuracy", f"always '{word}'"),
            (axes[1], "next_sentence_accuracy", "next sentence accuracy", "majority label")):
        ax.plot(steps, [r[metric] for r in rows], marker="o", label="BERT-Tiny (held out)")
        ax.axhline(base[metric], color="grey", linestyle="--", label=guess)
        ax.set_xlabel("training step")
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


# ---------------------------------------------------------------- main

def fresh_dir(path: Path) -> Path:
    """`path` emptied (it must be outside the repository: this deletes it)."""
    if _records.REPO in path.resolve().parents or path.resolve() == _records.REPO:
        raise ValueError(f"--output_dir {path} is inside the repository")
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train_batch_size", type=int, default=8)
    parser.add_argument("--num_train_steps", type=int, default=3000)
    parser.add_argument("--num_warmup_steps", type=int, default=300)
    parser.add_argument("--learning_rate", type=float, default=5e-4)
    parser.add_argument("--eval_every", type=int, default=300, help="steps between checkpoints "
                        "(each one evaluated)")
    parser.add_argument("--eval_examples", type=int, default=1024,
                        help="evaluate on the first this many held-out records")
    parser.add_argument("--eval_batch_size", type=int, default=64)
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--jit_compile", action="store_true")
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--output_dir", default=str(_records.WORKDIR / "curve"),
                        help="checkpoints and logs (emptied first; not in the repository)")
    parser.add_argument("--json_out", default="", help="also write the results here")
    parser.add_argument("--plot", default="", help="also draw a PNG here (needs matplotlib)")
    parser.add_argument("--from_json", default="", help="train nothing: print the table (and "
                        "--plot) of an earlier --json_out; needs neither TensorFlow nor records, "
                        "so any interpreter with matplotlib can draw the plot")
    return parser.parse_args()


def headline(report: dict) -> str:
    run, base = report["args"], report["baselines"]
    return (f"BERT-Tiny from scratch: {run['num_train_steps']} steps x batch "
            f"{run['train_batch_size']}, lr {run['learning_rate']:g}; trained in "
            f"{report['train_s'] / 60:.1f} min ({report['examples_per_s']:.1f} examples/s), all in "
            f"{report['total_s'] / 60:.1f} min; eval on the first {base['eval_examples']} "
            f"held-out records (WikiText-2 test)")


def report_and_plot(report: dict, args) -> None:
    print(headline(report))
    print(table(report["curve"], report["baselines"]))
    if args.plot and plot(report["curve"], report["baselines"], args.plot):
        log(f"plot: {args.plot}")


def main() -> None:
    args = parse_args()
    if args.from_json:
        report_and_plot(json.loads(Path(args.from_json).read_text()), args)
        return
    start = time.time()
    train_spec, eval_spec = record_specs(args.dupe_factor)
    train_records = _records.make_records(train_spec, log=log)
    eval_records = _records.make_records(eval_spec, log=log)
    eval_file = eval_records["files"][0]
    vocab_file = _records.default_vocab()
    base = baselines(eval_file, eval_steps(args) * args.eval_batch_size, train_records["files"],
                     vocab_file)

    out = fresh_dir(Path(args.output_dir))
    config = out / "bert_config.json"
    config.write_text(json.dumps(TINY_CONFIG, indent=2))
    epochs = args.num_train_steps * args.train_batch_size / train_records["instances"]
    log(f"training BERT-Tiny: {args.num_train_steps} steps of batch {args.train_batch_size} on "
        f"{train_records['instances']} records ({epochs:.2f} epochs)")
    train_s = train(args, train_records["files"], config, out)
    rows = []
    for step, prefix in checkpoints(out):
        rows.append(evaluate(prefix, step, eval_file, config, out, args))
        log(f"  eval at step {step}: " + ", ".join(f"{k} {rows[-1][k]:.4f}" for k in METRICS))

    report = {"config": TINY_CONFIG, "args": vars(args),
              "train_records": {k: train_records[k] for k in ("files", "instances")},
              "eval_records": {k: eval_records[k] for k in ("files", "instances")},
              "train_s": train_s, "total_s": time.time() - start,
              "examples_per_s": args.num_train_steps * args.train_batch_size / train_s,
              "load_average_after": os.getloadavg(), "baselines": base, "curve": rows}
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    report_and_plot(report, args)


if __name__ == "__main__":
    main()
