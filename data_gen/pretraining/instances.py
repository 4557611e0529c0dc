"""The original's pretraining instances (SPEC.md section 6) from a list of tokenized documents.

`create_pool_instances` is the original's `create_training_instances` after reading: shuffle the
documents, make `dupe_factor` passes over all of them, shuffle the instances. Given the same
documents and a `random.Random(seed)` it draws every random number in the original's order, so it
reproduces the original's instances; `--faithful_in_memory` calls it once on the whole corpus,
the streaming mode once per bounded pool of documents (see `nsp_pools`).

Per document and pass: `max_num_tokens = max_seq_length - 3`; the target length is
`max_num_tokens`, or with probability `short_seq_prob` `randint(2, max_num_tokens)`. Sentences
gather into a chunk until it reaches the target or the document ends; A is the first
`randint(1, len(chunk) - 1)` sentences (1 if the chunk has one). B is random (label 1) if the chunk
has one sentence or with probability 0.5: a random other document (up to 10 draws to differ), from
a random sentence on, filled to `target - len(A)`; the chunk's unused sentences are put back.
Otherwise B is the rest of the chunk (label 0). Truncation trims the longer of A and B, from the
front or the back with probability 0.5, until they fit `max_num_tokens`.

`no_nsp` (the paper's "No NSP" ablation): `max_num_tokens = max_seq_length - 2`, the whole chunk is
one segment `[CLS] A [SEP]` (segment ids 0, trimmed like A above), no A/B split or random document
is drawn, and the label is always 0.

`pack_sentences` (`create_packed_pool_instances`, RoBERTa's and Cramming's MLM-only rows): each
pass shuffles the documents and streams their tokens, document after document with a [SEP] between
two, into rows `[CLS] tokens [SEP]` of exactly `max_seq_length`; a sentence that does not fit
goes on in the next row, so only a pass's last row (and a row where a document boundary would take
its last slot) is shorter. No target lengths or truncation draws; the label is always 0.
"""
import random
from typing import NamedTuple

from bert_tf2.data_gen.pretraining import masking
from bert_tf2.process.errors import SettingsError

MAX_RANDOM_DOCUMENT_DRAWS = 10


class InstanceSettings(NamedTuple):
    """The original's flags that shape instances, with its defaults."""
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    do_whole_word_mask: bool = False
    no_nsp: bool = False
    pack_sentences: bool = False  # implies no_nsp

    @property
    def max_num_tokens(self) -> int:
        return self.max_seq_length - (2 if self.no_nsp or self.pack_sentences else 3)

    def check(self) -> "InstanceSettings":
        """Raise ValueError naming the flag of a setting that cannot work."""
        layout, smallest = (("[CLS] A [SEP]", 4) if self.no_nsp or self.pack_sentences
                            else ("[CLS] A [SEP] B [SEP]", 5))
        if self.max_seq_length < smallest:
            raise SettingsError(
                f"--max_seq_length={self.max_seq_length} is too small: {layout} with the shortest "
                f"target length of 2 tokens needs at least {smallest}")
        if self.max_predictions_per_seq < 1:
            raise SettingsError(f"--max_predictions_per_seq={self.max_predictions_per_seq}: must be "
                             "at least 1 (the original always predicts one token)")
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise SettingsError(f"--masked_lm_prob={self.masked_lm_prob}: must be in (0, 1]")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise SettingsError(f"--short_seq_prob={self.short_seq_prob}: must be in [0, 1]")
        if self.dupe_factor < 1:
            raise SettingsError(f"--dupe_factor={self.dupe_factor}: must be at least 1")
        return self


class TrainingInstance(NamedTuple):
    tokens: list  # [CLS] A [SEP] B [SEP], masked
    segment_ids: list
    is_random_next: bool
    masked_lm_positions: list
    masked_lm_labels: list
    mask_kinds: list  # masking.MASK / RANDOM / UNCHANGED per position, for the statistics


class DrawCounts:
    """Draws the statistics report: target lengths, forced random B, random B from A's document."""

    def __init__(self):
        self.target_lengths = 0
        self.short_target_lengths = 0
        self.one_sentence_chunks = 0  # B is random without a coin flip
        self.random_next_same_document = 0


def create_pool_instances(documents: list, settings: InstanceSettings, vocab_words: list,
                          rng: random.Random, draws: DrawCounts = None) -> list:
    """All instances of `documents` (lists of token lists), shuffled, as the original makes them
    (or with `settings.pack_sentences`, `create_packed_pool_instances`'s, which draws nothing that
    `draws` counts)."""
    if settings.pack_sentences:
        return create_packed_pool_instances(documents, settings, vocab_words, rng)
    draws = draws or DrawCounts()
    documents = list(documents)
    rng.shuffle(documents)
    instances = []
    for _ in range(settings.dupe_factor):
        for document_index in range(len(documents)):
            instances.extend(create_instances_from_document(
                documents, document_index, settings, vocab_words, rng, draws))
    rng.shuffle(instances)
    return instances


