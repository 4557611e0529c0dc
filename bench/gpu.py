"""Accelerator figures: fine-tuning and pretraining throughput and model FLOPs utilisation on one GPU,
our Keras model on JAX against Hugging Face transformers on PyTorch, in one short prepared run.

What it measures (bfloat16 compute, float32 master weights, sequence 128, the same batch for both):
- fine-tuning (a sequence classifier: encoder, pooler, 2 labels; cross-entropy; the original's
  AdamWeightDecay with its clip for ours, PyTorch's fused AdamW for theirs, `torch.compile`d as
  its users would) for MiniLM's shape (6 layers, hidden 384) and BERT-Base's (12, 768), batch 32;
- pretraining (masked LM on 20 positions + next sentence, the original's losses) for BERT-Base,
  batch 256 (ours only: transformers' BertForPreTraining scores every position, another job).
Random weights and inputs (speed does not depend on them). Each measurement compiles and warms up,
then times `--steps` updates with the inputs already on the device: the kernels alone.
- end to end (`e2e-*`): the real runners on JAX, reading from disk what a user's run reads:
  `run_pretraining.py` on pretraining TFRecords (random ids in the original's layout, 4 files,
  written by the project's writer), and `run_classifier.py --task_name=generic` on a TSV of
  full-length sentences (tokenised, cached as records, read back), BERT-Base, `--dtype
  mixed_bfloat16`; the examples/s and the input-wait share that every loop logs, medians over the
  loops after the first (which compiles); "compile or start" is then the run's time outside the
  timed loops (start-up, reading the data, compiling). `e2e-pretrain-budget` is
  `run_pretraining.py --recipe=budget` on packed rows (one segment, 40 mask slots): no NSP,
  30% dynamic masks, no dropout (fused attention), and the bfloat16 the recipe picks by itself
  on a GPU from the A100 on; its MFU counts the original's 20 predictions, so it is a little low.
Sequences/s, and MFU: the model's training FLOPs (3 x the forward's matrix products:
L x T x (8 H^2 + 4 H I + 4 T H) per sequence, plus the heads) per second over the chip's dense
bfloat16 peak (H100 SXM and H200: 989 TFLOP/s; H100 PCIe: 756).

On the GPU machine (its image has Python 3.12, JAX 0.11, PyTorch, transformers, absl-py, numba
and llvmlite, numpy 2.5, safetensors, tensorboard and protobuf, not Keras), Keras travels as
wheels: keras with namex and optree (2.8 MB; numba's llvmlite wheel alone, 60 MB, would not fit
in what a call carries beside the checkout, and the image has it). Here, once:

    echo /.whl/ >> .git/info/exclude
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl keras==3.15.1 namex optree

then one call there, carrying `.whl`:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; \
    KERAS_BACKEND=jax python3 bench/gpu.py --out $OUT/gpu.json

Every measurement runs as its own process (JAX and PyTorch never share the GPU's memory); the
whole run took 7m12s on an H200 (53b22ff, 2026-11-29; docs/benchmarks.md, "Accelerators").
On a machine without a GPU, `--smoke` runs the same code on tiny
shapes (2 layers, hidden 128, batch 8, sequence 32) to check it end to end, transformers from
`bench/.venv-pytorch` where this Python lacks it; its figures are not accelerator figures.
Prints a Markdown table; `--out` writes the JSON; exits 1 if any measurement failed.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
SHAPES = {  # layers, hidden, heads, intermediate
    "minilm": (6, 384, 12, 1536),
    "base": (12, 768, 12, 3072),
    "smoke": (2, 128, 2, 512),
}
VOCAB, PREDICTIONS = 30522, 20
BUDGET_PREDICTIONS = 40  # --recipe=budget masks 30%: 38 of 128 tokens
PEAKS = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "GH200": 989e12}


def training_flops(shape: tuple, length: int, pretraining: bool) -> float:
    """Training FLOPs of one sequence: 3 x the forward's matrix products (multiply-adds x 2)."""
    layers, hidden, _, intermediate = shape
    forward = length * layers * (8 * hidden ** 2 + 4 * hidden * intermediate + 4 * length * hidden)
    forward += 2 * hidden ** 2 + 2 * hidden * 2  # pooler, then 2 labels (or next sentence)
    if pretraining:  # the masked LM head on its positions: transform, then the vocabulary
        forward += PREDICTIONS * (2 * hidden ** 2 + 2 * hidden * VOCAB)
    return 3.0 * forward


