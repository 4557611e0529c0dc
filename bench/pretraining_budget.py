"""Pretraining on a budget: the original recipe, the budget recipe and transformers at equal wall
time on this CPU, then each model fine-tuned on MRPC and SST-2 the same way.

Why: issue 63 asks whether `--recipe=budget` buys a better BERT than the original recipe and than
transformers in the same time, by more than the spread over seeds.

What, with the project's own command lines (everything under `--work_dir`, never in the checkout):
1. text: the NLTK Gutenberg books with Tiny Shakespeare (`prose`) and WikiText-2 test
   (`wikitext`) to train on; held out, so that no model trains on it: WikiText-2 valid and two
   of the books (`HELD_OUT_BOOKS`), both kinds of text the models train on;
2. a WordPiece vocabulary of `--vocab_size` learned from the training text (`data_gen.learn_vocab`);
3. records (`create_pretraining_data`, sequence 128, 4 shards), each set made in one command
   from one JSON-lines file of its documents in a seeded random order, so that every pool and
   shard mixes books and articles (the original's input function opens at most 4 files at a time,
   and from one file per source it can read one source alone for thousands of steps):
   - the original's: masked LM + next sentence, static masks (15%, 20 slots), `--dupe_factor=5`;
   - the budget recipe's: `--pack_sentences`, 40 slots for its 30% masks, `--dupe_factor=1`;
   - held out: `--pack_sentences` with static 15% masks: every model is scored on the same
     masks, by the same code (`run_pretraining.py --do_eval --no_nsp`);
4. per seed, a BERT-Mini (4 layers, hidden 256, 4 heads, intermediate 1024) trained for
   `--budget_minutes` of wall time by each side, batch 32:
   - original: `run_pretraining.py --train_budget_minutes` with the original's choices: NSP,
     static masks, dropout 0.1, peak 1e-4 (the original's pretraining rate), warm-up over a tenth
     then linear decay;
   - budget: `run_pretraining.py --recipe=budget` (NSP off, 30% dynamic masks, no dropout, peak
     3e-4 on Cramming's triangle); it keeps a checkpoint every `--curve_every` steps, each scored
     on the held-out masks, so the bench can say when it passed the original's final score (the
     checkpoints' writes count against its budget: the comparison handicaps it, not the others);
   - ablations, where `--sides` names them (`ABLATIONS`): the budget recipe with one choice
     turned back to the original's (15% masks, dropout 0.1, a tenth of warm-up from 0, static
     masks, float32 where the recipe computes in bfloat16), or with Cramming's batch-size ramp added (32 rows per update at first, 128 from 60%
     of the budget);
   - architecture sides (`ARCHITECTURES`): the budget recipe on a BERT-Mini with Cramming's
     pre-LayerNorm, no biases or gated GELU (at 2/3 of the width: the same weights), each alone,
     or all three (`crammed`); each side's own bert_config.json goes with its checkpoint; the
     `_peak1e-3` sides take Cramming's peak learning rate too;
   - transformers: `bench/_hf_pretrain.py` in the peer's environment (bench/.venv-pytorch, made on
     first use as bench/finetune_vs_pytorch.py makes it): `BertForMaskedLM` with
     `DataCollatorForLanguageModeling` (15%) and its `Trainer`, on the budget recipe's own rows,
     peak 3e-4 with a tenth of warm-up (the budget recipe's peak: transformers' 5e-5 default would
     hardly move in minutes), dropout 0.1, bfloat16 autocast where the CPU has AMX (where the
     budget recipe computes in bfloat16 too);
5. each model fine-tuned by `run_classifier.py` with one recipe: MRPC 3 epochs at 128, SST-2 600
   steps at 64, batch 32, learning rate 1e-4; the dev score of each. The `untrained` side, where
   `--sides` names it, is the baseline of no pretraining: the same BERT-Mini fine-tuned from its
   random initialisation (no held-out score: it has none to give).

    python bench/pretraining_budget.py                              # 3 seeds x 5 minutes
    python bench/pretraining_budget.py --budget_minutes 1 --seeds 1 # a smoke run, about 8 minutes
    python bench/pretraining_budget.py --seeds 1 --tasks '' \
        --sides budget,mask15,dropout,schedule,static,ramp          # the ablation rows
    python bench/pretraining_budget.py --seeds 1 --tasks '' \
        --sides budget,pre_ln,no_bias,gated,crammed                 # the architecture rows
    python bench/pretraining_budget.py --sides untrained            # fine-tuning alone

Writes bench/results/pretraining_budget.json and prints a Markdown table (mean and min..max over
the seeds).
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # import from the checkout, not from bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from bench import _records  # noqa: E402
from bench.finetune_vs_pytorch import peer_python, timed  # noqa: E402
from bert_tf2.engine.distribution import cpu_computes_bfloat16  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
GLUE = _records.DATA_DIR / "glue"
LENGTH, BATCH = 128, 32
MINI = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
        "intermediate_size": 1024, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "max_position_embeddings": LENGTH,
        "type_vocab_size": 2, "initializer_range": 0.02}
SIDES = ("original", "budget", "transformers")
UNTRAINED = "untrained"  # no pretraining: what fine-tuning alone gives the same model
# Ablations (`--sides budget,mask15,...`): the budget recipe with one choice turned back to the
# original's (or, for `ramp`, one choice added), on the same packed records.
ABLATIONS = {
    "mask15": ["--masked_lm_prob=0.15"],
    "dropout": ["--hidden_dropout_prob=0.1", "--attention_probs_dropout_prob=0.1"],
    "schedule": ["--warmup_proportion=0.1", "--warmup_start_fraction=0"],  # the original's shape
    "static": ["--dynamic_masking=false"],  # the records' own 30% masks, the same every epoch
    # Cramming's ramp: from one micro-batch of 32 (the other sides' batch) to 4 of them (128)
    # at 60% of the budget.
    "ramp": [f"--train_batch_size={4 * BATCH}", "--num_accumulation_steps=4",
             "--batch_size_ramp=0.6"],
    # float32 compute where the recipe picks bfloat16 (a CPU with AMX, on TensorFlow)
    "float32": ["--dtype=float32"],
}
# Architecture sides: the budget recipe on a BERT-Mini with Cramming's changes (`BertConfig`),
# each on its own and all three. The gated feed-forward's width is 2/3 of 1024, so that its
# three matrices hold about the weights and products of BERT's two.
ARCHITECTURES = {
    "pre_ln": {"layer_norm_position": "pre"},
    "no_bias": {"use_bias": False},
    "gated": {"gated_feed_forward": True, "intermediate_size": 682},
    "crammed": {"layer_norm_position": "pre", "use_bias": False, "gated_feed_forward": True,
                "intermediate_size": 682},
}
# Pre-LayerNorm's promise is stability at a higher peak (Cramming's 1e-3): these sides take it.
for _side in ("pre_ln", "crammed"):
    ARCHITECTURES[f"{_side}_peak1e-3"] = ARCHITECTURES[_side]
    ABLATIONS[f"{_side}_peak1e-3"] = ["--learning_rate=1e-3"]
FINETUNE = {"MRPC": ["--max_seq_length=128", "--num_train_epochs=3"],
            "SST-2": ["--max_seq_length=64", "--num_train_steps=600"]}
DEV_METRIC = {"MRPC": "eval_f1", "SST-2": "eval_accuracy"}
HELD_OUT_BOOKS = ("chesterton-thursday.txt", "shakespeare-macbeth.txt")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def python(*args, log_file: str) -> str:
    return timed([sys.executable, *args], log_file)[1]


def make_data(work: Path, vocab_size: int, logs: str) -> dict:
    """The vocabulary and the three record sets (reused when complete)."""
    done = work / "data.json"
    if done.exists():
        return json.loads(done.read_text())
    every_book = _records.prose()
    books = [f for f in every_book.files if Path(f).name not in HELD_OUT_BOOKS]
    prose = dataclasses.replace(every_book, files=tuple(books))
    held_books = dataclasses.replace(every_book, name="held-out-books", files=tuple(
        f for f in every_book.files if Path(f).name in HELD_OUT_BOOKS))
    wiki_train, held_wiki = _records.wikitext("test"), _records.wikitext("valid")
    vocab = work / "vocab.txt"
    python("-m", "bert_tf2.data_gen.learn_vocab",
           f"--input_file={','.join(prose.files + wiki_train.files)}", "--skip_invalid_utf8",
           f"--vocab_size={vocab_size}", "--num_unused_tokens=99", f"--output_file={vocab}",
           log_file=f"{logs}/vocab.log")
    corpora = {"train": write_corpus(work / "train.jsonl", [prose, wiki_train]),
               "held_out": write_corpus(work / "held_out.jsonl", [held_wiki, held_books])}
    sets = {"original": ("train", ["--max_predictions_per_seq=20", "--dupe_factor=5"]),
            "packed": ("train", ["--pack_sentences", "--masked_lm_prob=0.3",
                                 "--max_predictions_per_seq=40", "--dupe_factor=1"]),
            "held_out": ("held_out", ["--pack_sentences", "--max_predictions_per_seq=20",
                                      "--dupe_factor=1"])}
    data = {"vocab": str(vocab), "records": {}}
    for name, (corpus, flags) in sets.items():
        files = [str(work / f"{name}-{i}.tfrecord") for i in range(4)]
        python("-m", "bert_tf2.data_gen.pretraining.create_pretraining_data",
               f"--input_file={corpora[corpus]}", f"--output_file={','.join(files)}",
               f"--vocab_file={vocab}", "--input_format=jsonl", f"--max_seq_length={LENGTH}",
               *flags, log_file=f"{logs}/records-{name}.log")
        data["records"][name] = files
        data[f"{name}_rows"] = json.loads(Path(files[0] + ".stats.json").read_text())[
            "instances"]
    data["peer_file"] = str(peer_rows(data["records"]["packed"], work))
    with open(vocab, encoding="utf-8") as f:
        data["vocab_size"] = sum(1 for _ in f)
    done.write_text(json.dumps(data, indent=1))
    return data


def write_corpus(path: Path, sources: list) -> str:
    """The documents of `sources` (as the data tools read them) as JSON lines, in a seeded
    random order; one sentence per line of each document's text."""
    import random

    from bert_tf2.data_gen.pretraining.documents import InputOptions, stream_documents

    documents = [{"text": "\n".join(document.sentences)} for source in sources
                 for document in stream_documents(list(source.files),
                                                  InputOptions(source.input_format, True))]
    random.Random(12345).shuffle(documents)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(document) + "\n" for document in documents)
    return str(path)


