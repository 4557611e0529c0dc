"""A drop-in for the original: its README's command lines and its output files, read the way users'
scripts read them (`numpy.loadtxt` on test_results.tsv, the original's eval_results.txt keys, the
official SQuAD scripts' input layout), with a small random BERT in Google's format (real vocabulary)
standing in for BERT-Base. Sizes are cut to that model (sequence 128, a few dozen examples); the
flags are the original's.
"""
import json
import re

import numpy as np
import pytest
from conftest import run_script
from reference_runs import glue_slice

from bert_tf2.tasks.squad import metrics as squad_metrics
from bert_tf2.tasks.squad.files import load_squad, make_v2, write_json

pytestmark = pytest.mark.integration

ORIGINAL_CLASSIFIER_KEYS = ["eval_accuracy", "eval_loss", "global_step", "loss"]
ORIGINAL_PRETRAINING_KEYS = ["global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
                             "next_sentence_accuracy", "next_sentence_loss"]


def keys_and_values(path):
    pairs = [line.split(" = ") for line in path.read_text().splitlines()]
    return [k for k, _ in pairs], {k: v for k, v in pairs}


def log_block(stderr: str, title: str = "Eval results") -> dict:
    """The `***** TITLE *****` block of a run's log (the last one): key -> the text logged."""
    lines = stderr.splitlines()
    start = max(i for i, line in enumerate(lines) if line.endswith(f"***** {title} *****"))
    block = {}
    for line in lines[start + 1:]:
        match = re.search(r"\s{2}(\S+) = (\S+)$", line)
        if not match:
            break
        block[match.group(1)] = match.group(2)
    return block


# ------------------------------------------------------------------------------ run_classifier
@pytest.fixture(scope="module")
def mrpc(tmp_path_factory, shared_data, tiny_checkpoint):
    """The original README's MRPC fine-tuning command (BERT_BASE_DIR: the tiny checkpoint)."""
    root = tmp_path_factory.mktemp("readme_mrpc")
    glue = glue_slice(shared_data, "MRPC", root / "MRPC", {"train": 64, "dev": 20, "test": 12})
    base = tiny_checkpoint
    model = [f"--vocab_file={base}/vocab.txt", f"--bert_config_file={base}/bert_config.json"]
    out = root / "mrpc_output"
    train = run_script("run_classifier.py", "--task_name=MRPC", "--do_train=true",
                       "--do_eval=true", f"--data_dir={glue}", *model,
                       f"--init_checkpoint={base}/bert_model.ckpt", "--max_seq_length=128",
                       "--train_batch_size=32", "--learning_rate=2e-5", "--num_train_epochs=3.0",
                       f"--output_dir={out}/")
    return {"root": root, "glue": glue, "model": model, "out": out, "log": train.stderr}


def test_classifier_eval_results_have_the_original_keys_first(mrpc):
    keys, values = keys_and_values(mrpc["out"] / "eval_results.txt")
    assert keys[:4] == ORIGINAL_CLASSIFIER_KEYS
    assert keys[4:] == sorted(keys[4:]) and "eval_f1" in keys[4:]
    assert values["global_step"] == "6"  # int(64 / 32 * 3), written as an integer
    # The log's block holds the same lines, as the original logs them.
    assert log_block(mrpc["log"]) == values
    # `loss` is Estimator's: the mean over evaluation batches (8, 8 and 4 rows) of batch means,
    # recomputed here from the probabilities in eval_predictions.tsv (6 decimals), which the
    # best weights wrote (best/eval_results.txt is their evaluation).
    best_keys, values = keys_and_values(mrpc["out"] / "best" / "eval_results.txt")
    assert best_keys == keys
    rows = [line.split("\t") for line in (mrpc["out"] / "eval_predictions.tsv").read_text()
            .splitlines()[1:]]
    gold = [int(line.split("\t")[0]) for line in (mrpc["glue"] / "dev.tsv").read_text(
        encoding="utf-8-sig").splitlines()[1:]]
    nll = np.array([-np.log(float(row[2 + label])) for row, label in zip(rows, gold)])
    batches = [nll[0:8].mean(), nll[8:16].mean(), nll[16:20].mean()]
    assert float(values["loss"]) == pytest.approx(np.mean(batches), abs=1e-5)
    assert float(values["eval_loss"]) == pytest.approx(nll.mean(), abs=1e-5)


