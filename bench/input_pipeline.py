"""The JAX input against tf.data on the same records, side by side in one run, over several rounds.

What it shows, in sequences per second out of each input pipeline (each measured in its own fresh
process, the sides alternating within every round; medians over `--rounds`):
- `pretraining, static masks`: batches of `--batch_size` x 128 (20 predictions) from records that
  `create_pretraining_data` made of the shared corpus's Gutenberg books and Tiny Shakespeare
  (7 MB of text, 4 shards), training order (interleave and shuffle buffer): `data_gen.pretraining.dataset.pretraining_dataset` (tf.data) against
  `numpy_dataset.pretraining_batches` (what run_pretraining.py reads on JAX);
- `pretraining, --dynamic_masking`: the same, every batch masked afresh (`with_dynamic_masking`
  against the compiled NumPy twin);
- `fine-tuning features`: SST-2 train (67,349 sentences) converted once to the classification
  task's feature file at sequence 128; each side loads it (`read_records`: tf.data, or the
  compiled parser) and batches it for training, 32 a batch, shuffled and bucketed by length
  (`in_memory_dataset` against `in_memory_batches`); the load is reported as records/s beside it.
Then the share of a JAX training step spent waiting on input: run_pretraining.py on JAX (a
2-layer BERT of width 128, so that the step is short and the input has the least time to hide
in), with `--dynamic_masking`, reading the same records from disk; the "input wait" every loop
logs, its median over the loops after the first (which compiles).

    python bench/input_pipeline.py                  # 3 rounds, 300 batches a measurement
    python bench/input_pipeline.py --rounds 5 --batches 500

The records and the feature file are made once under /tmp/bert-bench-input (never in the
repository) and reused. Writes bench/results/input_pipeline.json (every round's figures).
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # import from the checkout, not from bench/
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
WORKDIR = Path(os.environ.get("BERT_BENCH_INPUT_DIR", "/tmp/bert-bench-input"))
DATA_DIR = Path(os.environ.get("BERT_DATA_DIR", REPO.parent / "shared" / "data"))
CASES = ("pretraining-static", "pretraining-dynamic", "finetuning")
LABELS = {"pretraining-static": "pretraining, static masks",
          "pretraining-dynamic": "pretraining, --dynamic_masking",
          "finetuning": "fine-tuning features (SST-2)"}
SIDES = ("tf.data", "jax")
MASKING = {"vocab_size": 30522, "mask_id": 103, "cls_id": 101, "sep_id": 102}
TINY = {"vocab_size": 30522, "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 512, "max_position_embeddings": 512, "type_vocab_size": 2}


def pretraining_records(log=print) -> list:
    from _records import RecordSpec, make_records, prose

    spec = RecordSpec(sources=(prose(),), shards_per_source=4)
    return make_records(spec, log)["files"]


def finetuning_features(log=print) -> str:
    """SST-2 train as the classification task's feature file (sequence 128), made once."""
    from _records import default_vocab

    path = WORKDIR / "sst2-train-128.tf_record"
    if path.exists():
        return str(path)
    from bert_tf2.data_gen import records, tokenization
    from bert_tf2.tasks.classification.features import example_records
    from bert_tf2.tasks.classification.reader import Sst2Processor

    log(f"converting SST-2 train into {path} ...")
    WORKDIR.mkdir(parents=True, exist_ok=True)
    processor = Sst2Processor()
    examples = processor.get_train_examples(str(DATA_DIR / "glue" / "SST-2"))
    tokenizer = tokenization.FullTokenizer(default_vocab(), do_lower_case=True)
    with records.ShardedRecordWriter([str(path)]) as writer:
        for record in example_records(examples, processor.get_labels(), 128, tokenizer):
            writer.write(record)
    return str(path)


# ------------------------------------------------------------------------ one measurement
def _time(batches, count: int) -> float:
    """Sequences a second over `count` batches (after 5 to warm up)."""
    iterator = iter(batches)
    for _ in range(5):
        next(iterator)
    rows = 0
    start = time.perf_counter()
    for _ in range(count):
        rows += len(next(iter(next(iterator).values())))
    return rows / (time.perf_counter() - start)


