"""Multi-label classification: the JSON lines reader on the real Reuters-21578 files, the generic
task's label column, the loss, metrics and thresholds against hand and NumPy computations, and
run_classifier end to end on a Reuters slice down to a SavedModel served in a fresh process."""
import json

import numpy as np
import pytest
from conftest import read_results, read_tsv, run_script, serve_texts

from bert_tf2.data_gen.errors import DataError


def write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def processor():
    from bert_tf2.tasks.classification.processors import get_processor

    return get_processor("multilabel")


# ------------------------------------------------------------------------------------ reading
def test_reuters_files_are_documents_with_label_sets(shared_data):
    data = shared_data / "reuters21578"
    p = processor()
    labels = p.get_labels(str(data))
    assert labels == (data / "labels.txt").read_text().split()
    assert len(labels) == 90 and labels[:3] == ["acq", "alum", "barley"]
    train = p.get_examples(str(data), "train")
    dev, test = p.get_examples(str(data), "dev"), p.get_examples(str(data), "test")
    assert (len(train), len(dev), len(test)) == (6993, 777, 3019)
    first = json.loads((data / "train.jsonl").open().readline())
    assert (train[0].text_a, train[0].label, train[0].example_id) == (
        first["text"], tuple(first["labels"]), str(first["id"]))
    assert train[0].text_b is None and not p.is_pair(str(data))
    # 1.24 topics per document (the count; one document lists a topic twice and keeps
    # it once), and the test split's labels are not read.
    raw = [json.loads(line)["labels"] for line in (data / "train.jsonl").open()]
    assert sum(len(x) for x in raw) - sum(len(e.label) for e in train) == 1
    assert [e.label for e in train] == [tuple(dict.fromkeys(x)) for x in raw]
    assert np.mean([len(e.label) for e in train]) == pytest.approx(1.2357, abs=1e-4)
    assert all(e.label is None for e in test)


def test_without_labels_txt_the_labels_are_train_s_sorted(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [{"text": "a", "labels": ["wheat", "corn"]},
                                           {"text": "b", "labels": ["acq"]}, ""])
    write_jsonl(tmp_path / "dev.jsonl", [{"text": "c", "labels": ["corn", "corn"]}])
    p = processor()
    assert p.get_labels(str(tmp_path)) == ["acq", "corn", "wheat"]
    dev = p.get_examples(str(tmp_path), "dev")
    assert dev[0].label == ("corn",) and dev[0].example_id == "0"  # repeats count once


def test_text_b_makes_a_pair_task(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [{"text": "q", "text_b": "d", "labels": ["x"]}])
    p = processor()
    assert p.is_pair(str(tmp_path))
    (example,) = p.get_examples(str(tmp_path), "train")
    assert (example.text_a, example.text_b) == ("q", "d")


BAD_LINES = [
    ("not JSON", '{"text": "a", "labels": ["x"]', r"not JSON"),
    ("not an object", '["a", ["x"]]', r"a JSON object is expected, not list"),
    ("no text", '{"labels": ["x"]}', r"'text' must be a string, found missing"),
    ("text a number", '{"text": 3, "labels": ["x"]}', r"'text' must be a string, found a int"),
    ("no labels", '{"text": "a"}', r"'labels' must be a list of label names, found missing"),
    ("labels a string", '{"text": "a", "labels": "x"}', r"'labels' must be a list"),
    ("empty labels", '{"text": "a", "labels": []}', r"empty label list"),
    ("unknown label", '{"text": "a", "labels": ["x", "zz"]}',
     r"label 'zz' is not in the label set \(2 labels, .*labels.txt\)"),
]


