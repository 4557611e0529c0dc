"""extract_features on Apache Beam: the same shards of lines, spread over workers.

    pip install .[beam]
    python -m bert_tf2.tasks.feature_extraction.beam_pipeline --input_file='gs://bucket/text/*.txt' \\
        --output_file=gs://bucket/features/part --init_checkpoint=gs://... --pooling=mean \\
        --normalize -- --runner=DataflowRunner --project=P --region=R \\
        --temp_location=gs://bucket/tmp --setup_file=./setup.py

The flags before `--` are extract_features' (the original's and ours); `--input_file` may be
comma-separated globs, numbered as one file in sorted order. Everything after `--` is Beam's
`PipelineOptions`, as for the pretraining-data pipeline: `--runner=DirectRunner` (default, with
`--direct_num_workers=2 --direct_running_mode=multi_processing` on this machine), `DataflowRunner`,
`FlinkRunner` or `SparkRunner`. `--output_file` is a prefix: JSON lines in shards named
`PREFIX-00000-of-00004` (`--num_output_shards`; `.npy` outputs are the local tool's only). Each
worker loads the model once and runs `ShardExtractor` on shards of `--lines_per_shard` lines, as
the local tool does, so every line equals the local tool's; only their order in the files differs.
"""
from __future__ import annotations

import logging

import apache_beam as beam
from absl import flags
from apache_beam.options.pipeline_options import PipelineOptions

from bert_tf2.data_gen.pretraining.beam_pipeline import match_input_files
from bert_tf2.inference.beam_jobs import shard_pipeline, write_lines
from bert_tf2.process import output_lock
from bert_tf2.process.errors import SettingsError, parse_known_flags, run_main
from bert_tf2.tasks.feature_extraction import flags as extraction_flags
from bert_tf2.tasks.feature_extraction.extract import ExtractSettings, ShardExtractor, check

FLAGS = flags.FLAGS


class _Extractor:
    """A picklable factory: each Beam worker builds its own `ShardExtractor`."""

    def __init__(self, settings: ExtractSettings):
        self.settings = settings

    def __call__(self):
        return ShardExtractor(self.settings)


def build_pipeline(root: beam.Pipeline, files: list, output_prefix: str,
                   settings: ExtractSettings, num_output_shards: int = 0):
    """Add the extraction of `files` (paths) to the pipeline `root`."""
    lines = shard_pipeline(root, files, settings.lines_per_shard, _Extractor(settings))
    return write_lines(lines, output_prefix, num_output_shards)


def main(argv) -> None:
    logging.getLogger().setLevel(logging.INFO)
    settings = extraction_flags.settings()
    if settings.output_file and settings.output_file.endswith(".npy"):
        raise SettingsError("--output_file: the Beam pipeline writes JSON lines; .npy is the "
                            "local tool's (extract_features.py)")
    if settings.export_dir:
        raise SettingsError("--export_dir: export with extract_features.py")
    files = [path for path, _ in match_input_files(settings.input_file or "")]
    check(ExtractSettings(**{**vars(settings), "input_file": files[0]}))
    ShardExtractor(settings).build()  # bad weights or settings fail here, before the workers
    with output_lock.holding({settings.output_file: "--output_file"}), \
            beam.Pipeline(options=PipelineOptions(argv[1:])) as root:
        build_pipeline(root, files, settings.output_file, settings, FLAGS.num_output_shards)


def console_main() -> None:
    extraction_flags.define_flags()
    flags.DEFINE_integer("num_output_shards", 0, "Output shards (0: the runner decides).")
    run_main(main, flags_parser=parse_known_flags)


if __name__ == "__main__":
    console_main()
