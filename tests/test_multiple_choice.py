"""Multiple choice (`tasks/multiple_choice`, `run_multiple_choice.py`): the SWAG reader on the real
rows, generic JSON lines with 2, 3 and 5 choices, one-line errors for bad input, the pairs packed
as the original packs a sentence pair, masked choices, the "next sentence" set builder, and the
runner end to end with its SavedModel checked against `--do_predict` in a fresh process."""
import collections
import csv
import dataclasses
import json
import sys

import numpy as np
import pytest
from conftest import run_script, tensorflow_only

from bert_tf2.data_gen.errors import DataError
from bert_tf2.engine.task import Split
from bert_tf2.tasks.classification.features import convert_example as classifier_example
from bert_tf2.tasks.classification.reader import InputExample
from bert_tf2.tasks.multiple_choice import features, next_sentence
from bert_tf2.tasks.multiple_choice.reader import has_labels, read_examples
from bert_tf2.tasks.multiple_choice.task import MASKED_LOGIT, MultipleChoiceTask

SWAG_HEADER = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2," \
              "ending3,label"


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def generic_rows(count=24, labelled=True):
    rows = []
    for i in range(count):
        n = (2, 3, 5)[i % 3]
        row = {"id": f"q{i}", "context": f"The number {i} is small.",
               "question": "Which is it?" if i % 2 else "",
               "choices": [f"option {j} of {n}" for j in range(n)], "label": i % n}
        if not labelled:
            del row["label"]
        rows.append(row)
    return rows


def test_swag_reader_reads_the_real_rows_exactly(shared_data):
    path = shared_data / "swag_sample" / "val_first91.csv"
    examples = read_examples(str(path), "swag")
    assert len(examples) == 91
    assert collections.Counter(e.label for e in examples) == {0: 20, 1: 19, 2: 30, 3: 22}
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    for example, row in zip(examples, rows):
        assert example.example_id == row[""]
        assert example.context == row["sent1"] and example.question == row["sent2"]
        assert example.choices == tuple(row[f"ending{i}"] for i in range(4))
        assert example.label == int(row["label"])
    first = examples[0]
    assert first.pair_texts()[2] == "She walks slowly towards someone."
    assert first.line == 2 and has_labels(str(path), "swag")


def test_generic_reader_takes_any_number_of_choices(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", generic_rows(6))
    examples = read_examples(str(path), "generic")
    assert [len(e.choices) for e in examples] == [2, 3, 5, 2, 3, 5]
    assert examples[1].pair_texts()[0] == "Which is it? option 0 of 3"
    assert examples[0].pair_texts()[0] == "option 0 of 2"  # no question: the choice alone
    unlabelled = write_jsonl(tmp_path / "test.jsonl", generic_rows(3, labelled=False))
    assert not has_labels(str(unlabelled), "generic")
    assert [e.label for e in read_examples(str(unlabelled), "generic", labelled=False)] == \
        [None] * 3


SWAG_ROW = '0,vid,1,A man sits. He,A man sits.,He,gold,eats.,runs.,sleeps.,reads.,{label}'


@pytest.mark.parametrize("name,text,message", [
    ("empty.csv", "", "empty file"),
    ("missing_ending.csv", SWAG_HEADER + "\n" + SWAG_ROW.replace("runs.", "").format(label=1),
     ":2: choice 1 is empty"),
    ("ragged.csv", SWAG_HEADER + "\n" + SWAG_ROW.format(label=1) + "\n0,vid,1,short\n",
     ":3: 4 fields, the header has 12"),
    ("label.csv", SWAG_HEADER + "\n" + SWAG_ROW.format(label=4), ":2: label 4 is outside 0..3"),
    ("word.csv", SWAG_HEADER + "\n" + SWAG_ROW.format(label="two"), ":2: label 'two' is not"),
    ("header.csv", "a,b,c\n1,2,3\n", ":1: no column sent1"),
    ("few.jsonl", '{"context": "c", "choices": ["only"], "label": 0}\n',
     ":1: 1 choice(s); an example needs 2 or more"),
    ("bad.jsonl", '{"context": "c", "choices": ["a", "b"], "label": 0}\n{oops\n',
     ":2: not a JSON object"),
    ("nolabel.jsonl", '{"context": "c", "choices": ["a", "b"]}\n', ":1: no 'label'"),
    ("outside.jsonl", '{"context": "c", "choices": ["a", "b"], "label": 2}\n',
     ":1: label 2 is outside 0..1"),
])
def test_bad_input_names_the_file_and_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError) as error:
        read_examples(str(path), "swag" if name.endswith(".csv") else "generic")
    assert str(error.value).startswith(str(path)) and message in str(error.value)