@pytest.mark.parametrize("name,line,pattern", BAD_LINES, ids=[c[0] for c in BAD_LINES])
def test_a_bad_line_names_the_file_and_line(tmp_path, name, line, pattern):
    import re

    (tmp_path / "labels.txt").write_text("x\ny\n")
    write_jsonl(tmp_path / "train.jsonl", [{"text": "a", "labels": ["x"]}])
    path = write_jsonl(tmp_path / "dev.jsonl", [{"text": "ok", "labels": ["y"]}, "", line])
    with pytest.raises(DataError) as error:
        processor().get_examples(str(tmp_path), "dev")
    message = str(error.value)
    assert message.startswith(f"{path}:3: ") and "\n" not in message
    assert re.search(pattern, message), message


def test_invalid_utf8_and_a_repeated_label_file_line(tmp_path):
    (tmp_path / "labels.txt").write_text("x\ny\nx\n")
    write_jsonl(tmp_path / "train.jsonl", [{"text": "a", "labels": ["x"]}])
    with pytest.raises(DataError, match=r"labels.txt:3: label 'x' is listed twice"):
        processor().get_labels(str(tmp_path))
    (tmp_path / "labels.txt").write_text("x\n")
    (tmp_path / "train.jsonl").write_bytes(b'{"text": "caf\xe9", "labels": ["x"]}\n')
    with pytest.raises(DataError, match=r"train.jsonl:1: not UTF-8 text \(byte 0xe9"):
        processor().get_examples(str(tmp_path), "train")


def test_generic_label_column_holds_several_labels(tmp_path):
    from bert_tf2.tasks.classification.processors import get_processor

    (tmp_path / "train.tsv").write_text("text\ttopics\nrain and wheat\twheat|grain\nbank\tacq\n")
    (tmp_path / "test.tsv").write_text("text\ttopics\nsome text\t\n")
    p = get_processor("generic", text_a_column="text", label_column="topics", multi_label=True,
                      label_delimiter="|")
    assert p.is_multi_label and p.get_labels(str(tmp_path)) == ["acq", "grain", "wheat"]
    assert [e.label for e in p.get_examples(str(tmp_path), "train")] == [("wheat", "grain"),
                                                                        ("acq",)]
    assert p.get_examples(str(tmp_path), "test")[0].label is None
    (tmp_path / "dev.tsv").write_text("text\ttopics\nx\t\ny\twheat||acq\n")
    with pytest.raises(DataError, match=r"dev.tsv:2: empty label cell"):
        p.get_examples(str(tmp_path), "dev")
    (tmp_path / "dev.tsv").write_text("text\ttopics\ny\twheat||acq\n")
    with pytest.raises(DataError, match=r"dev.tsv:2: label cell 'wheat\|\|acq' has an empty"):
        p.get_examples(str(tmp_path), "dev")
    (tmp_path / "dev.tsv").write_text("text\ttopics\ny\twheat|corn\n")
    with pytest.raises(DataError, match=r"dev.tsv:2: label 'corn' is not one of acq, grain"):
        p.get_examples(str(tmp_path), "dev")
    with pytest.raises(ValueError, match="exclude each other"):
        get_processor("generic", text_a_column="t", label_column="l", multi_label=True,
                      regression=True)


# ------------------------------------------------------------------------------------ features
def test_label_sets_become_multi_hot_rows_and_back(tmp_path, tokenizer):
    from test_classification_features import write_records

    from bert_tf2.tasks.classification.features import example_records, load_features
    from bert_tf2.tasks.classification.reader import InputExample

    labels = ["acq", "corn", "grain", "wheat"]
    examples = [InputExample("t-0", "wheat and corn", None, ("wheat", "corn"), "0"),
                InputExample("t-1", "a merger", None, ("acq",), "1"),
                InputExample("t-2", "unlabelled", None, None, "2")]
    path = tmp_path / "f.tf_record"
    write_records(path, example_records(examples, labels, 16, tokenizer, multi_label=True))
    features = load_features(str(path), 16, regression=False, multi_label_size=4)
    assert features["label_ids"].dtype == np.float32
    np.testing.assert_array_equal(features["label_ids"], [[0, 1, 0, 1], [1, 0, 0, 0],
                                                           [0, 0, 0, 0]])


