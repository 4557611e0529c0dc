"""The same transformation as an Apache Beam pipeline, for corpora beyond one machine.

    pip install .[beam]
    python -m bert_tf2.data_gen.pretraining.beam_pipeline --input_file='gs://bucket/corpus/*.txt' \\
        --output_file=gs://bucket/records/train --num_output_shards=256 \\
        --vocab_file=gs://bucket/vocab.txt -- \\
        --runner=DataflowRunner --project=P --region=R --temp_location=gs://bucket/tmp \\
        --setup_file=./setup.py

Flags before `--` are the local command's (the original's, `--no_nsp`, `--input_format`,
`--skip_invalid_utf8`, `--pool_bytes`, `--stats_file`); everything after it goes to Beam's
`PipelineOptions`: `--runner=DirectRunner` (default), `DataflowRunner` (`--project --region
--temp_location`), `FlinkRunner` (`--flink_master=host:port --environment_type=...`) or
`SparkRunner` (`--spark_master_url=...`). `--output_file` is a prefix here: shards are named
`PREFIX-00000-of-00256`.

The steps are those of the local run, so the pools, and with them the records, are the same:
every document goes to the bucket `nsp_pools.document_bucket` picks; buckets are counted and
grouped into pools by `nsp_pools.group_buckets`; each pool (documents in bucket, file, position
order) becomes records with `pool_rng(seed, pool)`. Only the order of records in the shards differs.
"""
import functools
import os
import tempfile

import apache_beam as beam
from absl import flags, logging
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from bert_tf2.data_gen.pretraining import documents, nsp_pools
from bert_tf2.data_gen.pretraining import flags as pretraining_flags
from bert_tf2.data_gen.pretraining.documents import InputOptions
from bert_tf2.data_gen.pretraining.instances import InstanceSettings
from bert_tf2.data_gen.pretraining.records import RecordMaker
from bert_tf2.data_gen.pretraining.stats import PretrainingStats
from bert_tf2.process import output_lock
from bert_tf2.process.errors import as_user_error, parse_known_flags, run_main

FLAGS = flags.FLAGS
STATS_TAG = "stats"


def match_input_files(patterns: str) -> list:
    """(path, size) of every file the comma-separated patterns match, each pattern's sorted."""
    files = []
    for pattern in (p.strip() for p in patterns.split(",") if p.strip()):
        matched = sorted((m.path, m.size_in_bytes)
                         for result in FileSystems.match([pattern]) for m in result.metadata_list)
        if not matched:
            raise documents.InputFormatError(f"--input_file: {pattern!r} matches no file")
        files.extend(matched)
    if not files:
        raise documents.InputFormatError("--input_file names no file")
    return files


def build_pipeline(root: beam.Pipeline, input_files: list, output_prefix: str, vocab_file: str,
                   *, do_lower_case: bool = True, settings: InstanceSettings = InstanceSettings(),
                   random_seed: int = 12345, input_options: InputOptions = InputOptions(),
                   pool_bytes: int = nsp_pools.DEFAULT_POOL_BYTES, num_output_shards: int = 0,
                   stats_file: str = None) -> None:
    """Add the transformation of `input_files` ((path, size) pairs) to the pipeline `root`."""
    settings.check()
    input_options.check()
    buckets = nsp_pools.bucket_count(sum(size for _, size in input_files), pool_bytes)
    indexed_paths = [(index, path) for index, (path, _) in enumerate(input_files)]
    keyed = (root
             | "Files" >> beam.Create(indexed_paths)
             | "Documents" >> beam.FlatMap(_bucketed_documents, input_options, random_seed,
                                           buckets))
    pool_of_bucket = (keyed
                      | "Buckets" >> beam.Map(lambda item: (item[0], 1))
                      | "CountPerBucket" >> beam.CombinePerKey(sum)
                      | "AsDict" >> beam.combiners.ToDict()
                      | "GroupBuckets" >> beam.Map(_group_buckets, buckets, settings.no_nsp,
                                                   [path for path, _ in input_files]))
    made = (keyed
            | "KeyByPool" >> beam.Map(lambda item, pools: (pools[item[0]], item),
                                      pools=beam.pvalue.AsSingleton(pool_of_bucket))
            | "Pools" >> beam.GroupByKey()
            | "Records" >> beam.ParDo(_PoolRecordsFn(vocab_file, do_lower_case, settings,
                                                     random_seed)).with_outputs(STATS_TAG,
                                                                                main="records"))
    _ = made.records | "Write" >> beam.io.WriteToTFRecord(output_prefix,
                                                          num_shards=num_output_shards)
    _ = (made[STATS_TAG]
         | "MergeStats" >> beam.CombineGlobally(
             functools.partial(_merge_stats, settings.max_seq_length))
         | "WriteStats" >> beam.Map(_write_stats, stats_file or output_prefix + ".stats.json"))


