"""What each worker process runs, in two phases, both spread over every worker:

1. `spill`: one range of the input -> its documents tokenized and spilled to bucket files
   (`nsp_pools.TokenSpill`), with the count of documents per bucket;
2. `run`: one pool's spilled files -> its records and statistics.

Tokenizing happens in phase 1, where the input is read, so no step reads or tokenizes the corpus
in one process. Kept apart from the command line so that a worker imports neither TensorFlow nor
flags.
"""
import time
from typing import NamedTuple

import numpy as np

from bert_tf2.data_gen.pretraining import nsp_pools
from bert_tf2.data_gen.pretraining.documents import InputOptions, InputRange, range_documents
from bert_tf2.data_gen.pretraining.instances import InstanceSettings
from bert_tf2.data_gen.pretraining.records import RecordMaker
from bert_tf2.data_gen.pretraining.stats import PretrainingStats

_maker = None  # this process's RecordMaker, built once by `start`
_maker_args = None  # what it was built from
_start_error = None  # raised by the jobs: a pool initializer must not raise (the pool would respawn)


class SpillJob(NamedTuple):
    index: int  # the range's position in the input: its part number in the bucket files
    part: InputRange
    input_options: InputOptions
    seed: int
    bucket_count: int
    spill_dir: str


class SpillResult(NamedTuple):
    documents_per_bucket: np.ndarray  # int64 [bucket_count], every document read
    documents: int
    input_bytes: int  # of the sentences read (UTF-8), for progress lines
    seconds: dict  # "reading and spilling", "tokenizing"


class PoolJob(NamedTuple):
    index: int  # the pool's position in the output; pool 0 draws from Random(seed)
    spill_files: list  # the pool's spilled files: bucket by bucket, part by part
    seed: int
    shards: int = 1  # output files: the records come back dealt into this many chunks


class DealtPool(NamedTuple):
    chunks: list  # `ShardedRecordWriter.write_dealt`'s chunks
    count: int  # records
    stats: PretrainingStats


def start(vocab_file: str, do_lower_case: bool, settings: InstanceSettings) -> None:
    """Build this process's RecordMaker (a forked worker finds its parent's, already built)."""
    global _maker, _maker_args, _start_error
    if _maker is not None and _maker_args == (vocab_file, do_lower_case, settings):
        return
    _maker, _maker_args, _start_error = None, None, None
    try:
        _maker = RecordMaker(vocab_file, do_lower_case, settings)
        _maker.warm_up()
        _maker_args = (vocab_file, do_lower_case, settings)
    except Exception as error:  # noqa: BLE001 (handed to the parent by the jobs)
        _start_error = error


def spill(job: SpillJob) -> SpillResult:
    if _start_error is not None:
        raise _start_error
    began = time.perf_counter()
    spill_files = nsp_pools.TokenSpill(job.spill_dir, job.bucket_count, job.index)
    documents, input_bytes, tokenizing = 0, 0, 0.0
    reading = 0.0  # of the time in `next(tokenized)`, what `read` took

    def read():
        nonlocal documents, input_bytes, reading
        began = time.perf_counter()
        for sentences in range_documents(job.part, job.input_options):
            documents += 1
            input_bytes += sum(map(len, sentences)) + len(sentences)
            bucket = nsp_pools.document_bucket(sentences, job.seed, job.bucket_count)
            reading += time.perf_counter() - began
            yield bucket, sentences
            began = time.perf_counter()
        reading += time.perf_counter() - began

    try:
        tokenized = _maker.tokenize_documents(read())  # documents tokenized together
        while True:
            start_tokenizing = time.perf_counter()
            bucket, ids, lengths = next(tokenized, (None, None, None))
            tokenizing += time.perf_counter() - start_tokenizing
            if bucket is None:
                break
            spill_files.add(bucket, lengths, ids)
        tokenizing -= reading
    finally:
        spill_files.close()
    return SpillResult(spill_files.documents_per_bucket, documents, input_bytes, {
        "reading and spilling": time.perf_counter() - began - tokenizing,
        "tokenizing": tokenizing})


def run(job: PoolJob) -> DealtPool:
    if _start_error is not None:
        raise _start_error
    began = time.perf_counter()
    pool = nsp_pools.read_spilled_pool(job.spill_files)
    result = _maker.pool_records(pool, nsp_pools.pool_rng(job.seed, job.index))
    stats = result.stats
    stats.seconds["reading and spilling"] += time.perf_counter() - began - sum(
        stats.seconds.values())
    dealing = time.perf_counter()
    chunks = result.records.dealt(job.shards)
    stats.seconds["writing"] += time.perf_counter() - dealing
    return DealtPool(chunks, len(result.records), stats)
