"""Ctrl-C and SIGTERM through the real command line: one line saying where the run stopped and
what the same command does next, exit status 130 (SIGINT) or 143 (SIGTERM), nothing
half-written left, and a rerun that ends as the uninterrupted run, byte for byte.

Each run is frozen at a named point (`process.fault_points`, SIGSTOP), sent the signal and let
go, so the signal arrives at a known place: in a training loop, an evaluation, between the two
renames of an export, while a pretraining-data shard or an extract_features part is half
written.
"""
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import warm_python
from conftest import REPO, assert_same_run, listing, wait_until_stopped
from reference_runs import (
    classifier,
    extract_features_command,
    pretraining,
    run,
    two_shards_command,
)

from bert_tf2.process.fault_points import STOP_VARIABLE

pytestmark = pytest.mark.integration

ONE_LINE = re.compile(r"^(?P<program>\S+): interrupted by (?P<signal>Ctrl-C \(SIGINT\)|SIGTERM) "
                      r"(?P<where>.+); nothing half-written is left; the same command "
                      r"(?P<rerun>.+)$")
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}


def interrupted(command, point, signal_number):
    """`command` frozen at fault point `point`, sent `signal_number`, let go; (status, stderr)."""
    process = warm_python.start([sys.executable, *command], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env={**os.environ, STOP_VARIABLE: point})
    wait_until_stopped(process)
    os.kill(process.pid, signal_number)
    os.kill(process.pid, signal.SIGCONT)
    _, stderr = process.communicate(timeout=300)
    return process.returncode, stderr


def the_line(status, stderr, signal_number, program):
    """The run ended with the signal's status and one line, no traceback; its parts."""
    assert status == STATUS[signal_number], stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    match = ONE_LINE.match(last)
    assert match, last
    assert match["program"] == program
    assert match["signal"] == ("SIGTERM" if signal_number == signal.SIGTERM
                               else "Ctrl-C (SIGINT)")
    return match


def nothing_half_written(folder):
    """No temporary file, partial checkpoint, staging or `.old` copy, lock or pool folder."""
    left = [path for path in listing(folder) if re.search(
        r"\.tmp|_temp|\.old\d|\.lock|\.pools-", path)]
    assert not left, left
    lock = folder.parent / f".{folder.name}.lock"
    assert not lock.exists()


# ----------------------------------------------------------------------------- fine-tuning
def test_fine_tuning_interrupted_in_training_and_in_evaluation_resumes_to_the_same_run(
        mrpc_small, tiny_checkpoint, classifier_reference, tmp_path):
    out = tmp_path / "resumed"
    command = classifier(mrpc_small, tiny_checkpoint, out)

    # Ctrl-C after the loop ending at step 6, before its checkpoint: step 3's is the last.
    line = the_line(*interrupted(command, "train_loop@2", signal.SIGINT), signal.SIGINT,
                    "run_classifier.py")
    assert line["where"] == "at training step 6 of 12"
    assert line["rerun"] == f"resumes from {out}/model.ckpt-3 (step 3)"
    nothing_half_written(out)

    # SIGTERM inside the evaluation at step 9 (the second evaluation of the resumed run).
    line = the_line(*interrupted(command, "evaluation@2", signal.SIGTERM), signal.SIGTERM,
                    "run_classifier.py")
    assert line["where"] == "in the evaluation at step 9"
    assert line["rerun"] == f"resumes from {out}/model.ckpt-9 (step 9)"
    nothing_half_written(out)

    final = run(command)
    assert final.returncode == 0, final.stderr[-3000:]
    steps = sorted(p.name for p in out.glob("model.ckpt-*.index"))
    assert_same_run(classifier_reference["out"], out, [
        "eval_results.txt", "best/eval_results.txt", "best/model.data-00000-of-00001",
        steps[-1], steps[-1].replace(".index", ".data-00000-of-00001"), "test_results.tsv"])


def _first_loop_seconds(log: str) -> float:
    """Seconds from the "training examples" line to the first loop's "step N/M" line in a run's
    log: what tracing, compiling and that loop took on this machine at this load."""
    def seconds(line):
        hours, minutes, rest = line.split()[1].split(":")
        return 3600 * int(hours) + 60 * int(minutes) + float(rest)
    lines = log.splitlines()
    start = next(i for i, line in enumerate(lines) if "training examples" in line)
    end = next(line for line in lines[start:] if re.search(r"\] step \d+/\d+ \|", line))
    return seconds(end) - seconds(lines[start])


