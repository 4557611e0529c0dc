"""Pretraining TFRecords from raw documents: the original's algorithm, streaming and in parallel.

    python -m bert_tf2.data_gen.pretraining.create_pretraining_data --input_file=corpus/*.txt \\
        --output_file=out/train-0.tfrecord,out/train-1.tfrecord --vocab_file=vocab.txt \\
        --num_workers=2

Same flags and defaults as the original `create_pretraining_data.py`, plus `--no_nsp`,
`--input_format`, `--skip_invalid_utf8`, `--pool_bytes`, `--stats_file`, `--num_workers`,
`--tmp_dir` and `--faithful_in_memory`.

The default mode streams, in two phases on the same worker processes: each range of the input is
read a document at a time, tokenized and spilled to temporary bucket files (`nsp_pools`); then each
pool of buckets becomes records in a worker and is written round-robin to the output shards in
pool order. Memory holds a few pools, whatever the corpus
size; the output depends on the seed and the input only (not on `--num_workers`).
`--faithful_in_memory` does what the original does, whole corpus and every instance in memory in
one process, and writes the original's records for the same seed.

Either way the shards appear complete or not at all (`data_gen.records`), and a statistics summary is
printed and written as JSON (`stats`).
"""
import os
import random
import shutil
import tempfile
import time

import numpy as np
from absl import app, flags, logging

from bert_tf2.data_gen.pretraining import documents, nsp_pools, pool_worker
from bert_tf2.data_gen.pretraining import flags as pretraining_flags
from bert_tf2.data_gen.pretraining.documents import InputOptions
from bert_tf2.data_gen.pretraining.instances import InstanceSettings
from bert_tf2.data_gen.pretraining.parallel import OrderedPool, start_method
from bert_tf2.data_gen.pretraining.records import REQUIRED_TOKENS, RecordMaker
from bert_tf2.data_gen.pretraining.stats import PretrainingStats
from bert_tf2.data_gen.records import ShardedRecordWriter, check_output_files
from bert_tf2.data_gen.tokenization import load_vocab, special_token_ids
from bert_tf2.process import interrupts, output_lock
from bert_tf2.process.atomic_files import remove_partial_files, write_text
from bert_tf2.process.errors import SettingsError, as_user_error, run_main

FLAGS = flags.FLAGS

PROGRESS_SECONDS = 10.0


class Progress:
    """Progress lines at most every PROGRESS_SECONDS: documents, pools, instances, tokens/s."""

    def __init__(self, every_seconds: float = PROGRESS_SECONDS):
        self.every_seconds = every_seconds
        self.start = self._last = time.monotonic()
        self.documents = self.input_bytes = 0

    def read(self, documents: int, input_bytes: int) -> None:
        self.documents += documents
        self.input_bytes += input_bytes
        if self._due():
            logging.info("read %s documents (%.1f MB of text)", f"{self.documents:,}",
                         self.input_bytes / 1e6)

    def pool_done(self, done: int, total: int, stats: PretrainingStats, final=False) -> None:
        if self._due() or final:
            elapsed = time.monotonic() - self.start
            logging.info("pools %d/%d | documents %s | instances %s | input tokens %s | "
                         "%.0f tokens/s", done, total, f"{stats.documents:,}",
                         f"{stats.instances:,}", f"{stats.input_tokens:,}",
                         stats.input_tokens / max(elapsed, 1e-9))

    def _due(self) -> bool:
        now = time.monotonic()
        if now - self._last < self.every_seconds:
            return False
        self._last = now
        return True

    def counted(self, stream):
        for sentences in stream:
            self.read(1, sum(len(sentence) + 1 for sentence in sentences))
            yield sentences


def create_pretraining_data(input_files: list, output_files: list, vocab_file: str, *,
                            do_lower_case: bool = True,
                            settings: InstanceSettings = InstanceSettings(),
                            random_seed: int = 12345,
                            input_options: InputOptions = InputOptions(),
                            num_workers: int = 1,
                            pool_bytes: int = nsp_pools.DEFAULT_POOL_BYTES,
                            faithful_in_memory: bool = False,
                            stats_file: str = None, tmp_dir: str = None) -> PretrainingStats:
    """Write the records of `input_files` to the `output_files` shards; return the statistics."""
    settings.check()
    input_options.check()
    if num_workers < 1:
        raise SettingsError(f"--num_workers={num_workers}: must be at least 1")
    if faithful_in_memory and num_workers != 1:
        raise SettingsError("--faithful_in_memory runs in one process, as the original does; "
                         f"drop --num_workers={num_workers}")
    if not input_files:
        raise documents.InputFormatError("--input_file names no file")
    # The vocabulary's special tokens, before anything is written (a DataError naming the file).
    special_token_ids(load_vocab(vocab_file), REQUIRED_TOKENS, source=vocab_file)
    output_files = check_output_files(list(output_files), make_folders=False)
    for path in output_files:
        output_lock.check_file_output(path, "--output_file")
    stats_file = stats_file or output_files[0] + ".stats.json"
    with output_lock.holding({**{path: "--output_file" for path in output_files},
                              stats_file: "--stats_file"}):
        remove_leftovers(output_files + [stats_file])
        return _create(input_files, output_files, vocab_file, do_lower_case, settings,
                       random_seed, input_options, num_workers, pool_bytes, faithful_in_memory,
                       stats_file, tmp_dir)