def test_each_choice_is_packed_as_the_original_packs_a_pair(tmp_path, tokenizer):
    path = write_jsonl(tmp_path / "train.jsonl", generic_rows(3))
    examples = read_examples(str(path), "generic")
    long = dataclasses.replace(examples[2], context=" ".join(["context"] * 40))  # truncated
    for example in (*examples, long):
        row = features.convert_example(example, 7, 5, 32, tokenizer)
        ids = np.array(row["input_ids"]).reshape(5, 32)
        for i, second in enumerate(example.pair_texts()):
            expected = classifier_example(InputExample("x", example.context, second, None, "x"),
                                          0, None, 32, tokenizer)
            assert ids[i].tolist() == expected["input_ids"]
            assert np.array(row["segment_ids"]).reshape(5, 32)[i].tolist() == \
                expected["segment_ids"]
        assert row["choice_mask"] == [1] * len(example.choices) + [0] * (5 - len(example.choices))
        assert not ids[len(example.choices):].any()  # padded choices are all zeros
    with pytest.raises(DataError, match="5 choices, more than the 3"):
        features.convert_example(examples[2], 0, 3, 32, tokenizer)


def test_choices_an_example_lacks_are_never_picked():
    batch = {"input_ids": np.zeros((2, 3, 4), np.int32), "input_mask": np.ones((2, 3, 4), np.int32),
             "segment_ids": np.zeros((2, 3, 4), np.int32),
             "choice_mask": np.array([[1, 1, 0], [1, 1, 1]]), "label_ids": np.array([1, 2]),
             "example_index": np.array([0, 1])}

    def model(inputs, training):  # the padded choice of example 0 would win unmasked
        return {"logits": np.array([[0.0, 1.0, 9.0], [0.0, 1.0, 2.0]], np.float32)}

    task = MultipleChoiceTask()
    logits = np.asarray(task.predict_step(model, batch)["logits"])
    assert logits[0, 2] == MASKED_LOGIT and logits.argmax(-1).tolist() == [1, 2]
    loss, metrics = task.loss_and_metrics(model, batch, training=False)
    expected = -np.mean([np.log(np.exp(1) / (1 + np.exp(1))),
                         np.log(np.exp(2) / (1 + np.exp(1) + np.exp(2)))])
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert [float(v) for v in metrics["accuracy"]] == [2.0, 2.0]
    split = Split("eval", [], features={"label_ids": np.array([1, 2])})
    assert task.score(split, logits)["accuracy"] == 1.0


def test_next_sentence_set_has_the_true_sentence_and_three_distractors():
    documents = [[f"d{d} sentence {i} ." for i in range(n)] for d, n in enumerate((6, 2, 9))]
    rows = next_sentence.make_examples(documents, seed=3)
    assert len(rows) == 5 + 1 + 8
    assert rows == next_sentence.make_examples(documents, seed=3)  # deterministic
    for video, position, context, sent1, sent2, _, *endings, label in rows:
        d, i = int(video[3:]), int(position)
        assert endings[int(label)] == documents[d][i]
        assert context == sent1 and context.endswith(documents[d][i - 1]) and sent2 == ""
        assert len(set(endings)) == 4 and all(e not in context for e in endings)
        if len(documents[d]) >= 6:  # enough sentences: distractors from the same document
            assert all(e.startswith(f"d{d} ") for e in endings)
    assert len(next_sentence.make_examples(documents, seed=3, max_examples=4)) == 4
    assert collections.Counter(row[-1] for row in rows).keys() <= {"0", "1", "2", "3"}


