"""run_classifier.py end to end on slices of the real GLUE files, with a small random BERT.

The model is small (2 layers, hidden 32) but has the real uncased vocabulary, so the whole path is
the real one: GLUE TSV -> cached features -> training with evaluation every epoch -> best
checkpoint -> dev predictions, test_results.tsv -> SavedModel, which a fresh process that imports
only tensorflow and tensorflow_text must use to give the runner's dev predictions from raw strings.
"""
import csv
import os
import shutil

import numpy as np
import pytest
from conftest import read_results, read_tsv, run_script, serve_texts
from reference_runs import glue_slice


def run_classifier(*flags, check=True):
    return run_script("run_classifier.py", *flags, check=check)



results = read_results


@pytest.fixture(scope="module")
def mrpc_run(tmp_path_factory, shared_data, tiny_checkpoint):
    root = tmp_path_factory.mktemp("mrpc")
    data = glue_slice(shared_data, "MRPC", root / "data", {"train": 96, "dev": 40, "test": 24})
    out = root / "out"
    flags = ["--task_name=MRPC", f"--data_dir={data}", f"--output_dir={out}",
             f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}",
             "--max_seq_length=64", "--train_batch_size=16", "--num_train_epochs=2",
             "--learning_rate=1e-3", "--eval_batch_size=16"]
    first = run_classifier(*flags, "--do_train", "--do_eval", "--do_predict",
                           f"--export_dir={root / 'export'}", "--export_litert=none")
    return {"root": root, "data": data, "out": out, "flags": flags, "log": first.stderr}


@pytest.mark.integration
def test_training_evaluates_every_epoch_and_keeps_the_best(mrpc_run):
    out, log = mrpc_run["out"], mrpc_run["log"]
    # 96 examples at batch 16: 6 steps an epoch, 12 in all, evaluated at steps 6 and 12.
    assert "evaluation at step 6 (epoch 1.00)" in log
    assert "evaluation at step 12 (epoch 2.00)" in log
    final = results(out / "eval_results.txt")
    assert final["global_step"] == 12
    assert set(final) >= {"eval_accuracy", "eval_f1", "eval_acc_and_f1", "eval_loss", "eval_main"}
    best = results(out / "best" / "eval_results.txt")
    assert best["global_step"] in (6, 12)
    assert best["eval_main"] >= final["eval_main"]
    # The dev predictions file is what the kept (best) weights predict; its accuracy is best's.
    gold = [row[0] for row in read_tsv(mrpc_run["data"] / "dev.tsv")[1:]]
    rows = read_tsv(out / "eval_predictions.tsv")
    assert rows[0] == ["id", "prediction", "probability_0", "probability_1"]
    predicted = [row[1] for row in rows[1:]]
    assert len(predicted) == 40
    accuracy = np.mean([p == g for p, g in zip(predicted, gold)])
    assert accuracy == pytest.approx(best["eval_accuracy"], abs=1e-9)
    for row in rows[1:]:
        assert float(row[2]) + float(row[3]) == pytest.approx(1.0, abs=2e-6)
    # TensorBoard got the evaluations too.
    assert any(name.startswith("events") for name in os.listdir(out / "eval"))


@pytest.mark.integration
def test_test_results_map_back_to_the_files_ids(mrpc_run):
    rows = read_tsv(mrpc_run["out"] / "test_predictions.tsv")
    test_ids = [row[0] for row in read_tsv(mrpc_run["data"] / "test.tsv")[1:]]
    assert [row[0] for row in rows[1:]] == test_ids
    assert {row[1] for row in rows[1:]} <= {"0", "1"}
    # test_results.tsv: the same probabilities in the original's layout (numpy.loadtxt reads it).
    original = np.loadtxt(mrpc_run["out"] / "test_results.tsv", delimiter="\t")
    ours = np.array([[float(v) for v in row[2:]] for row in rows[1:]])
    np.testing.assert_allclose(original, ours, atol=5e-7)
    assert [["0", "1"][i] for i in original.argmax(axis=1)] == [row[1] for row in rows[1:]]


