"""`make demo`'s fine-tuning half: its labelled data is what its README says and what its builder
makes, and the serving script answers with the exported model's own predictions from a process
that holds nothing of this project. The whole half on the real MiniLM weights is `slow`."""
import collections
import csv
import importlib.util
import json
import re
import subprocess
import sys

import pytest
from conftest import REPO, read_results, run_script

EXAMPLES = REPO / "examples"
DATA = EXAMPLES / "docstring_topics"
LABELS = ["math", "text", "files", "time", "network"]


def load_example(name):
    """A script of examples/ as a module (they import each other as scripts do)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(EXAMPLES))


def read_split(folder, split):
    with open(folder / f"{split}.tsv", encoding="utf-8", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def test_committed_data_has_the_counts_its_readme_gives():
    table = {}
    for line in (DATA / "README.md").read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| `(\w+)\.tsv` \| (.+) \|$", line)
        if match:
            table[match.group(1)] = [int(n) for n in match.group(2).split(" | ")]
    assert set(table) == {"train", "dev"}
    for split, (total, *per_label) in table.items():
        rows = read_split(DATA, split)
        assert rows[0] == ["id", "label", "sentence"]
        counts = collections.Counter(label for _, label, _ in rows[1:])
        assert len(rows) - 1 == total
        assert [counts[label] for label in LABELS] == per_label


def test_committed_data_follows_the_builders_rules():
    make_data = load_example("docstring_topics/make_data")
    assert list(make_data.MODULES) == LABELS
    sentences = {}
    for split in ("train", "dev"):
        for name, label, sentence in read_split(DATA, split)[1:]:
            modules = make_data.MODULES[label]
            assert any(name.startswith(m + ".") for m in modules), f"{name} is not {label}'s"
            assert len(sentence.split()) >= 4 and "->" not in sentence, sentence
            assert sentence == " ".join(sentence.split())
            assert sentence not in sentences, f"{sentence!r} in {split} and {sentences[sentence]}"
            sentences[sentence] = split
    # Spot checks against this interpreter's own docstrings.
    assert make_data.summary(__import__("math").sqrt.__doc__) == "Return the square root of x."
    assert make_data.summary("sleep(seconds)\n\nDelay execution for a given number of seconds.  "
                             "The argument may be\na float.") == (
        "Delay execution for a given number of seconds.")


@pytest.mark.integration
def test_builder_remakes_the_committed_files(tmp_path):
    if (sys.version_info[:2], sys.platform) != ((3, 11), "linux"):
        pytest.skip(f"the files were made by Python 3.11 on linux, whose docstrings differ from "
                    f"Python {sys.version_info[0]}.{sys.version_info[1]} on {sys.platform}")
    subprocess.run([sys.executable, str(DATA / "make_data.py"), f"--output_dir={tmp_path}"],
                   check=True, capture_output=True)
    for split in ("train", "dev"):
        assert (tmp_path / f"{split}.tsv").read_bytes() == (DATA / f"{split}.tsv").read_bytes()


def test_majority_baseline_of_the_committed_data():
    demo = load_example("finetune_demo")
    train, dev = demo.read_split("train"), demo.read_split("dev")
    # math, files and network tie at 160 training rows: the first in sorted order answers.
    assert demo.majority_baseline(train, dev) == ("files", 40 / 168)


def test_readme_shows_the_demos_sentences_with_the_right_labels():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"\n  label +probability +sentence\n(.*?)\n```", readme, re.S).group(1)
    rows = [line.split(maxsplit=2) for line in block.splitlines()]
    demo = load_example("finetune_demo")
    assert [sentence for _, _, sentence in rows] == demo.SENTENCES
    assert [label for label, _, _ in rows] == [label for label in LABELS for _ in range(2)]
    assert all(0.2 < float(probability) <= 1 for _, probability, _ in rows)


@pytest.mark.integration
def test_a_step_prints_the_command_it_runs(capfd):
    steps = load_example("demo_steps")
    seconds = steps.run("say hello", "-c", "print('hello')")
    out = capfd.readouterr().out
    assert out.startswith(f"\n== say hello\n$ {steps.shown(sys.executable)} -c ")
    assert "'print('\"'\"'hello'\"'\"')'" in out  # as a shell would need it quoted
    assert "hello\n(" in out and seconds >= 0
    with pytest.raises(SystemExit, match="step failed"):
        steps.run("fail", "-c", "raise SystemExit(3)")


SERVE = r"""
import json, runpy, sys
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
print(json.dumps(sorted(m for m in ("modeling", "data_gen", "engine", "tasks", "runner_flags")
                        if m in sys.modules)))