def test_ctrl_c_inside_a_long_training_loop_stops_after_the_current_step(
        mrpc_small, tiny_checkpoint, classifier_reference, tmp_path):
    """One loop of 18,000 steps (minutes): the signal reaches the loop through the watcher
    thread's flag, and the run stops within seconds, at the step it was in. The signal comes once
    the loop runs: one second after the time the uninterrupted reference run (the same model and
    data) took from its "training examples" line to the end of its first loop. A signal that came
    while the loop was still being traced or compiled proves nothing (it stops at step 0 or 1): then
    the run is tried again with a longer wait."""
    first = _first_loop_seconds(classifier_reference["log"]) + 1.0
    for attempt, wait in enumerate([first, max(10, 2 * first), 60]):
        out = tmp_path / f"out{attempt}"
        command = [*classifier(mrpc_small, tiny_checkpoint, out), "--num_train_epochs=3000",
                   "--iterations_per_loop=18000", "--save_checkpoints_steps=18000",
                   "--eval_every_steps=18000"]
        process = warm_python.start([sys.executable, *command], cwd=REPO,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for line in process.stderr:
            if "training examples" in line:
                break
        time.sleep(wait)
        start = time.monotonic()
        os.kill(process.pid, signal.SIGINT)
        stderr = process.stderr.read()
        process.wait(timeout=300)
        stopped_in = time.monotonic() - start
        line = the_line(process.returncode, stderr, signal.SIGINT, "run_classifier.py")
        step = int(re.fullmatch(r"at training step (\d+) of 18000", line["where"])[1])
        assert line["rerun"] == "starts again from the beginning"
        assert stopped_in < 30, stopped_in
        nothing_half_written(out)
        if step > 1:
            assert step < 18000
            return
    raise AssertionError("the training loop had not started after 60 s")


def test_an_interrupted_export_leaves_the_previous_export(
        mrpc_small, tiny_checkpoint, classifier_reference, tmp_path):
    """Ctrl-C between the two renames of a SavedModel swap puts the previous export back and
    removes the new copy; the rerun exports again. (A copy of the classifier's finished run and
    export, made by the same command.)"""
    import shutil

    out, export = tmp_path / "out", tmp_path / "serving"
    shutil.copytree(classifier_reference["out"], out)
    shutil.copytree(classifier_reference["export"], export)
    command = classifier(mrpc_small, tiny_checkpoint, out, export)
    before = (export / "saved_model.pb").read_bytes()
    predict_only = [flag for flag in command if flag != "--do_train"]
    line = the_line(*interrupted(predict_only, "export@1", signal.SIGINT), signal.SIGINT,
                    "run_classifier.py")
    assert line["where"] == f"while exporting the SavedModel to {export}"
    assert sorted(os.listdir(tmp_path)) == ["out", "serving"]
    assert (export / "saved_model.pb").read_bytes() == before
    again = run(predict_only)
    assert again.returncode == 0, again.stderr[-3000:]


# ----------------------------------------------------------------------------- pretraining
def test_pretraining_interrupted_in_training_and_in_its_export_resumes_to_the_same_run(
        pretraining_records, pretraining_reference, tiny_checkpoint, tmp_path):
    out = tmp_path / "resumed"
    command = pretraining(pretraining_records, tiny_checkpoint, out)

    line = the_line(*interrupted(command, "train_loop@3", signal.SIGTERM), signal.SIGTERM,
                    "run_pretraining.py")
    assert line["where"] == "at training step 15 of 20"
    assert line["rerun"] == f"resumes from {out}/model.ckpt-10 (step 10)"
    nothing_half_written(out)

    line = the_line(*interrupted(command, "tf1_export@1", signal.SIGINT), signal.SIGINT,
                    "run_pretraining.py")
    assert line["where"] == f"while exporting the TF1 checkpoint to {out}/tf1"
    assert line["rerun"] == f"resumes from {out}/model.ckpt-20 (step 20)"
    nothing_half_written(out)

    final = run(command)
    assert final.returncode == 0, final.stderr[-3000:]
    assert_same_run(pretraining_reference, out, [
        "eval_results.txt", "model.ckpt-20.index", "model.ckpt-20.data-00000-of-00001",
        "tf1/bert_model.ckpt.index", "tf1/bert_model.ckpt.data-00000-of-00001",
        "tf1/bert_config.json", "tf1/vocab.txt", "run_config.json"])


# ----------------------------------------------------------------------------- the data tools
@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_create_pretraining_data_interrupted_leaves_nothing_and_reruns_the_same(
        shared_data, tiny_checkpoint, two_shards_reference, tmp_path, signal_number):
    """Interrupted with two workers running and two shards half written: the shards and the
    pool folder are removed, the workers end without a word, and the rerun writes the
    uninterrupted run's bytes."""
    def command(folder):
        return two_shards_command(shared_data, tiny_checkpoint, folder)

    out = tmp_path / "resumed"
    status, stderr = interrupted(command(out), "records@1", signal_number)
    line = the_line(status, stderr, signal_number, "create_pretraining_data.py")
    assert re.fullmatch(r"while making the records of pool \d+ of \d+", line["where"])
    assert line["rerun"] == "starts again from the beginning"
    nothing_half_written(out)
    assert os.listdir(out) == []
    final = run(command(out))
    assert final.returncode == 0, final.stderr[-3000:]
    assert_same_run(two_shards_reference, out,
                    ["a.tfrecord", "b.tfrecord", "a.tfrecord.stats.json"])


def test_extract_features_interrupted_in_a_part_resumes_after_the_complete_ones(
        sst2_lines, tiny_checkpoint, extract_features_reference, tmp_path):
    def command(folder):
        return extract_features_command(sst2_lines, tiny_checkpoint, folder)

    out = tmp_path / "resumed"
    out.mkdir()
    line = the_line(*interrupted(command(out), "parts@2", signal.SIGINT), signal.SIGINT,
                    "extract_features.py")
    assert line["where"] == "while writing part 2 (lines 41 to 80)"
    parts = out / ".features.jsonl.parts"
    assert line["rerun"] == f"resumes after line 40 (1 complete part(s) kept in {parts})"
    assert sorted(os.listdir(parts)) == ["part-000000.jsonl", "settings.json"]
    assert os.listdir(out) == [".features.jsonl.parts"]
    final = run(command(out))
    assert final.returncode == 0, final.stderr[-3000:]
    assert "resuming: 40 lines already written in 1 shards" in final.stderr
    assert_same_run(extract_features_reference, out, ["features.jsonl"])


# ----------------------------------------------------------------------------- a second Ctrl-C
SLOW_CLEAN_UP = textwrap.dedent("""
    import sys, time
    from bert_tf2.process.errors import run_main

    def main(argv):
        try:
            print("running", flush=True)
            time.sleep(600)
        finally:
            print("cleaning up", flush=True)
            time.sleep(600)  # a clean-up that takes long: a second Ctrl-C must not wait for it

    run_main(main)
""")


def read_until(stream, text, deadline=60):
    start = time.time()
    while time.time() - start < deadline:
        if stream.readline().strip() == text:
            return
    raise AssertionError(f"never printed {text!r}")


def test_a_second_ctrl_c_stops_at_once(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text(SLOW_CLEAN_UP)
    process = subprocess.Popen([sys.executable, str(script)], cwd=REPO, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
    read_until(process.stdout, "running")
    os.kill(process.pid, signal.SIGINT)
    read_until(process.stdout, "cleaning up")
    start = time.time()
    os.kill(process.pid, signal.SIGINT)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGINT
    assert time.time() - start < 5


def test_a_signal_without_a_phrase_says_the_command_starts_again(tmp_path):
    script = tmp_path / "quick.py"
    script.write_text(SLOW_CLEAN_UP.replace("time.sleep(600)  # a clean-up", "pass  # a clean-up"))
    process = subprocess.Popen([sys.executable, str(script)], cwd=REPO, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
    read_until(process.stdout, "running")
    os.kill(process.pid, signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143
    assert stderr.strip() == ("quick.py: interrupted by SIGTERM; nothing half-written is left; "
                              "the same command starts again from the beginning")
