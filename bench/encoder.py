"""Encoder speed on this CPU: forward and train-step sequences/s, with jit_compile and oneDNN on and off.

Why this shape: the machine is small (2 cores), shared and noisy, so absolute figures drift from one
run to the next. Every variant of a model is therefore measured in the same run, its timed
repetitions interleaved with the other variants' after a warm-up, and the table gives the median
next to its ratio to the plain setting (no XLA, oneDNN left as TensorFlow sets it). oneDNN is chosen
by `TF_ENABLE_ONEDNN_OPTS`, which only counts before TensorFlow is imported, so each setting runs
in its own child process of this script; a model's children live side by side and take turns for
every timed repetition, so the oneDNN ratio is as fair as the jit one.

`--compare_keras_hub` also times KerasHub's `BertBackbone` (random weights, built from arguments,
nothing downloaded) beside ours; it needs `keras_hub` importable by the interpreter running this.

    python bench/encoder.py                              # all models, jit and oneDNN both ways
    python bench/encoder.py --models tiny --jit on --onednn off --no-train
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__":  # import the project from this checkout, whether or not installed
    sys.path[0] = ROOT

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from bench._sizes import ARCHITECTURES, VOCAB_SIZE, Architecture  # noqa: E402

NUM_LABELS = 2
LEARNING_RATE = 1e-5


@dataclasses.dataclass(frozen=True)
class ModelSize:
    arch: Architecture
    repeats: int  # timed repetitions unless --repeats says otherwise


MODELS = {name: ModelSize(ARCHITECTURES[name], repeats)
          for name, repeats in (("tiny", 15), ("mini", 15), ("minilm", 9), ("base", 3))}
CHOICES = {"both": (False, True), "off": (False,), "on": (True,)}


# ---------------------------------------------------------------- the two implementations under test

def build_ours(size: ModelSize):
    """Our `BertEncoder` and a `BertClassifier` on it; the input names the encoder expects."""
    from bert_tf2.modeling.encoder import INPUT_NAMES, BertEncoder
    from bert_tf2.modeling.models import BertClassifier
    encoder = BertEncoder(size.arch.bert_config(VOCAB_SIZE))
    return encoder, BertClassifier(encoder, num_labels=NUM_LABELS), INPUT_NAMES


def build_keras_hub(size: ModelSize):
    """KerasHub's `BertBackbone` and `BertTextClassifier` with the same sizes, random weights."""
    import keras_hub
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=VOCAB_SIZE, num_layers=size.arch.layers, num_heads=size.arch.heads,
        hidden_dim=size.arch.hidden, intermediate_dim=size.arch.intermediate,
        max_sequence_length=512)
    classifier = keras_hub.models.BertTextClassifier(backbone, num_classes=NUM_LABELS,
                                                     preprocessor=None)
    return backbone, classifier, ("token_ids", "padding_mask", "segment_ids")


IMPLEMENTATIONS = {"ours": build_ours, "keras_hub": build_keras_hub}


# ---------------------------------------------------------------- the timed functions

