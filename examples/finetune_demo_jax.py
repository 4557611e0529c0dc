"""`make demo-jax`: the fine-tuning half of `make demo` on JAX, in `.venv-jax`, where TensorFlow is not
installed.

The same command as `make demo`'s, with `KERAS_BACKEND=jax` and without `--export_dir` (the
SavedModel is TensorFlow's: the same command on TensorFlow exports these weights,
docs/backends.md#exporting): fine-tune the MiniLM weights on `examples/docstring_topics`,
evaluate on dev at every epoch, keep the best weights, and write what they predict on dev
(`eval_predictions.tsv`). Everything goes to --output_dir; running again starts over.
"""
import argparse
import importlib.util
import os
import shutil

from demo_steps import run, shown
from finetune_demo import (
    DATA,
    EXAMPLES,
    describe_data,
    majority_baseline,
    minilm_folder,
    read_split,
)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="out/demo/jax")
    parser.add_argument("--num_train_epochs", default="4")
    parser.add_argument("--learning_rate", default="1e-4")
    args = parser.parse_args()
    out = args.output_dir
    shutil.rmtree(out, ignore_errors=True)
    print(f"Keras backend: {os.environ.get('KERAS_BACKEND')}; TensorFlow installed here: "
          f"{importlib.util.find_spec('tensorflow') is not None}")
    train, dev = read_split("train"), read_split("dev")
    describe_data(train, dev)
    run("fine-tune MiniLM on the docstring topics on JAX, evaluate on dev",
        shown(EXAMPLES.parent / "run_classifier.py"), "--task_name=generic",
        f"--data_dir={shown(DATA)}", "--text_a_column=sentence", "--label_column=label",
        "--id_column=id", f"--init_checkpoint={minilm_folder()}", f"--output_dir={out}",
        "--do_train", "--do_eval", "--max_seq_length=64", "--train_batch_size=32",
        f"--learning_rate={args.learning_rate}", f"--num_train_epochs={args.num_train_epochs}")
    with open(os.path.join(out, "best", "eval_results.txt")) as f:
        results = {k: float(v) for k, _, v in (line.partition(" = ") for line in f)}
    label, floor = majority_baseline(train, dev)
    print(f"\ndev accuracy {results['eval_accuracy']:.3f} ({len(dev)} sentences, the best "
          f"weights: step {int(results['global_step'])}); always answering {label!r}, the most "
          f"frequent training label: {floor:.3f}")
    with open(os.path.join(out, "eval_predictions.tsv"), encoding="utf-8") as f:
        header, *rows = [line.rstrip("\n").split("\t") for line in f]
    print(f"\nthe first dev predictions ({shown(os.path.join(out, 'eval_predictions.tsv'))}):")
    print(f"  {'id':<34} {'prediction':<10} probability")
    for row in rows[:6]:
        probability = float(row[header.index(f"probability_{row[1]}")])
        print(f"  {row[0][:34]:<34} {row[1]:<10} {probability:.3f}")

if __name__ == "__main__":
    main()