def _bucketed_documents(indexed_path: tuple, options: InputOptions, seed: int, buckets: int):
    """(bucket, (file index, document index), sentences) for every document of one file."""
    file_index, path = indexed_path
    with FileSystems.open(path) as f:
        for document in documents.file_documents(path, options, file_index,
                                                 raw_lines=iter(f.readline, b"")):
            bucket = nsp_pools.document_bucket(document.sentences, seed, buckets)
            yield bucket, (document.file_index, document.index), document.sentences


def _group_buckets(counts: dict, buckets: int, no_nsp: bool, paths: list) -> list:
    nsp_pools.check_document_count(sum(counts.values()), no_nsp, paths)
    return nsp_pools.group_buckets([counts.get(bucket, 0) for bucket in range(buckets)], no_nsp)


class _PoolRecordsFn(beam.DoFn):
    """One pool's documents -> its records (main output) and statistics (STATS_TAG)."""

    def __init__(self, vocab_file: str, do_lower_case: bool, settings: InstanceSettings,
                 seed: int):
        self._args = (vocab_file, do_lower_case, settings)
        self._seed = seed
        self._maker = None

    def setup(self):
        vocab_file, do_lower_case, settings = self._args
        self._maker = RecordMaker(_local_copy(vocab_file), do_lower_case, settings)

    def process(self, pool: tuple):
        pool_index, items = pool
        ordered = sorted(items, key=lambda item: (item[0], item[1]))  # bucket, then input order
        tokenized = self._maker.tokenize(sentences for _, _, sentences in ordered)
        result = self._maker.pool_records(tokenized, nsp_pools.pool_rng(self._seed, pool_index))
        yield from result.records.examples()
        yield beam.pvalue.TaggedOutput(STATS_TAG, result.stats)


def _local_copy(path: str) -> str:
    """A remote vocabulary (gs://...) copied to a local file; a local path as it is."""
    if "://" not in path:
        return path
    local = os.path.join(tempfile.mkdtemp(prefix="vocab-"), os.path.basename(path))
    with FileSystems.open(path) as source, open(local, "wb") as target:
        target.write(source.read())
    return local


def _merge_stats(max_seq_length: int, parts) -> PretrainingStats:
    total = PretrainingStats(max_seq_length)
    for part in parts:
        total.merge(part)
    return total


def _write_stats(stats: PretrainingStats, path: str) -> None:
    with FileSystems.create(path) as f:
        f.write(stats.to_json().encode())
    logging.info("statistics written to %s\n%s", path, stats.summary())


# ------------------------------------------------------------------ command line
def main(argv) -> None:
    pipeline_args = argv[1:]
    options = PipelineOptions(pipeline_args)
    try:
        input_files = match_input_files(FLAGS.input_file)
        # One pipeline per output prefix (a local one: no lock reaches gs://).
        with output_lock.holding({FLAGS.output_file: "--output_file"}), \
                beam.Pipeline(options=options) as root:
            build_pipeline(
                root, input_files, FLAGS.output_file, FLAGS.vocab_file,
                do_lower_case=FLAGS.do_lower_case, settings=pretraining_flags.instance_settings(),
                random_seed=FLAGS.random_seed, input_options=pretraining_flags.input_options(),
                pool_bytes=FLAGS.pool_bytes, num_output_shards=FLAGS.num_output_shards,
                stats_file=FLAGS.stats_file)
    except (ValueError, OSError) as error:  # bad flags or input, named in the message
        raise as_user_error(error) from None


def console_main() -> None:
    pretraining_flags.define_flags()
    flags.DEFINE_integer("num_output_shards", 0, "Output shards (0: the runner decides).")
    for name in pretraining_flags.REQUIRED:
        flags.mark_flag_as_required(name)
    run_main(main, flags_parser=parse_known_flags)


if __name__ == "__main__":
    console_main()