def peer_rows(files: list, work: Path) -> Path:
    """The budget recipe's packed rows, unmasked, as NumPy arrays for the transformers side."""
    import numpy as np

    from bert_tf2.data_gen.pretraining.dataset import load_records

    features = load_records(files, LENGTH, 40)
    ids = features["input_ids"].copy()
    rows, slots = np.nonzero(features["masked_lm_weights"] > 0)
    ids[rows, features["masked_lm_positions"][rows, slots]] = features["masked_lm_ids"][rows,
                                                                                          slots]
    path = work / "peer_rows.npz"
    np.savez(path, ids=ids.astype(np.int64), mask=features["input_mask"].astype(np.int8))
    return path


def side_config(work: Path, side: str) -> Path:
    """The side's bert_config.json: the BERT-Mini's, with an architecture side's changes."""
    if side not in ARCHITECTURES:
        return work / "bert_config.json"
    path = work / f"bert_config-{side}.json"
    path.write_text(json.dumps({**json.loads((work / "bert_config.json").read_text()),
                                **ARCHITECTURES[side]}, indent=1))
    return path


def evaluate(data: dict, checkpoint: str, work: Path, logs: str, name: str,
             config: Path) -> dict:
    """Held-out masked-LM scores of a checkpoint (any format the runners load)."""
    out = work / f"eval-{name}"
    shutil.rmtree(out, ignore_errors=True)
    python("run_pretraining.py", f"--input_file={','.join(data['records']['held_out'])}",
           f"--output_dir={out}", f"--init_checkpoint={checkpoint}",
           f"--bert_config_file={config}", "--do_eval", "--no_nsp",
           f"--max_seq_length={LENGTH}", "--max_predictions_per_seq=20", "--eval_batch_size=64",
           "--max_eval_steps=100000", log_file=f"{logs}/eval-{name}.log")
    results = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text()
                   .splitlines())
    return {k: float(results[k]) for k in ("masked_lm_accuracy", "masked_lm_loss")}


