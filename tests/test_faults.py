"""A kill anywhere resumes to the same result: each runner killed with SIGKILL at every named phase.

Each runner's command is run once uninterrupted, and once as a chain of runs of the same command,
each killed at the next fault point (`modeling.fault_points`: the process kills itself there)
and the next one resuming what the killed one left, until a last run that finishes. The chain's
outputs must then equal the uninterrupted run's byte for byte: checkpoints, `best/`,
`eval_results.txt`, the prediction files, the export's variables, and the folder's listing
(hidden files included: no temporary file, lock, staging or `.old` folder is left). The
classifier's settings make the kept weights depend on every evaluation (the best `eval_loss` is
at step 9 of 12, improving at 3, 6 and 9), so a skipped or repeated evaluation shows.
"""
import json
import os
import signal
import subprocess
import sys

import pytest

from modeling.fault_points import KILL_VARIABLE, POINTS
from tests.conftest import REPO
from tests.test_run_classifier import glue_slice

# Runs whose TensorBoard event files are named by time and host; their folders' names are compared.
EVENT_FOLDERS = ("train", "eval")


def run(command, env_extra=None):
    return subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **(env_extra or {})}, timeout=900)


def run_chain(command, kills):
    """Run `command` killed at each point of `kills` in turn, then once to the end."""
    for point in kills:
        assert point.partition("@")[0] in POINTS
        result = run(command, {KILL_VARIABLE: point})
        assert result.returncode == -signal.SIGKILL, (
            f"the run meant to die at {point} ended with {result.returncode}:\n"
            f"{result.stderr[-3000:]}")
    final = run(command)
    assert final.returncode == 0, final.stderr[-3000:]
    return final


def listing(folder):
    """Every path under `folder` (hidden ones too), but the event files of TensorBoard's folders."""
    paths = set()
    for path in folder.rglob("*"):
        relative = path.relative_to(folder)
        if relative.parts[0] in EVENT_FOLDERS and len(relative.parts) > 1:
            continue
        paths.add(str(relative) + ("/" if path.is_dir() else ""))
    return paths


def assert_same_run(reference, resumed, compared):
    assert listing(resumed) == listing(reference)
    for name in compared:
        assert (resumed / name).read_bytes() == (reference / name).read_bytes(), name
    # The lock file beside the output is gone: the last run removed it, the killed ones left it.
    assert not (resumed.parent / f".{resumed.name}.lock").exists()


@pytest.fixture(scope="module")
def mrpc(shared_data, tmp_path_factory):
    return glue_slice(shared_data, "MRPC", tmp_path_factory.mktemp("faults") / "MRPC",
                      {"train": 48, "dev": 24, "test": 8})


def classifier(data, checkpoint, out, export=None):
    return ["run_classifier.py", "--task_name=MRPC", f"--data_dir={data}",
            f"--init_checkpoint={checkpoint}/bert_model.ckpt", "--max_seq_length=64",
            "--train_batch_size=8", "--num_train_epochs=2", "--eval_every_steps=3",
            "--best_metric=eval_loss", "--learning_rate=1e-3", f"--output_dir={out}",
            "--do_train", "--do_eval", "--do_predict",
            *([f"--export_dir={export}"] if export else [])]


# The classifier's chain: every point, later ones at a later occurrence so that the kill falls
# where an earlier best/ is being replaced and where a resumed run has evaluated already.
CLASSIFIER_KILLS = ["features@1", "train_loop@1", "checkpoint_write@1", "evaluation@1",
                    "best_swap@1", "eval_results@1", "best_swap@2", "evaluation@2",
                    "prediction@1", "export@1"]


def test_every_point_is_tried():
    assert {kill.partition("@")[0] for kill in CLASSIFIER_KILLS} | {
        "tf1_export", "records", "parts"} == set(POINTS)


def test_classifier_killed_at_every_phase_ends_as_the_uninterrupted_run(mrpc, tiny_checkpoint,
                                                                         tmp_path):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    straight = run(classifier(mrpc, tiny_checkpoint, reference / "out", reference / "export"))
    assert straight.returncode == 0, straight.stderr[-3000:]
    # The kept weights are those of step 9, the third of four evaluations to improve.
    best = dict(line.split(" = ") for line in
                (reference / "out" / "best" / "eval_results.txt").read_text().splitlines())
    assert best["global_step"] == "9", best
    assert straight.stderr.count("new best eval_loss") == 3
    final = run_chain(classifier(mrpc, tiny_checkpoint, resumed / "out", resumed / "export"),
                      CLASSIFIER_KILLS)
    assert "did not finish before the run was stopped" not in final.stderr  # all done before
    assert_same_run(reference / "out", resumed / "out", [
        "eval_results.txt", "best/eval_results.txt", "best/model.index",
        "best/model.data-00000-of-00001", "model.ckpt-12.index",
        "model.ckpt-12.data-00000-of-00001", "test_results.tsv", "test_predictions.tsv",
        "eval_predictions.tsv", "run_config.json"])
    assert_same_run(reference / "export", resumed / "export", [
        "variables/variables.index", "variables/variables.data-00000-of-00001",
        "assets.extra/vocab.txt"])


def test_killed_evaluation_is_run_on_resume(mrpc, tiny_checkpoint, tmp_path):
    """The issue's case alone: killed inside the first evaluation, the rerun evaluates step 3
    before training on (it did not, and best/ ended at another step)."""
    out = tmp_path / "out"
    killed = run(classifier(mrpc, tiny_checkpoint, out), {KILL_VARIABLE: "evaluation@1"})
    assert killed.returncode == -signal.SIGKILL
    assert (out / "model.ckpt-3.index").exists() and not (out / "eval_results.txt").exists()
    resumed = run(classifier(mrpc, tiny_checkpoint, out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert ("the evaluation at step 3 did not finish before the run was stopped: evaluating the "
            "restored weights now") in resumed.stderr
    assert resumed.stderr.count("] evaluation at step ") == 4
    best = json.dumps(sorted((out / "best" / "eval_results.txt").read_text().splitlines()))
    assert '"global_step = 9"' in best