@pytest.mark.parametrize("checkpoint", ["model.ckpt-6", ".", "best"])
def test_classifier_predicts_from_the_trained_checkpoint(mrpc, checkpoint, tmp_path):
    """The README's predict step: --init_checkpoint=$TRAINED_CLASSIFIER (the run's model.ckpt-N,
    or its folder, or its best/ weights), then test_results.tsv read with numpy.loadtxt."""
    out = mrpc["out"]
    assert (out / "model.ckpt-6.index").is_file()
    trained = out if checkpoint == "." else out / checkpoint
    # The README predicts into the training run's output_dir; the others use their own.
    predict_dir = out if checkpoint == "model.ckpt-6" else tmp_path / "predict"
    run = run_script("run_classifier.py", "--task_name=MRPC", "--do_predict=true",
                     f"--data_dir={mrpc['glue']}", *mrpc["model"],
                     f"--init_checkpoint={trained}", "--max_seq_length=128",
                     f"--output_dir={predict_dir}")
    assert f"using --init_checkpoint {out}" in run.stderr
    if checkpoint != "best":  # the step the checkpoint was saved at (best/ holds weights only)
        run = run_script("run_classifier.py", "--task_name=MRPC", "--do_eval=true",
                         f"--data_dir={mrpc['glue']}", *mrpc["model"],
                         f"--init_checkpoint={trained}", "--max_seq_length=128",
                         f"--output_dir={tmp_path / 'evaluate'}")
        assert "global_step = 6\n" in (tmp_path / "evaluate" / "eval_results.txt").read_text()
    probabilities = np.loadtxt(predict_dir / "test_results.tsv")
    assert probabilities.shape == (12, 2)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-6)
    first = mrpc.setdefault("predictions", {}).setdefault(checkpoint != "best", probabilities)
    np.testing.assert_array_equal(probabilities, first)  # the prefix and the folder agree