@pytest.mark.integration
def test_features_are_reused_until_an_input_changes(mrpc_run, tmp_path):
    out = mrpc_run["out"]
    before = (out / "dev.tf_record").stat().st_mtime_ns
    again = run_classifier(*mrpc_run["flags"], "--do_eval")
    assert "reusing dev features" in again.stderr
    assert (out / "dev.tf_record").stat().st_mtime_ns == before
    # Evaluation alone restores the best weights and scores them as during training.
    assert results(out / "eval_results.txt")["eval_main"] == pytest.approx(
        results(out / "best" / "eval_results.txt")["eval_main"], abs=1e-6)
    # Copies, so that the module's other tests keep their files; one dev sentence edited.
    copy, data = tmp_path / "out", tmp_path / "data"
    shutil.copytree(out, copy)
    shutil.copytree(mrpc_run["data"], data)
    dev = (data / "dev.tsv").read_bytes().replace(b"pie business", b"cake business", 1)
    (data / "dev.tsv").write_bytes(dev)
    changed = run_classifier(*[f for f in mrpc_run["flags"] if not f.startswith(
        ("--data_dir", "--output_dir"))], f"--data_dir={data}", f"--output_dir={copy}",
        "--do_eval")
    assert "rebuilding dev features" in changed.stderr and "dev.tsv changed" in changed.stderr


FRESH_PROCESS = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)
model = tf.saved_model.load(sys.argv[1])
inputs = json.load(open(sys.argv[2]))
text = model.signatures["serve_text"]
out = text(text_a=tf.constant([a for a, _ in inputs["pairs"]]),
           text_b=tf.constant([b for _, b in inputs["pairs"]]))
ids = model.signatures["serve_token_ids"](**{k: tf.constant(v, tf.int32)
                                             for k, v in inputs["ids"].items()})
print(json.dumps({"label": [x.decode() for x in out["label"].numpy()],
                  "probabilities": out["probabilities"].numpy().tolist(),
                  "logits": out["logits"].numpy().tolist(),
                  "id_logits": ids["logits"].numpy().tolist(),
                  "modules": sorted(m for m in ("modeling", "data_gen", "keras_hub")
                                    if m in sys.modules)}))