def measure(side: str, case: str, files: list, features: str, batch_size: int,
            count: int) -> dict:
    """In a fresh process: KERAS_BACKEND is tensorflow for tf.data, jax for ours."""
    if case.startswith("pretraining"):
        masking = MASKING if case == "pretraining-dynamic" else None
        if side == "jax":
            from bert_tf2.data_gen.pretraining.numpy_dataset import pretraining_batches

            batches = pretraining_batches(files, batch_size, 128, 20, True, seed=0,
                                          masking=masking)
        else:
            from bert_tf2.data_gen.pretraining.dataset import pretraining_dataset
            from bert_tf2.data_gen.pretraining.dynamic_masking import with_dynamic_masking

            dataset = pretraining_dataset(files, batch_size, 128, 20, True, seed=0)
            if masking:
                dataset = with_dynamic_masking(dataset, 0, **masking)
            batches = dataset.as_numpy_iterator()
        return {"sequences_per_s": _time(batches, count)}
    from bert_tf2.tasks.classification.features import load_features

    start = time.perf_counter()
    loaded = load_features(features, 128, regression=False)
    load_s = time.perf_counter() - start
    rows = len(loaded["input_ids"])
    if side == "jax":
        from bert_tf2.data_gen.numpy_datasets import in_memory_batches

        batches = in_memory_batches(loaded, batch_size, True, seed=0)
    else:
        from bert_tf2.data_gen.datasets import in_memory_dataset

        batches = in_memory_dataset(loaded, batch_size, True, seed=0).as_numpy_iterator()
    return {"sequences_per_s": _time(batches, count), "load_records_per_s": rows / load_s,
            "records": rows}