# ------------------------------------------------------------------------------ run_squad
@pytest.fixture(scope="module")
def squad_files(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("readme_squad")
    source = load_squad(shared_data / "squad" / "dev-v1.1.json")
    v1 = {"version": "1.1", "data": [
        {"title": source["data"][a]["title"], "paragraphs": source["data"][a]["paragraphs"][:3]}
        for a in (0, 40)]}
    write_json(root / "train-v1.1.json", v1)
    write_json(root / "dev-v2.0.json", make_v2(v1, seed=5))
    return root


def squad_command(files, base, out, *flags):
    return ["run_squad.py", f"--vocab_file={base}/vocab.txt",
            f"--bert_config_file={base}/bert_config.json",
            f"--init_checkpoint={base}/bert_model.ckpt", "--train_batch_size=12",
            "--learning_rate=3e-5", "--num_train_epochs=1.0", "--max_seq_length=128",
            "--doc_stride=64", f"--output_dir={out}/", *flags]


def test_squad_v1_writes_what_the_official_script_reads(squad_files, tiny_checkpoint):
    train = squad_files / "train-v1.1.json"
    out = squad_files / "squad_base"
    run_script(*squad_command(squad_files, tiny_checkpoint, out, "--do_train=True",
                              f"--train_file={train}", "--do_predict=True",
                              f"--predict_file={train}"))
    dataset = load_squad(train)
    qids = [qa["id"] for a in dataset["data"] for p in a["paragraphs"] for qa in p["qas"]]
    predictions = json.loads((out / "predictions.json").read_text())
    assert list(predictions) == qids and all(isinstance(v, str) for v in predictions.values())
    nbest = json.loads((out / "nbest_predictions.json").read_text())
    assert list(nbest) == qids
    for qid, entries in nbest.items():
        assert entries[0]["text"] == predictions[qid]
        assert set(entries[0]) == {"text", "probability", "start_logit", "end_logit"}
    assert not (out / "null_odds.json").exists()
    scores = squad_metrics.squad_v1_scores(dataset["data"], predictions)
    assert 0.0 <= scores["exact_match"] <= scores["f1"] <= 100.0


def test_squad_v2_threshold_pasted_back_decides_as_reported(squad_files, tiny_checkpoint):
    """The README's v2 recipe: train and predict, take the best threshold from the scores, then
    predict again with --null_score_diff_threshold=$THRESH. The logged value is exact, so the
    second run nulls exactly the questions whose null odds exceed it."""
    dev = squad_files / "dev-v2.0.json"
    out = squad_files / "squad_v2"
    first = run_script(*squad_command(squad_files, tiny_checkpoint, out, "--do_train=True",
                                      f"--train_file={dev}", "--do_predict=True",
                                      f"--predict_file={dev}", "--version_2_with_negative=True"))
    dataset = load_squad(dev)["data"]
    predictions = json.loads((out / "predictions.json").read_text())
    null_odds = json.loads((out / "null_odds.json").read_text())
    assert list(null_odds) == list(predictions)
    assert all(isinstance(v, float) for v in null_odds.values())
    official = squad_metrics.squad_v2_scores(dataset, predictions, null_odds)
    logged = log_block(first.stderr, "Scores of the predictions for eval")
    threshold = logged["best_f1_thresh"]
    assert float(threshold) == official["best_f1_thresh"]  # full precision, not 4 decimals
    assert float(logged["best_f1"]) == official["best_f1"]
    second = run_script(*squad_command(squad_files, tiny_checkpoint, out, "--do_train=False",
                                       "--do_predict=True", f"--predict_file={dev}",
                                       "--version_2_with_negative=True",
                                       f"--null_score_diff_threshold={threshold}"))
    assert second.returncode == 0
    again = json.loads((out / "predictions.json").read_text())
    nulled = {qid for qid, text in again.items() if text == ""}
    assert nulled == {qid for qid, odds in null_odds.items() if odds > float(threshold)}
    if official["best_f1_thresh"] <= 0.0:  # the official search is exact for thresholds <= 0
        assert squad_metrics.squad_v2_scores(dataset, again)["f1"] == pytest.approx(
            official["best_f1"], abs=1e-9)


# ------------------------------------------------------------------------------ pretraining
def test_pretraining_readme_commands(shared_data, tiny_checkpoint, tmp_path):
    """create_pretraining_data.py then run_pretraining.py, the README's flags; eval_results.txt
    holds exactly the original's keys, and the checkpoints carry its names."""
    base = tiny_checkpoint
    sample = tmp_path / "sample_text.txt"
    sample.write_bytes((shared_data / "corpus" / "wikitext-2" / "valid.txt").read_bytes()[:60_000])
    records = tmp_path / "tf_examples.tfrecord"
    run_script("create_pretraining_data.py", f"--input_file={sample}",
               f"--output_file={records}", f"--vocab_file={base}/vocab.txt",
               "--do_lower_case=True", "--max_seq_length=128", "--max_predictions_per_seq=20",
               "--masked_lm_prob=0.15", "--random_seed=12345", "--dupe_factor=5")
    out = tmp_path / "pretraining_output"
    run = run_script("run_pretraining.py", f"--input_file={records}", f"--output_dir={out}",
                     "--do_train=True", "--do_eval=True", f"--bert_config_file={base}/"
                     "bert_config.json", f"--init_checkpoint={base}/bert_model.ckpt",
                     "--train_batch_size=32", "--max_seq_length=128",
                     "--max_predictions_per_seq=20", "--num_train_steps=20",
                     "--num_warmup_steps=10", "--learning_rate=2e-5")
    keys, values = keys_and_values(out / "eval_results.txt")
    assert keys == ORIGINAL_PRETRAINING_KEYS
    assert values["global_step"] == "20"
    assert log_block(run.stderr) == values
    assert (out / "model.ckpt-20.index").is_file()
