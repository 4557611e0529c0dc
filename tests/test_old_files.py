"""Files written by the code before the task-layer redesign (commit 52385cc) still load and give
the same outputs: `.keras` files of every model class, a TF1 checkpoint, a run_classifier output
folder (training checkpoint, best weights, run_config.json) and its SavedModel export.

The files are in tests/fixtures/old_format/, written by its make_fixtures.py with the old code.
"""
import json
import pathlib
import shutil
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the export's tokenizer ops)
import warm_python
from conftest import REPO, tensorflow_only

from bert_tf2.engine.best_checkpoint import BestCheckpoint
from bert_tf2.modeling import (
    checkpoints,
    models,  # noqa: F401  (registers the model classes for load_model)
)
from bert_tf2.modeling.encoder import BertEncoder

OLD = pathlib.Path(__file__).resolve().parent / "fixtures" / "old_format"
EXPECTED = json.loads((OLD / "expected.json").read_text())
INPUTS = {name: np.array(value, np.int32) for name, value in EXPECTED["inputs"].items()}


def model_inputs(name: str) -> dict:
    if name == "pretrainer":
        return {**INPUTS, "masked_lm_positions": np.array([[1, 2, 3], [4, 5, 0]], np.int32)}
    if name == "multiple_choice":
        return {k: np.stack([v, v[::-1]]) for k, v in INPUTS.items()}
    return INPUTS


@pytest.mark.parametrize("name", ["encoder", "classifier", "span_labeler", "token_classifier",
                                  "feature_tagger", "pretrainer", "multiple_choice"])
def test_old_keras_files_load_and_give_the_same_outputs(name):
    model = keras.models.load_model(OLD / f"{name}.keras")
    expected = EXPECTED[f"{name}.keras"]
    outputs = model(model_inputs(name))
    np.testing.assert_allclose(np.asarray(outputs[expected["output"]]),
                               np.array(expected["values"]), rtol=1e-5, atol=1e-6)


def test_old_tf1_checkpoint_restores_strictly():
    config = checkpoints.read_config(OLD / "tf1")
    model = models.BertPretrainer(BertEncoder(config), max_predictions_per_seq=3)
    report = checkpoints.load_checkpoint(model, OLD / "tf1")
    assert not report.initialised and not report.unused
    expected = EXPECTED["pretrainer.keras"]
    np.testing.assert_allclose(model(model_inputs("pretrainer"))[expected["output"]],
                               np.array(expected["values"]), rtol=1e-5, atol=1e-6)


def test_old_run_folder_checkpoints_restore(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(OLD / "classifier_run", run)
    config = checkpoints.read_config(OLD / "tf1")
    # The best weights, as BestCheckpoint keeps them.
    model = models.BertClassifier(BertEncoder(config), num_labels=2)
    best = BestCheckpoint(str(run), "eval_main")
    assert best.restore(model) and best.results["global_step"] == 4
    np.testing.assert_allclose(model(INPUTS)["logits"], np.array(EXPECTED["best_logits"]),
                               rtol=1e-5, atol=1e-6)
    # The object-based training checkpoint, as --init_checkpoint (model weights only).
    fresh = models.BertClassifier(BertEncoder(config), num_labels=2)
    report = checkpoints.load_initial_weights(fresh, run / "ckpt-4")
    assert not report.initialised
    # ... and as the start of a classifier of another size (its encoder only).
    other = models.BertClassifier(BertEncoder(config), num_labels=3)
    report = checkpoints.load_initial_weights(other, run, allow_new_heads=True)
    for a, b in zip(fresh.encoder.weights, other.encoder.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.integration
def test_old_run_folder_is_evaluated_by_todays_runner(tmp_path, shared_data):
    """run_config.json of the old run matches today's identity; --do_eval picks the old best
    weights and scores them exactly as the old run did."""
    lines = (shared_data / "glue" / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig") \
        .splitlines()
    data = tmp_path / "mrpc"
    data.mkdir()
    for split, count in (("train", 32), ("dev", 8)):
        (data / f"{split}.tsv").write_text("\n".join(lines[:1 + count]) + "\n", encoding="utf-8")
    run = tmp_path / "run"
    shutil.copytree(OLD / "classifier_run", run)
    old_results = (run / "eval_results.txt").read_text()
    result = warm_python.run(
        [sys.executable, str(REPO / "run_classifier.py"), "--task_name=MRPC",
         f"--data_dir={data}", f"--output_dir={run}", f"--init_checkpoint={OLD / 'tf1'}",
         "--max_seq_length=32", "--do_eval"], cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "using the best weights (eval_main = 0.6971 at step 4)" in result.stderr
    # The same scores; today's file puts the original's keys first and adds Estimator's `loss`
    # (one batch of 8 here, so it equals eval_loss).
    old = {key: float(value) for key, value in
           (line.split(" = ") for line in old_results.splitlines())}
    new = {key: float(value) for key, value in
           (line.split(" = ") for line in (run / "eval_results.txt").read_text().splitlines())}
    assert list(new)[:4] == ["eval_accuracy", "eval_loss", "global_step", "loss"]
    assert new.pop("loss") == pytest.approx(new["eval_loss"], abs=1e-12)
    # Every score made of counts is exact; the loss agrees to float32 round-off, whose last bits
    # follow the CPU's kernels (an AMD EPYC's oneDNN gave 0.690384072948191 for the stored
    # 0.6903840729710471).
    assert new.keys() == old.keys()
    assert new.pop("eval_loss") == pytest.approx(old.pop("eval_loss"), rel=1e-6, abs=0)
    assert new == old


@pytest.mark.integration
def test_old_saved_model_serves_in_a_fresh_process():
    script = (
        "import json, sys, tensorflow as tf, tensorflow_text\n"
        "model = tf.saved_model.load(sys.argv[1])\n"
        "inputs = json.loads(sys.argv[2])\n"
        "out = model.signatures['serving_default'](**{k: tf.constant(v) "
        "for k, v in inputs.items()})\n"
        "print(json.dumps(out['probabilities'].numpy().tolist()))\n")
    result = tensorflow_only([sys.executable, "-c", script, OLD / "export",
                              json.dumps(EXPECTED["export"]["inputs"])], cwd=OLD)
    assert result.returncode == 0, result.stderr[-3000:]
    probabilities = json.loads(result.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(probabilities, EXPECTED["export"]["probabilities"], atol=1e-6)
    # And today's code loads it too (the same SavedModel API the tests of serving use).
    served = tf.saved_model.load(str(OLD / "export")).signatures["serving_default"](
        **{k: tf.constant(v) for k, v in EXPECTED["export"]["inputs"].items()})
    np.testing.assert_allclose(served["probabilities"].numpy(),
                               EXPECTED["export"]["probabilities"], atol=1e-6)