def run_child(side: str, case: str, files: list, features: str, batch_size: int,
              count: int) -> dict:
    env = {**os.environ, "KERAS_BACKEND": "jax" if side == "jax" else "tensorflow",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    spec = json.dumps([side, case, files, features, batch_size, count])
    result = subprocess.run([sys.executable, __file__, "--_child", spec], capture_output=True,
                            text=True, env=env, cwd=REPO)
    if result.returncode:
        raise RuntimeError(f"{side} {case} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------ input-wait share
def wait_share(files: list, steps: int, batch_size: int) -> dict:
    """run_pretraining.py on JAX, reading the records from disk: the logged input-wait share of
    every loop after the first."""
    from _records import default_vocab

    with tempfile.TemporaryDirectory(prefix="input-wait-") as folder:
        config = Path(folder) / "bert_config.json"
        config.write_text(json.dumps(TINY))
        command = [sys.executable, str(REPO / "run_pretraining.py"),
                   f"--input_file={','.join(files)}", f"--output_dir={folder}/run",
                   f"--bert_config_file={config}", "--max_seq_length=128",
                   "--max_predictions_per_seq=20", f"--train_batch_size={batch_size}",
                   "--learning_rate=1e-4", f"--num_train_steps={steps}",
                   "--num_warmup_steps=2", "--steps_per_loop=10",
                   f"--save_checkpoints_steps={steps}", "--dynamic_masking",
                   f"--vocab_file={default_vocab()}", "--do_train"]
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, cwd=REPO,
                                env={**os.environ, "KERAS_BACKEND": "jax"})
        elapsed = time.perf_counter() - start
    if result.returncode:
        raise RuntimeError(f"run_pretraining.py on JAX failed:\n{result.stderr[-3000:]}")
    shares = [float(m) for m in re.findall(r"input wait ([0-9.]+)%", result.stderr)]
    speeds = [float(m) for m in re.findall(r"([0-9.]+) examples/s", result.stderr)]
    if len(shares) < 2:
        raise RuntimeError(f"no input-wait lines in the run's log:\n{result.stderr[-2000:]}")
    return {"loops": shares, "median_after_first": statistics.median(shares[1:]),
            "examples_per_s": statistics.median(speeds[1:]), "wall_s": elapsed,
            "steps": steps, "batch_size": batch_size}


# ------------------------------------------------------------------------ the table
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=300, help="batches a measurement")
    parser.add_argument("--batch_size", type=int, default=256, help="pretraining batch")
    parser.add_argument("--finetune_batch_size", type=int, default=32)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--train_steps", type=int, default=60,
                        help="steps of the input-wait run (0: skip it)")
    parser.add_argument("--_child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child:
        side, case, files, features, batch_size, count = json.loads(args._child)
        print(json.dumps(measure(side, case, files, features, batch_size, count)))
        return
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown or args.rounds < 1 or args.batches < 1:
        sys.exit(f"input_pipeline.py: --cases from {', '.join(CASES)}; --rounds and --batches "
                 f"at least 1 (got {args.cases!r}, {args.rounds}, {args.batches})")
    from backends import cpu_kind

    files = pretraining_records()
    features = finetuning_features() if "finetuning" in cases else ""
    results = {"cpu": cpu_kind(), "rounds": [], "batches": args.batches,
               "batch_size": args.batch_size, "finetune_batch_size": args.finetune_batch_size,
               "workers": _workers()}
    for number in range(args.rounds):
        row = {}
        for case in cases:
            size = args.finetune_batch_size if case == "finetuning" else args.batch_size
            sides = SIDES if number % 2 == 0 else SIDES[::-1]
            row[case] = {side: run_child(side, case, files, features, size, args.batches)
                         for side in sides}
            print(f"round {number + 1}: {LABELS[case]:34s} "
                  + "  ".join(f"{s} {row[case][s]['sequences_per_s']:9,.0f}/s" for s in SIDES)
                  + f"  jax/tf.data {_ratio(row[case]):.2f}x", flush=True)
        results["rounds"].append(row)
    if args.train_steps:
        results["input_wait"] = wait_share(files, args.train_steps, 64)
    print(table(results, cases))
    RESULTS.mkdir(parents=True, exist_ok=True)
    target = RESULTS / "input_pipeline.json"
    partial = target.with_suffix(".json.tmp")
    partial.write_text(json.dumps(results, indent=2))
    partial.replace(target)


def _workers() -> int:
    from bert_tf2.data_gen.numpy_datasets import default_workers

    return default_workers()


def _ratio(sides: dict) -> float:
    return sides["jax"]["sequences_per_s"] / sides["tf.data"]["sequences_per_s"]


def table(results: dict, cases: list) -> str:
    lines = [f"\n{results['cpu']}; medians of {len(results['rounds'])} rounds, "
             f"{results['batches']} batches a measurement; JAX input with "
             f"{results['workers']} worker thread(s)\n",
             "| input | tf.data seq/s | JAX input seq/s | JAX / tf.data (each round) |",
             "|---|---|---|---|"]
    for case in cases:
        rounds = [r[case] for r in results["rounds"]]
        tf_rate = statistics.median(r["tf.data"]["sequences_per_s"] for r in rounds)
        jax_rate = statistics.median(r["jax"]["sequences_per_s"] for r in rounds)
        each = ", ".join(f"{_ratio(r):.2f}" for r in rounds)
        lines.append(f"| {LABELS[case]} | {tf_rate:,.0f} | {jax_rate:,.0f} | "
                     f"**{statistics.median(_ratio(r) for r in rounds):.2f}x** ({each}) |")
    if "finetuning" in cases:
        rounds = [r["finetuning"] for r in results["rounds"]]
        lines.append("\nLoading the feature file (records/s): tf.data "
                     f"{statistics.median(r['tf.data']['load_records_per_s'] for r in rounds):,.0f}"
                     f", compiled parser "
                     f"{statistics.median(r['jax']['load_records_per_s'] for r in rounds):,.0f}")
    wait = results.get("input_wait")
    if wait:
        lines.append(f"\nJAX run_pretraining.py (2 layers, width 128, batch {wait['batch_size']},"
                     f" --dynamic_masking, {wait['steps']} steps): input wait "
                     f"{wait['median_after_first']:.1f}% of step time (median of the loops after "
                     f"the first; every loop: {', '.join(f'{s:.1f}' for s in wait['loops'])}), "
                     f"{wait['examples_per_s']:,.0f} examples/s")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
