"""One pool of raw documents -> framed pretraining records and their statistics.

This is the unit of work that the local worker processes, the in-memory mode and the Beam pipeline
share: tokenize the sentences (dropping those that tokenize to nothing, then empty documents, as the
original does), make the original's instances, and encode them as TFRecord frames. Tokenising runs
compiled on ASCII chunks (`compiled_wordpiece`, the twin of `FullTokenizer.tokenize_lines_to_ids`,
which takes the other chunks); instances, masking and encoding run compiled (`compiled_instances`,
`compiled_records`), one call per pool. The Python
statement of the same algorithm (`instances`, `masking`, `schema`) is the reference the tests hold
this against, record for record.
"""
import random
import time
from typing import Iterable, Iterator, NamedTuple

import numpy as np

from bert_tf2.data_gen.compiled_wordpiece import CompiledWordpiece
from bert_tf2.data_gen.pretraining import compiled_instances
from bert_tf2.data_gen.pretraining.compiled_instances import TokenizedPool
from bert_tf2.data_gen.pretraining.compiled_records import FramedRecords, framed_records
from bert_tf2.data_gen.pretraining.instances import InstanceSettings
from bert_tf2.data_gen.pretraining.stats import PretrainingStats
from bert_tf2.data_gen.tokenization import FullTokenizer, special_token_ids

REQUIRED_TOKENS = ("[CLS]", "[SEP]", "[MASK]", "[UNK]")  # [UNK]: for characters it lacks
TOKENIZE_BATCH_BYTES = 1 << 18  # characters of text per tokenizer call (`tokenize_documents`)


class PoolRecords(NamedTuple):
    records: FramedRecords  # in the pool's shuffled order
    stats: PretrainingStats  # its `seconds` hold the time of each stage


class RecordMaker:
    """A tokenizer and the instance settings; build one per process and reuse it for every pool."""

    def __init__(self, vocab_file: str, do_lower_case: bool, settings: InstanceSettings):
        self.settings = settings.check()
        self.tokenizer = FullTokenizer(vocab_file, do_lower_case=do_lower_case)
        special_token_ids(self.tokenizer.vocab, REQUIRED_TOKENS, source=vocab_file)
        self.vocab_words = list(self.tokenizer.vocab.keys())
        self.vocabulary = compiled_instances.vocabulary_ids(self.tokenizer.vocab, self.vocab_words)
        self.lines_to_ids = CompiledWordpiece(self.tokenizer).tokenize_lines_to_ids

    def tokenize(self, documents: Iterable[list]) -> TokenizedPool:
        """Documents of sentences -> the pool's non-empty documents of non-empty sentences.

        The time it takes is the pool's `seconds["tokenizing"]` (reading included when
        `documents` is a lazy reader).
        """
        start = time.perf_counter()
        pieces, lengths = [], []
        for _, ids, counts in self.tokenize_documents((None, sentences) for sentences in documents):
            counts = counts[counts > 0]
            if len(counts):
                pieces.append(ids)
                lengths.append(counts)
        return TokenizedPool.of_documents(pieces, lengths)._replace(
            seconds=time.perf_counter() - start)

    def tokenize_documents(self, documents: Iterable[tuple]) -> Iterator[tuple]:
        """`(key, sentences)` pairs -> `(key, ids, counts)` per document, in order: the ids of
        its sentences one after another and how many each has (zeros kept). Documents are
        tokenized together, about `TOKENIZE_BATCH_BYTES` of text per call: one call per short
        document (a news story) would cost more than its tokens."""
        batch, size = [], 0
        for key, sentences in documents:
            batch.append((key, sentences))
            size += sum(map(len, sentences))
            if size >= TOKENIZE_BATCH_BYTES:
                yield from self._tokenize_batch(batch)
                batch, size = [], 0
        yield from self._tokenize_batch(batch)

    def _tokenize_batch(self, batch: list) -> Iterator[tuple]:
        if not batch:
            return
        ids, counts = self.lines_to_ids([line for _, sentences in batch for line in sentences])
        line_ends = np.cumsum([len(sentences) for _, sentences in batch])
        token_ends = np.concatenate(([0], np.cumsum(counts)))[line_ends]
        line_start, token_start = 0, 0
        for (key, _), line_end, token_end in zip(batch, line_ends.tolist(), token_ends.tolist()):
            yield key, ids[token_start:token_end], counts[line_start:line_end]
            line_start, token_start = line_end, token_end

    def warm_up(self) -> None:
        """Load the compiled code (and the tokenizer's patterns) now, on a two-document pool,
        rather than on the first real pool."""
        pool = self.tokenize([["a b c.", "d e f."], ["g h i."]])
        self.pool_records(pool, random.Random(0))

    def pool_records(self, pool: TokenizedPool, rng: random.Random) -> PoolRecords:
        """The framed records of a tokenized pool, drawing from `rng` as the original does."""
        stats = PretrainingStats(self.settings.max_seq_length)
        stats.add_pool(pool)
        start = time.perf_counter()
        instances = compiled_instances.create_pool_instances(pool, self.settings, self.vocabulary,
                                                             rng)
        made = time.perf_counter()
        records = framed_records(instances)
        stats.seconds["instances and masking"] += made - start
        stats.seconds["encoding"] += time.perf_counter() - made
        stats.add_instances(instances)
        return PoolRecords(records, stats)