"""


@pytest.fixture(scope="module")
def topics_run(tiny_checkpoint, tmp_path_factory):
    """A tiny BERT fine-tuned a little on the demo's data and exported."""
    out = tmp_path_factory.mktemp("topics") / "out"
    run_script("run_classifier.py", "--task_name=generic", f"--data_dir={DATA}",
               "--text_a_column=sentence", "--label_column=label", "--id_column=id",
               f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}", f"--output_dir={out}",
               "--do_train", "--do_eval", "--num_train_steps=8", "--learning_rate=1e-3",
               "--max_seq_length=64", f"--export_dir={out / 'serving'}")
    assert read_results(out / "eval_results.txt")["global_step"] == 8
    return out


@pytest.mark.integration
def test_classify_text_prints_the_exported_models_predictions(topics_run, tmp_path):
    out = topics_run
    dev = read_split(DATA, "dev")[1:]
    predicted = {row[0]: row for row in read_split(out, "eval_predictions")[1:]}
    picked = dev[::40]  # 5 sentences, one of each label
    wrapper = tmp_path / "serve.py"
    wrapper.write_text(SERVE)
    result = subprocess.run([sys.executable, str(wrapper), str(EXAMPLES / "classify_text.py"),
                             str(out / "serving"), *[row[2] for row in picked]],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    *lines, modules = result.stdout.strip().splitlines()
    assert json.loads(modules) == []  # nothing of this project
    assert lines[0].split() == ["label", "probability", "sentence"]
    header = read_split(out, "eval_predictions")[0]
    for line, (name, _, sentence) in zip(lines[1:], picked, strict=True):
        label, probability, text = line.split(maxsplit=2)
        row = predicted[name]
        assert (label, text) == (row[1], sentence)
        # The script prints 2 decimals of the same float32 probability.
        assert abs(float(probability) - float(row[header.index("probability_" + label)])) <= (
            0.005 + 1e-6)


@pytest.mark.integration
def test_classify_text_fast_prints_the_litert_int8_answers(topics_run):
    """--fast: the export's LiteRT int8 file, without TensorFlow, gives the runner's labels and
    its probabilities within int8's drift."""
    out = topics_run
    dev = read_split(DATA, "dev")[1:]
    predicted = {row[0]: row for row in read_split(out, "eval_predictions")[1:]}
    header = read_split(out, "eval_predictions")[0]
    picked = dev[::40]
    code = ("import runpy, sys; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__'); "
            "print('tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code, str(EXAMPLES / "classify_text.py"),
                             "--fast", str(out / "serving"), *[row[2] for row in picked]],
                            capture_output=True, text=True, cwd=out)
    assert result.returncode == 0, result.stderr[-3000:]
    *lines, tensorflow_loaded = result.stdout.strip().splitlines()
    assert tensorflow_loaded == "False"
    assert lines[0].split() == ["label", "probability", "sentence"]
    for line, (name, _, sentence) in zip(lines[1:], picked, strict=True):
        label, probability, text = line.split(maxsplit=2)
        row = predicted[name]
        assert (label, text) == (row[1], sentence)
        assert abs(float(probability) - float(row[header.index("probability_" + label)])) <= 0.02


@pytest.mark.slow
def test_finetuning_half_on_minilm_learns_and_serves(minilm_dir, tmp_path):
    """The demo's own command: real weights, the committed data, the served answers."""
    result = subprocess.run([sys.executable, str(EXAMPLES / "finetune_demo.py"),
                             f"--output_dir={tmp_path / 'finetune'}"],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    accuracy = read_results(tmp_path / "finetune" / "best" / "eval_results.txt")["eval_accuracy"]
    assert accuracy >= 0.85  # always answering one label scores 0.238
    answers = re.split(r"\n +label +probability +sentence\n", result.stdout)[1].splitlines()
    served = [line.split(maxsplit=2) for line in answers if line.startswith("  ")]
    # What the README shows: the same labels, and probabilities within round-off of another CPU.
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"\n  label +probability +sentence\n(.*?)\n```", readme, re.S).group(1)
    shown = [line.split(maxsplit=2) for line in block.splitlines()]
    assert [(label, text) for label, _, text in served] == [
        (label, text) for label, _, text in shown], answers
    for (_, probability, _), (_, expected, _) in zip(served, shown, strict=True):
        assert abs(float(probability) - float(expected)) <= 0.03, answers
