"""Each task's hooks in process, on real data: reading, feature conversion, decoding, scoring and
result files (`tasks/*/task.py` through the interface of `engine.task`), and the fine-tuning
driver itself (`engine.finetuning.finetune`) on a small run.

The model outputs fed to `predictions` are built from the gold labels, so a correct chain of
reading, conversion, decoding and scoring must give perfect scores and files that say the gold.
"""
import json
import math

import numpy as np
import pytest
from conftest import read_results, read_tsv
from reference_runs import glue_slice
from test_run_ner import conll_slice
from test_run_squad import paragraphs

from bert_tf2.data_gen.records import ShardedRecordWriter
from bert_tf2.engine.finetuning import FinetuneSettings, check_best_metric, finetune
from bert_tf2.engine.task import Setup
from bert_tf2.process.errors import SettingsError
from bert_tf2.tasks.classification.task import ClassificationTask
from bert_tf2.tasks.ner.task import NerTask
from bert_tf2.tasks.squad.task import SquadTask

SEQ = 64


def load(task, split, tmp_path):
    """What the driver does for a split: read, convert, write the records, load them back."""
    split.examples = task.read(split)
    path = str(tmp_path / f"{split.name}.tf_record")
    with ShardedRecordWriter([path]) as writer:
        for record in task.records(split):
            writer.write(record)
    split.features = task.load_features(path)
    return split


def settings(tmp_path, **values):
    values = {"max_seq_length": SEQ, "do_train": True, "do_eval": True, "do_predict": True,
              **values}
    return FinetuneSettings(output_dir=str(tmp_path), **values)


def prepared(task, tmp_path, vocab_file, tokenizer, max_seq_length=SEQ):
    task.check(settings(tmp_path, max_seq_length=max_seq_length))
    task.prepare(Setup(None, str(vocab_file), tokenizer, max_seq_length, True))
    return task



def test_classification_reads_scores_and_writes_as_the_gold_says(
        tmp_path, shared_data, vocab_file, tokenizer):
    data = glue_slice(shared_data, "MRPC", tmp_path / "data", {"train": 40, "dev": 30,
                                                               "test": 12})
    task = prepared(ClassificationTask("MRPC", str(data)), tmp_path, vocab_file, tokenizer)
    assert task.identity() == {"task": "mrpc", "processor_options": {}, "labels": ["0", "1"]}
    assert {"accuracy", "f1", "acc_and_f1", "main", "loss"} <= set(task.metric_names())
    dev = load(task, task.eval_splits()[0], tmp_path)
    assert dev.name == "dev" and dev.rows == len(dev.examples) == 30
    gold = np.array([int(example.label) for example in dev.examples])
    np.testing.assert_array_equal(dev.features["label_ids"], gold)
    logits = np.where(np.eye(2)[gold] > 0, 4.0, -4.0).astype(np.float32)
    predicted = task.predictions(dev, {"logits": logits, "example_index": np.arange(30)})
    scores = task.score(dev, predicted)
    assert scores["accuracy"] == scores["f1"] == scores["main"] == 1.0
    assert math.isclose(scores["loss"], math.log1p(math.exp(-8.0)), rel_tol=1e-6)
    task.write_eval_outputs(dev, predicted, str(tmp_path))
    rows = read_tsv(tmp_path / "eval_predictions.tsv")
    assert rows[0] == ["id", "prediction", "probability_0", "probability_1"]
    assert [row[1] for row in rows[1:]] == [str(g) for g in gold]
    assert [row[0] for row in rows[1:]] == [example.example_id for example in dev.examples]
    # The test split is unlabelled: its predictions file has a row per example.
    test = load(task, task.predict_splits()[0], tmp_path)
    assert not test.labelled and test.name == "test"
    logits = np.stack([np.zeros(12), np.linspace(-3, 3, 12)], axis=1).astype(np.float32)
    path = task.write_predictions(test, logits, str(tmp_path))
    # The original's layout: probabilities only, no header, one line per example.
    assert path.endswith("test_results.tsv")
    probabilities = np.loadtxt(path, delimiter="\t")
    expected = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(probabilities, expected, rtol=1e-6)
    rows = read_tsv(tmp_path / "test_predictions.tsv")
    assert rows[0] == ["id", "prediction", "probability_0", "probability_1"] and len(rows) == 13
    assert [row[1] for row in rows[1:]] == ["1" if x > 0 else "0" for x in logits[:, 1]]


