"""A kill anywhere resumes to the same result: each runner killed with SIGKILL at every named phase.

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
import warm_python
from conftest import REPO, KillChain, assert_same_run, sizes, wait_until_stopped
from reference_runs import (
    classifier,
    extract_features_command,
    pretraining,
    run,
    two_shards_command,
)

from bert_tf2.process.fault_points import KILL_VARIABLE, POINTS

pytestmark = pytest.mark.integration

# The classifier's chain: every point, later ones at a later occurrence so that the kill falls
# where an earlier best/ is being replaced and where a resumed run has evaluated already.
CLASSIFIER_KILLS = ["features@1", "train_loop@1", "checkpoint_write@1", "evaluation@1",
                    "best_swap@1", "eval_results@1", "best_swap@2", "evaluation@2",
                    "prediction@1", "export@1"]
# Pretraining's own points (its export, its evaluation) after a kill in training and one in a
# checkpoint write; `PRETRAINING_ALL_KILLS` (make test-all) adds a kill after resuming from a
# middle checkpoint and one in the last checkpoint's write.
PRETRAINING_KILLS = ["train_loop@1", "checkpoint_write@1", "tf1_export@1", "evaluation@1"]
PRETRAINING_ALL_KILLS = ["train_loop@1", "checkpoint_write@1", "train_loop@3",
                         "checkpoint_write@1", "tf1_export@1", "evaluation@1"]


def test_every_point_is_tried():
    assert {kill.partition("@")[0] for kill in CLASSIFIER_KILLS} | {
        "tf1_export", "records", "parts"} == set(POINTS)
    assert {kill.partition("@")[0] for kill in PRETRAINING_KILLS} == {
        kill.partition("@")[0] for kill in PRETRAINING_ALL_KILLS}


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


# ----------------------------------------------------------------------------- the other runners
def squad_command(data, checkpoint, out):
    return ["run_squad.py", f"--train_file={data}/train.json", f"--predict_file={data}/dev.json",
            f"--output_dir={out}", f"--init_checkpoint={checkpoint}/bert_model.ckpt",
            "--max_seq_length=128", "--doc_stride=48", "--max_query_length=32",
            "--train_batch_size=8", "--num_train_epochs=2", "--learning_rate=1e-3",
            "--do_train", "--do_eval", "--do_predict"]


def ner_command(data, checkpoint, out):
    return ["run_ner.py", f"--data_dir={data}", f"--output_dir={out}",
            f"--init_checkpoint={checkpoint}/bert_model.ckpt", "--max_seq_length=32",
            "--doc_stride=16", "--train_batch_size=16", "--num_train_epochs=2",
            "--learning_rate=2e-3", "--do_train", "--do_eval"]


def multiple_choice_command(data, checkpoint, out):
    return ["run_multiple_choice.py", "--task_name=generic", f"--data_dir={data}",
            f"--output_dir={out}", f"--init_checkpoint={checkpoint}", "--max_seq_length=32",
            "--train_batch_size=8", "--num_train_epochs=2", "--learning_rate=1e-3",
            "--do_train", "--do_eval", "--do_predict"]


def squad_data(shared_data, folder):
    from bert_tf2.tasks.squad.files import load_squad, write_json

    squad = load_squad(shared_data / "squad" / "dev-v1.1.json")
    folder.mkdir()
    for name, article, count in (("train", 0, 4), ("dev", 40, 2)):
        source = squad["data"][article]
        write_json(folder / f"{name}.json", {"version": "1.1", "data": [
            {"title": source["title"], "paragraphs": source["paragraphs"][:count]}]})
    return folder


def ner_data(shared_data, folder):
    from test_run_ner import conll_slice

    return conll_slice(shared_data, folder, {"train.txt": 800, "valid.txt": 300})


def multiple_choice_data(shared_data, folder):
    from test_multiple_choice import generic_rows, write_jsonl

    folder.mkdir()
    write_jsonl(folder / "train.jsonl", generic_rows(24))
    write_jsonl(folder / "val.jsonl", generic_rows(12))
    write_jsonl(folder / "test.jsonl", generic_rows(9, labelled=False))
    return folder


# What each writes beyond checkpoints and best/: its evaluation and prediction files.
OTHER_RUNNERS = {
    "squad": (squad_data, squad_command, ["predictions.json", "nbest_predictions.json"]),
    "ner": (ner_data, ner_command, ["eval_predictions.txt"]),
    "multiple_choice": (multiple_choice_data, multiple_choice_command,
                        ["test_results.tsv", "test_predictions.tsv", "eval_predictions.tsv"]),
}
# Killed inside the first evaluation, while the first best/ is swapped in, and between prediction
# files.
OTHER_KILLS = ["evaluation@1", "best_swap@1", "prediction@1"]


def assert_ends_as_the_uninterrupted_run(runner, reference, resumed):
    steps = sorted(p.name for p in reference.glob("model.ckpt-*.index"))
    assert_same_run(reference, resumed, [
        "eval_results.txt", "best/eval_results.txt", "best/model.data-00000-of-00001",
        steps[-1], steps[-1].replace(".index", ".data-00000-of-00001"), *OTHER_RUNNERS[runner][2]])


@pytest.fixture(scope="module")
def ner_chain(shared_data, tiny_checkpoint, tmp_path_factory):
    """NER's uninterrupted run and its chain (make test; SQuAD and multiple choice, the same kills
    on other tasks, in make test-all)."""
    root = tmp_path_factory.mktemp("ner_chain")
    data = ner_data(shared_data, root / "data")
    straight = run(ner_command(data, tiny_checkpoint, root / "reference"))
    assert straight.returncode == 0, straight.stderr[-3000:]
    chain = KillChain(run, ner_command(data, tiny_checkpoint, root / "resumed"), OTHER_KILLS)
    chain.folder = root
    return chain


@pytest.mark.parametrize("point", OTHER_KILLS)
def test_ner_killed_at(point, ner_chain):
    ner_chain.kill_through(point)


def test_ner_killed_in_evaluation_and_prediction_ends_as_the_uninterrupted_run(ner_chain):
    """NER reads, scores and writes its own files; the engine around it is the classifier's,
    tried at every point above."""
    ner_chain.finish()
    assert_ends_as_the_uninterrupted_run("ner", ner_chain.folder / "reference",
                                         ner_chain.folder / "resumed")


@pytest.mark.slow  # the NER chain's kills on other tasks (make test-all)
@pytest.mark.parametrize("runner", ["squad", "multiple_choice"])
def test_each_fine_tuning_runner_killed_in_evaluation_and_prediction_ends_the_same(
        runner, shared_data, tiny_checkpoint, tmp_path):
    """Their tasks read, score and write their own files; the engine around them is the
    classifier's, tried at every point above. Each ends as its uninterrupted run."""
    make_data, command, _ = OTHER_RUNNERS[runner]
    data = make_data(shared_data, tmp_path / "data")
    straight = run(command(data, tiny_checkpoint, tmp_path / "reference"))
    assert straight.returncode == 0, straight.stderr[-3000:]
    KillChain(run, command(data, tiny_checkpoint, tmp_path / "resumed"), OTHER_KILLS).finish()
    assert_ends_as_the_uninterrupted_run(runner, tmp_path / "reference", tmp_path / "resumed")