def pretrain(side: str, seed: int, data: dict, args, work: Path, logs: str) -> dict:
    if side == UNTRAINED:
        return {"side": side, "seed": seed, "wall": 0.0, "steps": 0, "checkpoint": None,
                "held_out": None}
    out = work / f"{side}-{seed}"
    shutil.rmtree(out, ignore_errors=True)
    config = side_config(work, side)
    common = [f"--output_dir={out}", f"--bert_config_file={config}",
              f"--vocab_file={data['vocab']}", f"--max_seq_length={LENGTH}",
              f"--train_batch_size={BATCH}", f"--random_seed={seed}", "--do_train",
              f"--train_budget_minutes={args.budget_minutes}", "--num_train_steps=10000000",
              "--keep_checkpoint_max=1000"]
    if side == "original":
        flags = [f"--input_file={','.join(data['records']['original'])}",
                 "--max_predictions_per_seq=20", "--learning_rate=1e-4",
                 "--save_checkpoints_steps=10000000"]
    elif side == "budget" or side in ABLATIONS or side in ARCHITECTURES:
        flags = [f"--input_file={','.join(data['records']['packed'])}", "--recipe=budget",
                 "--max_predictions_per_seq=40", f"--save_checkpoints_steps={args.curve_every}",
                 *ABLATIONS.get(side, [])]
    if side != "transformers":
        wall, output = timed([sys.executable, "run_pretraining.py", *common, *flags],
                             f"{logs}/pretrain-{side}-{seed}.log")
        steps = int(json.loads((out / "time_budget.json").read_text()).popitem()[0])
        row = {"wall": wall, "steps": steps, "checkpoint": str(out / "tf1")}
    else:
        wall, output = timed([peer_python(), "bench/_hf_pretrain.py",
                              f"--rows={data['peer_file']}", f"--vocab_file={data['vocab']}",
                              f"--bert_config_file={config}", f"--output_dir={out}",
                              f"--budget_seconds={60 * args.budget_minutes}", f"--seed={seed}",
                              f"--train_batch_size={BATCH}",
                              *(["--bf16"] if cpu_computes_bfloat16() else [])],
                             f"{logs}/pretrain-{side}-{seed}.log")
        result = json.loads([line for line in output.splitlines() if line.startswith("{")][-1])
        row = {"wall": wall, "steps": result["steps"], "checkpoint": str(out),
               "peer": result}
    row.update(side=side, seed=seed, held_out=evaluate(data, row["checkpoint"], work, logs,
                                                         f"{side}-{seed}", config))
    if side == "budget":  # the held-out curve: each checkpoint's score at its time spent
        spent = {step: figure["seconds"] if isinstance(figure, dict) else figure
                 for step, figure in json.loads((out / "time_budget.json").read_text()).items()}
        row["curve"] = [{"step": int(step), "seconds": seconds,
                         **evaluate(data, str(out / f"model.ckpt-{step}"), work, logs,
                                    f"{side}-{seed}-{step}", config)}
                        for step, seconds in sorted(spent.items(), key=lambda kv: int(kv[0]))]
    return row


