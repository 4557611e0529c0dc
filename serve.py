"""Serve any runner's export over HTTP with TF Serving's REST API (console script `bert-serve`).

    python serve.py --export_dir=out/demo/finetune/serving --model_name=mrpc --port=8501
    curl -d '{"instances": [{"text_a": "He said so.", "text_b": "So he said."}]}' \
        localhost:8501/v1/models/mrpc:predict

Any `--export_dir` of the runners (sentence classifier, multi-label, NER, SQuAD, multiple choice,
embeddings) answers raw texts with the outputs of its `serve_text`, from its LiteRT int8 file by
default (`--runtime=float32` for the float32 file, `--runtime=savedmodel` for the SavedModel
itself, which needs TensorFlow). Requests that arrive together run as one batch
(`--max_batch_size`, `--batch_timeout_micros`, TF Serving's names); a full queue is 503 with
Retry-After at once. `--tf_serving_grpc_port` adds TF Serving's gRPC API (its
`tensorflow-serving-api` clients), `--grpc_port` the Open Inference Protocol's gRPC, both from the
same batcher. SIGTERM or Ctrl-C drains: what is in flight is answered, then exit 0.
docs/serving.md, "The model server", says what each endpoint answers.
"""
from __future__ import annotations

import os
import re

from absl import flags

from bert_tf2 import runner_flags
from bert_tf2.model_server.settings import ServerSettings
from bert_tf2.process import flag_ranges
from bert_tf2.tasks.runtimes import RUNTIMES

FLAGS = flags.FLAGS
# What a model name may be: a path segment of /v1/models/NAME that needs no escaping.
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
D = ServerSettings  # every default below is ServerSettings' own

flags.DEFINE_string("export_dir", None, "A SavedModel folder a runner's --export_dir wrote.")
flags.DEFINE_string("model_name", None, "The NAME in /v1/models/NAME (default: the export "
                    "folder's name).")
flags.DEFINE_string("host", D.host, "The address to listen on (127.0.0.1: this machine only).")
flags.DEFINE_integer("port", D.port, "The HTTP port (TF Serving's REST port is 8501).")
flags.DEFINE_integer("tf_serving_grpc_port", D.tf_serving_grpc_port, "Also serve TF Serving's "
                     "gRPC API (PredictionService, ModelService) on this port: TF Serving's "
                     "clients work unchanged (TF Serving's own is 8500; 0: none).")
flags.DEFINE_integer("grpc_port", D.grpc_port, "Also serve the Open Inference Protocol's gRPC "
                     "(KServe's and Triton's clients) on this port (0: none).")
flags.DEFINE_enum("runtime", D.runtime, RUNTIMES,
                  "What answers: the export's LiteRT int8 or float32 file, or its SavedModel's "
                  "serve_text (default: int8 where the export has it, else float32, else the "
                  "SavedModel).")
flags.DEFINE_integer("max_batch_size", D.max_batch_size, "Rows run together at most (a larger "
                     "request runs alone).")
flags.DEFINE_integer("batch_timeout_micros", D.batch_timeout_micros, "How long a batch waits "
                     "for more rows after its first (0: it takes what has arrived while the "
                     "model was busy).")
flags.DEFINE_integer("max_enqueued_batches", D.max_enqueued_batches, "The queue holds this many "
                     "batches of --max_batch_size rows; a request beyond it is answered 503 at "
                     "once.")
flags.DEFINE_integer("num_batch_threads", D.num_batch_threads, "Threads running the model, each "
                     "a batch at a time: for --runtime=savedmodel (a LiteRT runtime runs one "
                     "batch at a time, each call on every core).")
flags.DEFINE_integer("max_request_bytes", D.max_request_bytes, "Larger requests are answered "
                     "413.")
flags.DEFINE_integer("grpc_max_message_bytes", D.grpc_max_message_bytes, "Larger gRPC requests "
                     "are answered RESOURCE_EXHAUSTED (0: --max_request_bytes).")
flags.DEFINE_float("drain_grace_s", D.drain_grace_s, "On SIGTERM, how long the server goes on "
                   "accepting and answering (readiness already 503) before it closes its port, "
                   "so that load balancers stop sending first (0: at once; a second SIGTERM or "
                   "Ctrl-C cuts it short).")
flags.DEFINE_float("drain_seconds", D.drain_seconds, "On SIGTERM, how long in-flight requests "
                   "may take before the server exits anyway.")
flag_ranges.at_least_one("max_batch_size", "max_enqueued_batches", "num_batch_threads",
                         "max_request_bytes")
flag_ranges.check("port", 0, 65535)
flag_ranges.check("grpc_port", 0, 65535)
flag_ranges.check("tf_serving_grpc_port", 0, 65535)
flag_ranges.check("grpc_max_message_bytes", 0, why="0: --max_request_bytes")
flag_ranges.check("batch_timeout_micros", 0, why="0: no wait")
flag_ranges.check("drain_grace_s", 0, why="0: close the port at once")
flag_ranges.check("drain_seconds", 0)


def main(argv):
    del argv
    from bert_tf2.process.errors import SettingsError

    runner_flags.setup_logging()
    if not FLAGS.export_dir:
        raise SettingsError("--export_dir is required: the folder a runner's --export_dir wrote")
    name = FLAGS.model_name
    if name is None:
        name = os.path.basename(os.path.normpath(FLAGS.export_dir))
        if not MODEL_NAME.fullmatch(name):
            raise SettingsError(f"--export_dir={FLAGS.export_dir}: its folder's name {name!r} "
                                f"cannot be a model name (letters, digits, '.', '_', '-'); "
                                f"give one with --model_name")
    elif not MODEL_NAME.fullmatch(name):
        raise SettingsError(f"--model_name={name!r}: a model name is letters, digits, '.', '_' "
                            f"and '-', starting with a letter or digit (the NAME of "
                            f"/v1/models/NAME)")
    try:
        from bert_tf2.model_server.app import ServerSettings, serve
    except ImportError as e:
        raise SettingsError(f"serve.py needs the serve extra ({e}): pip install "
                            f"'bert-tf2[serve]'") from None
    serve(ServerSettings(
        export_dir=FLAGS.export_dir, model_name=name, host=FLAGS.host, port=FLAGS.port,
        grpc_port=FLAGS.grpc_port, tf_serving_grpc_port=FLAGS.tf_serving_grpc_port,
        runtime=FLAGS.runtime, max_batch_size=FLAGS.max_batch_size,
        batch_timeout_micros=FLAGS.batch_timeout_micros,
        max_enqueued_batches=FLAGS.max_enqueued_batches,
        num_batch_threads=FLAGS.num_batch_threads, max_request_bytes=FLAGS.max_request_bytes,
        grpc_max_message_bytes=FLAGS.grpc_max_message_bytes,
        drain_grace_s=FLAGS.drain_grace_s, drain_seconds=FLAGS.drain_seconds))


def console_main():
    runner_flags.main(main)


if __name__ == "__main__":
    console_main()
