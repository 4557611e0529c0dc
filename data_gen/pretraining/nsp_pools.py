"""Bounded pools of documents, the streaming stand-in for the original's whole-corpus draw.

The original draws a random next sentence from any document of the corpus, so it holds the corpus
in memory. Here the corpus is cut into pools of about `pool_bytes` of input text, and the original
algorithm runs on each pool on its own: documents shuffled, `dupe_factor` passes, random next
documents drawn uniformly from the same pool, instances shuffled within the pool.

How documents are pooled: there are `ceil(input bytes / pool_bytes)` buckets; a document goes to
bucket `blake2b(seed, its text) mod buckets`, so each bucket is a uniform random sample of the whole
corpus (not a run of neighbouring documents), and where it goes depends on its text alone, not on
the order of reading or the number of processes. Buckets are spilled to temporary files as the input
streams by, then grouped in bucket order into pools of at least two documents (one with
`--no_nsp`; a short last group joins the one before). Within a pool, documents keep the input
order, bucket by bucket.

Memory: reading holds one document; each worker holds one pool (its documents, instances and
records); the writer holds the records of up to 2 x workers pools; and there is a count per bucket.
None of it grows with the corpus, only with `pool_bytes`, `dupe_factor` and the largest document.

How that differs from the original: a random next document is uniform over the other documents of
its pool (a random ~1/pools of the corpus) instead of the whole corpus, so for any one document the
candidates are still a uniform sample, but two documents of the same pool share theirs; and the
final shuffle mixes the instances of one pool, while pools are written one after another (the
training reader shuffles across files and records). Pool k draws from `random.Random(seed)` for
k = 0, so a corpus that fits one pool gives exactly the original's output (if each input file ends
with a blank line: the original lets a document run on into the next file); later pools draw from
`random.Random(f"{seed}/pool{k}")`.
"""
import collections
import hashlib
import math
import os
import random
from typing import Iterable, Iterator

from data_gen.pretraining.documents import InputFormatError

MIN_DOCUMENTS_WITH_NSP = 2  # a random next document must be able to differ from the current one
DEFAULT_POOL_BYTES = 2_000_000
_MAX_OPEN_FILES = 128


def bucket_count(total_input_bytes: int, pool_bytes: int) -> int:
    if pool_bytes < 1:
        raise ValueError(f"--pool_bytes={pool_bytes}: must be at least 1")
    return max(1, math.ceil(total_input_bytes / pool_bytes))


def document_bucket(sentences: list, seed: int, num_buckets: int) -> int:
    digest = hashlib.blake2b(f"{seed}\n".encode(), digest_size=8)
    digest.update("\n".join(sentences).encode())
    return int.from_bytes(digest.digest(), "big") % num_buckets


def check_document_count(count: int, no_nsp: bool, input_files: list) -> None:
    """No documents, or one while next-sentence prediction needs a second: InputFormatError."""
    names = ", ".join(input_files[:3]) + (f" and {len(input_files) - 3} more"
                                           if len(input_files) > 3 else "")
    if count == 0:
        raise InputFormatError(f"no documents with text in --input_file ({names})")
    if count < MIN_DOCUMENTS_WITH_NSP and not no_nsp:
        raise InputFormatError(
            f"only one document in --input_file ({names}): next-sentence prediction needs a "
            "second one to draw random sentences from (put a blank line between documents, "
            "or pass --no_nsp)")


def group_buckets(documents_per_bucket: list, no_nsp: bool) -> list:
    """Pool index of every bucket: consecutive buckets until a pool has enough documents."""
    min_documents = 1 if no_nsp else MIN_DOCUMENTS_WITH_NSP
    pool_of_bucket, pool_sizes = [], []
    for count in documents_per_bucket:
        if not pool_sizes or (pool_sizes[-1] >= min_documents and count > 0):
            pool_sizes.append(0)
        pool_sizes[-1] += count
        pool_of_bucket.append(len(pool_sizes) - 1)
    if len(pool_sizes) > 1 and pool_sizes[-1] < min_documents:
        pool_of_bucket = [min(pool, len(pool_sizes) - 2) for pool in pool_of_bucket]
    return pool_of_bucket


def pools_of_buckets(pool_of_bucket: list) -> list:
    """Bucket indices of every pool, in order."""
    pools = collections.defaultdict(list)
    for bucket, pool in enumerate(pool_of_bucket):
        pools[pool].append(bucket)
    return [pools[pool] for pool in sorted(pools)]


def pool_rng(seed: int, pool_index: int) -> random.Random:
    return random.Random(seed if pool_index == 0 else f"{seed}/pool{pool_index}")


class BucketSpill:
    """Documents spilled to one file per bucket, in the original layout (blank line after each).

    At most `_MAX_OPEN_FILES` files are open at once (least recently used ones are closed), so a
    corpus of many pools does not run out of file handles.
    """

    def __init__(self, directory: str, num_buckets: int):
        self.directory = directory
        self.documents_per_bucket = [0] * num_buckets
        self._open = collections.OrderedDict()

    def path(self, bucket: int) -> str:
        return os.path.join(self.directory, f"bucket-{bucket:06d}.txt")

    def add(self, bucket: int, sentences: list) -> None:
        self._file(bucket).write("".join(f"{s}\n" for s in sentences).encode() + b"\n")
        self.documents_per_bucket[bucket] += 1

    def _file(self, bucket: int):
        f = self._open.pop(bucket, None)
        if f is None:
            if len(self._open) >= _MAX_OPEN_FILES:
                self._open.popitem(last=False)[1].close()
            f = open(self.path(bucket), "ab")
        self._open[bucket] = f
        return f

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()


def read_bucket_documents(paths: Iterable[str]) -> Iterator[list]:
    """The documents of spilled bucket files, in order."""
    for path in paths:
        if not os.path.exists(path):
            continue  # an empty bucket has no file
        document = []
        with open(path, "rb") as f:
            for raw in f:
                line = raw[:-1].decode()
                if line:
                    document.append(line)
                else:
                    yield document
                    document = []