def random_batch(input_names, batch_size: int, seq_length: int, seed: int = 0):
    """Random word ids, a full mask, two segments; and random labels. `input_names` are given in
    the order (word ids, mask, type ids)."""
    import numpy as np
    import tensorflow as tf
    rng = np.random.default_rng(seed)
    word_ids = rng.integers(1, VOCAB_SIZE, (batch_size, seq_length))
    mask = np.ones((batch_size, seq_length))
    type_ids = (np.arange(seq_length) >= seq_length // 2) * np.ones((batch_size, 1))
    inputs = {name: tf.constant(value, tf.int32)
              for name, value in zip(input_names, (word_ids, mask, type_ids))}
    return inputs, tf.constant(rng.integers(0, NUM_LABELS, (batch_size,)), tf.int32)


def forward_step(encoder, jit: bool):
    import tensorflow as tf

    def forward(inputs):
        outputs = encoder(inputs, training=False)
        return outputs["sequence_output"], outputs["pooled_output"]

    return tf.function(forward, jit_compile=jit)


def train_step(classifier, optimizer, jit: bool):
    import tensorflow as tf

    from bert_tf2.modeling import losses

    def step(inputs, labels):
        with tf.GradientTape() as tape:
            outputs = classifier(inputs, training=True)
            logits = outputs["logits"] if isinstance(outputs, dict) else outputs
            loss = losses.classification_loss(logits, labels)
        variables = classifier.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    return tf.function(step, jit_compile=jit)


class Variant:
    """One (implementation, task, jit) combination: a step function and its timings."""

    def __init__(self, key: dict, run, batch_size: int):
        self.key, self.run, self.batch_size = key, run, batch_size
        self.steps_per_repeat = 1
        self.first_call_s = None
        self.rates, self.cpu_rates = [], []  # sequences per second of wall clock, of CPU time

    def call(self, steps: int = 1) -> tuple[float, float]:
        """Run `steps` steps, wait for the result; the wall and CPU seconds (all threads) taken."""
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            result = self.run()
        float(result[0][0, 0, 0] if isinstance(result, tuple) else result)  # block until done
        return time.perf_counter() - wall, time.process_time() - cpu

    def warm_up(self, repeat_seconds: float) -> None:
        """Trace (and compile) on the first call, then size a repetition to last `repeat_seconds`."""
        self.first_call_s = self.call()[0]
        self.steps_per_repeat = max(1, round(repeat_seconds / self.call()[0]))

    def time_once(self) -> None:
        sequences = self.steps_per_repeat * self.batch_size
        wall, cpu = self.call(self.steps_per_repeat)
        self.rates.append(sequences / wall)
        self.cpu_rates.append(sequences / cpu)

    def result(self) -> dict:
        return {**self.key, "seq_per_s": statistics.median(self.rates),
                "best_seq_per_s": max(self.rates),
                "seq_per_cpu_s": statistics.median(self.cpu_rates), "runs": self.rates,
                "cpu_runs": self.cpu_rates, "steps_per_repeat": self.steps_per_repeat,
                "first_call_s": self.first_call_s}


def variants_for(impl: str, size: ModelSize, args) -> list[Variant]:
    import keras
    encoder, classifier, input_names = IMPLEMENTATIONS[impl](size)
    inputs, labels = random_batch(input_names, args.batch_size, args.seq_length)
    optimizer = keras.optimizers.AdamW(learning_rate=LEARNING_RATE)
    optimizer.build(classifier.trainable_variables)
    found = []
    for jit in CHOICES[args.jit]:
        key = {"impl": impl, "jit": jit}
        forward = forward_step(encoder, jit)
        found.append(Variant({**key, "task": "forward"}, lambda f=forward: f(inputs),
                             args.batch_size))
        if args.train:
            train = train_step(classifier, optimizer, jit)
            found.append(Variant({**key, "task": "train"}, lambda t=train: t(inputs, labels),
                                 args.batch_size))
    return found


def serve(args) -> None:
    """The worker: builds every variant of one model under this process's oneDNN setting, then
    obeys the parent's commands on stdin, one line each, answering each on stdout."""
    from bert_tf2.process import environment
    environment.configure()  # before Keras and TensorFlow
    import keras
    keras.utils.set_random_seed(0)
    size = MODELS[args.models[0]]
    impls = ["ours", "keras_hub"] if args.compare_keras_hub else ["ours"]
    variants = [v for impl in impls for v in variants_for(impl, size, args)]
    rounds = 0
    for command in sys.stdin:
        command = command.strip()
        if command == "warm_up":
            for variant in variants:
                variant.warm_up(args.repeat_seconds)
                log(f"  warmed up {describe(variant.key)}: first call "
                    f"{variant.first_call_s:.1f} s, {variant.steps_per_repeat} step(s) a repetition")
            reply("ready")
        elif command == "repeat":  # the order alternates so that drift in load hits all alike
            for variant in variants if rounds % 2 == 0 else variants[::-1]:
                variant.time_once()
            rounds += 1
            reply("done")
        elif command == "results":
            reply(json.dumps([variant.result() for variant in variants]))
            return


REPLY = "@bench "  # marks the worker's answers among anything else printed to stdout


def reply(message: str) -> None:
    print(REPLY + message, flush=True)


# ---------------------------------------------------------------- the parent: one worker per setting

def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def describe(key: dict) -> str:
    return f"{key['impl']} {key['task']} jit={'on' if key['jit'] else 'off'}"


def child_env(onednn: bool) -> dict:
    env = dict(os.environ)
    env.pop("TF_ENABLE_ONEDNN_OPTS", None)  # "off" is TensorFlow's own choice on this CPU
    if onednn:
        env["TF_ENABLE_ONEDNN_OPTS"] = "1"
    return env


class Worker:
    """This script re-run as a child process with one model and one oneDNN setting."""

    def __init__(self, model: str, onednn: bool, args):
        self.model, self.onednn = model, onednn
        command = [sys.executable, __file__, "--worker", "--models", model, "--jit", args.jit,
                   "--train" if args.train else "--no-train", "--batch_size", str(args.batch_size),
                   "--seq_length", str(args.seq_length),
                   "--repeat_seconds", str(args.repeat_seconds)]
        command += ["--compare_keras_hub"] if args.compare_keras_hub else []
        self.process = subprocess.Popen(command, env=child_env(onednn), text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def ask(self, command: str) -> str:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        for line in self.process.stdout:
            if line.startswith(REPLY):
                return line[len(REPLY):].strip()
        raise RuntimeError(f"{self.model} worker (oneDNN {self.onednn}) died: exit code "
                           f"{self.process.wait()}")

    def results(self) -> list[dict]:
        results = json.loads(self.ask("results"))
        self.process.wait()
        return [{"model": self.model, "onednn": self.onednn, **r} for r in results]


def measure(model: str, args) -> list[dict]:
    """Both oneDNN settings of one model, side by side: one worker each, alive together, warmed
    up one after the other, then taking turns (in alternating order) for every timed repetition."""
    workers = [Worker(model, onednn, args) for onednn in CHOICES[args.onednn]]
    try:
        for worker in workers:
            log(f"{model}, oneDNN {'on' if worker.onednn else 'off'}")
            worker.ask("warm_up")
        for i in range(args.repeats or MODELS[model].repeats):
            for worker in workers if i % 2 == 0 else workers[::-1]:
                worker.ask("repeat")
        return [r for worker in workers for r in worker.results()]
    finally:
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.kill()


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").open()
                if line.startswith("model name")), platform.processor())
    versions = subprocess.run(
        [sys.executable, "-c", "import modeling, tensorflow as tf, keras; "
                               "print(tf.__version__, keras.__version__)"],
        capture_output=True, text=True, check=True, cwd=ROOT).stdout.split()
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "tensorflow": versions[0], "keras": versions[1]}


