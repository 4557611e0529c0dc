"""TensorBoard event files of the JAX trainer's scalars, written without TensorFlow.

tensorboard's own `EventFileWriter` writes through `tf.io.gfile`, so it imports TensorFlow
wherever TensorFlow is installed: about 2 s of every JAX run, and TensorFlow's memory and threads,
in a run that needs TensorFlow for nothing else. The file written here is the one that writer
writes: TFRecord frames (`data_gen.tfrecord_frames`) of `Event` protos, the first with
`file_version: "brain.Event:2"`, in a file named `events.out.tfevents.<seconds>.<host>.<pid>.<n>`
in the summaries' folder (`train`, `eval`). A remote folder (`gs://...`) still goes through
tensorboard's writer, and so through TensorFlow.
"""
from __future__ import annotations

import itertools
import os
import socket
import time

from bert_tf2.process.atomic_files import is_remote

_files = itertools.count()


class EventFile:
    """`EventFile(folder).write({"loss": 0.5}, step)`: one `Event` of simple values per call,
    flushed at once, as the TensorFlow trainer's summaries are."""

    def __init__(self, folder: str):
        from tensorboard.compat.proto import event_pb2

        self._event = event_pb2.Event
        if is_remote(folder):
            from tensorboard.summary.writer.event_file_writer import EventFileWriter

            self._writer = EventFileWriter(folder)
            self._file = None
            self.path = None  # named by tensorboard's writer
            return
        os.makedirs(folder, exist_ok=True)
        self.path = os.path.join(folder, "events.out.tfevents.%010d.%s.%s.%s" % (
            time.time(), socket.gethostname(), os.getpid(), next(_files)))
        self._writer = None
        self._file = open(self.path, "ab")
        self._add(self._event(wall_time=time.time(), file_version="brain.Event:2",
                              source_metadata={"writer": "bert_tf2.engine.event_files"}))

    def write(self, values: dict, step: int) -> None:
        from tensorboard.compat.proto import summary_pb2

        summary = summary_pb2.Summary(value=[
            summary_pb2.Summary.Value(tag=name, simple_value=float(value))
            for name, value in values.items()])
        self._add(self._event(wall_time=time.time(), step=step, summary=summary))

    def _add(self, event) -> None:
        if self._writer is not None:
            self._writer.add_event(event)
            self._writer.flush()
            return
        from bert_tf2.data_gen.tfrecord_frames import framed

        self._file.write(framed(event.SerializeToString()))
        self._file.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        elif not self._file.closed:
            self._file.close()
