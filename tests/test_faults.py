"""A kill anywhere resumes to the same result: each runner killed with SIGKILL at every named phase.

Each runner's command is run once uninterrupted, and once as a chain of runs of the same command,
each killed at the next fault point (`process.fault_points`: the process kills itself there)
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
import warm_python
from conftest import REPO
from test_run_classifier import glue_slice

from bert_tf2.process.fault_points import KILL_VARIABLE, POINTS

# Runs whose TensorBoard event files are named by time and host; their folders' names are compared.
EVENT_FOLDERS = ("train", "eval")


def run(command, env_extra=None):
    return warm_python.run([sys.executable, *command], cwd=REPO,
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


# NER in make test; SQuAD and multiple choice, the same kills on other tasks, in make test-all.
@pytest.mark.parametrize("runner", [pytest.param(name, marks=[] if name == "ner" else
                                                 pytest.mark.slow)
                                    for name in sorted(OTHER_RUNNERS)])
def test_each_fine_tuning_runner_killed_in_evaluation_and_prediction_ends_the_same(
        runner, shared_data, tiny_checkpoint, tmp_path):
    """Their tasks read, score and write their own files; the engine around them is the
    classifier's, tried at every point above. Killed inside the first evaluation, while the first
    best/ is swapped in, and between prediction files, each ends as its uninterrupted run."""
    make_data, command, files = OTHER_RUNNERS[runner]
    data = make_data(shared_data, tmp_path / "data")
    straight = run(command(data, tiny_checkpoint, tmp_path / "reference"))
    assert straight.returncode == 0, straight.stderr[-3000:]
    run_chain(command(data, tiny_checkpoint, tmp_path / "resumed"),
              ["evaluation@1", "best_swap@1", "prediction@1"])
    reference = tmp_path / "reference"
    steps = sorted(p.name for p in reference.glob("model.ckpt-*.index"))
    assert_same_run(reference, tmp_path / "resumed", [
        "eval_results.txt", "best/eval_results.txt", "best/model.data-00000-of-00001",
        steps[-1], steps[-1].replace(".index", ".data-00000-of-00001"), *files])


# ----------------------------------------------------------------------------- pretraining
@pytest.fixture(scope="module")
def records(shared_data, tiny_checkpoint, tmp_path_factory):
    path = tmp_path_factory.mktemp("records") / "records.tfrecord"
    made = run(["-m", "bert_tf2.data_gen.pretraining.create_pretraining_data",
                f"--input_file={shared_data}/corpus/wikitext-2/valid.txt",
                f"--output_file={path}", f"--vocab_file={tiny_checkpoint}/vocab.txt",
                "--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=1"])
    assert made.returncode == 0, made.stderr[-3000:]
    return path


def pretraining_command(records, checkpoint, out):
    return ["run_pretraining.py", f"--input_file={records}", f"--output_dir={out}",
            f"--bert_config_file={checkpoint}/bert_config.json", "--max_seq_length=64",
            "--max_predictions_per_seq=10", "--train_batch_size=8", "--learning_rate=1e-3",
            "--num_train_steps=20", "--num_warmup_steps=3", "--steps_per_loop=5",
            "--save_checkpoints_steps=10", "--do_train", "--do_eval", "--max_eval_steps=5",
            f"--vocab_file={checkpoint}/vocab.txt"]


def test_pretraining_killed_at_every_phase_ends_as_the_uninterrupted_run(records, tiny_checkpoint,
                                                                         tmp_path):
    straight = run(pretraining_command(records, tiny_checkpoint, tmp_path / "reference"))
    assert straight.returncode == 0, straight.stderr[-3000:]
    run_chain(pretraining_command(records, tiny_checkpoint, tmp_path / "resumed"),
              ["train_loop@1", "checkpoint_write@1", "train_loop@3", "checkpoint_write@1",
               "tf1_export@1", "evaluation@1"])
    assert_same_run(tmp_path / "reference", tmp_path / "resumed", [
        "eval_results.txt", "model.ckpt-20.index", "model.ckpt-20.data-00000-of-00001",
        "tf1/bert_model.ckpt.index", "tf1/bert_model.ckpt.data-00000-of-00001",
        "tf1/bert_config.json", "tf1/vocab.txt", "run_config.json"])


# ----------------------------------------------------------------------------- the data tools
def pretraining_data_command(shared_data, checkpoint, folder):
    """create_pretraining_data on WikiText-2 valid into two shards of `folder`, two workers and
    pools small enough that there are several."""
    return ["-m", "bert_tf2.data_gen.pretraining.create_pretraining_data",
            f"--input_file={shared_data}/corpus/wikitext-2/valid.txt",
            f"--output_file={folder}/a.tfrecord,{folder}/b.tfrecord",
            f"--vocab_file={checkpoint}/vocab.txt", "--max_seq_length=64",
            "--max_predictions_per_seq=10", "--dupe_factor=1", "--num_workers=2",
            "--pool_bytes=200000"]


def sst2_lines(shared_data, path):
    """The first 120 sentences of SST-2 dev, one a line, written to `path`."""
    text = (shared_data / "glue" / "SST-2" / "dev.tsv").read_text(encoding="utf-8")
    path.write_text("\n".join(row.split("\t")[0] for row in text.splitlines()[1:121]) + "\n")
    return path


def extract_features_command(lines, checkpoint, folder):
    """extract_features of `lines` into `folder/features.jsonl`, in parts of 40 lines."""
    return ["extract_features.py", f"--input_file={lines}",
            f"--output_file={folder}/features.jsonl",
            f"--init_checkpoint={checkpoint}/bert_model.ckpt", "--max_seq_length=32",
            "--layers=-1", "--lines_per_shard=40"]


def test_create_pretraining_data_killed_while_writing_leaves_nothing_and_reruns_the_same(
        shared_data, tiny_checkpoint, tmp_path):
    """Killed with its pool folder and half-written shards on disk, the rerun removes both
    (saying so) and writes the uninterrupted run's bytes."""
    def command(folder):
        return pretraining_data_command(shared_data, tiny_checkpoint, folder)

    assert run(command(tmp_path / "reference")).returncode == 0
    killed = run(command(tmp_path / "resumed"), {KILL_VARIABLE: "records@1"})
    assert killed.returncode == -signal.SIGKILL
    left = sorted(os.listdir(tmp_path / "resumed"))
    assert any(".pools-" in name for name in left) and any(".tmp" in name for name in left), left
    final = run(command(tmp_path / "resumed"))
    assert final.returncode == 0, final.stderr[-3000:]
    assert "the pool files of an interrupted run" in final.stderr
    assert "a partial file left by an interrupted run" in final.stderr
    assert_same_run(tmp_path / "reference", tmp_path / "resumed",
                    ["a.tfrecord", "b.tfrecord", "a.tfrecord.stats.json"])


