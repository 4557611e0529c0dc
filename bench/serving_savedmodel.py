"""What XLA compilation (`jit_compile`) and bfloat16 give the SavedModel that TF Serving users load.

    python bench/serving_savedmodel.py [--work_dir /tmp/bench-serving] [--requests 200]

The MRPC model of `bench/serving.py` (made there first; its `best/` weights) is exported four ways
as a pair classifier's SavedModel (`ClassifierServing`, raw text in, the graph tokenizer), each
written with `tf.saved_model.save` and loaded back as TF Serving would load it:
- `float32`: as `run_classifier.py --export_dir` writes it;
- `xla`: the same with the model run inside `tf.function(jit_compile=True)`;
- `bf16`: the model built under Keras' `mixed_bfloat16` policy (LayerNorm and softmax stay
  float32; the logits are cast back to float32);
- `bf16+xla`: both.

Each loaded `serve_text` answers `--requests` single MRPC sentences one at a time (the 7 to 70
WordPieces of real text, so XLA meets many shapes) and 10 batches of 32 pairs, after the same
requests once untimed (XLA compiles each new shape once: its count and time are reported apart);
then MRPC dev (408 pairs) for accuracy. Prints a table with the commit, date and CPU kind, and
writes --json_out.

TF Serving's `tensorflow_model_server` runs an XLA-compiled function only when started with
`--xla_cpu_compilation_enabled=true` (default false: "models utilizing this feature will return
bad Status on first compilation request"); a bfloat16 SavedModel needs no flag.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from backends import cpu_kind  # noqa: E402
from serving import commit, read_tsv  # noqa: E402

from bert_tf2.process.atomic_files import recover_directory, staged_directory, write_text  # noqa: E402

VARIANTS = ("float32", "xla", "bf16", "bf16+xla")


def compiled(model):
    """`model` called inside `tf.function(jit_compile=True)` (one XLA cluster per shape), in a
    `tf.Module` so that the SavedModel tracks its variables."""
    import tensorflow as tf

    class Compiled(tf.Module):
        def __init__(self):
            super().__init__()
            self.model = model
            self.call = tf.function(lambda inputs: model(inputs, training=False),
                                    jit_compile=True)

        def __call__(self, inputs, training=False):
            return self.call(inputs)

    return Compiled()


def export(variant: str, run_dir: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """`variant`'s SavedModel of the run's best weights in `out/variant` (made once)."""
    path = out / variant.replace("+", "_")
    recover_directory(path)  # what a killed export left beside it
    if (path / "saved_model.pb").exists():
        return path
    import keras
    import tensorflow as tf

    from bench.finetune_vs_pytorch import minilm_dir
    from bert_tf2.modeling.checkpoints import load_initial_weights, read_config
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertClassifier
    from bert_tf2.tasks.classification.serving import ClassifierServing

    keras.config.set_dtype_policy("mixed_bfloat16" if variant.startswith("bf16") else "float32")
    model = BertClassifier(BertEncoder(read_config(minilm_dir())), 2)
    load_initial_weights(model, str(run_dir / "best" / "model"))
    keras.config.set_dtype_policy("float32")
    served = compiled(model) if variant.endswith("xla") else model
    module = ClassifierServing(served, str(pathlib.Path(minilm_dir()) / "vocab.txt"), True, 128,
                              ["0", "1"], pair=True)
    with staged_directory(path) as staging:  # a killed export leaves no half of one behind
        tf.saved_model.save(module, staging, signatures=module.signatures())
    return path


def measure(path: pathlib.Path, singles: list, pairs: list, dev: list) -> dict:
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    signature = tf.saved_model.load(str(path)).signatures["serve_text"]

    def ask(a, b):
        return signature(text_a=tf.constant(a), text_b=tf.constant(b))

    start = time.perf_counter()  # every shape the timed requests meet, once (XLA compiles)
    for text in singles:
        ask([text], [""])
    for i in range(0, len(pairs), 32):
        ask([p[0] for p in pairs[i:i + 32]], [p[1] for p in pairs[i:i + 32]])
    first_pass = time.perf_counter() - start
    seconds = []
    for text in singles:
        start = time.perf_counter()
        ask([text], [""])
        seconds.append(time.perf_counter() - start)
    start = time.perf_counter()
    for i in range(0, len(pairs), 32):
        ask([p[0] for p in pairs[i:i + 32]], [p[1] for p in pairs[i:i + 32]])
    batch = time.perf_counter() - start
    predicted = []
    for i in range(0, len(dev), 32):
        rows = dev[i:i + 32]
        predicted += ask([r[3] for r in rows], [r[4] for r in rows])["label_id"].numpy().tolist()
    accuracy = float(np.mean([p == int(r[0]) for p, r in zip(predicted, dev)]))
    return {"single_p50_ms": float(np.percentile(seconds, 50) * 1e3),
            "single_p99_ms": float(np.percentile(seconds, 99) * 1e3),
            "pair_batch32_per_s": len(pairs) / batch, "first_pass_s": first_pass,
            "mrpc_dev_accuracy": accuracy, "predicted": predicted}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default="/tmp/bench-serving")
    parser.add_argument("--shared", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json_out", default=None)
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: no {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    if args.requests < 1:
        parser.error(f"--requests={args.requests}: time at least one request")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    work = pathlib.Path(args.work_dir)
    run_dir = work / "mrpc"
    if not (run_dir / "best").exists():
        raise SystemExit(f"{run_dir}/best: run `python bench/serving.py --work_dir={work}` first")
    shared = pathlib.Path(args.shared)
    train = read_tsv(shared / "glue" / "MRPC" / "train.tsv")[1:]
    dev = read_tsv(shared / "glue" / "MRPC" / "dev.tsv")[1:]
    singles = [r[3] for r in train[-args.requests:]]
    pairs = [(r[3], r[4]) for r in train[-args.requests - 320:-args.requests]]
    results = {}
    for variant in variants:
        path = export(variant, run_dir, work / "savedmodel-variants")
        results[variant] = measure(path, singles, pairs, dev)
        print(variant, {k: v for k, v in results[variant].items() if k != "predicted"},
              flush=True)
    base = results.get("float32")
    print(f"\ncommit {commit()}, {time.strftime('%Y-%m-%d')}, {cpu_kind()}; "
          f"{args.requests} single sentences one at a time, 10 batches of 32 pairs\n")
    print("| SavedModel | single p50 ms | p99 | batch 32 pairs/s | untimed first pass s | "
          "MRPC dev accuracy | labels unlike float32 |\n|---|---|---|---|---|---|---|")
    for variant, r in results.items():
        differ = sum(x != y for x, y in zip(r["predicted"], base["predicted"])) if base else ""
        print(f"| {variant} | {r['single_p50_ms']:.2f} | {r['single_p99_ms']:.2f} | "
              f"{r['pair_batch32_per_s']:.0f} | {r['first_pass_s']:.1f} | "
              f"{r['mrpc_dev_accuracy']:.4f} | {differ} |")
    out = args.json_out or str(work / "serving_savedmodel.json")
    write_text(out, json.dumps({"commit": commit(), "date": time.strftime("%Y-%m-%d"),
                                "cpu": cpu_kind(),
                                "results": {v: {k: x for k, x in r.items() if k != "predicted"}
                                            for v, r in results.items()}}, indent=2))
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
