"""Pretraining speed on this CPU: examples/s of our training loop, jit_compile off vs on, and where
the time of a step goes (input pipeline vs compute).

Why this shape: `run_pretraining.py` spends its time in one place, `Trainer._train_loop` (the
`tf.function` that runs `steps_per_loop` updates of `PretrainingTask` with `create_optimizer`'s
AdamWeightDecay), fed by `pretraining_dataset`. So that is what is timed, with the project's own
objects, not a re-implementation; `Trainer.train` adds only checkpoints, summaries and a log line
per loop. For each model three things are timed, N batches or steps each:

- input:   the real tf.data pipeline alone (TFRecords -> parsed int32 batches), pulled inside a
           `tf.function` as the training loop pulls it;
- compute: N updates on batches already in memory (a repeated in-memory dataset of real batches);
- full:    N updates fed by the real pipeline, i.e. the training loop as `run_pretraining` runs it.

If full is close to compute, the input pipeline is hidden behind the compute (it runs ahead in
tf.data's own threads); input alone says how much CPU it needs. The machine is small (2 cores)
and shared with other jobs, so absolute figures drift; every variant of a model (jit off and on,
each of the three) lives in the same process, is warmed up first (tracing, XLA compilation), and
the timed repetitions take turns, alternating their order, so that changing load hits all alike.
The table gives medians, and jit's speed-up as the median of the per-round ratios (jit off and on
ran back to back in each round); the load average is recorded beside them.

Records are made once with `data_gen.pretraining.create_pretraining_data` from WikiText-2 valid
(length 128, 20 predictions, dupe_factor 1) under /tmp (see `bench/_records.py`).

    python bench/pretraining_step.py                          # tiny, mini, base
    python bench/pretraining_step.py --models tiny --steps 100 --json_out /tmp/step.json
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # import from the checkout, not from bench/, whose scripts' names
    # (bench/tokenize.py) shadow the standard library's
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from bench import _records  # noqa: E402
from bench._sizes import ARCHITECTURES, VOCAB_SIZE, Architecture  # noqa: E402

SEQ_LENGTH = 128
MAX_PREDICTIONS = 20
BATCH_SIZE = 8
MEMORY_BATCHES = 16  # distinct real batches the in-memory dataset cycles through
LOADS = []  # 1-minute load average after each timed repetition
RECORDS = _records.RecordSpec((_records.wikitext("valid"),), SEQ_LENGTH, MAX_PREDICTIONS)


@dataclasses.dataclass(frozen=True)
class ModelSize:
    arch: Architecture
    step_share: float  # timed steps = --steps * this (Base is ~50x slower than Tiny)
    max_repeats: int


MODELS = {name: ModelSize(ARCHITECTURES[name], share, max_repeats)
          for name, share, max_repeats in (("tiny", 1.0, 99), ("mini", 0.5, 99),
                                           ("base", 0.1, 3))}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the project's objects

def build_trainer(size: ModelSize, jit: bool, steps: int):
    """A pretraining `Trainer` as `run_pretraining.build` makes one: BertPretrainer, the original's
    AdamWeightDecay with warmup, one device, float32."""
    from bert_tf2.engine.distribution import get_strategy
    from bert_tf2.engine.training import Trainer, TrainerConfig
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertPretrainer
    from bert_tf2.modeling.optimization import create_optimizer
    from bert_tf2.tasks.pretraining.task import PretrainingTask

    config = size.arch.bert_config(VOCAB_SIZE)
    strategy = get_strategy("one_device")
    with strategy.scope():
        model = BertPretrainer(BertEncoder(config), max_predictions_per_seq=MAX_PREDICTIONS)
        optimizer = create_optimizer(1e-4, num_train_steps=100_000, num_warmup_steps=10)
    return Trainer(model, optimizer, PretrainingTask(), strategy, TrainerConfig(
        output_dir=tempfile.mkdtemp(prefix="bench-step-"), num_train_steps=100_000,
        steps_per_loop=steps, jit_compile=jit, examples_per_step=BATCH_SIZE))


def real_batches(files, seed: int):
    from bert_tf2.data_gen.pretraining.dataset import pretraining_dataset
    return pretraining_dataset(files, BATCH_SIZE, SEQ_LENGTH, MAX_PREDICTIONS, is_training=True,
                               seed=seed)


def memory_batches(files):
    """`MEMORY_BATCHES` real batches held as tensors, repeated: an input that costs ~nothing."""
    import tensorflow as tf
    batches = list(real_batches(files, seed=1).take(MEMORY_BATCHES))
    stacked = {k: tf.stack([b[k] for b in batches]) for k in batches[0]}
    return tf.data.Dataset.from_tensor_slices(stacked).repeat().prefetch(tf.data.AUTOTUNE)


def pull_batches():
    """A `tf.function` that takes n batches from an iterator, as `_train_loop` does, and nothing
    else."""
    import tensorflow as tf

    @tf.function
    def pull(iterator, n):
        checksum = tf.constant(0, tf.int32)
        for _ in tf.range(n):
            checksum += next(iterator)["input_ids"][0, 0]
        return checksum
    return pull


# ---------------------------------------------------------------- timing

class Variant:
    """One timed thing: `run(n)` does n steps and returns something to wait for."""

    def __init__(self, model: str, jit: bool | None, part: str, run, steps: int):
        self.model, self.jit, self.part, self.run, self.steps = model, jit, part, run, steps
        self.first_call_s = None
        self.seconds = []

    def _call(self, n: int) -> float:
        import tensorflow as tf
        start = time.perf_counter()
        result = self.run(tf.constant(n))
        tf.nest.map_structure(lambda t: t.numpy(), result)  # block until done
        return time.perf_counter() - start

    def warm_up(self) -> None:
        self.first_call_s = self._call(2)  # traces (and compiles) the function
        self._call(2)

    def time_once(self) -> None:
        self.seconds.append(self._call(self.steps) / self.steps)

    def result(self) -> dict:
        per_step = statistics.median(self.seconds)
        return {"model": self.model, "jit": self.jit, "part": self.part, "steps": self.steps,
                "ms_per_step": 1000 * per_step, "examples_per_s": BATCH_SIZE / per_step,
                "runs_ms": [1000 * s for s in self.seconds], "first_call_s": self.first_call_s}


def variants_for(name: str, files, steps: int) -> list[Variant]:
    size = MODELS[name]
    pull = pull_batches()
    input_iterator = iter(real_batches(files, seed=2))
    found = [Variant(name, None, "input", lambda n: pull(input_iterator, n),
                     steps=max(steps, 200))]
    memory = memory_batches(files)
    for jit in (False, True):
        trainer = build_trainer(size, jit, steps)
        memory_iterator, real_iterator = iter(memory), iter(real_batches(files, seed=3))
        # Trainer.train runs exactly this tf.function, loop after loop. (The lambdas hold the
        # trainer itself: a tf.function method keeps only a weak reference to its instance.)
        found.append(Variant(name, jit, "compute",
                             lambda n, t=trainer, it=memory_iterator: t._train_loop(it, n), steps))
        found.append(Variant(name, jit, "full",
                             lambda n, t=trainer, it=real_iterator: t._train_loop(it, n), steps))
    return found


def measure(name: str, files, args) -> list[dict]:
    size = MODELS[name]
    steps = max(2, round(args.steps * size.step_share))
    repeats = min(args.repeats, size.max_repeats)
    variants = variants_for(name, files, steps)
    for variant in variants:
        variant.warm_up()
        log(f"  {name} {variant.part} jit={variant.jit}: first call {variant.first_call_s:.1f} s")
    for i in range(repeats):
        for variant in variants if i % 2 == 0 else variants[::-1]:
            variant.time_once()
        LOADS.append(os.getloadavg()[0])
        log(f"  {name}: repetition {i + 1}/{repeats} done (load {LOADS[-1]:.1f})")
    return [v.result() for v in variants]


# ---------------------------------------------------------------- report

def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def paired_speedup(reference: dict, other: dict) -> float:
    """Median over repetitions of reference time / other time: the two ran in the same round,
    back to back, so the ratio cancels most of the load drift between rounds."""
    return statistics.median(a / b for a, b in zip(reference["runs_ms"], other["runs_ms"]))


def summary_rows(results: list[dict]) -> list[dict]:
    """One row per (model, jit): the three parts and what they say."""
    index = {(r["model"], r["jit"], r["part"]): r for r in results}
    rows = []
    for model in dict.fromkeys(r["model"] for r in results):
        input_ms = index[(model, None, "input")]["ms_per_step"]
        plain = {part: index[(model, False, part)] for part in ("compute", "full")}
        for jit in (False, True):
            compute, full = index[(model, jit, "compute")], index[(model, jit, "full")]
            rows.append({
                "model": model, "jit": jit, "input_ms": input_ms,
                "compute_ms": compute["ms_per_step"], "full_ms": full["ms_per_step"],
                "full_ms_range": [min(full["runs_ms"]), max(full["runs_ms"])],
                "examples_per_s": full["examples_per_s"],
                "compute_examples_per_s": compute["examples_per_s"],
                "full_vs_jit_off": paired_speedup(plain["full"], full),
                "compute_vs_jit_off": paired_speedup(plain["compute"], compute),
                "input_share": input_ms / full["ms_per_step"],
                "full_minus_compute_ms": full["ms_per_step"] - compute["ms_per_step"],
            })
    return rows


def table(rows: list[dict]) -> str:
    header = ["model", "jit", "examples/s (full loop)", "speed vs jit off: full / compute",
              "full ms/step (median, min-max)", "compute ms/step", "input ms/batch",
              "input / full", "full - compute ms"]
    return markdown_table(header, [[
        r["model"], "on" if r["jit"] else "off", f"{r['examples_per_s']:.1f}",
        f"x{r['full_vs_jit_off']:.2f} / x{r['compute_vs_jit_off']:.2f}",
        f"{r['full_ms']:.0f} ({r['full_ms_range'][0]:.0f}-{r['full_ms_range'][1]:.0f})",
        f"{r['compute_ms']:.0f}", f"{r['input_ms']:.2f}", f"{100 * r['input_share']:.2f}%",
        f"{r['full_minus_compute_ms']:+.0f}"] for r in rows])


def environment() -> dict:
    import keras
    import tensorflow as tf
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    return {"cpu": cpu, "cores": os.cpu_count(), "tensorflow": tf.__version__,
            "keras": keras.__version__, "batch_size": BATCH_SIZE, "seq_length": SEQ_LENGTH,
            "max_predictions_per_seq": MAX_PREDICTIONS, "dtype": "float32"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="tiny,mini,base",
                        help=f"comma-separated subset of {', '.join(MODELS)}")
    parser.add_argument("--steps", type=int, default=20,
                        help="timed steps per repetition for tiny (mini half, base a tenth; "
                             "the input pipeline pulls at least 200 batches)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions (base: <= 3)")
    parser.add_argument("--json_out", default="", help="also write the results here")
    args = parser.parse_args()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {', '.join(MODELS)}")

    from bert_tf2.process import environment
    environment.configure()  # before Keras and TensorFlow
    import keras
    keras.utils.set_random_seed(0)
    records = _records.make_records(RECORDS, log=log)
    load_before = os.getloadavg()
    results = []
    for model in models:
        log(f"{model}: building, warming up (jit off and on)")
        results.extend(measure(model, records["files"], args))
    rows = summary_rows(results)
    report = {"environment": environment(), "records": records["files"],
              "load_average_before": load_before, "load_averages_during": LOADS,
              "summary": rows, "raw": results}
    print(json.dumps(report, indent=2))
    print(f"float32, batch {BATCH_SIZE}, sequence {SEQ_LENGTH}, {MAX_PREDICTIONS} predictions; "
          f"1-minute load average during the repetitions {min(LOADS):.1f}-{max(LOADS):.1f} "
          f"on {os.cpu_count()} cores (this run itself counts for up to 2)")
    print(table(rows))
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