# ----------------------------------------------------------------------------- pretraining
PRETRAINING_FILES = ["eval_results.txt", "model.ckpt-20.index",
                     "model.ckpt-20.data-00000-of-00001", "tf1/bert_model.ckpt.index",
                     "tf1/bert_model.ckpt.data-00000-of-00001", "tf1/bert_config.json",
                     "tf1/vocab.txt", "run_config.json"]


@pytest.fixture(scope="module")
def pretraining_chain(pretraining_records, tiny_checkpoint, tmp_path_factory):
    resumed = tmp_path_factory.mktemp("pretraining_chain") / "out"
    chain = KillChain(run, pretraining(pretraining_records, tiny_checkpoint, resumed),
                      PRETRAINING_KILLS)
    chain.folder = resumed
    return chain


@pytest.mark.parametrize("point", PRETRAINING_KILLS)
def test_pretraining_killed_at(point, pretraining_chain):
    pretraining_chain.kill_through(point)


def test_pretraining_killed_at_every_phase_ends_as_the_uninterrupted_run(
        pretraining_chain, pretraining_reference):
    pretraining_chain.finish()
    assert_same_run(pretraining_reference, pretraining_chain.folder, PRETRAINING_FILES)


@pytest.mark.slow  # the chain above, with two more kills in training (make test-all)
def test_pretraining_killed_at_every_point_of_the_long_chain_ends_as_the_uninterrupted_run(
        pretraining_records, pretraining_reference, tiny_checkpoint, tmp_path):
    KillChain(run, pretraining(pretraining_records, tiny_checkpoint, tmp_path / "resumed"),
              PRETRAINING_ALL_KILLS).finish()
    assert_same_run(pretraining_reference, tmp_path / "resumed", PRETRAINING_FILES)