"""


@pytest.mark.integration
def test_saved_model_in_a_fresh_process_predicts_as_the_runner(mrpc_run, tmp_path):
    from bert_tf2.data_gen.tokenization import FullTokenizer
    from bert_tf2.tasks.classification.features import convert_example, load_features
    from bert_tf2.tasks.classification.reader import InputExample

    dev = read_tsv(mrpc_run["data"] / "dev.tsv")[1:]
    features = load_features(str(mrpc_run["out"] / "dev.tf_record"), 64, regression=False)
    # Rows with an empty (or token-less) second text: the runner's conversion makes them
    # single-text examples, `[CLS] A [SEP]`, and serve_text must pack them the same way.
    vocab = mrpc_run["root"] / "export" / "assets.extra" / "vocab.txt"
    tokenizer = FullTokenizer(str(vocab), do_lower_case=True)
    singles = [[dev[0][3], ""], [dev[1][4], " \u200b "]]
    extra = [convert_example(InputExample("x", a, b, None, "x"), 0, {"0": 0, "1": 1}, 64,
                             tokenizer) for a, b in singles]
    assert all(row["segment_ids"] == [0] * 64 for row in extra)
    inputs = {"pairs": [[row[3], row[4]] for row in dev] + singles, "ids": {
        "input_word_ids": features["input_ids"].tolist() + [r["input_ids"] for r in extra],
        "input_mask": features["input_mask"].tolist() + [r["input_mask"] for r in extra],
        "input_type_ids": features["segment_ids"].tolist() + [r["segment_ids"] for r in extra]}}
    served = serve_texts(FRESH_PROCESS, mrpc_run["root"] / "export", inputs, tmp_path)
    assert served["modules"] == []
    # Raw strings through the graph tokenizer give the runner's features: the same logits as the
    # token-id signature fed with the runner's cached features.
    np.testing.assert_allclose(served["logits"], served["id_logits"], atol=1e-6)
    rows = read_tsv(mrpc_run["out"] / "eval_predictions.tsv")[1:]
    assert served["label"][:len(rows)] == [row[1] for row in rows]
    np.testing.assert_allclose(served["probabilities"][:len(rows)],
                               [[float(row[2]), float(row[3])] for row in rows], atol=5e-5)
    assert (mrpc_run["root"] / "export" / "assets.extra" / "vocab.txt").is_file()


@pytest.mark.integration
def test_regression_task_trains_and_serves_scores(shared_data, tiny_checkpoint, tmp_path):
    data = glue_slice(shared_data, "STS-B", tmp_path / "data", {"train": 48, "dev": 16, "test": 8})
    out = tmp_path / "out"
    run_classifier("--task_name=STS-B", f"--data_dir={data}", f"--output_dir={out}",
                   f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}",
                   "--max_seq_length=64", "--train_batch_size=16", "--num_train_epochs=1",
                   "--do_train", "--do_eval", "--do_predict")
    final = results(out / "eval_results.txt")
    assert {"eval_pearson", "eval_spearman", "eval_loss"} <= set(final)
    gold = np.array([float(row[-1]) for row in read_tsv(data / "dev.tsv")[1:]])
    predicted = np.array([float(row[1]) for row in read_tsv(out / "eval_predictions.tsv")[1:]])
    # eval_loss is the mean squared error of the kept weights' scores (6 decimals in the file).
    assert np.mean((predicted - gold) ** 2) == pytest.approx(final["eval_loss"], abs=1e-4)
    rows = read_tsv(out / "test_predictions.tsv")
    assert rows[0] == ["id", "prediction"] and len(rows) == 9
    scores = np.loadtxt(out / "test_results.tsv")  # the original's layout: one score per line
    np.testing.assert_allclose(scores, [float(row[1]) for row in rows[1:]], atol=5e-7)


@pytest.mark.integration
def test_bad_label_fails_naming_file_and_line(shared_data, tiny_checkpoint, tmp_path):
    data = glue_slice(shared_data, "MRPC", tmp_path / "data", {"train": 20, "dev": 8})
    lines = (data / "train.tsv").read_text(encoding="utf-8-sig").splitlines()
    lines[5] = "7" + lines[5][1:]
    (data / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_classifier("--task_name=MRPC", f"--data_dir={data}",
                            f"--output_dir={tmp_path / 'out'}",
                            f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}",
                            "--do_train", check=False)
    assert result.returncode != 0
    assert "train.tsv:6" in result.stderr and "'7'" in result.stderr
    assert not (tmp_path / "out" / "train.tf_record").exists()


@pytest.mark.integration
def test_unknown_task_is_a_usage_error(tiny_checkpoint, tmp_path):
    result = run_classifier("--task_name=nope", f"--data_dir={tmp_path}",
                            f"--output_dir={tmp_path / 'out'}",
                            f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}",
                            "--do_train", check=False)
    assert result.returncode != 0 and "nope" in result.stderr and "mrpc" in result.stderr


def sentence_pairs(shared_data, count):
    rows = read_tsv(shared_data / "glue" / "MRPC" / "train.tsv")[1:count + 1]
    return [(row[3], row[4]) for row in rows]


@pytest.mark.integration
def test_mnli_scores_matched_and_mismatched(shared_data, tiny_checkpoint, tmp_path):
    labels = ["contradiction", "entailment", "neutral"]
    header = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
              "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
              "sentence2"]
    pairs = iter(sentence_pairs(shared_data, 56))
    data = tmp_path / "data"
    data.mkdir()

    def write(name, count, labelled, start):
        lines = [header + (["gold_label"] if labelled else [])]
        for i in range(count):
            a, b = next(pairs)
            lines.append([str(start + i), "0", "0", "fiction", "", "", "", "", a, b]
                         + ([labels[i % 3]] if labelled else []))
        (data / name).write_text("\n".join("\t".join(line) for line in lines) + "\n")
    write("train.tsv", 32, True, 0)
    write("dev_matched.tsv", 8, True, 100)
    write("dev_mismatched.tsv", 8, True, 200)
    write("test_matched.tsv", 4, False, 300)
    write("test_mismatched.tsv", 4, False, 400)
    out = tmp_path / "out"
    run_classifier("--task_name=MNLI", f"--data_dir={data}", f"--output_dir={out}",
                   f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}",
                   "--max_seq_length=64", "--train_batch_size=16", "--num_train_epochs=1",
                   "--do_train", "--do_eval", "--do_predict")
    final = results(out / "eval_results.txt")
    assert {"eval_dev_matched_accuracy", "eval_dev_mismatched_accuracy",
            "eval_dev_matched_main"} <= set(final)
    assert results(out / "best" / "eval_results.txt")["global_step"] == 2
    for kind, split, ids in [("eval_predictions", "matched", range(100, 108)),
                             ("eval_predictions", "mismatched", range(200, 208)),
                             ("test_predictions", "matched", range(300, 304)),
                             ("test_predictions", "mismatched", range(400, 404))]:
        rows = read_tsv(out / f"{kind}_{split}.tsv")
        assert rows[0] == ["id", "prediction"] + [f"probability_{x}" for x in labels]
        assert [row[0] for row in rows[1:]] == [str(i) for i in ids]
        assert {row[1] for row in rows[1:]} <= set(labels)
    # test_results.tsv is the matched split's, as the original wrote it; mismatched is suffixed.
    for name, split in (("test_results.tsv", "matched"), ("test_results_mismatched.tsv",
                                                          "mismatched")):
        rows = read_tsv(out / f"test_predictions_{split}.tsv")[1:]
        np.testing.assert_allclose(np.loadtxt(out / name, delimiter="\t"),
                                   [[float(v) for v in row[2:]] for row in rows], atol=5e-7)
    # The file's accuracy is the one reported for the split.
    gold = [labels[i % 3] for i in range(8)]
    predicted = [row[1] for row in read_tsv(out / "eval_predictions_mismatched.tsv")[1:]]
    assert np.mean([p == g for p, g in zip(predicted, gold)]) == pytest.approx(
        final["eval_dev_mismatched_accuracy"])


@pytest.mark.integration
def test_generic_csv_task_with_labels_from_train(shared_data, tiny_checkpoint, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    pairs = sentence_pairs(shared_data, 40)
    for name, chunk in [("train.csv", pairs[:32]), ("dev.csv", pairs[32:])]:
        with open(data / name, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["id", "review", "verdict"])
            for i, (a, _) in enumerate(chunk):
                writer.writerow([f"r{i}", a, ["good", "bad", "meh"][i % 3]])
    out = tmp_path / "out"
    run_classifier("--task_name=generic", f"--data_dir={data}", f"--output_dir={out}",
                   "--text_a_column=review", "--label_column=verdict", "--id_column=id",
                   f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}",
                   "--max_seq_length=64", "--train_batch_size=16", "--num_train_epochs=1",
                   "--do_train", "--do_eval")
    rows = read_tsv(out / "eval_predictions.tsv")
    assert rows[0] == ["id", "prediction", "probability_bad", "probability_good",
                       "probability_meh"]
    assert [row[0] for row in rows[1:]] == [f"r{i}" for i in range(8)]
    assert "eval_accuracy" in results(out / "eval_results.txt")


@pytest.mark.integration
def test_a_reused_output_dir_must_hold_the_same_run(mrpc_run, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(mrpc_run["out"], copy)
    flags = [f for f in mrpc_run["flags"] if not f.startswith(("--output_dir", "--learning_rate"))]
    result = run_classifier(*flags, f"--output_dir={copy}", "--learning_rate=3e-4", "--do_train",
                            check=False)
    assert result.returncode != 0
    assert "learning_rate was 0.001, now 0.0003" in result.stderr
    other_task = run_classifier(*[f for f in flags if not f.startswith("--task_name")],
                                "--task_name=RTE", f"--output_dir={copy}", "--do_eval",
                                check=False)
    assert other_task.returncode != 0 and "task was 'mrpc', now 'rte'" in other_task.stderr


@pytest.mark.integration
def test_evaluation_needs_a_trained_head(mrpc_run, tmp_path):
    flags = [f for f in mrpc_run["flags"] if not f.startswith("--output_dir")]
    result = run_classifier(*flags, f"--output_dir={tmp_path / 'fresh'}", "--do_eval",
                            check=False)
    assert result.returncode != 0
    assert "no trained weights" in result.stderr and "output_weights" in result.stderr


@pytest.mark.integration
def test_unknown_best_metric_is_refused_before_training(mrpc_run, tmp_path):
    flags = [f for f in mrpc_run["flags"] if not f.startswith("--output_dir")]
    result = run_classifier(*flags, f"--output_dir={tmp_path / 'out'}", "--do_train",
                            "--do_eval", "--best_metric=eval_matthews_corr", check=False)
    assert result.returncode != 0
    assert "--best_metric=eval_matthews_corr" in result.stderr and "eval_f1" in result.stderr
    assert not (tmp_path / "out" / "train.tf_record").exists()
