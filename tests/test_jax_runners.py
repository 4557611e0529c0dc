"""The classifier on JAX, in processes where TensorFlow cannot be imported (as in `make
venv-jax`): it trains, evaluates, predicts and writes the files it writes on TensorFlow; a run
killed with SIGKILL anywhere resumes to the uninterrupted run's files byte for byte, and one
stopped by SIGTERM says where in one line; what JAX cannot do is refused in one line; a folder
remembers its backend; and TensorFlow exports what JAX trained. (Several devices and processes,
pretraining and the other runners on JAX: test_jax_training.py.)"""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import reference_runs
import warm_python
from conftest import (
    REPO,
    KillChain,
    assert_same_jax_run,
    listing,
    read_results,
    read_tsv,
    run_script,
    snapshot,
    wait_until_stopped,
)

pytestmark = pytest.mark.integration

pytest.importorskip("jax", reason="jax is not installed (make test installs setup.py's jax extra)")


def run_jax(no_tensorflow, script, *flags, env=None, check=True):
    return reference_runs.run_jax(no_tensorflow, script, *flags, env=env, check=check)


def test_tensorflow_is_not_importable_there(no_tensorflow):
    result = run_jax(no_tensorflow, "-m", "-c", "import tensorflow", check=False)
    assert result.returncode == 1 and "No module named 'tensorflow'" in result.stderr


# Checkpoints are the one deliberate difference in what a run writes (docs/backends.md).
TF_ONLY = {"checkpoint", "best/model.index", "best/model.data-00000-of-00001"}


def _without_checkpoints(names):
    return {n for n in names if n not in TF_ONLY and not n.startswith("model.ckpt-")
            and n != "best/weights.safetensors"}


@pytest.fixture(scope="module")
def mrpc(mrpc_small):
    return mrpc_small


def classifier(data, checkpoint, out, *extra):
    """The small MRPC classifier of the kill chains (`reference_runs.classifier`)."""
    return reference_runs.classifier(data, checkpoint, out, None, *extra)


@pytest.fixture(scope="module")
def classifier_runs(jax_classifier_reference, classifier_reference, tmp_path_factory):
    """The same classifier command on JAX (from the TF1 checkpoint, read without TensorFlow) and
    on TensorFlow (whose export is beside its folder): copies of the runs made once for every
    file, which the refused runs here lock and the TensorFlow export below evaluates again."""
    import shutil

    root = tmp_path_factory.mktemp("classifier")
    shutil.copytree(jax_classifier_reference["out"], root / "jax")
    shutil.copytree(classifier_reference["out"], root / "tf")
    command = [f"--output_dir={root / 'jax'}" if flag.startswith("--output_dir=") else flag
               for flag in jax_classifier_reference["command"]]
    return {"root": root, "jax": root / "jax", "tf": root / "tf",
            "log": jax_classifier_reference["log"], "tf_log": classifier_reference["log"],
            "command": command}


def test_classifier_on_jax_writes_the_files_tensorflow_writes(classifier_runs):
    jax_out, tf_out = classifier_runs["jax"], classifier_runs["tf"]
    assert _without_checkpoints(listing(jax_out)) == _without_checkpoints(listing(tf_out))
    assert {"model.ckpt-12.safetensors", "best/weights.safetensors"} <= listing(jax_out)
    ours, theirs = read_results(jax_out / "eval_results.txt"), read_results(
        tf_out / "eval_results.txt")
    assert set(ours) == set(theirs) and ours["global_step"] == theirs["global_step"] == 12
    # Four evaluations (steps 3, 6, 9, 12), each recorded once, as on TensorFlow.
    assert classifier_runs["log"].count("***** Eval results *****") == 4
    assert classifier_runs["tf_log"].count("***** Eval results *****") == 4
    assert 0.3 < ours["eval_accuracy"] <= 1.0 and 0.0 < ours["eval_loss"] < 2.0
    tests = read_tsv(jax_out / "test_results.tsv")
    assert len(tests) == 8 and all(abs(sum(map(float, row)) - 1) < 1e-5 for row in tests)
    assert read_tsv(jax_out / "eval_predictions.tsv")[0] == read_tsv(
        tf_out / "eval_predictions.tsv")[0]


JAX_KILLS = ["features@1", "train_loop@1", "checkpoint_write@1", "evaluation@1", "best_swap@1",
             "eval_results@1", "best_swap@2", "evaluation@2", "prediction@1"]


@pytest.fixture(scope="module")
def jax_chain(mrpc, tiny_checkpoint, no_tensorflow, tmp_path_factory):
    """The JAX classifier killed at every point of its run (one kill per test, then the run that
    finishes): its safetensors checkpoints and best/ resume as TensorFlow's do."""
    out = tmp_path_factory.mktemp("jax_chain") / "out"
    chain = KillChain(lambda command, env: run_jax(no_tensorflow, *command, env=env, check=False),
                      classifier(mrpc, tiny_checkpoint, out), JAX_KILLS)
    chain.folder = out
    return chain


@pytest.mark.parametrize("point", JAX_KILLS)
def test_a_jax_run_killed_at(point, jax_chain):
    jax_chain.kill_through(point)


def test_a_killed_jax_run_resumes_to_the_uninterrupted_runs_files(classifier_runs, jax_chain):
    final = jax_chain.finish()
    assert "did not finish before the run was stopped" not in final.stderr
    assert_same_jax_run(classifier_runs["jax"], jax_chain.folder,
                    ["best/weights.safetensors", "model.ckpt-12.safetensors", "run_config.json"],
                    ["eval_results.txt", "best/eval_results.txt"],
                    ["test_results.tsv", "test_predictions.tsv", "eval_predictions.tsv"])