# ---------------------------------------------------------------- report

def combos(results) -> list[tuple[bool, bool]]:
    return sorted({(r["onednn"], r["jit"]) for r in results})


def combo_name(onednn: bool, jit: bool) -> str:
    return f"oneDNN {'on' if onednn else 'off'}, jit {'on' if jit else 'off'}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


STATS = {"median": "seq_per_s", "best": "best_seq_per_s", "cpu": "seq_per_cpu_s"}
STAT_NAMES = {"median": "median of the timed repetitions", "best": "best timed repetition",
              "cpu": "per CPU-second of the process, median; less sensitive to other load"}


def rates(results, task: str, stat: str) -> dict:
    """{(model, impl, onednn, jit): sequences/s} for one task."""
    return {(r["model"], r["impl"], r["onednn"], r["jit"]): r[STATS[stat]]
            for r in results if r["task"] == task}


def speed_table(results, task: str, stat: str) -> str:
    """seq/s per model and implementation, each with its ratio to the first setting's."""
    columns, index = combos(results), rates(results, task, stat)
    rows = []
    for model, impl in dict.fromkeys((m, i) for m, i, _, _ in index):
        row = [index[(model, impl, *c)] for c in columns]
        rows.append([model, impl] + [f"{x:.1f} (x{x / row[0]:.2f})" for x in row])
    return markdown_table(["model", "impl"] + [combo_name(*c) for c in columns], rows)