def test_regression_scores_are_the_predicted_values(tmp_path, shared_data, vocab_file,
                                                    tokenizer):
    data = glue_slice(shared_data, "STS-B", tmp_path / "data", {"train": 10, "dev": 20})
    task = prepared(ClassificationTask("STS-B", str(data)), tmp_path, vocab_file, tokenizer)
    assert task.regression and task.identity()["labels"] == []
    dev = load(task, task.eval_splits()[0], tmp_path)
    gold = dev.features["label_ids"].astype(np.float64)
    np.testing.assert_allclose(gold, [float(example.label) for example in dev.examples])
    scores = task.score(dev, task.predictions(dev, {"logits": gold[:, None] * 2 + 1}))
    assert math.isclose(scores["pearson"], 1.0) and math.isclose(scores["spearman"], 1.0)
    assert math.isclose(scores["loss"], float(np.mean((gold + 1) ** 2)))


def test_squad_decodes_gold_spans_into_the_answers_and_the_originals_files(
        tmp_path, shared_data, vocab_file, tokenizer):
    squad = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(paragraphs(squad, 0, 3)), encoding="utf-8")
    task = SquadTask(str(path), str(path), doc_stride=48, max_query_length=32)
    prepared(task, tmp_path, vocab_file, tokenizer, max_seq_length=128)
    assert task.metric_names() == ["exact_match", "f1"] and task.main_metric == "f1"
    evaluation = load(task, task.eval_splits()[0], tmp_path)
    assert evaluation.labelled and evaluation.rows > len(evaluation.examples)  # long contexts
    # The training conversion of the same file marks each window's answer tokens (windows do
    # not depend on answers): logits peaking there must decode to the gold answers.
    (tmp_path / "train").mkdir()
    train = load(task, task.train_split(), tmp_path / "train")
    assert len(train.examples) == len(evaluation.examples)
    np.testing.assert_array_equal(train.features["input_ids"], evaluation.features["input_ids"])
    start = np.full((evaluation.rows, 128), -5.0, np.float32)
    end = np.full((evaluation.rows, 128), -5.0, np.float32)
    rows = np.arange(evaluation.rows)
    start[rows, train.features["start_positions"]] = 5.0
    end[rows, train.features["end_positions"]] = 5.0
    answers = task.predictions(evaluation, {"start_logits": start, "end_logits": end,
                                            "example_index": rows})
    # Each answer is the gold one, or (as in the original, where the gold answer is part of a
    # word the tokenizer keeps whole: "gold" in "golden", "8" in "20-18") the word holding it.
    for example in train.examples:
        assert example.orig_answer_text in answers.predictions[example.qas_id]
    scores = task.score(evaluation, answers)
    assert scores == {"exact_match": 92.5, "f1": 92.5, "total": 80}  # the 6 whole words above
    written = task.write_predictions(evaluation, answers, str(tmp_path))
    predictions = json.loads(open(written, encoding="utf-8").read())
    assert predictions == answers.predictions and len(predictions) == len(evaluation.examples)
    nbest = json.loads((tmp_path / "nbest_predictions.json").read_text(encoding="utf-8"))
    assert all(entries[0]["text"] == predictions[qid] for qid, entries in nbest.items())


