"""Predict with an exported SavedModel over text files of any size, locally or on Apache Beam.

Any `--export_dir` SavedModel of the runners (classifier, SQuAD, NER, multiple choice, embedder)
takes raw strings; this feeds it the lines of `--input_file` (JSON objects keyed by the
signature's inputs, or TSV with `--columns`) and writes one JSON object per line with every output
(`inference/line_predictor.py`), batching lines of similar length together. `--litert=int8`
runs the export's LiteRT file instead (the fast CPU path every task's export holds,
docs/serving.md), with serve_text's inputs. Locally (the default) the output is one file, in
input order, written under a temporary name. With `--beam` the same work runs as an Apache Beam
pipeline on shards of lines: `--input_file` may be comma-separated globs (numbered as one file),
`--output_file` is a prefix of text shards, and the flags after `--` are Beam's
(`--runner=DataflowRunner ...`, or on this machine `--direct_num_workers=2
--direct_running_mode=multi_processing`). Every line equals the local run's; only their order in
the shards differs.

    python batch_predict.py --saved_model=out/mrpc/serving --input_file=pairs.tsv \
        --columns=text_a,text_b --output_file=out/predictions.jsonl
"""
from __future__ import annotations

from absl import flags

from bert_tf2 import runner_flags
from bert_tf2.process import flag_ranges

FLAGS = flags.FLAGS

flags.DEFINE_string("saved_model", None, "A SavedModel written by a runner's --export_dir.")
flags.DEFINE_string("signature", "serving_default", "The signature to call.")
flags.DEFINE_string("input_file", None, "JSON lines keyed by the signature's inputs, or TSV "
                    "(--columns); with --beam, comma-separated globs.")
flags.DEFINE_string("output_file", None, "JSON lines (with --beam: a prefix of shards).")
flags.DEFINE_list("columns", None, "TSV input: the signature's input in each column, in "
                  "order; an empty name skips a column (--columns=,,,text_a,text_b).")
flags.DEFINE_bool("header", False, "TSV input: skip the first line of each file.")
flags.DEFINE_integer("batch_size", 32, "Lines per call of the SavedModel.")
flags.DEFINE_enum("litert", "none", ["none", "int8", "float32"],
                  "Predict with the export's LiteRT file of this precision (EXPORT_DIR/litert/; "
                  "the fast CPU path) instead of the SavedModel, with the inputs of serve_text.")
flags.DEFINE_integer("lines_per_shard", 1000, "Lines per unit of work.")
flags.DEFINE_bool("beam", False, "Run as an Apache Beam pipeline (Beam's flags after --).")
flags.DEFINE_integer("num_output_shards", 0, "--beam: output shards (0: the runner decides).")
flag_ranges.at_least_one("batch_size", "lines_per_shard")
flag_ranges.check("num_output_shards", 0, why="0: the runner decides")


def main(argv):
    import functools

    from bert_tf2.inference.line_predictor import LinePredictor, predict_file
    from bert_tf2.process.errors import SettingsError

    runner_flags.setup_logging()
    for name in ("saved_model", "input_file", "output_file"):
        if not FLAGS[name].value:
            raise SettingsError(f"--{name} is required")
    if FLAGS.litert != "none":
        from bert_tf2.tasks.runtimes import load_runtime

        load = functools.partial(load_runtime, FLAGS.saved_model, FLAGS.litert)
    else:
        from bert_tf2.inference.saved_model_text import SavedModelText

        load = functools.partial(SavedModelText.load, FLAGS.saved_model, FLAGS.signature)
    predictor = LinePredictor(load, FLAGS.batch_size, FLAGS.columns, FLAGS.header)
    if not FLAGS.beam:
        if len(argv) > 1:
            raise SettingsError(f"unexpected arguments {' '.join(argv[1:])} (Beam's flags "
                                f"need --beam)")
        predict_file(predictor, FLAGS.input_file, FLAGS.output_file, FLAGS.lines_per_shard)
        return
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from bert_tf2.data_gen.pretraining.beam_pipeline import match_input_files
    from bert_tf2.inference.beam_jobs import shard_pipeline, write_lines
    from bert_tf2.process import output_lock

    predictor.load()  # a wrong model or signature fails here, before the workers start
    files = [path for path, _ in match_input_files(FLAGS.input_file)]
    fresh = predictor.unloaded()  # each worker loads its own copy
    with output_lock.holding({FLAGS.output_file: "--output_file"}), \
            beam.Pipeline(options=PipelineOptions(argv[1:])) as root:
        lines = shard_pipeline(root, files, FLAGS.lines_per_shard, fresh.unloaded)
        write_lines(lines, FLAGS.output_file, FLAGS.num_output_shards)


def console_main():
    from bert_tf2.process.errors import parse_known_flags, run_main

    run_main(main, flags_parser=parse_known_flags)


if __name__ == "__main__":
    console_main()
