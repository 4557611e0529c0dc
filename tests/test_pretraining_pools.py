"""Bounded pools of documents and the ordered process map that makes their records."""
import collections
import contextlib
import os
import random
import sys

import numpy as np
import pytest

from bert_tf2.data_gen.pretraining import nsp_pools, parallel, pool_worker
from bert_tf2.data_gen.pretraining.documents import InputFormatError
from bert_tf2.data_gen.pretraining.instances import InstanceSettings


def test_bucket_count_follows_input_size():
    assert nsp_pools.bucket_count(10, 2_000_000) == 1
    assert nsp_pools.bucket_count(4_000_001, 2_000_000) == 3
    with pytest.raises(ValueError, match="--pool_bytes=0"):
        nsp_pools.bucket_count(10, 0)


def test_buckets_are_uniform_and_depend_on_text_and_seed_only():
    documents = [[f"sentence {i}", f"and {i * 7}"] for i in range(20_000)]
    buckets = [nsp_pools.document_bucket(d, 12345, 10) for d in documents]
    counts = collections.Counter(buckets)
    assert sorted(counts) == list(range(10))
    assert max(counts.values()) < 2_150 and min(counts.values()) > 1_850  # 2,000 +- 3.5 sigma
    assert buckets == [nsp_pools.document_bucket(d, 12345, 10) for d in reversed(documents)][::-1]
    other_seed = [nsp_pools.document_bucket(d, 1, 10) for d in documents]
    assert sum(a == b for a, b in zip(buckets, other_seed)) < 2_300  # independent: ~1/10 agree


@pytest.mark.parametrize("counts, no_nsp, pools", [
    ([5, 3, 0, 4], False, [0, 1, 1, 2]),
    ([1, 0, 1, 1], False, [0, 0, 0, 0]),  # the short last pool joins the one before
    ([1, 1, 1], False, [0, 0, 0]),
    ([0, 0, 2, 1], False, [0, 0, 0, 0]),
    ([1, 1, 1], True, [0, 1, 2]),
    ([3], False, [0]),
])
def test_buckets_group_into_pools_of_at_least_two_documents(counts, no_nsp, pools):
    assert nsp_pools.group_buckets(counts, no_nsp) == pools
    sizes = collections.Counter()
    for bucket, pool in enumerate(pools):
        sizes[pool] += counts[bucket]
    assert min(sizes.values()) >= (1 if no_nsp else 2)


def test_too_few_documents_is_an_error_naming_the_files_and_the_way_out():
    with pytest.raises(InputFormatError, match=r"no documents with text in --input_file \(a.txt\)"):
        nsp_pools.check_document_count(0, False, ["a.txt"])
    with pytest.raises(InputFormatError, match=r"only one document .* \(a.txt, b.txt\).*--no_nsp"):
        nsp_pools.check_document_count(1, False, ["a.txt", "b.txt"])
    nsp_pools.check_document_count(1, True, ["a.txt"])


def test_pool_zero_draws_from_the_seed_itself():
    assert nsp_pools.pool_rng(12345, 0).random() == random.Random(12345).random()
    assert nsp_pools.pool_rng(12345, 1).random() != random.Random(12345).random()


def _ids(*values) -> tuple:
    return np.array([len(v) for v in values], dtype=np.int64), np.array(
        [i for v in values for i in v], dtype=np.int32)


def test_spilled_documents_come_back_exactly_in_order(tmp_path):
    # documents as (sentence lengths, ids); the second has an empty sentence, the last no tokens
    documents = [_ids([5, 6], [7, 8, 9]), _ids([1]), _ids([2, 3], [], [4]), _ids([])]
    first, second = nsp_pools.TokenSpill(str(tmp_path), 3, 0), nsp_pools.TokenSpill(
        str(tmp_path), 3, 1)
    for spill, document, bucket in zip([first, first, second, second], documents, [2, 0, 2, 2]):
        spill.add(bucket, *document)
    first.close()
    second.close()
    assert first.documents_per_bucket.tolist() == [1, 0, 1]
    assert second.documents_per_bucket.tolist() == [0, 0, 2]  # the empty one counts, unwritten
    paths = [nsp_pools.spill_path(str(tmp_path), bucket, part) for bucket in range(3)
             for part in range(2)]
    pool = nsp_pools.read_spilled_pool(paths)
    assert pool.as_lists() == [[[1]], [[5, 6], [7, 8, 9]], [[2, 3], [4]]]


