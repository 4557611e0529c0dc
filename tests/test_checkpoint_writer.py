"""Checkpoints written in the background: training goes on while a checkpoint is written, a
checkpoint is visible only once complete, evaluations are recorded only after their step's
checkpoint, and a write's failure or an interrupted run loses nothing.

The loop (`engine.training_loop.TrainingLoop`) is driven by a backend of plain Python whose
"devices" hold one number and whose checkpoint writes wait on the test, so the order of events
is what is asserted, not timings."""
import logging
import os
import re
import threading
import time
import types

import numpy as np
import pytest

from bert_tf2.engine.checkpoint_writer import CheckpointWriter
from bert_tf2.engine.trainer_config import TrainerConfig
from bert_tf2.engine.training_loop import TrainingLoop
from bert_tf2.process import interrupts


class CountingLoop(TrainingLoop):
    """Step k adds k to the state; checkpoint N is the file `ckpt-N` holding the state, written
    by `write` after the test sets `release` (when it is given)."""

    def __init__(self, output_dir, steps, every, release=None, fail_at=None):
        strategy = types.SimpleNamespace(process_index=None, cluster_resolver=None)
        super().__init__(None, None, None, strategy, TrainerConfig(
            str(output_dir), num_train_steps=steps, steps_per_loop=1,
            save_checkpoints_steps=every, keep_checkpoint_max=100))
        self.state, self.step = 0, 0
        self.events = []  # what happened, in order
        self.release, self.fail_at = release, fail_at

    @property
    def global_step(self):
        return self.step

    def current_learning_rate(self):
        return 0.0

    def latest_checkpoint(self):
        found = sorted(int(n.split("-")[1]) for n in os.listdir(self.config.output_dir)
                       if n.startswith("ckpt-") and not n.endswith(".tmp"))
        return os.path.join(self.config.output_dir, f"ckpt-{found[-1]}") if found else None

    def _checkpoint_folder(self):
        return None

    def _open(self, dataset_fn):
        pass

    def _restore_for_training(self):
        latest = self.latest_checkpoint()
        if latest:
            self.step = int(latest.rsplit("-", 1)[1])
            self.state = int(open(latest).read())
        return latest

    def _training_input(self, dataset_fn, step):
        return iter(range(step + 1, 10 ** 6))

    def _close_input(self, batches):
        pass

    def _input_waited(self, batches):
        return None

    def _run_steps(self, batches, count):
        for _ in range(count):
            self.step = next(batches)
            self.state += self.step
            self.events.append(("step", self.step))
        return {"loss": (1.0, 1.0)}

    def _request_stop(self, stop):
        pass

    def _save(self, step):
        state = self.state  # taken now: the steps after this one change it
        path = os.path.join(self.config.output_dir, f"ckpt-{step}")

        def write():
            self.events.append(("write starts", step))
            if self.release is not None:
                assert self.release.wait(30), "the test never released the write"
                self.release.clear()
            if step == self.fail_at:
                raise OSError(28, "No space left on device")
            with open(path + ".tmp", "w") as f:
                f.write(str(state))
            os.replace(path + ".tmp", path)
            self.events.append(("written", step))
            return path
        return write

    def write_summary(self, kind, values, step):
        pass

    def write_weights(self, folder):
        pass


def written(loop):
    return sorted(int(n.split("-")[1]) for n in os.listdir(loop.config.output_dir)
                  if n.startswith("ckpt-") and not n.endswith(".tmp"))


@pytest.mark.integration
def test_training_goes_on_while_a_checkpoint_is_written(tmp_path, caplog):
    caplog.set_level(logging.INFO, "bert_tf2.engine.training_loop")
    release = threading.Event()
    loop = CountingLoop(tmp_path, steps=6, every=3, release=release)

    def on_loop_end(step, metrics):
        if step == 5:  # two steps after checkpoint 3 was handed over: not yet on disk
            assert written(loop) == []
            time.sleep(0.3)  # training's own work, while the write waits
            release.set()  # checkpoint 3 may finish; checkpoint 6 is released at the end
        if step == 6:
            release.set()
    loop.train(lambda context: None, on_loop_end)
    events = loop.events
    assert events.index(("write starts", 3)) < events.index(("step", 4))
    assert events.index(("step", 5)) < events.index(("written", 3))
    # Checkpoint 6 is complete when train() returns, and each holds its own step's state.
    assert written(loop) == [3, 6]
    assert [int(open(tmp_path / f"ckpt-{n}").read()) for n in (3, 6)] == [1 + 2 + 3, 21]
    # The log says how long training waited for checkpoint 3 and how long its write took.
    saved = re.search(r"saved (\S+) \(training waited ([0-9.]+) s; written in ([0-9.]+) s beside",
                      caplog.text)
    assert saved and saved[1] == str(tmp_path / "ckpt-3")
    assert float(saved[2]) < 0.1 and float(saved[3]) >= 0.3  # it lasted while steps 4, 5 ran


