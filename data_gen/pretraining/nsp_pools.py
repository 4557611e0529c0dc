"""Bounded pools of documents, the streaming stand-in for the original's whole-corpus draw.

The original draws a random next sentence from any document of the corpus, so it holds the corpus
in memory. Here the corpus is cut into pools of about `pool_bytes` of input text, and the original
algorithm runs on each pool on its own: documents shuffled, `dupe_factor` passes, random next
documents drawn uniformly from the same pool, instances shuffled within the pool.

How documents are pooled: there are `ceil(input bytes / pool_bytes)` buckets; a document goes to
bucket `blake2b(seed, its text) mod buckets`, so each bucket is a uniform random sample of the whole
corpus (not a run of neighbouring documents), and where it goes depends on its text alone, not on
the order of reading or the number of processes. The workers read the input in ranges
(`documents.input_ranges`), tokenize each document and spill its ids to the file of its bucket and
range (`TokenSpill`); the buckets are then grouped in bucket order into pools of at least two
documents (one with `--no_nsp`; a short last group joins the one before). Within a pool, documents
keep the input order, bucket by bucket.

Memory: reading holds one document; each worker holds one pool (its documents, instances and
records); the writer holds the records of up to 2 x workers pools; and there is a count per bucket
per input range. None of it grows with the corpus, only with `pool_bytes`, `dupe_factor` and the
largest document.

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
from typing import Iterable

import numpy as np

from bert_tf2.data_gen.pretraining.compiled_instances import TokenizedPool
from bert_tf2.data_gen.pretraining.documents import InputFormatError
from bert_tf2.process.errors import SettingsError

MIN_DOCUMENTS_WITH_NSP = 2  # a random next document must be able to differ from the current one
DEFAULT_POOL_BYTES = 2_000_000
_MAX_OPEN_FILES = 128


def bucket_count(total_input_bytes: int, pool_bytes: int) -> int:
    if pool_bytes < 1:
        raise SettingsError(f"--pool_bytes={pool_bytes}: must be at least 1")
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


class TokenSpill:
    """Tokenized documents spilled to one file per bucket, for one part of the input.

    A worker spills the documents of one input range (part `part`); a pool later reads its buckets'
    files part by part, which is the input order. Each document is int32 values: its sentence
    count and token count, the length of each sentence, then its token ids. At most
    `_MAX_OPEN_FILES` files are open at once (least recently used ones are closed).
    `documents_per_bucket` counts every document read, also those that tokenize to nothing (they
    are not written), so pools are grouped the same way as before tokenizing moved here.
    """

    def __init__(self, directory: str, num_buckets: int, part: int):
        self.directory = directory
        self.part = part
        self.documents_per_bucket = np.zeros(num_buckets, dtype=np.int64)
        self._open = collections.OrderedDict()

    def add(self, bucket: int, sentence_lengths: np.ndarray, token_ids: np.ndarray) -> None:
        """One document: the lengths of its sentences (zeros allowed) and all its token ids."""
        self.documents_per_bucket[bucket] += 1
        lengths = sentence_lengths[sentence_lengths > 0]
        if len(lengths):
            header = np.array([len(lengths), len(token_ids)], dtype=np.int32)
            self._file(bucket).write(header.tobytes() + lengths.astype(np.int32).tobytes()
                                     + token_ids.astype(np.int32).tobytes())

    def _file(self, bucket: int):
        f = self._open.pop(bucket, None)
        if f is None:
            if len(self._open) >= _MAX_OPEN_FILES:
                self._open.popitem(last=False)[1].close()
            f = open(spill_path(self.directory, bucket, self.part), "ab")
        self._open[bucket] = f
        return f

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()


def spill_path(directory: str, bucket: int, part: int) -> str:
    return os.path.join(directory, f"bucket-{bucket:06d}-part-{part:06d}.ids")


def read_spilled_pool(paths: Iterable[str]) -> TokenizedPool:
    """The documents of spilled files, in order, as one tokenized pool (missing files: none)."""
    ids, lengths = [], []
    for path in paths:
        if not os.path.exists(path):
            continue  # no document of that part fell into that bucket
        values = np.fromfile(path, dtype=np.int32)
        at = 0
        while at < len(values):
            sentences, tokens = int(values[at]), int(values[at + 1])
            lengths.append(values[at + 2:at + 2 + sentences])
            at += 2 + sentences
            ids.append(values[at:at + tokens])
            at += tokens
    return TokenizedPool.of_documents(ids, lengths)
