"""Write the fast CPU path of an exported SavedModel: a LiteRT file of its `serve_token_ids`.

    python export_litert.py --saved_model=out/mrpc/serving [--quantization=int8|float32]

The runners' `--export_dir` already writes it (`--export_litert`); this command makes it for an
export written without it, or in the other precision. It writes `SAVED_MODEL/litert/int8.tflite`
(or `float32.tflite`) beside the export's `serving.json`, and checks the new file against the
SavedModel on a few token-id rows before it says so. docs/serving.md#the-fast-path-litert-int8.
"""
from __future__ import annotations

from absl import flags

from bert_tf2 import runner_flags

FLAGS = flags.FLAGS
flags.DEFINE_string("saved_model", None, "The SavedModel folder a runner's --export_dir wrote.")
flags.DEFINE_enum("quantization", "int8", ["int8", "float32"],
                  "int8: int8 dense kernels (dynamic range); float32: the weights as they are.")


def main(argv):
    del argv
    from bert_tf2.engine import litert
    from bert_tf2.process.errors import SettingsError

    runner_flags.setup_logging()
    if not FLAGS.saved_model:
        raise SettingsError("--saved_model is required: the folder a runner's --export_dir wrote")
    litert.write(FLAGS.saved_model, FLAGS.quantization)


def console_main():
    runner_flags.main(main)


if __name__ == "__main__":
    console_main()