def test_spill_keeps_few_files_open(tmp_path, monkeypatch):
    monkeypatch.setattr(nsp_pools, "_MAX_OPEN_FILES", 4)
    spill = nsp_pools.TokenSpill(str(tmp_path), 50, 0)
    for i in range(500):
        spill.add(i * 7 % 50, *_ids([i]))
        assert len(spill._open) <= 4
    spill.close()
    pool = nsp_pools.read_spilled_pool([nsp_pools.spill_path(str(tmp_path), b, 0)
                                        for b in range(50)])
    assert sorted(pool.as_lists()) == sorted([[[i]] for i in range(500)])


# ------------------------------------------------------------------ ordered process map
def _square(x):
    return x * x


def _pool_records_and_tensorflow(job):
    return pool_worker.run(job).count, "tensorflow" in sys.modules, os.getpid()


def _fail_on_three(x):
    if x == 3:
        raise ValueError("item 3 is bad")
    return x


@pytest.mark.integration
def test_results_come_in_input_order_from_two_processes():
    assert list(parallel.ordered_map(_square, range(30), num_workers=2)) == [
        x * x for x in range(30)]


@pytest.mark.integration
def test_inputs_are_taken_lazily():
    taken = []

    def items():
        for x in range(100):
            taken.append(x)
            yield x

    results = parallel.ordered_map(_square, items(), num_workers=2)
    assert next(results) == 0
    assert len(taken) <= 4 + 1  # 2 * workers in flight, plus the one being handed out
    results.close()


@pytest.mark.integration
def test_pool_workers_make_records_without_importing_tensorflow(tmp_path, minilm_dir):
    """This process holds TensorFlow, so the workers are spawned: they must not import it."""
    import tensorflow  # noqa: F401  (the premise, whichever tests ran before in this process)

    assert parallel.start_method() == "spawn"
    spill = nsp_pools.TokenSpill(str(tmp_path), 2, 0)
    for i in range(8):
        spill.add(i % 2, *_ids([2000 + i, 2001, 2002, 1012], [2005, 2117, 1012]))
    spill.close()
    jobs = [pool_worker.PoolJob(b, [nsp_pools.spill_path(str(tmp_path), b, 0)], 12345)
            for b in range(2)]
    settings = InstanceSettings(dupe_factor=1)
    answers = list(parallel.ordered_map(_pool_records_and_tensorflow, jobs, 2, pool_worker.start,
                                        (str(minilm_dir / "vocab.txt"), True, settings)))
    assert all(records > 0 for records, _, _ in answers)
    assert {imported for _, imported, _ in answers} == {False}  # 650 MB saved per worker
    assert os.getpid() not in {pid for _, _, pid in answers}


@pytest.mark.integration
def test_worker_errors_reach_the_parent():
    with pytest.raises(ValueError, match="item 3 is bad"):
        list(parallel.ordered_map(_fail_on_three, range(10), num_workers=2))


def _large(x):
    return bytes(8 << 20)  # 8 MB: more than a pipe holds, so a worker blocks sending it


def _die_on_two(x):
    if x == 2:
        os.kill(os.getpid(), 9)
    return x


@pytest.mark.integration
@pytest.mark.parametrize("how", ["error", "early close"])
def test_workers_blocked_sending_large_results_do_not_hang_the_exit(how):
    """An error (or Ctrl-C) in the parent while workers are blocked sending results that nobody
    reads any more: the pool still stops (multiprocessing.Pool.terminate can hang there, on a
    queue lock that a blocked worker holds)."""
    import time

    start = time.monotonic()
    with pytest.raises(KeyError) if how == "error" else contextlib.nullcontext():
        with parallel.OrderedPool(2) as pool:
            results = pool.map(_large, range(20))
            assert len(next(results)) == 8 << 20
            time.sleep(0.5)  # the other workers' results are now stuck in their pipes
            if how == "error":
                raise KeyError("stop")
            results.close()
    assert time.monotonic() - start < 30


@pytest.mark.integration
def test_a_worker_that_dies_is_an_error_not_a_hang():
    with pytest.raises(parallel.WorkerDied, match="exit status -9"):
        list(parallel.ordered_map(_die_on_two, range(10), num_workers=2))


@pytest.mark.integration
def test_a_worker_that_died_before_its_next_item_is_the_same_error():
    # The item goes to a dead worker's pipe (a broken pipe on send, not on receive).
    with parallel.OrderedPool(2) as pool:
        for process, _ in pool._workers:
            os.kill(process.pid, 9)
            process.join()
        with pytest.raises(parallel.WorkerDied, match="exit status -9"):
            list(pool.map(_die_on_two, range(10)))