def finetune(row: dict, task: str, data: dict, work: Path, logs: str) -> float:
    out = work / f"finetune-{row['side']}-{row['seed']}-{task}"
    shutil.rmtree(out, ignore_errors=True)
    python("run_classifier.py", f"--task_name={task}", f"--data_dir={GLUE / task}",
           f"--output_dir={out}", f"--vocab_file={data['vocab']}",
           f"--init_checkpoint={row['checkpoint']}" if row["checkpoint"] else
           f"--bert_config_file={work / 'bert_config.json'}", "--do_train", "--do_eval",
           f"--train_batch_size={BATCH}", "--learning_rate=1e-4", f"--random_seed={row['seed']}",
           *FINETUNE[task], log_file=f"{logs}/finetune-{row['side']}-"
                                                      f"{row['seed']}-{task}.log")
    results = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text()
                   .splitlines())
    return float(results[DEV_METRIC[task]])


def spread(values: list) -> str:
    if None in values:  # the untrained side's held-out scores
        return "-"
    return (f"{statistics.mean(values):.4f} ({min(values):.4f}..{max(values):.4f})"
            if len(values) > 1 else f"{values[0]:.4f}")


def table(rows: list, tasks: list) -> str:
    lines = ["| side | steps | held-out MLM accuracy | held-out MLM loss |"
             + "".join(f" {t} dev {DEV_METRIC[t][5:]} |" for t in tasks),
             "|---" * (4 + len(tasks)) + "|"]
    for side in dict.fromkeys(r["side"] for r in rows):
        mine = [r for r in rows if r["side"] == side]
        if not mine:
            continue
        lines.append(f"| {side} | {spread([r['steps'] for r in mine])} | "
                     f"{spread([(r['held_out'] or {}).get('masked_lm_accuracy') for r in mine])} | "
                     f"{spread([(r['held_out'] or {}).get('masked_lm_loss') for r in mine])} |"
                     + "".join(f" {spread([r['dev'][t] for r in mine])} |" for t in tasks))
    return "\n".join(lines)


