"""The flags of extract_features, local and on Beam: the original's, and ours.

`define_flags()` defines them (once, when a front door runs); `settings()` reads them into
`ExtractSettings`. Only the front doors (`extract_features.py`, `tasks.feature_extraction.
beam_pipeline`) call these.
"""
from __future__ import annotations

from absl import flags

from bert_tf2.process import flag_ranges

FLAGS = flags.FLAGS


def define_flags() -> None:
    # The original's flags and defaults.
    flags.DEFINE_string("input_file", None, "Text, one example per line (a pair: `A ||| B`).")
    flags.DEFINE_string("output_file", None, "JSON lines (or, with --pooling, a .npy array).")
    flags.DEFINE_string("layers", "-1,-2,-3,-4", "Layers to write, indexes of the transformer "
                        "blocks' outputs (-1: the last).")
    flags.DEFINE_string("bert_config_file", None, "bert_config.json (default: beside "
                        "--init_checkpoint).")
    flags.DEFINE_integer("max_seq_length", 128, "WordPieces per line, [CLS] and [SEP] included; "
                         "longer lines are truncated as the original truncates them.")
    flags.DEFINE_string("init_checkpoint", None, "The weights: a TF1 checkpoint, a Hugging Face "
                        "model.safetensors (or its folder), a .keras file, or a runner's "
                        "checkpoint.")
    flags.DEFINE_string("vocab_file", None, "vocab.txt (default: beside --init_checkpoint).")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (uncased models).")
    flags.DEFINE_integer("batch_size", 32, "Lines per batch.")
    flags.DEFINE_bool("use_tpu", False, "Accepted for compatibility; extraction runs on the "
                      "local CPU or GPU.")
    flags.DEFINE_string("master", None, "Accepted for compatibility.")
    flags.DEFINE_integer("num_tpu_cores", 8, "Accepted for compatibility.")
    flags.DEFINE_bool("use_one_hot_embeddings", False, "Accepted for compatibility (same numbers).")
    # Beyond the original.
    flags.DEFINE_enum("pooling", None, ["cls", "mean"], "Write one vector per line: the [CLS] "
                      "vector or the mean over real tokens of the last layer.")
    flags.DEFINE_bool("normalize", False, "With --pooling: scale each vector to unit L2 norm.")
    flags.DEFINE_string("export_dir", None, "Write a SavedModel that embeds raw strings "
                        "(--pooling, default mean; --normalize).")
    flags.DEFINE_enum("export_litert", "int8", ["int8", "float32", "none"],
                      "With --export_dir, also write the fast CPU path, a LiteRT file of the "
                      "encoder with int8 (or float32) dense kernels, in EXPORT_DIR/litert/ "
                      "(not with --doc_stride; docs/serving.md).")
    flags.DEFINE_integer("lines_per_shard", 1000, "Lines per resumable shard of the output.")
    flags.DEFINE_integer("doc_stride", None, "Read a line longer than max_seq_length whole, in "
                         "windows starting this many tokens apart: each token's vectors come "
                         "from the window where it has the most context, and --pooling pools "
                         "every token of the line (default: truncate, as the original).")
    flag_ranges.check("max_seq_length", 3, why="[CLS], a token and [SEP]")
    flag_ranges.at_least_one("batch_size", "num_tpu_cores", "lines_per_shard")


def layers() -> tuple:
    try:
        return tuple(int(x) for x in FLAGS.layers.split(","))
    except ValueError:
        from bert_tf2.process.errors import SettingsError

        raise SettingsError(f"--layers={FLAGS.layers}: comma-separated integers, such as "
                            f"-1,-2,-3,-4") from None


def settings():
    """The flags as `ExtractSettings`."""
    from bert_tf2.tasks.feature_extraction.extract import ExtractSettings

    return ExtractSettings(
        input_file=FLAGS.input_file, output_file=FLAGS.output_file,
        bert_config_file=FLAGS.bert_config_file, init_checkpoint=FLAGS.init_checkpoint,
        vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case, layers=layers(),
        max_seq_length=FLAGS.max_seq_length, batch_size=FLAGS.batch_size,
        pooling=FLAGS.pooling, normalize=FLAGS.normalize, export_dir=FLAGS.export_dir,
        lines_per_shard=FLAGS.lines_per_shard, doc_stride=FLAGS.doc_stride,
        export_litert=FLAGS.export_litert)
