"""What a training checkpoint costs the training thread, written in it (as before) or beside it.

On JAX a checkpoint is the model, Adam's two moments and the step (`modeling.variable_files`):
1.3 GB for BERT-Base. Written in the training thread, the whole write stalls training; written
by `engine.checkpoint_writer` the step waits only for the copy off the devices
(`variable_files.host_arrays`), and the file is written beside training. This bench builds
BERT-Base (or `--config`) with the runners' AdamWeightDecay on JAX and measures, over `--rounds`:
- `in the training thread`: `variable_files.save` through a temporary name, renamed (what
  training waited before);
- `beside training`: what training waits now (`host_arrays`), and the write's own time in the
  thread;
- how much slower a stand-in training step (a jitted chain of matmuls) runs while a
  write goes on beside it than alone: on a small CPU the write competes for the same cores.

    KERAS_BACKEND=jax python bench/checkpoint_write.py            # BERT-Base, 3 rounds
    KERAS_BACKEND=jax python bench/checkpoint_write.py --rounds 5 --folder /mnt/fast

Files go to a temporary folder under `--folder` (default: the system's), removed at the end.
Writes bench/results/checkpoint_write.json.
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # import from the checkout, not from bench/
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import _checkout  # noqa: E402

BERT_BASE = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
             "num_attention_heads": 12, "intermediate_size": 3072,
             "max_position_embeddings": 512, "type_vocab_size": 2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", default=None, help="where the checkpoints are written")
    parser.add_argument("--config", default=None, help="a bert_config.json (default BERT-Base)")
    args = parser.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "jax")
    sys.path.insert(0, _checkout.path_entry())  # this checkout, not an installed copy
    import jax
    import jax.numpy as jnp
    import keras

    from bert_tf2.modeling import variable_files
    from bert_tf2.modeling.config import BertConfig
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.optimization import create_optimizer

    if keras.backend.backend() != "jax":
        raise SystemExit("run with KERAS_BACKEND=jax (the background writer is the JAX trainer's)")
    config = (BertConfig.from_json_file(args.config) if args.config
              else BertConfig.from_dict(BERT_BASE))
    encoder = BertEncoder(config)
    optimizer = create_optimizer(1e-4, 1000, 100)
    optimizer.build(encoder.trainable_variables)
    groups = {"model": encoder.weights, "optimizer": list(optimizer.variables)}
    size = sum(v.value.size * v.value.dtype.itemsize for g in groups.values() for v in g)

    # A stand-in training step: a chain of matmuls in XLA.
    x = jnp.ones((512, 1024), jnp.float32)

    @jax.jit
    def step(x):
        for _ in range(8):
            x = jnp.tanh(x @ jnp.ones((1024, 1024), jnp.float32) / 1024)
        return x
    step(x).block_until_ready()

    def steps_per_second(seconds: float, stop: threading.Event | None = None) -> float:
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds and not (stop and stop.is_set()):
            step(x).block_until_ready()
            count += 1
        return count / (time.perf_counter() - start)

    folder = tempfile.mkdtemp(prefix="bert-bench-checkpoint-", dir=args.folder)
    rows = []
    try:
        for round_ in range(args.rounds):
            path = os.path.join(folder, f"model.ckpt-{round_}.safetensors")
            start = time.perf_counter()
            variable_files.save(path + ".tmp", groups, round_)
            os.replace(path + ".tmp", path)
            synchronous = time.perf_counter() - start
            os.remove(path)

            alone = steps_per_second(3.0)
            start = time.perf_counter()
            arrays = variable_files.host_arrays(groups)
            waited = time.perf_counter() - start
            done, written = threading.Event(), {}

            def write():
                begin = time.perf_counter()
                variable_files.write(path + ".tmp", arrays, round_)
                os.replace(path + ".tmp", path)
                written["seconds"] = time.perf_counter() - begin
                done.set()
            writer = threading.Thread(target=write)
            writer.start()
            beside = steps_per_second(600.0, stop=done)
            writer.join()
            os.remove(path)
            rows.append({"synchronous_s": synchronous, "waited_s": waited,
                         "written_s": written["seconds"], "steps_alone_per_s": alone,
                         "steps_beside_write_per_s": beside})
            print(f"round {round_ + 1}: in the training thread {synchronous:.2f} s; beside "
                  f"training: waited {waited:.2f} s, written in {written['seconds']:.2f} s; "
                  f"steps/s alone {alone:.1f}, during the write {beside:.1f}", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    def median(key):
        return statistics.median(r[key] for r in rows)
    from backends import cpu_kind

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=_checkout.REPO).stdout.strip()
    summary = {"bytes": size, "rounds": rows, "cpu": cpu_kind(), "commit": commit}
    print(f"\ncheckpoint of {size / 1e9:.2f} GB ({len(rows)} rounds, medians; {commit}, "
          f"{summary['cpu']}):")
    print("| written | training waits (s) | write (s) | stand-in step speed during it |")
    print("|---|---|---|---|")
    print(f"| in the training thread (before) | {median('synchronous_s'):.2f} | "
          f"{median('synchronous_s'):.2f} | - |")
    print(f"| beside training (engine.checkpoint_writer) | {median('waited_s'):.2f} | "
          f"{median('written_s'):.2f} | "
          f"{median('steps_beside_write_per_s') / median('steps_alone_per_s'):.2f}x of alone |")
    os.makedirs(os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"),
                exist_ok=True)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                           "checkpoint_write.json"), "w") as f:
        json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
