"""The JAX trainer's TensorBoard event files (`engine.event_files`, written without TensorFlow) hold
what tensorboard's own `EventFileWriter` writes for the same scalars, in frames TensorFlow's
reader checks, under the file name TensorBoard looks for."""
import re
import socket

import pytest

from bert_tf2.engine.event_files import EventFile

SCALARS = [({"loss": 0.6931, "learning_rate": 2e-5}, 4), ({"loss": 0.25, "accuracy": 0.875}, 8)]


def events(path) -> list:
    """Every `Event` of an event file, read by TensorFlow's TFRecord reader (which checks each
    frame's CRCs)."""
    import tensorflow as tf
    from tensorboard.compat.proto import event_pb2

    return [event_pb2.Event.FromString(record.numpy())
            for record in tf.data.TFRecordDataset(str(path))]


def test_an_event_file_holds_what_tensorboards_writer_writes(tmp_path):
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    ours = EventFile(str(tmp_path / "ours" / "train"))  # the folder is made
    theirs = EventFileWriter(str(tmp_path / "theirs"))
    for values, step in SCALARS:
        ours.write(values, step)
        theirs.add_event(event_pb2.Event(step=step, summary=summary_pb2.Summary(value=[
            summary_pb2.Summary.Value(tag=name, simple_value=value)
            for name, value in values.items()])))
    theirs.close()
    ours.close()
    [path] = (tmp_path / "ours" / "train").iterdir()
    assert re.fullmatch(rf"events\.out\.tfevents\.\d{{10}}\.{re.escape(socket.gethostname())}"
                        rf"\.\d+\.\d+", path.name), path.name
    [their_path] = (tmp_path / "theirs").iterdir()
    mine, other = events(path), events(their_path)
    assert len(mine) == len(other) == 3
    assert mine[0].file_version == other[0].file_version == "brain.Event:2"
    assert mine[0].source_metadata.writer == "bert_tf2.engine.event_files"
    for a, b in zip(mine[1:], other[1:]):
        assert a.wall_time > 0
        a.wall_time = b.wall_time = 0
        assert a.SerializeToString() == b.SerializeToString()


def test_tensorboard_reads_the_scalars_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    writer = EventFile(str(tmp_path))
    for values, step in SCALARS:
        writer.write(values, step)
    writer.close()
    accumulator = EventAccumulator(str(tmp_path))
    accumulator.Reload()
    assert sorted(accumulator.Tags()["scalars"]) == ["accuracy", "learning_rate", "loss"]
    assert [(e.step, e.value) for e in accumulator.Scalars("loss")] == [
        (4, pytest.approx(0.6931)), (8, 0.25)]