def time_to_match(rows: list) -> list:
    """Per seed: the budget recipe's first time spent (s) at which its held-out accuracy reached
    the original recipe's final one (None: not within the budget)."""
    matched = []
    for budget in (r for r in rows if r["side"] == "budget"):
        target = next((r["held_out"]["masked_lm_accuracy"] for r in rows
                       if r["side"] == "original" and r["seed"] == budget["seed"]), None)
        if target is None:
            continue
        hit = next((p["seconds"] for p in budget["curve"]
                    if p["masked_lm_accuracy"] >= target), None)
        matched.append({"seed": budget["seed"], "original_accuracy": target, "seconds": hit})
    return matched


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget_minutes", type=float, default=5.0)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--tasks", default="MRPC,SST-2", help="'' to skip fine-tuning")
    parser.add_argument("--vocab_size", type=int, default=8192)
    parser.add_argument("--curve_every", type=int, default=200,
                        help="budget recipe: a checkpoint (held-out point) every this many steps")
    parser.add_argument("--work_dir", default="/tmp/bert-bench-budget")
    parser.add_argument("--json_out", default=str(REPO / "bench" / "results" /
                                                  "pretraining_budget.json"))
    args = parser.parse_args()
    work = Path(args.work_dir)
    logs = str(work / "logs")
    work.mkdir(parents=True, exist_ok=True)
    start = time.time()
    data = make_data(work, args.vocab_size, logs)
    (work / "bert_config.json").write_text(json.dumps({"vocab_size": data["vocab_size"],
                                                       **MINI}, indent=1))
    log(f"data: {json.dumps({k: v for k, v in data.items() if k.endswith('_rows')})}")
    tasks = [t for t in args.tasks.split(",") if t]
    rows = []
    sides = args.sides.split(",")
    known = SIDES + tuple(dict.fromkeys((*ABLATIONS, *ARCHITECTURES))) + (UNTRAINED,)
    unknown = [side for side in sides if side not in known]
    if unknown:
        parser.error(f"--sides: {', '.join(unknown)} unknown; sides are {', '.join(known)}")
    for seed in range(1, args.seeds + 1):
        order = sides if seed % 2 else sides[::-1]  # alternate who runs first
        for side in order:
            row = pretrain(side, seed, data, args, work, logs)
            row["dev"] = {task: finetune(row, task, data, work, logs) for task in tasks}
            log(f"seed {seed} {side}: {row['steps']} steps, held-out "
                f"{row['held_out']}, dev {row['dev']}")
            rows.append(row)
    result = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "budget_minutes": args.budget_minutes, "seeds": args.seeds, "data": data,
              "model": MINI, "rows": rows, "time_to_match": time_to_match(rows),
              "bench_seconds": time.time() - start}
    Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json_out).write_text(json.dumps(result, indent=1))
    print(table(rows, tasks))
    print(f"\nbudget recipe reaching the original's final held-out accuracy: "
          f"{json.dumps(result['time_to_match'])}")
    print(f"bench: {result['bench_seconds'] / 60:.1f} minutes")


if __name__ == "__main__":
    main()