# ------------------------------------------------------------------------------------ math
def test_loss_is_the_mean_binary_cross_entropy():
    from bert_tf2.modeling.losses import multi_label_loss
    from bert_tf2.tasks.classification.task import ClassificationTask

    rng = np.random.default_rng(0)
    logits = rng.normal(0, 4, (6, 5)).astype(np.float32)
    logits[0, 0], logits[1, 1] = 60.0, -60.0  # saturated: the stable form stays finite
    targets = (rng.random((6, 5)) < 0.4).astype(np.float32)
    targets[0, 0], targets[1, 1] = 0.0, 1.0
    x = logits.astype(np.float64)
    # -z log(sigmoid x) - (1 - z) log(1 - sigmoid x), with log sigmoid x = -log(1 + e^-x).
    expected = np.mean(targets * np.logaddexp(0, -x) + (1 - targets) * np.logaddexp(0, x))
    assert float(multi_label_loss(logits, targets)) == pytest.approx(expected, rel=1e-6)
    assert expected > 60 / 30  # the saturated wrong answers dominate
    task = ClassificationTask()
    task.multi_label = True
    assert task.loss(logits, targets) == pytest.approx(expected, rel=1e-12)


def test_metrics_against_a_hand_count():
    from bert_tf2.tasks.classification.metrics import multi_label_metrics, per_label_metrics

    gold = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 0]])
    pred = np.array([[1, 0, 0], [1, 0, 1], [0, 1, 0], [0, 0, 0]])
    # label 0: tp 2; label 1: tp 1, fn 1; label 2: fp 1, never gold.
    per = per_label_metrics(gold, pred)
    np.testing.assert_allclose(per["precision"], [1, 1, 0])
    np.testing.assert_allclose(per["recall"], [1, 0.5, 0])
    np.testing.assert_allclose(per["f1"], [1, 2 / 3, 0])
    np.testing.assert_array_equal(per["support"], [2, 2, 0])
    m = multi_label_metrics(gold, pred)
    # pooled: tp 3, fp 1, fn 1 -> P = R = F1 = 0.75; macro = (1 + 2/3 + 0) / 3; exact rows 0, 2, 3.
    assert (m["micro_precision"], m["micro_recall"]) == (0.75, 0.75)
    assert m["micro_f1"] == m["main"] == 0.75
    assert m["macro_f1"] == pytest.approx(5 / 9)
    assert m["subset_accuracy"] == 0.75


def test_thresholds_tuned_by_hand():
    from bert_tf2.tasks.classification.thresholds import tune_thresholds

    probs = np.array([[0.9, 0.30, 0.2], [0.6, 0.35, 0.1], [0.2, 0.10, 0.4], [0.45, 0.6, 0.1]])
    gold = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 0], [1, 0, 0]])
    # Label 0 is gold where p in {0.9, 0.6, 0.45}, absent at 0.2: any cut in [0.20, 0.44] is
    # perfect; nearest 0.5 is 0.44. Label 1 is gold at 0.30 and 0.35, absent at 0.10 and 0.6:
    # cuts in [0.10, 0.29] give tp 2, fp 1 (F1 0.8), the best; nearest 0.5 is 0.29.
    # Label 2 has no gold document: it keeps the default.
    np.testing.assert_allclose(tune_thresholds(probs, gold, per_label=True), [0.44, 0.29, 0.5])
    # One cut for all: in [0.20, 0.29] every gold label is predicted (tp 5) with fp 2 (label 1's
    # 0.6, label 2's 0.4): F1 10/12; above 0.29 label 1's 0.30 is lost (tp 4, fp 2, fn 1: 8/11);
    # below 0.20 the 0.2s become false positives. Nearest 0.5: 0.29.
    np.testing.assert_allclose(tune_thresholds(probs, gold, per_label=False), [0.29] * 3)
    # A flat curve keeps the default.
    np.testing.assert_allclose(tune_thresholds(np.zeros((2, 2)), np.zeros((2, 2)), False),
                               [0.5, 0.5])