def create_packed_pool_instances(documents: list, settings: InstanceSettings, vocab_words: list,
                                 rng: random.Random) -> list:
    """`--pack_sentences`: every pass packs the shuffled documents into full rows (see the module
    docstring), masked as the original masks; all rows shuffled at the end."""
    documents = list(documents)
    instances = []
    for _ in range(settings.dupe_factor):
        rng.shuffle(documents)
        for tokens in packed_rows(documents, settings.max_num_tokens):
            instances.append(_instance(tokens, None, False, settings, vocab_words, rng))
    rng.shuffle(instances)
    return instances


def packed_rows(documents: list, width: int) -> list:
    """The documents' tokens in order, "[SEP]" between two documents, cut into rows of `width`
    tokens. A "[SEP]" never opens or closes a row: where it would take a row's last slot, the
    row ends one short instead."""
    rows, row = [], []
    for document in documents:
        if row:
            if len(row) < width - 1:
                row.append("[SEP]")
            else:
                rows.append(row)
                row = []
        for sentence in document:
            for token in sentence:
                row.append(token)
                if len(row) == width:
                    rows.append(row)
                    row = []
    if row:
        rows.append(row)
    return rows


def create_instances_from_document(documents: list, document_index: int,
                                   settings: InstanceSettings, vocab_words: list,
                                   rng: random.Random, draws: DrawCounts) -> list:
    document = documents[document_index]
    max_num_tokens = settings.max_num_tokens
    target_length = max_num_tokens
    draws.target_lengths += 1
    if rng.random() < settings.short_seq_prob:
        target_length = rng.randint(2, max_num_tokens)
        draws.short_target_lengths += 1

    instances = []
    chunk, chunk_length = [], 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        chunk_length += len(document[i])
        if i == len(document) - 1 or chunk_length >= target_length:
            if settings.no_nsp:
                segments = ([token for sentence in chunk for token in sentence], None, False)
            else:
                segments, unused = _sentence_pair(chunk, documents, document_index,
                                                  target_length, rng, draws)
                i -= unused
            instances.append(_instance(*segments, settings, vocab_words, rng))
            chunk, chunk_length = [], 0
        i += 1
    return instances


def _sentence_pair(chunk: list, documents: list, document_index: int, target_length: int,
                   rng: random.Random, draws: DrawCounts) -> tuple:
    """((tokens_a, tokens_b, is_random_next), sentences of the chunk to put back)."""
    a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
    draws.one_sentence_chunks += len(chunk) == 1
    tokens_a = [token for sentence in chunk[:a_end] for token in sentence]
    if len(chunk) == 1 or rng.random() < 0.5:
        target_b_length = target_length - len(tokens_a)
        for _ in range(MAX_RANDOM_DOCUMENT_DRAWS):
            random_index = rng.randint(0, len(documents) - 1)
            if random_index != document_index:
                break
        else:
            draws.random_next_same_document += 1
        random_document = documents[random_index]
        tokens_b = []
        for sentence in random_document[rng.randint(0, len(random_document) - 1):]:
            tokens_b.extend(sentence)
            if len(tokens_b) >= target_b_length:
                break
        return (tokens_a, tokens_b, True), len(chunk) - a_end
    tokens_b = [token for sentence in chunk[a_end:] for token in sentence]
    return (tokens_a, tokens_b, False), 0


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_num_tokens: int,
                      rng: random.Random) -> None:
    """Trim the longer segment (B on a tie) at its front or back, at random, until they fit."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def _instance(tokens_a: list, tokens_b, is_random_next: bool, settings: InstanceSettings,
              vocab_words: list, rng: random.Random) -> TrainingInstance:
    truncate_seq_pair(tokens_a, tokens_b or [], settings.max_num_tokens, rng)
    tokens = ["[CLS]", *tokens_a, "[SEP]"]
    segment_ids = [0] * len(tokens)
    if tokens_b is not None:
        tokens += [*tokens_b, "[SEP]"]
        segment_ids += [1] * (len(tokens_b) + 1)
    masked = masking.mask_tokens(tokens, settings.masked_lm_prob, settings.max_predictions_per_seq,
                                 vocab_words, rng, settings.do_whole_word_mask)
    return TrainingInstance(masked.tokens, segment_ids, is_random_next, masked.positions,
                            masked.labels, masked.kinds)
