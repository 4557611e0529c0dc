"""What each worker process runs: one spilled pool of documents -> its records and statistics.

Kept apart from the command line so that a worker imports neither TensorFlow nor flags.
"""
from typing import NamedTuple

from data_gen.pretraining import nsp_pools
from data_gen.pretraining.instances import InstanceSettings
from data_gen.pretraining.records import PoolRecords, RecordMaker

_maker = None  # this process's RecordMaker, built once by `start`
_start_error = None  # raised by `run`: a pool initializer must not raise (the pool would respawn)


class PoolJob(NamedTuple):
    index: int  # the pool's position in the output; pool 0 draws from Random(seed)
    bucket_files: list  # spilled bucket files of the pool, in bucket order
    seed: int


def start(vocab_file: str, do_lower_case: bool, settings: InstanceSettings) -> None:
    global _maker, _start_error
    _maker, _start_error = None, None
    try:
        _maker = RecordMaker(vocab_file, do_lower_case, settings)
        _maker.warm_up()
    except Exception as error:  # noqa: BLE001 (handed to the parent by `run`)
        _start_error = error


def run(job: PoolJob) -> PoolRecords:
    if _start_error is not None:
        raise _start_error
    documents = _maker.tokenize(nsp_pools.read_bucket_documents(job.bucket_files))
    return _maker.pool_records(documents, nsp_pools.pool_rng(job.seed, job.index))