def test_extract_features_killed_in_a_part_resumes_to_the_same_lines(
        shared_data, tiny_checkpoint, tmp_path):
    lines = sst2_lines(shared_data, tmp_path / "lines.txt")

    def command(folder):
        return extract_features_command(lines, tiny_checkpoint, folder)

    assert run(command(tmp_path / "reference")).returncode == 0
    (tmp_path / "resumed").mkdir()
    run_chain(command(tmp_path / "resumed"), ["parts@2", "parts@1"])
    assert_same_run(tmp_path / "reference", tmp_path / "resumed", ["features.jsonl"])


# ----------------------------------------------------------------------------- one run per output
def wait_until_stopped(process, deadline=600):
    import time

    start = time.time()
    while time.time() - start < deadline:
        assert process.poll() is None, process.stderr.read()[-3000:]
        with open(f"/proc/{process.pid}/stat") as f:
            if f.read().split(") ", 1)[1].startswith("T"):
                return
        time.sleep(0.2)
    raise AssertionError("the first run never reached its stop point")


def frozen(command, point):
    """`command` started and frozen (SIGSTOP) at fault point `point`, holding its outputs."""
    from bert_tf2.process.fault_points import STOP_VARIABLE

    process = warm_python.start([sys.executable, *command], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env={**os.environ, STOP_VARIABLE: point})
    wait_until_stopped(process)
    return process


