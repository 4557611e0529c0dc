"""A kill anywhere resumes to the same result: the classifier killed with SIGKILL at every named
phase (NER, pretraining and the data tools at theirs: test_faults_runners.py).

Each runner's command is run once uninterrupted (the classifier's, the pretraining's and the data
tools' references are made once for every test file: conftest's fixtures), and once as a chain of
runs of the same command, each killed at the next fault point (`process.fault_points`: the
process kills itself there; conftest's `KillChain`, one kill per test) and the next one resuming
what the killed one left, until a last run that finishes. The chain's outputs must then equal the
uninterrupted run's byte for byte: checkpoints, `best/`, `eval_results.txt`, the prediction files,
the export's variables, and the folder's listing (hidden files included: no temporary file, lock,
staging or `.old` folder is left). The classifier's settings make the kept weights depend on every
evaluation (the best `eval_loss` is at step 9 of 12, improving at 3, 6 and 9), so a skipped or
repeated evaluation shows.
"""
import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import KillChain, assert_same_run, frozen, sizes
from reference_runs import classifier, run

from bert_tf2.process.fault_points import KILL_VARIABLE, POINTS

pytestmark = pytest.mark.integration

# The classifier's chain: every point, later ones at a later occurrence so that the kill falls
# where an earlier best/ is being replaced and where a resumed run has evaluated already.
CLASSIFIER_KILLS = ["features@1", "train_loop@1", "checkpoint_write@1", "evaluation@1",
                    "best_swap@1", "eval_results@1", "best_swap@2", "evaluation@2",
                    "prediction@1", "export@1"]


def test_every_point_is_tried():
    """The classifier's chain tries every point but those of pretraining and the data tools
    (test_faults_runners.py) and the JAX step's (the signal inside a JAX loop, test_jax_runners)."""
    assert {kill.partition("@")[0] for kill in CLASSIFIER_KILLS} | {
        "tf1_export", "records", "parts", "train_step"} == set(POINTS)


# A writer that made its `*_temp` folder and then reached `checkpoint_write` (the JAX runs' own
# writer), then a write that takes under a millisecond: it ends unkilled if the kill waits for a
# watcher.
WRITER = """
import os, sys
from bert_tf2.process import fault_points
os.makedirs(os.path.join(sys.argv[1], "model.ckpt-3_temp"))
fault_points.reached("checkpoint_write", sys.argv[1])
os.rename(os.path.join(sys.argv[1], "model.ckpt-3_temp"), os.path.join(sys.argv[1], "done"))
print("written", flush=True)
"""


def test_a_kill_in_a_checkpoint_write_lands_in_the_write_that_reached_it(tmp_path):
    """With its `*_temp` folder already made, the process dies at the point, before the write
    goes on, however busy the machine: not later, when a watcher got scheduled (a kill chain
    that resumed one checkpoint later than its plan broke under load)."""
    result = subprocess.run([sys.executable, "-c", WRITER, str(tmp_path)], capture_output=True,
                            text=True, timeout=60,
                            env={**os.environ, KILL_VARIABLE: "checkpoint_write@1"})
    assert (result.returncode, result.stdout) == (-signal.SIGKILL, ""), result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["model.ckpt-3_temp"]


@pytest.fixture(scope="module")
def classifier_chain(mrpc_small, tiny_checkpoint, tmp_path_factory):
    resumed = tmp_path_factory.mktemp("classifier_chain")
    chain = KillChain(run, classifier(mrpc_small, tiny_checkpoint, resumed / "out",
                                      resumed / "export"), CLASSIFIER_KILLS)
    chain.folder = resumed
    return chain


@pytest.mark.parametrize("point", CLASSIFIER_KILLS)
def test_classifier_killed_at(point, classifier_chain):
    classifier_chain.kill_through(point)


def test_classifier_killed_at_every_phase_ends_as_the_uninterrupted_run(classifier_chain,
                                                                         classifier_reference):
    reference, resumed = classifier_reference, classifier_chain.folder
    # The kept weights are those of step 9, the third of four evaluations to improve.
    best = dict(line.split(" = ") for line in
                (reference["out"] / "best" / "eval_results.txt").read_text().splitlines())
    assert best["global_step"] == "9", best
    assert reference["log"].count("new best eval_loss") == 3
    final = classifier_chain.finish()
    assert "did not finish before the run was stopped" not in final.stderr  # all done before
    assert_same_run(reference["out"], resumed / "out", [
        "eval_results.txt", "best/eval_results.txt", "best/model.index",
        "best/model.data-00000-of-00001", "model.ckpt-12.index",
        "model.ckpt-12.data-00000-of-00001", "test_results.tsv", "test_predictions.tsv",
        "eval_predictions.tsv", "run_config.json"])
    assert_same_run(reference["export"], resumed / "export", [
        "variables/variables.index", "variables/variables.data-00000-of-00001",
        "assets.extra/vocab.txt"])


def test_killed_evaluation_is_run_on_resume(mrpc_small, tiny_checkpoint, tmp_path):
    """The issue's case alone: killed inside the first evaluation, the rerun evaluates step 3
    before training on (it did not, and best/ ended at another step)."""
    out = tmp_path / "out"
    killed = run(classifier(mrpc_small, tiny_checkpoint, out), {KILL_VARIABLE: "evaluation@1"})
    assert killed.returncode == -signal.SIGKILL
    assert (out / "model.ckpt-3.index").exists() and not (out / "eval_results.txt").exists()
    resumed = run(classifier(mrpc_small, tiny_checkpoint, out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert ("the evaluation at step 3 did not finish before the run was stopped: evaluating the "
            "restored weights now") in resumed.stderr
    assert resumed.stderr.count("] evaluation at step ") == 4
    best = json.dumps(sorted((out / "best" / "eval_results.txt").read_text().splitlines()))
    assert '"global_step = 9"' in best


# ----------------------------------------------------------------------------- one run per output
def test_a_second_run_on_a_held_output_dir_is_refused_and_writes_nothing(mrpc_small,
                                                                          tiny_checkpoint,
                                                                          tmp_path):
    out = tmp_path / "out"
    first = frozen(classifier(mrpc_small, tiny_checkpoint, out), "features@1")
    try:
        before = sizes(out)
        second = run(classifier(mrpc_small, tiny_checkpoint, out) + ["--learning_rate=2e-5"])
        assert second.returncode == 1, second.stderr[-3000:]
        line = second.stderr.strip().splitlines()[-1]
        assert line == (f"run_classifier.py: error: {out}: --output_dir in use by "
                        f"run_classifier.py (pid {first.pid}, since "
                        f"{line.split('since ')[1].split(')')[0]}); wait for it to finish, or use "
                        f"another --output_dir"), line
        assert sizes(out) == before
        # Another tool on the same folder is refused the same way.
        other = run(["run_pretraining.py", f"--input_file={mrpc_small}/train.tsv",
                     f"--output_dir={out}", f"--bert_config_file={tiny_checkpoint}/"
                     f"bert_config.json", "--do_train"])
        assert other.returncode == 1 and f"(pid {first.pid}," in other.stderr, other.stderr
        assert sizes(out) == before
    finally:
        first.kill()
        first.wait()
    # The OS released the lock with the process: the same command now resumes and finishes.
    again = run(classifier(mrpc_small, tiny_checkpoint, out))
    assert again.returncode == 0, again.stderr[-3000:]
    assert not (tmp_path / ".out.lock").exists()