@pytest.mark.integration
def test_generic_runner_trains_on_two_three_and_five_choices(tmp_path, tiny_checkpoint):
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "train.jsonl", generic_rows(24))
    write_jsonl(data / "val.jsonl", generic_rows(12))
    write_jsonl(data / "test.jsonl", generic_rows(9, labelled=False))
    out = tmp_path / "out"
    run = run_script("run_multiple_choice.py", "--task_name=generic", f"--data_dir={data}",
                     f"--output_dir={out}", f"--init_checkpoint={tiny_checkpoint}",
                     "--max_seq_length=32", "--train_batch_size=8", "--num_train_epochs=2",
                     "--learning_rate=1e-3", "--do_train", "--do_eval", "--do_predict")
    assert "multiple choice (generic, 5 choices)" in run.stderr
    assert "evaluation at step 6 (epoch 2.00)" in run.stderr
    results = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text()
                   .splitlines())
    assert set(results) == {"eval_accuracy", "eval_loss", "global_step"}
    rows = list(csv.reader(open(out / "test_predictions.tsv", encoding="utf-8"), delimiter="\t"))
    assert rows[0] == ["id", "prediction", *(f"probability_{i}" for i in range(5))]
    np.testing.assert_allclose(np.loadtxt(out / "test_results.tsv", delimiter="\t"),
                               [[float(p) for p in row[2:]] for row in rows[1:]], atol=5e-7)
    assert [row[0] for row in rows[1:]] == [f"q{i}" for i in range(9)]
    for i, row in enumerate(rows[1:]):
        probabilities = [float(p) for p in row[2:]]
        n = (2, 3, 5)[i % 3]
        assert all(p == 0.0 for p in probabilities[n:])  # choices it lacks: never picked
        assert sum(probabilities) == pytest.approx(1.0, abs=1e-5) and int(row[1]) < n


EXPORT_CHECK = r"""
import csv, json, sys
import tensorflow as tf, tensorflow_text  # noqa: F401
model = tf.saved_model.load(sys.argv[1])
requests = json.load(open(sys.argv[2]))
out = model.signatures["serving_default"](
    context=tf.constant(requests["context"]), question=tf.constant(requests["question"]),
    choices=tf.constant(requests["choices"]))
print(json.dumps({"probabilities": out["probabilities"].numpy().tolist(),
                  "choice": out["choice"].numpy().tolist()}))
"""


@pytest.mark.integration
def test_swag_runner_and_its_export_agree_from_raw_strings(tmp_path, shared_data,
                                                           tiny_checkpoint):
    swag = shared_data / "swag_sample" / "val_first91.csv"
    lines = swag.read_text(encoding="utf-8").splitlines()
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("\n".join(lines[:41]) + "\n", encoding="utf-8")
    out, export = tmp_path / "out", tmp_path / "export"
    run_script("run_multiple_choice.py", "--task_name=swag", f"--data_dir={data}",
               f"--eval_file={swag}", f"--predict_file={swag}", f"--output_dir={out}",
               f"--init_checkpoint={tiny_checkpoint}", "--max_seq_length=48",
               "--train_batch_size=8", "--num_train_epochs=1", "--learning_rate=1e-3",
               "--do_train", "--do_eval", "--do_predict", f"--export_dir={export}")
    assert (export / "litert" / "int8.tflite").is_file()  # its fast path (tests/test_litert.py)
    examples = read_examples(str(swag), "swag")
    requests = {"context": [e.context for e in examples], "question": [e.question for e in examples],
                "choices": [list(e.choices) for e in examples]}
    (tmp_path / "requests.json").write_text(json.dumps(requests))
    served = tensorflow_only([sys.executable, "-c", EXPORT_CHECK, export,
                              tmp_path / "requests.json"], cwd=tmp_path)
    assert served.returncode == 0, served.stderr[-3000:]
    served = json.loads(served.stdout.strip().splitlines()[-1])
    rows = list(csv.reader(open(out / "test_predictions.tsv", encoding="utf-8"),
                           delimiter="\t"))[1:]
    assert [int(row[1]) for row in rows] == served["choice"]
    np.testing.assert_allclose([[float(p) for p in row[2:]] for row in rows],
                               served["probabilities"], atol=1e-5)
    # A bad file is refused in one line with its name and line, before any training.
    bad = data / "bad.csv"
    bad.write_text(lines[0] + "\n" + lines[1].rsplit(",", 1)[0] + ",7\n", encoding="utf-8")
    result = run_script("run_multiple_choice.py", "--task_name=swag", f"--eval_file={bad}",
                        f"--output_dir={tmp_path / 'bad'}", f"--init_checkpoint={out}",
                        f"--vocab_file={tiny_checkpoint / 'vocab.txt'}",
                        f"--bert_config_file={tiny_checkpoint / 'bert_config.json'}",
                        "--max_seq_length=48", "--do_eval", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"run_multiple_choice.py: error: {bad}:2: label 7 is outside 0..3\n" in result.stderr