def test_ner_reads_back_one_tag_per_word_and_scores_it(tmp_path, shared_data, vocab_file,
                                                       tokenizer):
    data = conll_slice(shared_data, tmp_path / "data", {"train.txt": 300, "valid.txt": 200})
    unlabelled = tmp_path / "test.txt"
    unlabelled.write_text("".join(line.split()[0] + "\n" if line.split() else line
                                  for line in (data / "valid.txt").open(encoding="utf-8")),
                          encoding="utf-8")
    tags = ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER"]
    task = NerTask(str(data), predict_file=str(unlabelled), given_labels=tags, doc_stride=8)
    prepared(task, tmp_path, vocab_file, tokenizer, max_seq_length=16)
    assert task.labels == tags and task.title == "NER (fine_tune, 9 tags, IOB2 tagging)"
    for key in ("eval_f1", "eval_accuracy", "eval_PER_f1", "eval_MISC_recall"):
        check_best_metric(task, key)
    for key in ("eval_f2", "eval_loss", "eval_PER_f2", "f1"):
        with pytest.raises(SettingsError, match=f"--best_metric={key}: evaluation writes "
                           r"eval_\*_f1, .*eval_recall \(\* stands for a name the data gives\)"):
            check_best_metric(task, key)
    evaluation = load(task, task.eval_splits()[0], tmp_path)
    assert evaluation.rows > len(evaluation.examples)  # long sentences take several windows
    predicted = task.predictions(evaluation, {
        "predicted_ids": np.maximum(evaluation.features["label_ids"], 0),
        "example_index": np.arange(evaluation.rows)})
    assert predicted == [sentence.labels for sentence in evaluation.examples]
    scores = task.score(evaluation, predicted)
    assert scores["f1"] == scores["precision"] == scores["recall"] == 1.0
    task.write_eval_outputs(evaluation, predicted, str(tmp_path))
    lines = [line.split() for line in (tmp_path / "eval_predictions.txt").read_text(
        encoding="utf-8").splitlines() if line]
    assert all(len(line) == 3 and line[1] == line[2] for line in lines)
    assert "accuracy: 100.00%" in (tmp_path / "eval_report.txt").read_text(encoding="utf-8")
    test = load(task, task.predict_splits()[0], tmp_path)
    assert not test.labelled
    path = task.write_predictions(test, predicted, str(tmp_path))
    assert all(len(line.split()) == 2 for line in open(path, encoding="utf-8") if line.strip())


@pytest.mark.integration
def test_the_driver_fine_tunes_evaluates_predicts_and_exports_in_process(
        tmp_path, shared_data, tiny_checkpoint):
    data = glue_slice(shared_data, "MRPC", tmp_path / "data", {"train": 32, "dev": 16,
                                                               "test": 8})
    out = tmp_path / "out"
    finetune(ClassificationTask("MRPC", str(data)), settings(
        out, init_checkpoint=str(tiny_checkpoint / "bert_model.ckpt"), train_batch_size=8,
        eval_batch_size=8, num_train_epochs=1.0, learning_rate=1e-3,
        export_dir=str(tmp_path / "export"), export_litert="none"))
    results = read_results(out / "eval_results.txt")
    assert results["global_step"] == 4 and 0.0 <= results["eval_accuracy"] <= 1.0
    assert read_results(out / "best" / "eval_results.txt") == results
    assert len(read_tsv(out / "eval_predictions.tsv")) == 17
    assert np.loadtxt(out / "test_results.tsv").shape == (8, 2)
    assert len(read_tsv(out / "test_predictions.tsv")) == 9
    assert (tmp_path / "export" / "saved_model.pb").is_file()
    run_config = json.loads((out / "run_config.json").read_text())
    assert run_config["identity"]["max_seq_length"] == SEQ
    assert run_config["training"]["num_train_steps"] == 4
    # A second run with another task in the same output_dir is refused before it writes.
    from bert_tf2.engine.run_config import RunConfigError

    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    cola = glue_slice(shared_data, "CoLA", tmp_path / "cola", {"train": 8, "dev": 8})
    with pytest.raises(RunConfigError, match="task was 'mrpc', now 'cola'"):
        finetune(ClassificationTask("CoLA", str(cola)), settings(
            out, init_checkpoint=str(tiny_checkpoint / "bert_model.ckpt")))
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before