def peak_flops(device_name: str) -> float | None:
    for name, peak in PEAKS.items():
        if name in device_name:
            return peak
    return None


# ------------------------------------------------------------------------------------ ours (JAX)
class _Task:
    """The classification or pretraining loss, as the runners' tasks compute it."""

    def __init__(self, pretraining: bool):
        self.pretraining = pretraining

    def loss_and_metrics(self, model, batch, training):
        from keras import ops

        from bert_tf2.modeling import losses

        inputs = {"input_word_ids": batch["input_ids"], "input_mask": batch["input_mask"],
                  "input_type_ids": batch["segment_ids"]}
        if not self.pretraining:
            logits = model(inputs, training=training)["logits"]
            return losses.classification_loss(logits, batch["label_ids"]), {}
        outputs = model({**inputs, "masked_lm_positions": batch["masked_lm_positions"]},
                        training=training)
        mlm = losses.masked_lm_loss(outputs["mlm_logits"], batch["masked_lm_ids"],
                                    ops.cast(batch["masked_lm_weights"], "float32"))
        nsp = losses.next_sentence_loss(outputs["nsp_logits"], batch["next_sentence_labels"])
        return mlm + nsp, {}


def batch_arrays(batch: int, length: int, vocab: int, seed: int = 0) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    return {"input_ids": rng.integers(1000, vocab, (batch, length)).astype(np.int32),
            "input_mask": np.ones((batch, length), np.int32),
            "segment_ids": (np.arange(length)[None, :] >= length // 2).repeat(batch, 0)
            .astype(np.int32),
            "label_ids": rng.integers(0, 2, batch).astype(np.int32),
            "masked_lm_positions": np.sort(rng.choice(length, (batch, PREDICTIONS)), 1)
            .astype(np.int32) if length >= PREDICTIONS else None,
            "masked_lm_ids": rng.integers(1000, vocab, (batch, PREDICTIONS)).astype(np.int32),
            "masked_lm_weights": np.ones((batch, PREDICTIONS), np.float32),
            "next_sentence_labels": rng.integers(0, 2, batch).astype(np.int32)}


def ours(shape_name: str, batch: int, length: int, steps: int, pretraining: bool) -> dict:
    sys.path.insert(0, str(REPO / "bench"))
    import _checkout

    _checkout.importable()  # the GPU machine has JAX, not this project installed
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import jax
    import keras

    from bert_tf2.engine.distribution import KerasStrategy, set_precision
    from bert_tf2.engine.keras_training import KerasTrainer
    from bert_tf2.engine.trainer_config import TrainerConfig
    from bert_tf2.modeling.config import BertConfig
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertClassifier, BertPretrainer
    from bert_tf2.modeling.optimization import create_optimizer

    layers, hidden, heads, intermediate = SHAPES[shape_name]
    keras.utils.set_random_seed(0)
    set_precision("mixed_bfloat16")
    config = BertConfig.from_dict({
        "vocab_size": VOCAB, "hidden_size": hidden, "num_hidden_layers": layers,
        "num_attention_heads": heads, "intermediate_size": intermediate,
        "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "initializer_range": 0.02})
    encoder = BertEncoder(config)
    model = (BertPretrainer(encoder, max_predictions_per_seq=PREDICTIONS) if pretraining
             else BertClassifier(encoder, num_labels=2))
    optimizer = create_optimizer(1e-4, 10_000, 100)
    trainer = KerasTrainer(model, optimizer, _Task(pretraining),
                           KerasStrategy("one_device", jax.local_devices()[:1]),
                           TrainerConfig(output_dir="/tmp/bench-gpu", num_train_steps=10_000))
    arrays = {k: v for k, v in batch_arrays(batch, length, VOCAB).items() if v is not None}
    device_batch = jax.device_put(arrays)
    step = trainer._jitted("train", trainer._train_step, donate_argnums=0)
    state = trainer._state()
    start = time.perf_counter()
    state, sums = step(state, device_batch)
    jax.block_until_ready(sums)
    compile_s = time.perf_counter() - start
    for _ in range(3):  # warm-up
        state, sums = step(state, device_batch)
    jax.block_until_ready(sums)
    start = time.perf_counter()
    for _ in range(steps):
        state, sums = step(state, device_batch)
    jax.block_until_ready(sums)
    seconds = time.perf_counter() - start
    return {"side": "ours: Keras on JAX", "compile_s": compile_s,
            "sequences_per_s": batch * steps / seconds,
            "loss": float(jax.device_get(sums["loss"])[0]),
            "device": jax.devices()[0].device_kind, "jax": jax.__version__,
            "keras": keras.__version__}


# ------------------------------------------------------------------------------------ PyTorch
def theirs(shape_name: str, batch: int, length: int, steps: int, compile_model: bool) -> dict:
    import torch
    import transformers

    layers, hidden, heads, intermediate = SHAPES[shape_name]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=hidden,
                                     num_hidden_layers=layers, num_attention_heads=heads,
                                     intermediate_size=intermediate, num_labels=2)
    model = transformers.BertForSequenceClassification(config).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01,
                                  fused=device == "cuda")
    arrays = batch_arrays(batch, length, VOCAB)
    inputs = {"input_ids": torch.tensor(arrays["input_ids"], dtype=torch.long, device=device),
              "attention_mask": torch.tensor(arrays["input_mask"], device=device),
              "token_type_ids": torch.tensor(arrays["segment_ids"], dtype=torch.long,
                                             device=device),
              "labels": torch.tensor(arrays["label_ids"], dtype=torch.long, device=device)}
    forward = torch.compile(model) if compile_model else model

    def step():
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = forward(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    start = time.perf_counter()
    loss = step()
    sync()
    compile_s = time.perf_counter() - start
    for _ in range(3):
        loss = step()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    sync()
    seconds = time.perf_counter() - start
    return {"side": "transformers on PyTorch" + (", torch.compile" if compile_model else ""),
            "compile_s": compile_s, "sequences_per_s": batch * steps / seconds,
            "loss": float(loss), "device": (torch.cuda.get_device_name() if device == "cuda"
                                            else "cpu"),
            "torch": torch.__version__, "transformers": transformers.__version__}


# ------------------------------------------------------------------------------------ end to end
def _config(shape_name: str) -> dict:
    layers, hidden, heads, intermediate = SHAPES[shape_name]
    return {"vocab_size": VOCAB, "hidden_size": hidden, "num_hidden_layers": layers,
            "num_attention_heads": heads, "intermediate_size": intermediate,
            "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu",
            "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
            "initializer_range": 0.02}


def _pretraining_records(folder: pathlib.Path, count: int, length: int,
                         predictions: int = PREDICTIONS, packed: bool = False) -> list:
    """`count` pretraining records of full length (random ids, the original's masking layout;
    `packed`: one segment, label 0, as `--pack_sentences` writes) in 4 TFRecord files, written by
    the project's own writer."""
    import numpy as np

    from bert_tf2.data_gen import records
    from bert_tf2.data_gen.pretraining import schema

    rng = np.random.default_rng(0)
    paths = [str(folder / f"records-{i}.tfrecord") for i in range(4)]
    with records.ShardedRecordWriter(paths) as writer:
        for i in range(count):
            ids = [101] + rng.integers(1000, VOCAB, length - 2).tolist() + [102]
            positions = sorted(rng.choice(np.arange(1, length - 1), predictions,
                                          replace=False).tolist())
            segments = ([0] * length if packed
                        else [0] * (length // 2) + [1] * (length - length // 2))
            features = schema.padded_features(ids, segments, positions,
                                              [ids[p] for p in positions],
                                              0 if packed else i % 2, length, predictions)
            writer.write(records.serialize(features, float_features=("masked_lm_weights",)))
    return paths


def _classification_data(folder: pathlib.Path, rows: int, words: int) -> tuple:
    """A two-label TSV of `rows` sentences of `words` random words each, and a vocabulary that
    holds every word whole (so each is one token)."""
    import numpy as np

    rng = np.random.default_rng(0)
    vocabulary = [f"w{i}" for i in range(2000)]
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    (folder / "vocab.txt").write_text("\n".join(special + vocabulary) + "\n")
    lines = ["label\tsentence"]
    for i in range(rows):
        chosen = rng.integers(0, len(vocabulary), words)
        lines.append(f"{'ab'[i % 2]}\t{' '.join(vocabulary[c] for c in chosen)}")
    (folder / "train.tsv").write_text("\n".join(lines) + "\n")
    (folder / "dev.tsv").write_text("\n".join(lines[:9]) + "\n")
    return str(folder), str(folder / "vocab.txt")


def end_to_end(job: str, shape_name: str, batch: int, length: int, steps: int) -> dict:
    """The real runner on JAX, reading its input from disk: run_pretraining.py on records, or
    run_classifier.py on a TSV (tokenised, cached as records, read back); the examples/s and
    input-wait share every loop logs, medians over the loops after the first (which compiles)."""
    import re
    import statistics
    import tempfile

    sys.path.insert(0, str(REPO / "bench"))
    import _checkout

    _checkout.importable()
    config = _config(shape_name)
    loops = 5
    per_loop = max(1, steps // loops)
    with tempfile.TemporaryDirectory(prefix=f"gpu-{job}-") as name:
        folder = pathlib.Path(name)
        (folder / "bert_config.json").write_text(json.dumps(config))
        common = [f"--output_dir={folder / 'run'}", f"--bert_config_file={folder}/bert_config.json",
                  f"--max_seq_length={length}", f"--train_batch_size={batch}",
                  "--learning_rate=1e-4", f"--num_train_steps={per_loop * loops}",
                  f"--steps_per_loop={per_loop}", f"--save_checkpoints_steps={per_loop * loops}",
                  "--dtype=mixed_bfloat16", "--do_train"]
        start = time.perf_counter()
        if job == "e2e-pretrain-budget":
            # --recipe=budget: no NSP, 30% dynamic masks, no dropout (so fused attention), and
            # bfloat16 chosen by the recipe itself where the device has it (no --dtype here).
            files = _pretraining_records(folder, batch * per_loop * 2, length,
                                         BUDGET_PREDICTIONS, packed=True)
            special = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}
            (folder / "vocab.txt").write_text("\n".join(
                special.get(i, f"w{i}") for i in range(VOCAB)) + "\n")
            records_s = time.perf_counter() - start
            command = [str(REPO / "run_pretraining.py"), f"--input_file={','.join(files)}",
                       f"--max_predictions_per_seq={BUDGET_PREDICTIONS}", "--recipe=budget",
                       "--train_budget_minutes=60", f"--vocab_file={folder}/vocab.txt",
                       *[flag for flag in common
                         if not flag.startswith(("--dtype", "--learning_rate"))]]
        elif job == "e2e-pretrain":
            files = _pretraining_records(folder, batch * per_loop * 2, length)
            records_s = time.perf_counter() - start
            command = [str(REPO / "run_pretraining.py"), f"--input_file={','.join(files)}",
                       f"--max_predictions_per_seq={PREDICTIONS}", "--num_warmup_steps=2",
                       *common]
        else:
            # One epoch over all the loops: a fine-tuning run checkpoints at each epoch's end,
            # and an epoch per loop (as before 2026-11-30) timed that write with the steps.
            data_dir, vocab = _classification_data(folder, batch * per_loop * loops, length - 8)
            records_s = time.perf_counter() - start
            command = [str(REPO / "run_classifier.py"), "--task_name=generic",
                       f"--data_dir={data_dir}", "--text_a_column=sentence",
                       "--label_column=label", f"--vocab_file={vocab}", *common]
        env = {**os.environ, "KERAS_BACKEND": "jax",
               "PYTHONPATH": os.pathsep.join(filter(None, [_checkout.path_entry(),
                                                           os.environ.get("PYTHONPATH")]))}
        start = time.perf_counter()
        done = subprocess.run([sys.executable, *command], capture_output=True, text=True,
                              env=env, cwd=folder, timeout=480)
        run_s = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "?")
    logged = [(int(step), float(speed)) for step, speed in re.findall(
        r"step (\d+)/\d+ .*? ([0-9.]+) examples/s", done.stderr)]
    waits = [float(x) for x in re.findall(r"input wait ([0-9.]+)%", done.stderr)]
    if len(logged) < 2 or len(waits) < 2:
        raise RuntimeError(f"no loop lines in the runner's log: {done.stderr[-500:]}")
    import jax

    # Each loop's own length (a run on a time budget starts with a loop of one step, then sizes
    # its loops from the speed); the median over the full-length loops after the first.
    sizes = [step - before for (step, _), (before, _) in zip(logged[1:], logged)]
    full = [speed for size, (_, speed) in zip(sizes, logged[1:]) if size == max(sizes)]
    return {"side": f"ours: {command[0].rsplit('/', 1)[-1]} on JAX, from disk",
            "sequences_per_s": statistics.median(full),
            "input_wait_share": statistics.median(waits[1:]) / 100,
            "compile_s": run_s - sum(batch * size / speed
                                     for size, (_, speed) in zip(sizes, logged[1:])),
            "data_s": records_s, "device": jax.devices()[0].device_kind}


# ------------------------------------------------------------------------------------ driver
def plan(smoke: bool) -> list:
    if smoke:
        return [("finetune", "smoke", 8, 32, "ours"), ("finetune", "smoke", 8, 32, "theirs"),
                ("pretrain", "smoke", 8, 32, "ours"), ("e2e-finetune", "smoke", 8, 32, "ours"),
                ("e2e-pretrain", "smoke", 8, 32, "ours"),
                ("e2e-pretrain-budget", "smoke", 8, 64, "ours")]
    return [("finetune", "minilm", 32, 128, "ours"), ("finetune", "minilm", 32, 128, "theirs"),
            ("finetune", "base", 32, 128, "ours"), ("finetune", "base", 32, 128, "theirs"),
            ("pretrain", "base", 256, 128, "ours"), ("e2e-finetune", "base", 32, 128, "ours"),
            ("e2e-pretrain", "base", 256, 128, "ours"),
            ("e2e-pretrain-budget", "base", 256, 128, "ours")]


def worker(args) -> None:
    job, shape, batch, length, side = args.worker.split(":")
    batch, length = int(batch), int(length)
    if job.startswith("e2e"):
        result = end_to_end(job, shape, batch, length, args.steps * 2)
    elif side == "ours":
        result = ours(shape, batch, length, args.steps, job == "pretrain")
    else:
        result = theirs(shape, batch, length, args.steps, not args.no_compile)
    print("RESULT " + json.dumps(result), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, for a CPU")
    parser.add_argument("--steps", type=int, default=None, help="timed updates (50; smoke 5)")
    parser.add_argument("--no_compile", action="store_true", help="PyTorch without compile")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--torch_python", default=sys.executable,
                        help="the Python with torch and transformers (default: this one)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.steps = args.steps or (5 if args.smoke else 50)
    if args.worker:
        worker(args)
        return
    results = []
    torch_python = args.torch_python
    if args.smoke and subprocess.run([torch_python, "-c", "import transformers"],
                                     capture_output=True).returncode:
        sys.path.insert(0, str(REPO / "bench"))
        from finetune_vs_pytorch import peer_python  # torch and transformers, made on first use

        torch_python = peer_python()
    for job, shape, batch, length, side in plan(args.smoke):
        python = sys.executable if side == "ours" else torch_python
        command = [python, __file__, f"--worker={job}:{shape}:{batch}:{length}:{side}",
                   f"--steps={args.steps}"] + (["--no_compile"] if args.no_compile else [])
        env = {**os.environ, "KERAS_BACKEND": "jax"}
        start = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=env,
                                  timeout=540)
        except subprocess.TimeoutExpired:
            done = subprocess.CompletedProcess(command, 1, "", "timed out after 540 s")
        line = next((out for out in done.stdout.splitlines() if out.startswith("RESULT ")), None)
        entry = {"job": job, "shape": shape, "batch": batch, "length": length,
                 "wall_s": time.perf_counter() - start}
        if done.returncode or line is None:
            entry.update(side=side, error=(done.stderr.strip().splitlines() or ["?"])[-1][:300])
        else:
            entry.update(json.loads(line[7:]))
            flops = training_flops(SHAPES[shape], length, job.endswith("pretrain"))
            entry["tflops_per_s"] = flops * entry["sequences_per_s"] / 1e12
            peak = peak_flops(entry.get("device", ""))
            entry["mfu"] = flops * entry["sequences_per_s"] / peak if peak else None
        results.append(entry)
        print(json.dumps(entry), flush=True)
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(results, indent=1))
    print("\n| job | shape | batch x length | side | sequences/s | TFLOP/s | MFU | compile or start (s) "
          "| input wait |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['job']} | {r['shape']} | {r['batch']}x{r['length']} | {r['side']} | "
                  f"failed: {r['error']} | | | | |")
            continue
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "-"
        wait = (f"{100 * r['input_wait_share']:.1f}%" if "input_wait_share" in r
                else "inputs on the device")
        print(f"| {r['job']} | {r['shape']} | {r['batch']}x{r['length']} | {r['side']} | "
              f"{r['sequences_per_s']:.1f} | {r['tflops_per_s']:.2f} | {mfu} | "
              f"{r['compile_s']:.1f} | {wait} |")
    devices = sorted({r.get("device") for r in results if r.get("device")})
    print(f"\ndevice: {', '.join(devices)}")
    if any("error" in r for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
