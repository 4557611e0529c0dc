"""NER, pretraining and the data tools killed with SIGKILL at their own phases end as their
uninterrupted runs; a second extract_features run on a held output is refused; a full disk is one
line and the rerun resumes. (The classifier's chain, every point of the engine: test_faults.py;
the method and the comparison are described there.)
"""
import os
import signal
import sys

import pytest
import warm_python
from conftest import REPO, KillChain, assert_same_run, frozen, sizes
from reference_runs import (
    classifier,
    extract_features_command,
    pretraining,
    run,
    two_shards_command,
)

from bert_tf2.process.fault_points import KILL_VARIABLE, POINTS

pytestmark = pytest.mark.integration

# Pretraining's own points (its export, its evaluation) after a kill in training and one in a
# checkpoint write; `PRETRAINING_ALL_KILLS` (make test-all) adds a kill after resuming from a
# middle checkpoint and one in the last checkpoint's write.
PRETRAINING_KILLS = ["train_loop@1", "checkpoint_write@1", "tf1_export@1", "evaluation@1"]
PRETRAINING_ALL_KILLS = ["train_loop@1", "checkpoint_write@1", "train_loop@3",
                         "checkpoint_write@1", "tf1_export@1", "evaluation@1"]


def test_the_short_pretraining_chain_tries_every_point_of_the_long_one():
    assert {kill.partition("@")[0] for kill in PRETRAINING_KILLS} == {
        kill.partition("@")[0] for kill in PRETRAINING_ALL_KILLS} <= set(POINTS)


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
    out = tmp_path / "out"
    limited = warm_python.run([sys.executable, *classifier(mrpc_small, tiny_checkpoint, out)],
                              cwd=REPO, timeout=900, file_size_limit=2_000_000)
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