def versus_table(results, task: str, stat: str) -> str:
    """ours / keras_hub per model and setting."""
    columns, index = combos(results), rates(results, task, stat)
    models = dict.fromkeys(m for m, _, _, _ in index)
    rows = [[model] + [f"x{index[(model, 'ours', *c)] / index[(model, 'keras_hub', *c)]:.2f}"
                       for c in columns] for model in models]
    return markdown_table(["model"] + [combo_name(*c) for c in columns], rows)


def report(payload: dict, stat: str) -> str:
    results, settings = payload["results"], payload["settings"]
    tasks = [t for t in ("forward", "train") if any(r["task"] == t for r in results)]
    parts = [f"Sequences/s ({STAT_NAMES[stat]}), batch {settings['batch_size']} x "
             f"{settings['seq_length']}; (xN) = ratio to the first column."]
    for task in tasks:
        parts += [f"\n{task}\n", speed_table(results, task, stat)]
    if any(r["impl"] == "keras_hub" for r in results):
        for task in tasks:
            parts += [f"\n{task}: ours / KerasHub\n", versus_table(results, task, stat)]
    return "\n".join(parts)


def write_json(payload: dict, path: str) -> None:
    text = json.dumps(payload, indent=1)
    if path == "-":
        print(text)
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text + "\n")
    log(f"wrote {path}")


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        serve(args)
        return
    if args.report:
        print(report(json.loads(Path(args.report).read_text()), args.stat))
        return
    load_before = os.getloadavg()
    results = [r for model in args.models for r in measure(model, args)]
    payload = {"settings": {k: v for k, v in vars(args).items() if k not in ("worker", "report")},
               "machine": machine(), "load_average": [load_before, os.getloadavg()],
               "results": results}
    print(report(payload, args.stat), file=sys.stderr if args.json_out == "-" else sys.stdout,
          flush=True)
    write_json(payload, args.json_out)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="tiny,mini,minilm,base",
                        type=lambda s: [m for m in s.split(",") if m],
                        help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed repetitions per variant (default: 15, 15, 9, 3 by model size)")
    parser.add_argument("--repeat_seconds", type=float, default=0.5,
                        help="aim for repetitions this long (at least one step each)")
    parser.add_argument("--jit", choices=CHOICES, default="both", help="tf.function jit_compile")
    parser.add_argument("--onednn", choices=CHOICES, default="both",
                        help="TF_ENABLE_ONEDNN_OPTS=1 (on) or unset (off)")
    parser.add_argument("--train", action=argparse.BooleanOptionalAction, default=True,
                        help="also time a classifier train step (AdamW)")
    parser.add_argument("--compare_keras_hub", action="store_true",
                        help="also time KerasHub's BertBackbone / BertTextClassifier")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--json_out", default="bench/results/encoder.json",
                        help="where the JSON goes ('-' for stdout; the table then goes to stderr)")
    parser.add_argument("--stat", choices=STATS, default="median",
                        help="the tables' figure: median or best wall-clock rate, or the median "
                             "rate per CPU-second (the JSON has all three)")
    parser.add_argument("--report", metavar="JSON", help="print the tables of a saved run, no timing")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = set(args.models) - set(MODELS)
    if unknown:
        parser.error(f"unknown model(s) {sorted(unknown)}; choose from {', '.join(MODELS)}")
    return args


if __name__ == "__main__":
    main()