# ----------------------------------------------------------------------------- the data tools
def test_create_pretraining_data_killed_while_writing_leaves_nothing_and_reruns_the_same(
        shared_data, tiny_checkpoint, two_shards_reference, tmp_path):
    """Killed with its pool folder and half-written shards on disk, the rerun removes both
    (saying so) and writes the uninterrupted run's bytes."""
    command = two_shards_command(shared_data, tiny_checkpoint, tmp_path / "resumed")
    killed = run(command, {KILL_VARIABLE: "records@1"})
    assert killed.returncode == -signal.SIGKILL
    left = sorted(os.listdir(tmp_path / "resumed"))
    assert any(".pools-" in name for name in left) and any(".tmp" in name for name in left), left
    final = run(command)
    assert final.returncode == 0, final.stderr[-3000:]
    assert "the pool files of an interrupted run" in final.stderr
    assert "a partial file left by an interrupted run" in final.stderr
    assert_same_run(two_shards_reference, tmp_path / "resumed",
                    ["a.tfrecord", "b.tfrecord", "a.tfrecord.stats.json"])


def test_extract_features_killed_in_a_part_resumes_to_the_same_lines(
        sst2_lines, tiny_checkpoint, extract_features_reference, tmp_path):
    (tmp_path / "resumed").mkdir()
    KillChain(run, extract_features_command(sst2_lines, tiny_checkpoint, tmp_path / "resumed"),
              ["parts@2", "parts@1"]).finish()
    assert_same_run(extract_features_reference, tmp_path / "resumed", ["features.jsonl"])


# ----------------------------------------------------------------------------- one run per output
def frozen(command, point):
    """`command` started and frozen (SIGSTOP) at fault point `point`, holding its outputs."""
    from bert_tf2.process.fault_points import STOP_VARIABLE

    process = warm_python.start([sys.executable, *command], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env={**os.environ, STOP_VARIABLE: point})
    wait_until_stopped(process)
    return process


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


def test_two_extract_features_runs_on_one_output(sst2_lines, tiny_checkpoint, tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(sst2_lines.read_text().splitlines(keepends=True)[:80]))
    command = extract_features_command(lines, tiny_checkpoint, tmp_path, lines_per_shard=20)
    first = frozen(command, "parts@2")
    try:
        before = sizes(tmp_path)
        second = run(command)
        assert second.returncode == 1
        assert (f"features.jsonl: --output_file in use by extract_features.py (pid {first.pid}"
                in second.stderr.strip().splitlines()[-1]), second.stderr[-2000:]
        assert sizes(tmp_path) == before
    finally:
        first.kill()
        first.wait()
    assert run(command).returncode == 0
    assert len((tmp_path / "features.jsonl").read_text().splitlines()) == 80


def test_a_full_disk_is_one_line_and_the_rerun_resumes(mrpc_small, tiny_checkpoint, tmp_path):
    """A file size limit (RLIMIT_FSIZE: the same refusal as a full disk, without filling one)
    stops the first checkpoint write; the run says so in one line naming its folder, and the same
    command, with room again, removes the partial checkpoint and ends as an uninterrupted run."""
    import resource

    out = tmp_path / "out"
    limited = subprocess.run(
        [sys.executable, *classifier(mrpc_small, tiny_checkpoint, out)], cwd=REPO, text=True,
        capture_output=True, timeout=900,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (2_000_000, 2_000_000)))
    assert limited.returncode == 1, limited.stderr[-3000:]
    assert "Traceback" not in limited.stderr
    assert limited.stderr.strip().splitlines()[-1] == (
        f"run_classifier.py: error: {out}: file too large while writing; free some space or "
        f"raise the file size limit, then run the same command again (it resumes where it "
        f"stopped)")
    assert not list(out.glob("*_temp"))  # the failed write's partial folder is removed
    again = run(classifier(mrpc_small, tiny_checkpoint, out))
    assert again.returncode == 0, again.stderr[-3000:]
    assert not list(out.glob("*_temp"))