def remove_leftovers(outputs: list) -> None:
    """The hidden temporary shards a killed run of these outputs left (the outputs are held)."""
    for path in outputs:
        for removed in remove_partial_files(path):
            logging.info("removed %s, a partial file left by an interrupted run", removed)


def _create(input_files, output_files, vocab_file, do_lower_case, settings, random_seed,
            input_options, num_workers, pool_bytes, faithful_in_memory, stats_file, tmp_dir):
    bucket_count = nsp_pools.bucket_count(sum(map(documents.file_size, input_files)), pool_bytes)
    progress = Progress()
    with ShardedRecordWriter(output_files) as writer:
        if faithful_in_memory:
            maker = RecordMaker(vocab_file, do_lower_case, settings)
            stats = _write_in_memory(maker, input_files, input_options, random_seed, writer,
                                     progress)
        else:
            stats = _write_streaming(input_files, input_options, bucket_count, random_seed,
                                     (vocab_file, do_lower_case, settings), num_workers,
                                     spill_folder(tmp_dir, writer.paths[0]), writer, progress)
    write_text(stats_file, stats.to_json())
    logging.info("wrote %s instances to %d file(s) in %.1f s\n%s", f"{stats.instances:,}",
                 len(writer.paths), time.monotonic() - progress.start, stats.summary())
    logging.info("seconds of work per stage, summed over processes: %s", stats.time_split())
    return stats


def _write_in_memory(maker: RecordMaker, input_files: list, input_options: InputOptions,
                     random_seed: int, writer: ShardedRecordWriter,
                     progress: Progress) -> PretrainingStats:
    interrupts.at("while reading the whole corpus (--faithful_in_memory)")
    corpus = maker.tokenize(progress.counted(
        documents.original_documents(input_files, input_options)))
    nsp_pools.check_document_count(corpus.documents, maker.settings.no_nsp, input_files)
    interrupts.at("while making the records (--faithful_in_memory)")
    result = maker.pool_records(corpus, random.Random(random_seed))
    start = time.perf_counter()
    writer.write_dealt(result.records.dealt(len(writer.paths)), len(result.records))
    result.stats.seconds["writing"] += time.perf_counter() - start
    progress.pool_done(1, 1, result.stats, final=True)
    return result.stats


def _write_streaming(input_files: list, input_options: InputOptions, bucket_count: int,
                     random_seed: int, maker_args: tuple, num_workers: int, spill_dir: str,
                     writer: ShardedRecordWriter, progress: Progress) -> PretrainingStats:
    """Two phases on the same workers: each input range is read, tokenized and spilled to bucket
    files (`pool_worker.spill`) in `spill_dir`; then each pool of buckets becomes records
    (`pool_worker.run`), written here in pool order. `spill_dir` is removed at the end, and at
    the start when a killed run left it."""
    no_nsp = maker_args[2].no_nsp
    stats = PretrainingStats(maker_args[2].max_seq_length)
    ranges = documents.input_ranges(input_files, input_options,
                                    _range_bytes(input_files, num_workers))
    if os.path.isdir(spill_dir):  # the outputs are held: a killed run of them left it
        logging.info("removed %s, the pool files of an interrupted run", spill_dir)
        shutil.rmtree(spill_dir)
    os.makedirs(spill_dir)
    if start_method() == "fork":
        pool_worker.start(*maker_args)  # once, here: forked workers inherit it
    try:
        with OrderedPool(num_workers, pool_worker.start, maker_args) as workers:
            return _spill_and_write(ranges, input_files, input_options, bucket_count,
                                    random_seed, spill_dir, no_nsp, stats, workers, writer,
                                    num_workers, progress)
    finally:
        shutil.rmtree(spill_dir, ignore_errors=True)