# ------------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def reuters_run(tmp_path_factory, shared_data, tiny_checkpoint):
    root = tmp_path_factory.mktemp("reuters")
    data = root / "data"
    data.mkdir()
    source = shared_data / "reuters21578"
    for split, count in (("train", 250), ("dev", 60), ("test", 30)):
        lines = (source / f"{split}.jsonl").read_text().splitlines()[:count]
        (data / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    (data / "labels.txt").write_text((source / "labels.txt").read_text())
    out = root / "out"
    flags = ["--task_name=multilabel", f"--data_dir={data}", f"--output_dir={out}",
             f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}", "--max_seq_length=64",
             "--train_batch_size=16", "--num_train_epochs=2", "--learning_rate=1e-3",
             "--eval_batch_size=16"]
    run = run_script("run_classifier.py", *flags, "--do_train", "--do_eval", "--do_predict",
                     "--tune_threshold=per_label", f"--export_dir={root / 'export'}",
                     "--export_litert=none")
    return {"root": root, "data": data, "out": out, "flags": flags, "log": run.stderr}



def gold_matrix(path, labels):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return np.array([[label in row["labels"] for label in labels] for row in rows], np.int64)


@pytest.mark.integration
def test_runner_scores_writes_and_thresholds(reuters_run):
    from bert_tf2.tasks.classification.metrics import multi_label_metrics, per_label_metrics

    out, data = reuters_run["out"], reuters_run["data"]
    labels = (data / "labels.txt").read_text().split()
    results = read_results(out / "eval_results.txt")
    assert {"eval_micro_f1", "eval_macro_f1", "eval_subset_accuracy", "eval_loss"} <= set(results)
    assert results["eval_main"] == results["eval_micro_f1"]
    # The dev predictions of the kept weights, rescored here from their probabilities.
    rows = read_tsv(out / "eval_predictions.tsv")
    assert rows[0] == ["id", "prediction", *(f"probability_{label}" for label in labels)]
    dev_ids = [str(json.loads(x)["id"]) for x in (data / "dev.jsonl").read_text().splitlines()]
    assert [row[0] for row in rows[1:]] == dev_ids
    probs = np.array([[float(v) for v in row[2:]] for row in rows[1:]])
    thresholds = read_tsv(out / "thresholds.tsv")
    assert [row[0] for row in thresholds[1:]] == labels
    limits = np.array([float(row[1]) for row in thresholds[1:]])
    decided = (probs > limits).astype(int)
    assert [row[1] for row in rows[1:]] == [",".join(np.array(labels)[d == 1]) for d in decided]
    gold = gold_matrix(data / "dev.jsonl", labels)
    # Tuned on this split, per label: no label's F1 is below its F1 at 0.5.
    tuned = per_label_metrics(gold, decided)["f1"]
    assert np.all(tuned >= per_label_metrics(gold, (probs > 0.5).astype(int))["f1"] - 1e-9)
    assert multi_label_metrics(gold, decided)["micro_f1"] >= results["eval_micro_f1"] - 1e-6
    table = read_tsv(out / "eval_per_label.tsv")
    assert table[0] == ["label", "precision", "recall", "f1", "support"]
    assert [row[0] for row in table[1:]] == labels
    assert [int(row[4]) for row in table[1:]] == gold.sum(0).tolist()
    np.testing.assert_allclose([float(row[3]) for row in table[1:]], tuned, atol=1e-6)
    # test_results.tsv: the original's layout, one probability per label, one line per document.
    test = np.loadtxt(out / "test_results.tsv", ndmin=2)
    assert test.shape == (30, 90)
    predictions = read_tsv(out / "test_predictions.tsv")
    np.testing.assert_allclose(test, [[float(v) for v in row[2:]] for row in predictions[1:]],
                               atol=1e-6)
    assert "thresholds tuned on dev (per_label)" in reuters_run["log"]