def snapshot(folder):
    return {str(p.relative_to(folder)): p.stat().st_size if p.is_file() else "folder"
            for p in folder.rglob("*")}


def test_a_second_run_on_a_held_output_dir_is_refused_and_writes_nothing(mrpc, tiny_checkpoint,
                                                                          tmp_path):
    out = tmp_path / "out"
    first = frozen(classifier(mrpc, tiny_checkpoint, out), "train_loop@1")
    try:
        before = snapshot(out)
        second = run(classifier(mrpc, tiny_checkpoint, out) + ["--learning_rate=2e-5"])
        assert second.returncode == 1, second.stderr[-3000:]
        line = second.stderr.strip().splitlines()[-1]
        assert line == (f"run_classifier.py: error: {out}: --output_dir in use by "
                        f"run_classifier.py (pid {first.pid}, since "
                        f"{line.split('since ')[1].split(')')[0]}); wait for it to finish, or use "
                        f"another --output_dir"), line
        assert snapshot(out) == before
        # Another tool on the same folder is refused the same way.
        other = run(["run_pretraining.py", f"--input_file={mrpc}/train.tsv",
                     f"--output_dir={out}", f"--bert_config_file={tiny_checkpoint}/"
                     f"bert_config.json", "--do_train"])
        assert other.returncode == 1 and f"(pid {first.pid}," in other.stderr, other.stderr
        assert snapshot(out) == before
    finally:
        first.kill()
        first.wait()
    # The OS released the lock with the process: the same command now resumes and finishes.
    again = run(classifier(mrpc, tiny_checkpoint, out))
    assert again.returncode == 0, again.stderr[-3000:]
    assert not (tmp_path / ".out.lock").exists()


def test_two_extract_features_runs_on_one_output(shared_data, tiny_checkpoint, tmp_path):
    lines = tmp_path / "lines.txt"
    text = (shared_data / "glue" / "SST-2" / "dev.tsv").read_text(encoding="utf-8")
    lines.write_text("\n".join(row.split("\t")[0] for row in text.splitlines()[1:81]) + "\n")
    command = ["extract_features.py", f"--input_file={lines}",
               f"--output_file={tmp_path}/features.jsonl",
               f"--init_checkpoint={tiny_checkpoint}/bert_model.ckpt", "--max_seq_length=32",
               "--layers=-1", "--lines_per_shard=20"]
    first = frozen(command, "parts@2")
    try:
        before = snapshot(tmp_path)
        second = run(command)
        assert second.returncode == 1
        assert (f"features.jsonl: --output_file in use by extract_features.py (pid {first.pid}"
                in second.stderr.strip().splitlines()[-1]), second.stderr[-2000:]
        assert snapshot(tmp_path) == before
    finally:
        first.kill()
        first.wait()
    assert run(command).returncode == 0
    assert len((tmp_path / "features.jsonl").read_text().splitlines()) == 80


def test_a_full_disk_is_one_line_and_the_rerun_resumes(mrpc, tiny_checkpoint, tmp_path):
    """A file size limit (RLIMIT_FSIZE: the same refusal as a full disk, without filling one)
    stops the first checkpoint write; the run says so in one line naming its folder, and the same
    command, with room again, removes the partial checkpoint and ends as an uninterrupted run."""
    import resource

    out = tmp_path / "out"
    limited = subprocess.run(
        [sys.executable, *classifier(mrpc, tiny_checkpoint, out)], cwd=REPO, text=True,
        capture_output=True, timeout=900,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (2_000_000, 2_000_000)))
    assert limited.returncode == 1, limited.stderr[-3000:]
    assert "Traceback" not in limited.stderr
    assert limited.stderr.strip().splitlines()[-1] == (
        f"run_classifier.py: error: {out}: file too large while writing; free some space or "
        f"raise the file size limit, then run the same command again (it resumes where it "
        f"stopped)")
    assert not list(out.glob("*_temp"))  # the failed write's partial folder is removed
    again = run(classifier(mrpc, tiny_checkpoint, out))
    assert again.returncode == 0, again.stderr[-3000:]
    assert not list(out.glob("*_temp"))