def _spill_and_write(ranges, input_files, input_options, bucket_count, random_seed, spill_dir,
                     no_nsp, stats, workers, writer, num_workers, progress) -> PretrainingStats:
    """The two phases of `_write_streaming` on its workers."""
    spill_jobs = [pool_worker.SpillJob(index, part, input_options, random_seed, bucket_count,
                                       spill_dir) for index, part in enumerate(ranges)]
    documents_per_bucket = np.zeros(bucket_count, dtype=np.int64)
    interrupts.at(f"while reading the input ({len(ranges)} part(s), pool files in {spill_dir})")
    for result in workers.map(pool_worker.spill, spill_jobs):
        documents_per_bucket += result.documents_per_bucket
        stats.seconds.update(result.seconds)
        progress.read(result.documents, result.input_bytes)
    documents_read = int(documents_per_bucket.sum())
    nsp_pools.check_document_count(documents_read, no_nsp, input_files)
    pools = nsp_pools.pools_of_buckets(
        nsp_pools.group_buckets(documents_per_bucket.tolist(), no_nsp))
    logging.info("%s documents in %d pools; making records with %d worker(s)",
                 f"{documents_read:,}", len(pools), num_workers)
    jobs = (pool_worker.PoolJob(index, [nsp_pools.spill_path(spill_dir, bucket, part)
                                        for bucket in buckets for part in range(len(ranges))],
                                random_seed, len(writer.paths))
            for index, buckets in enumerate(pools))
    interrupts.at(f"while making the records of pool 1 of {len(pools)}")
    for done, result in enumerate(workers.map(pool_worker.run, jobs), start=1):
        interrupts.at(f"while making the records of pool {min(done + 1, len(pools))} of "
                      f"{len(pools)}")
        start = time.perf_counter()
        writer.write_dealt(result.chunks, result.count)
        result.stats.seconds["writing"] += time.perf_counter() - start
        stats.merge(result.stats)
        progress.pool_done(done, len(pools), stats, final=done == len(pools))
    return stats


def _range_bytes(input_files: list, num_workers: int) -> int:
    """About four input ranges per worker, each 1-64 MB: enough to keep every worker busy, few
    enough that each is worth a job. The documents do not depend on it."""
    total = sum(map(documents.file_size, input_files))
    return min(64 << 20, max(1 << 20, total // (4 * num_workers) + 1))


def cpu_count() -> int:
    """The cores this process may run on (the affinity mask where there is one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def spill_folder(tmp_dir: str | None, first_output: str) -> str:
    """The pool files' folder, named after the first output (`.NAME.pools-HASH`, in `--tmp_dir`,
    by default beside it), so that the next run of the same outputs finds and removes what a
    killed one left."""
    import hashlib

    absolute = os.path.abspath(first_output) if "://" not in first_output else first_output
    folder = tmp_dir or (tempfile.gettempdir() if "://" in first_output
                         else os.path.dirname(absolute))
    digest = hashlib.sha1(absolute.encode("utf-8")).hexdigest()[:8]
    return os.path.join(folder, f".{os.path.basename(first_output)}.pools-{digest}")


# ------------------------------------------------------------------ command line
def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        create_pretraining_data(
            documents.expand_input_files(FLAGS.input_file),
            [path.strip() for path in FLAGS.output_file.split(",") if path.strip()],
            FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case,
            settings=pretraining_flags.instance_settings(), random_seed=FLAGS.random_seed,
            input_options=pretraining_flags.input_options(),
            num_workers=(FLAGS.num_workers or (1 if FLAGS.faithful_in_memory else cpu_count())),
            pool_bytes=FLAGS.pool_bytes, faithful_in_memory=FLAGS.faithful_in_memory,
            stats_file=FLAGS.stats_file, tmp_dir=FLAGS.tmp_dir)
    except (ValueError, OSError) as error:  # bad flags or input, named in the message
        raise as_user_error(error) from None


def define_flags() -> None:
    """The original's flags and ours, defined when the CLI runs, not on import."""
    pretraining_flags.define_flags()
    flags.DEFINE_integer("num_workers", 0, "Processes that read, tokenize and make instances; "
                         "0: one per CPU core. The records do not depend on it.")
    flags.DEFINE_string("tmp_dir", None, "Folder for the temporary pool files, about the size of "
                        "the input (default: beside the first output file).")
    flags.DEFINE_bool("faithful_in_memory", False, "Do what the original does: the whole corpus "
                      "and every instance in memory, one process; same records as the original.")


def console_main() -> None:
    define_flags()
    for name in pretraining_flags.REQUIRED:
        flags.mark_flag_as_required(name)
    run_main(main)


if __name__ == "__main__":
    console_main()