SERVE = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401
model = tf.saved_model.load(sys.argv[1])
out = model.signatures["serve_text"](text_a=tf.constant(json.load(open(sys.argv[2]))))
print(json.dumps({"probabilities": out["probabilities"].numpy().tolist(),
                  "predicted": out["predicted"].numpy().tolist(),
                  "labels": [x.decode() for x in out["labels"].numpy()],
                  "modules": sorted(m for m in ("modeling", "data_gen") if m in sys.modules)}))
"""


@pytest.mark.integration
def test_saved_model_serves_the_runner_s_probabilities_and_sets(reuters_run, tmp_path):
    texts = [json.loads(x)["text"] for x in
             (reuters_run["data"] / "test.jsonl").read_text().splitlines()]
    served = serve_texts(SERVE, str(reuters_run["root"] / "export"), texts, tmp_path)
    assert served["modules"] == []
    rows = read_tsv(reuters_run["out"] / "test_predictions.tsv")[1:]
    np.testing.assert_allclose(served["probabilities"], [[float(v) for v in row[2:]]
                                                         for row in rows], atol=2e-5)
    assert served["labels"] == [row[1] for row in rows]
    assert any(served["labels"])  # the tuned thresholds (under 0.5 here) predict some labels
    labels = (reuters_run["data"] / "labels.txt").read_text().split()
    assert [",".join(np.array(labels)[np.array(p) == 1]) for p in served["predicted"]] == \
        served["labels"]


@pytest.mark.integration
def test_runner_refuses_a_bad_line_and_a_threshold_without_dev(reuters_run, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.jsonl", "labels.txt"):
        (data / name).write_bytes((reuters_run["data"] / name).read_bytes())
    write_jsonl(data / "dev.jsonl", [{"text": "a", "labels": ["earn"]}, {"text": "b",
                                                                         "labels": ["pork"]}])
    flags = [f for f in reuters_run["flags"] if not f.startswith(("--data_dir", "--output_dir"))]
    bad = run_script("run_classifier.py", *flags, f"--data_dir={data}",
                     f"--output_dir={tmp_path / 'out'}", "--do_eval", check=False)
    last = bad.stderr.strip().splitlines()[-1]
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert last == (f"run_classifier.py: error: {data / 'dev.jsonl'}:2: label 'pork' is not in "
                    f"the label set (90 labels, {data / 'labels.txt'})")
    assert not (tmp_path / "out").exists()
    refused = run_script("run_classifier.py", *flags, f"--data_dir={data}",
                         f"--output_dir={tmp_path / 'out'}", "--do_predict",
                         "--tune_threshold=global", check=False)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].endswith(
        "--tune_threshold=global tunes on the dev split: add --do_eval")


@pytest.mark.integration
def test_batch_predict_takes_the_multi_label_export(reuters_run, tmp_path):
    texts = [json.loads(x)["text"] for x in
             (reuters_run["data"] / "test.jsonl").read_text().splitlines()]
    write_jsonl(tmp_path / "in.jsonl", [{"text_a": text} for text in texts])
    run_script("batch_predict.py", f"--saved_model={reuters_run['root'] / 'export'}",
               f"--input_file={tmp_path / 'in.jsonl'}", f"--output_file={tmp_path / 'o.jsonl'}",
               "--batch_size=7")
    lines = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    rows = read_tsv(reuters_run["out"] / "test_predictions.tsv")[1:]
    assert [line["labels"] for line in lines] == [row[1] for row in rows]
    np.testing.assert_allclose([line["probabilities"] for line in lines],
                               [[float(v) for v in row[2:]] for row in rows], atol=2e-5)


@pytest.mark.integration
def test_generic_tsv_with_multi_label_through_the_runner(reuters_run, tmp_path):
    """`--task_name=generic --multi_label`: a TSV whose label column holds `a|b`; the labels are
    learned from train, and the run's identity records the options (a single-label generic run's
    identity keeps its earlier keys)."""
    data = tmp_path / "data"
    data.mkdir()
    rows = [json.loads(x) for x in (reuters_run["data"] / "train.jsonl").open()]
    known = {label for r in rows[:32] for label in r["labels"]}
    rows = rows[:32] + [r for r in rows[32:] if set(r["labels"]) <= known][:16]
    for split, part in (("train", rows[:32]), ("dev", rows[32:])):
        (data / f"{split}.tsv").write_text("text\ttopics\n" + "".join(
            " ".join(r["text"].split())[:400] + "\t" + "|".join(r["labels"]) + "\n"
            for r in part))
    flags = [f for f in reuters_run["flags"] if not f.startswith(
        ("--data_dir", "--output_dir", "--task_name"))]
    out = tmp_path / "out"
    run_script("run_classifier.py", *flags, "--task_name=generic", f"--data_dir={data}",
               f"--output_dir={out}", "--text_a_column=text", "--label_column=topics",
               "--multi_label", "--label_delimiter=|", "--do_train", "--do_eval")
    config = json.loads((out / "run_config.json").read_text())
    labels = sorted({label for r in rows[:32] for label in r["labels"]})
    assert config["identity"]["labels"] == labels
    assert config["identity"]["processor_options"]["multi_label"] is True
    assert config["identity"]["processor_options"]["label_delimiter"] == "|"
    table = read_tsv(out / "eval_per_label.tsv")
    assert [row[0] for row in table[1:]] == labels
    gold = [[label in r["labels"] for label in labels] for r in rows[32:]]
    assert [int(row[4]) for row in table[1:]] == np.sum(gold, 0).tolist()
    assert "eval_micro_f1" in read_results(out / "eval_results.txt")


@pytest.mark.integration
def test_label_bias_starts_at_the_training_log_odds(reuters_run):
    """--init_label_bias: a fresh head's biases are log(p / (1 - p)) of each label's share of the
    training documents (kept within [1e-4, 1 - 1e-4])."""
    from conftest import TINY

    from bert_tf2.engine.task import Split
    from bert_tf2.modeling.config import BertConfig
    from bert_tf2.tasks.classification.task import ClassificationTask, label_log_odds

    np.testing.assert_allclose(label_log_odds([0.5, 0.1, 0.0, 1.0]),
                               [0.0, np.log(1 / 9), np.log(1e-4 / (1 - 1e-4)),
                                np.log((1 - 1e-4) / 1e-4)], rtol=1e-6)
    data = reuters_run["data"]
    labels = (data / "labels.txt").read_text().split()
    task = ClassificationTask("multilabel", str(data), init_label_bias=True)
    from bert_tf2.tasks.classification.processors import get_processor

    task.processor, task.multi_label, task.labels = get_processor("multilabel"), True, labels
    task.read(Split("train", [str(data / "train.jsonl")]))
    rows = [json.loads(x)["labels"] for x in (data / "train.jsonl").open()]
    shares = np.array([sum(label in r for r in rows) for label in labels]) / len(rows)
    model = task.build_model(BertConfig.from_dict(TINY))
    bias = model.head.projection.output_bias.numpy()
    np.testing.assert_allclose(bias, label_log_odds(shares), rtol=1e-6)
    assert bias[labels.index("earn")] > -2 > bias[labels.index("yen")]  # common vs rare
    refused = run_script("run_classifier.py", "--task_name=MRPC", "--data_dir=/nonexistent",
                         "--output_dir=/tmp/never-written", "--init_checkpoint=/nonexistent",
                         "--do_train", "--init_label_bias", check=False)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].endswith(
        "--init_label_bias applies to multi-label tasks (--task_name=multilabel, or generic with "
        "--multi_label)")