def test_tensorflow_exports_what_jax_trained(classifier_runs, mrpc, tmp_path):
    """The same command on TensorFlow, without --do_train and with --export_dir, exports the
    JAX run's best weights (best/weights.safetensors): the SavedModel answers the test pairs'
    raw text with JAX's probabilities."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the export's tokenizer ops)

    out = classifier_runs["jax"]
    command = [flag for flag in classifier_runs["command"] if flag != "--do_train"]
    export = tmp_path / "export"
    result = run_script(*command, f"--export_dir={export}", "--export_litert=none")
    assert "restored the best weights" in result.stderr
    pairs = [(row[3], row[4]) for row in read_tsv(mrpc / "test.tsv")[1:]]
    served = tf.saved_model.load(str(export)).signatures["serve_text"](
        text_a=tf.constant([a for a, _ in pairs]), text_b=tf.constant([b for _, b in pairs]))
    jax_rows = read_tsv(out / "test_predictions.tsv")[1:]
    assert len(jax_rows) == len(pairs) == 8
    np.testing.assert_allclose(served["probabilities"].numpy(),
                               [[float(row[2]), float(row[3])] for row in jax_rows], atol=2e-5)
    assert [x.decode() for x in served["label"].numpy()] == [row[1] for row in jax_rows]


def test_a_run_folder_remembers_its_backend(classifier_runs, no_tensorflow):
    """The same training command on the other backend is refused in one line naming the backend
    that trained the folder, in both directions, and touches nothing in it."""
    jax_out, tf_out = classifier_runs["jax"], classifier_runs["tf"]
    assert json.loads((jax_out / "run_config.json").read_text())["backend"] == "jax"
    assert json.loads((tf_out / "run_config.json").read_text())["backend"] == "tensorflow"
    for out, other, run in ((jax_out, "tensorflow", lambda c: run_script(*c, check=False)),
                            (tf_out, "jax", lambda c: run_jax(no_tensorflow, *c, check=False))):
        trained_on = "jax" if other == "tensorflow" else "tensorflow"
        command = [flag if not flag.startswith("--output_dir=") else f"--output_dir={out}"
                   for flag in classifier_runs["command"]]
        before = snapshot(out)
        result = run(command)
        assert result.returncode == 2, result.stderr[-2000:]
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            f"run_classifier.py: error: {out} holds a run trained on KERAS_BACKEND={trained_on}"
        ), lines
        assert f"run the same command with KERAS_BACKEND={trained_on}" in lines[0]
        assert snapshot(out) == before


def test_what_jax_cannot_do_is_refused_in_one_line(mrpc, tiny_checkpoint, no_tensorflow,
                                                   tmp_path):
    export = run_jax(no_tensorflow, *classifier(mrpc, tiny_checkpoint, tmp_path / "a",
                                                f"--export_dir={tmp_path / 'export'}"),
                     check=False)
    assert export.returncode == 2
    line = export.stderr.strip().splitlines()[-1]
    assert line.startswith("run_classifier.py: error: --export_dir writes a TensorFlow "
                           "SavedModel: not on KERAS_BACKEND=jax")
    assert "--do_train left out" in line and len(export.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "a").exists() and not (tmp_path / "export").exists()
    packed = run_jax(no_tensorflow, *classifier(mrpc, tiny_checkpoint, tmp_path / "b",
                                                "--pack_examples"), check=False)
    assert packed.returncode == 2 and "--pack_examples runs on TensorFlow only" in packed.stderr
    torch = run_jax(no_tensorflow, *classifier(mrpc, tiny_checkpoint, tmp_path / "c"),
                    env={"KERAS_BACKEND": "torch"}, check=False)
    assert torch.returncode == 2
    assert torch.stderr.strip().splitlines() == [
        "run_classifier.py: error: the runners train and predict on the tensorflow and jax "
        "backends, not torch (KERAS_BACKEND); the encoder runs on torch (docs/backends.md)"]


def test_sigterm_on_jax_is_one_line_and_the_rerun_ends_as_the_uninterrupted_run(
        classifier_runs, mrpc, tiny_checkpoint, no_tensorflow, tmp_path):
    from bert_tf2.process.fault_points import STOP_VARIABLE

    out = tmp_path / "out"
    command = [sys.executable, *[str(REPO / part) if part.endswith(".py") else part
                                 for part in classifier(mrpc, tiny_checkpoint, out)]]
    process = warm_python.start(command, cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE,
                                env={**os.environ, "KERAS_BACKEND": "jax",
                                     "PYTHONPATH": reference_runs.without_tensorflow(no_tensorflow),
                                     STOP_VARIABLE: "train_step@5"})
    # Frozen inside a loop (steps 4-6), after step 5 donated the variables' buffers and before
    # the loop assigns them back: the step is still known, from the host's count.
    wait_until_stopped(process)
    os.kill(process.pid, signal.SIGTERM)
    os.kill(process.pid, signal.SIGCONT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 143, stderr[-3000:]
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"run_classifier.py: interrupted by SIGTERM at training step 5 of 12; nothing "
        f"half-written is left; the same command resumes from {out}/model.ckpt-3.safetensors "
        f"(step 3)")
    run_jax(no_tensorflow, *classifier(mrpc, tiny_checkpoint, out))
    assert_same_jax_run(classifier_runs["jax"], out,
                    ["best/weights.safetensors", "model.ckpt-12.safetensors"],
                    ["eval_results.txt", "best/eval_results.txt"],
                    ["test_results.tsv", "eval_predictions.tsv"])