@pytest.mark.integration
def test_the_next_checkpoint_waits_for_the_one_in_flight(tmp_path):
    loop = CountingLoop(tmp_path, steps=4, every=1)
    loop.train(lambda context: None)
    writes = [e for e in loop.events if e[0] != "step"]
    assert writes == [("write starts", 1), ("written", 1), ("write starts", 2), ("written", 2),
                      ("write starts", 3), ("written", 3), ("write starts", 4), ("written", 4)]


@pytest.mark.integration
def test_an_evaluation_is_recorded_after_its_steps_checkpoint(tmp_path):
    from bert_tf2.engine.finetuning import evaluate_and_record

    release = threading.Event()
    loop = CountingLoop(tmp_path, steps=4, every=2, release=release)
    recorded = []

    def evaluate():
        release.set()  # the evaluation runs while checkpoint 2 or 4 is written
        return {"eval_loss": 0.5}

    def on_loop_end(step, metrics):
        if step % 2 == 0:
            evaluate_and_record(loop, evaluate, str(tmp_path),
                                offer=lambda write, results: recorded.append(written(loop)))
    loop.train(lambda context: None, on_loop_end)
    assert recorded == [[2], [2, 4]]  # best/ was offered each evaluation after its checkpoint
    assert (tmp_path / "eval_results.txt").read_text().count("global_step = 4") == 1


@pytest.mark.integration
def test_a_failed_write_stops_training_with_its_error_and_leaves_the_last_checkpoint(tmp_path):
    loop = CountingLoop(tmp_path, steps=9, every=3, fail_at=6)
    with pytest.raises(OSError, match="No space left"):
        loop.train(lambda context: None)
    assert written(loop) == [3]
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    # The rerun resumes from checkpoint 3 and ends as an uninterrupted run.
    rerun = CountingLoop(tmp_path, steps=9, every=3)
    rerun.train(lambda context: None)
    assert written(rerun) == [3, 6, 9] and rerun.state == sum(range(10))
    assert int((tmp_path / "ckpt-9").read_text()) == sum(range(10))


@pytest.mark.integration
def test_an_interrupted_run_finishes_the_checkpoint_in_flight(tmp_path):
    interrupts.reset()
    release = threading.Event()
    loop = CountingLoop(tmp_path, steps=9, every=3, release=release)

    def on_loop_end(step, metrics):
        if step == 4:  # checkpoint 3 is being written when Ctrl-C arrives
            threading.Timer(0.2, release.set).start()
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        loop.train(lambda context: None, on_loop_end)
    assert written(loop) == [3] and int((tmp_path / "ckpt-3").read_text()) == 6
    assert interrupts.message(KeyboardInterrupt()).endswith(
        f"the same command resumes from {tmp_path / 'ckpt-3'} (step 3)")
    interrupts.reset()


def test_an_error_in_the_thread_is_raised_once_by_wait():
    writer = CheckpointWriter()

    def fail():
        raise OSError("disk gone")
    writer.submit(fail, then=lambda path, seconds: None)
    with pytest.raises(OSError, match="disk gone"):
        writer.wait()
    writer.wait()  # reported once
    seen = []
    writer.submit(lambda: "ckpt-2", then=lambda path, seconds: seen.append((path, seconds >= 0)))
    writer.wait()
    assert seen == [("ckpt-2", True)]


def test_shares_written_by_three_processes_make_the_file_one_process_writes(tmp_path):
    """Several JAX processes each write their share of one checkpoint file
    (`variable_files.Layout`): the file holds every array of the state, reads back as the one
    `variable_files.save` writes, and the shares split the bytes evenly."""
    import keras
    from safetensors.numpy import load_file

    from bert_tf2.modeling import variable_files
    from bert_tf2.modeling.config import BertConfig
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.optimization import create_optimizer

    keras.utils.set_random_seed(1)
    encoder = BertEncoder(BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=32,
                                     max_position_embeddings=32))
    optimizer = create_optimizer(1e-3, 10, 1)
    optimizer.build(encoder.trainable_variables)
    groups = {"model": encoder.weights, "optimizer": list(optimizer.variables)}
    layout = variable_files.Layout(groups, 7, 3)
    shared = str(tmp_path / "shares.safetensors")
    layout.create(shared)
    for process in (2, 0, 1):  # in any order
        layout.write_share(shared, layout.host_share(process))
    whole = str(tmp_path / "one.safetensors")
    variable_files.save(whole, groups, 7)
    a, b = load_file(shared), load_file(whole)
    assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
    assert variable_files.step_of(shared) == 7
    assert sorted(k for share in layout.shares for k in share) == sorted(b)
    loads = [sum(a[k].nbytes for k in share) for share in layout.shares]
    assert max(loads) - min(loads) <= max(v.nbytes for v in a.values())
    # And it restores the state, as the one-process file does.
    saved = [keras.ops.convert_to_numpy(v.value) for v in encoder.weights]
    for v in encoder.weights:
        v.assign(np.zeros(v.shape, v.dtype))
    variable_files.load(shared, groups)
    assert all(np.array_equal(keras.ops.convert_to_numpy(v.value), w)
               for v, w in zip(encoder.weights, saved))
