"""The original's instances and masking of one pool, compiled: `instances` + `masking` without a
Python loop per token.

`instances.create_pool_instances` and `masking.mask_tokens` are the readable statement of the
algorithm (SPEC.md section 6) and the reference; this module is their compiled twin over arrays of
token ids. It makes the same random draws in the same order from the same `random.Random` state
(`mersenne`), so it gives the same instances, and the tests hold the two against each other and
against the original's script. Python keeps the per-pool work (reading, tokenising, writing); one
compiled call makes every instance of the pool, masked and in the final shuffled order.

A pool is three arrays (`TokenizedPool`): every token id, sentence after sentence; where each
sentence starts; where each document's sentences start. A sentence is a slice of the first, a run
of sentences is one too, so segments A and B are `(start, end)` pairs, not lists.
"""
import random
from typing import NamedTuple

import numpy as np

from bert_tf2.data_gen.pretraining import mersenne
from bert_tf2.data_gen.pretraining.mersenne import randbelow, randint, random_float, shuffle
from bert_tf2.process import compiled

MAX_RANDOM_DOCUMENT_DRAWS = 10
KIND_MASK, KIND_RANDOM, KIND_UNCHANGED = 0, 1, 2  # what a chosen token became
# Counters of the draws (`instances.DrawCounts`), in this order.
DRAW_COUNTERS = ("target_lengths", "short_target_lengths", "one_sentence_chunks",
                 "random_next_same_document")


class TokenizedPool(NamedTuple):
    """Non-empty documents of non-empty sentences, as flat token ids."""
    token_ids: np.ndarray  # int32, every token of every sentence in order
    sentence_starts: np.ndarray  # int64, len(sentences) + 1 offsets into token_ids
    document_starts: np.ndarray  # int64, len(documents) + 1 offsets into the sentences
    seconds: float = 0.0  # how long tokenizing took

    @classmethod
    def of_documents(cls, token_ids: list, sentence_lengths: list) -> "TokenizedPool":
        """The pool of documents given as their token ids and their (non-zero) sentence lengths,
        one array of each per document."""
        sentences_per_document = np.array([len(lengths) for lengths in sentence_lengths],
                                          dtype=np.int64)
        return cls(np.concatenate(token_ids) if token_ids else np.zeros(0, dtype=np.int32),
                   _offsets(sentence_lengths), _offsets([sentences_per_document]))

    @property
    def documents(self) -> int:
        return len(self.document_starts) - 1

    @property
    def sentences(self) -> int:
        return len(self.sentence_starts) - 1

    def as_lists(self) -> list:
        """Documents as lists of lists of ids (for the Python reference and the tests)."""
        ids = self.token_ids.tolist()
        starts = self.sentence_starts.tolist()
        return [[ids[starts[s]:starts[s + 1]] for s in range(first, last)]
                for first, last in zip(self.document_starts[:-1].tolist(),
                                       self.document_starts[1:].tolist())]


class VocabularyIds(NamedTuple):
    """What the compiled maker needs of the vocabulary."""
    cls_id: int
    sep_id: int
    mask_id: int
    random_word_ids: np.ndarray  # int32: id of the original's `vocab_words[i]` (its random words)
    is_continuation: np.ndarray  # bool per id: the token starts with "##" (whole-word masking)


class PoolInstances(NamedTuple):
    """Every instance of a pool, in the original's final (shuffled) order; rows padded with 0."""
    input_ids: np.ndarray  # int32 [n, max_seq_length], masked
    lengths: np.ndarray  # int32 [n]: real tokens
    first_segment_lengths: np.ndarray  # int32 [n]: len([CLS] A [SEP]); segment 1 after it
    is_random_next: np.ndarray  # int8 [n]
    masked_lm_positions: np.ndarray  # int32 [n, max_predictions_per_seq], sorted, 0-padded
    masked_lm_ids: np.ndarray  # int32 [n, max_predictions_per_seq]: the original tokens
    mask_kinds: np.ndarray  # int8 [n, max_predictions_per_seq]: KIND_* (-1 in padding)
    masked_counts: np.ndarray  # int32 [n]
    draws: dict  # DRAW_COUNTERS -> count

    def __len__(self) -> int:
        return len(self.lengths)


def _offsets(count_arrays: list) -> np.ndarray:
    """Offsets 0, c0, c0 + c1, ... of the counts in `count_arrays`, as int64."""
    counts = np.concatenate(count_arrays) if count_arrays else np.zeros(0, dtype=np.int64)
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def vocabulary_ids(vocab: dict, vocab_words: list) -> VocabularyIds:
    """`vocab` token -> id as the tokenizer has it; `vocab_words` the original's list of keys."""
    size = max(vocab.values()) + 1
    is_continuation = np.zeros(size, dtype=np.bool_)
    for token, index in vocab.items():
        is_continuation[index] = token.startswith("##")
    return VocabularyIds(vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"],
                         np.array([vocab[word] for word in vocab_words], dtype=np.int32),
                         is_continuation)


def create_pool_instances(pool: TokenizedPool, settings, vocabulary: VocabularyIds,
                          rng: random.Random, mask: bool = True) -> PoolInstances:
    """`instances.create_pool_instances` (or with `settings.pack_sentences`,
    `instances.create_packed_pool_instances`) on a pool of ids; `rng` ends as if it had drawn.

    `mask=False` leaves the instances unmasked (other draws, so other instances): it is there
    for `bench/pretraining_data.py` to tell the time of masking from that of making instances.
    """
    state = mersenne.state_of(rng)
    draws = np.zeros(len(DRAW_COUNTERS), dtype=np.int64)
    # Room for twice the usual number of instances (half-length ones, two per document): the
    # zeroed arrays cost no memory until written, and doubling them would copy. They still double
    # if a pool needs more.
    capacity = settings.dupe_factor * (2 * len(pool.token_ids) // settings.max_num_tokens
                                       + 2 * pool.documents) + 16
    if settings.pack_sentences:
        result = _packed_pool_instances(
            pool.token_ids, pool.sentence_starts, pool.document_starts, state,
            settings.max_seq_length, settings.max_predictions_per_seq, settings.masked_lm_prob,
            settings.dupe_factor, settings.do_whole_word_mask, vocabulary.cls_id,
            vocabulary.sep_id, vocabulary.mask_id, vocabulary.random_word_ids,
            vocabulary.is_continuation, capacity, mask)
    else:
        result = _pool_instances(
            pool.token_ids, pool.sentence_starts, pool.document_starts, state, draws,
            settings.max_seq_length, settings.max_predictions_per_seq, settings.masked_lm_prob,
            settings.short_seq_prob, settings.dupe_factor, settings.do_whole_word_mask,
            settings.no_nsp, vocabulary.cls_id, vocabulary.sep_id, vocabulary.mask_id,
            vocabulary.random_word_ids, vocabulary.is_continuation, capacity, mask)
    mersenne.restore(rng, state)
    return PoolInstances(*result, dict(zip(DRAW_COUNTERS, draws.tolist())))


# ------------------------------------------------------------------ compiled
@compiled.njit()
def python_round(value: float) -> int:
    """Python 3's `round(value)`: halves go to the even neighbour."""
    rounded = np.floor(value)
    difference = value - rounded
    if difference > 0.5 or (difference == 0.5 and rounded % 2 == 1):
        rounded += 1
    return int(rounded)


@compiled.njit()
def _grow(array, rows, fill=0):
    bigger = np.full((rows,) + array.shape[1:], fill, dtype=array.dtype)
    bigger[:array.shape[0]] = array
    return bigger


@compiled.njit()
def _mask_scratch(max_seq_length):
    """Scratch arrays for one row's masking (`_mask`): candidates, group starts, group order,
    chosen positions and their kinds."""
    return (np.zeros(max_seq_length, dtype=np.int64), np.zeros(max_seq_length + 1, dtype=np.int64),
            np.zeros(max_seq_length, dtype=np.int64), np.zeros(max_seq_length, dtype=np.int64),
            np.zeros(max_seq_length, dtype=np.int8))


@compiled.njit()
def _pool_instances(token_ids, sentence_starts, document_starts, state, draws, max_seq_length,
                    max_predictions, masked_lm_prob, short_seq_prob, dupe_factor, whole_word,
                    no_nsp, cls_id, sep_id, mask_id, random_word_ids, is_continuation,
                    capacity, mask):
    max_num_tokens = max_seq_length - (2 if no_nsp else 3)
    documents = len(document_starts) - 1
    ids = np.zeros((capacity, max_seq_length), dtype=np.int32)
    lengths = np.zeros(capacity, dtype=np.int32)
    first_lengths = np.zeros(capacity, dtype=np.int32)
    random_next = np.zeros(capacity, dtype=np.int8)
    positions = np.zeros((capacity, max_predictions), dtype=np.int32)
    labels = np.zeros((capacity, max_predictions), dtype=np.int32)
    kinds = np.full((capacity, max_predictions), -1, dtype=np.int8)
    counts = np.zeros(capacity, dtype=np.int32)
    candidates, group_starts, group_order, chosen, chosen_kinds = _mask_scratch(max_seq_length)

    order = np.arange(documents)
    shuffle(state, order)
    n = 0
    for _ in range(dupe_factor):
        for position in range(documents):
            first_sentence = document_starts[order[position]]
            sentence_count = document_starts[order[position] + 1] - first_sentence
            target_length = max_num_tokens
            draws[0] += 1
            if random_float(state) < short_seq_prob:
                target_length = randint(state, 2, max_num_tokens)
                draws[1] += 1
            chunk_first = -1
            chunk_length = 0
            i = 0
            while i < sentence_count:
                if chunk_first < 0:
                    chunk_first = i
                sentence = first_sentence + i
                chunk_length += sentence_starts[sentence + 1] - sentence_starts[sentence]
                if i == sentence_count - 1 or chunk_length >= target_length:
                    chunk_sentences = i - chunk_first + 1
                    chunk_start = sentence_starts[first_sentence + chunk_first]
                    chunk_end = sentence_starts[sentence + 1]
                    is_random = False
                    if no_nsp:
                        a_start, a_end, b_start, b_end = chunk_start, chunk_end, 0, 0
                    else:
                        a_sentences = 1
                        if chunk_sentences >= 2:
                            a_sentences = randint(state, 1, chunk_sentences - 1)
                        if chunk_sentences == 1:
                            draws[2] += 1
                        a_start = chunk_start
                        a_end = sentence_starts[first_sentence + chunk_first + a_sentences]
                        if chunk_sentences == 1 or random_float(state) < 0.5:
                            is_random = True
                            target_b_length = target_length - (a_end - a_start)
                            random_position = 0
                            differs = False
                            for _draw in range(MAX_RANDOM_DOCUMENT_DRAWS):
                                random_position = randint(state, 0, documents - 1)
                                if random_position != position:
                                    differs = True
                                    break
                            if not differs:
                                draws[3] += 1
                            other_first = document_starts[order[random_position]]
                            other_count = document_starts[order[random_position] + 1] - other_first
                            s = other_first + randint(state, 0, other_count - 1)
                            b_start = sentence_starts[s]
                            b_end = b_start
                            while s < other_first + other_count:
                                b_end = sentence_starts[s + 1]
                                if b_end - b_start >= target_b_length:
                                    break
                                s += 1
                            i -= chunk_sentences - a_sentences
                        else:
                            b_start, b_end = a_end, chunk_end
                    # truncate_seq_pair
                    while (a_end - a_start) + (b_end - b_start) > max_num_tokens:
                        if (a_end - a_start) > (b_end - b_start):
                            if random_float(state) < 0.5:
                                a_start += 1
                            else:
                                a_end -= 1
                        else:
                            if random_float(state) < 0.5:
                                b_start += 1
                            else:
                                b_end -= 1
                    if n == ids.shape[0]:
                        rows = 2 * n
                        ids, lengths, first_lengths = (_grow(ids, rows), _grow(lengths, rows),
                                                       _grow(first_lengths, rows))
                        random_next, positions = _grow(random_next, rows), _grow(positions, rows)
                        labels, counts = _grow(labels, rows), _grow(counts, rows)
                        kinds = _grow(kinds, rows, -1)
                    row = ids[n]
                    la = a_end - a_start
                    row[0] = cls_id
                    for k in range(la):  # explicit loops: numba's slice copies cost ~us each
                        row[1 + k] = token_ids[a_start + k]
                    row[1 + la] = sep_id
                    length = la + 2
                    if not no_nsp:
                        lb = b_end - b_start
                        for k in range(lb):
                            row[length + k] = token_ids[b_start + k]
                        row[length + lb] = sep_id
                        length += lb + 1
                    lengths[n] = length
                    first_lengths[n] = la + 2
                    random_next[n] = 1 if is_random else 0
                    if mask:
                        counts[n] = _mask(row, length, sep_id, masked_lm_prob,
                                          max_predictions, whole_word, mask_id,
                                          random_word_ids, is_continuation, state,
                                          candidates, group_starts, group_order, chosen,
                                          chosen_kinds, positions[n], labels[n], kinds[n])
                    n += 1
                    chunk_first = -1
                    chunk_length = 0
                i += 1
    final = np.arange(n)
    shuffle(state, final)
    return (ids[final], lengths[final], first_lengths[final], random_next[final],
            positions[final], labels[final], kinds[final], counts[final])


@compiled.njit()
def _packed_pool_instances(token_ids, sentence_starts, document_starts, state, max_seq_length,
                           max_predictions, masked_lm_prob, dupe_factor, whole_word, cls_id,
                           sep_id, mask_id, random_word_ids, is_continuation, capacity, mask):
    """`instances.create_packed_pool_instances` on a pool of ids."""
    width = max_seq_length - 2
    documents = len(document_starts) - 1
    ids = np.zeros((capacity, max_seq_length), dtype=np.int32)
    lengths = np.zeros(capacity, dtype=np.int32)
    positions = np.zeros((capacity, max_predictions), dtype=np.int32)
    labels = np.zeros((capacity, max_predictions), dtype=np.int32)
    kinds = np.full((capacity, max_predictions), -1, dtype=np.int8)
    counts = np.zeros(capacity, dtype=np.int32)
    candidates, group_starts, group_order, chosen, chosen_kinds = _mask_scratch(max_seq_length)

    order = np.arange(documents)
    n = 0
    for _ in range(dupe_factor):
        shuffle(state, order)
        filled = 0  # tokens in row n so far, [CLS] not counted
        for position in range(documents):
            first = sentence_starts[document_starts[order[position]]]
            last = sentence_starts[document_starts[order[position] + 1]]
            if filled:  # row n is open: a [SEP] between the documents, or the row ends
                if filled < width - 1:
                    ids[n, 1 + filled] = sep_id
                    filled += 1
                else:
                    n = _end_row(ids, lengths, counts, positions, labels, kinds, n, filled,
                                 cls_id, sep_id, masked_lm_prob, max_predictions, whole_word,
                                 mask_id, random_word_ids, is_continuation, state, candidates,
                                 group_starts, group_order, chosen, chosen_kinds, mask)
                    filled = 0
            for t in range(first, last):
                if n == ids.shape[0]:  # row n is about to open: room for it
                    rows = 2 * n
                    ids, lengths, positions = _grow(ids, rows), _grow(lengths, rows), _grow(
                        positions, rows)
                    labels, counts = _grow(labels, rows), _grow(counts, rows)
                    kinds = _grow(kinds, rows, -1)
                ids[n, 1 + filled] = token_ids[t]
                filled += 1
                if filled == width:
                    n = _end_row(ids, lengths, counts, positions, labels, kinds, n, filled,
                                 cls_id, sep_id, masked_lm_prob, max_predictions, whole_word,
                                 mask_id, random_word_ids, is_continuation, state, candidates,
                                 group_starts, group_order, chosen, chosen_kinds, mask)
                    filled = 0
        if filled:
            n = _end_row(ids, lengths, counts, positions, labels, kinds, n, filled, cls_id,
                         sep_id, masked_lm_prob, max_predictions, whole_word, mask_id,
                         random_word_ids, is_continuation, state, candidates, group_starts,
                         group_order, chosen, chosen_kinds, mask)
    final = np.arange(n)
    shuffle(state, final)
    lengths = lengths[final]
    return (ids[final], lengths, lengths.copy(), np.zeros(n, dtype=np.int8), positions[final],
            labels[final], kinds[final], counts[final])


@compiled.njit()
def _end_row(ids, lengths, counts, positions, labels, kinds, n, filled, cls_id, sep_id,
             masked_lm_prob, max_predictions, whole_word, mask_id, random_word_ids,
             is_continuation, state, candidates, group_starts, group_order, chosen,
             chosen_kinds, mask):
    """Closes row `n` of `filled` tokens (`[CLS]` before, `[SEP]` after), masks it; returns n + 1."""
    row = ids[n]
    row[0] = cls_id
    row[1 + filled] = sep_id
    lengths[n] = filled + 2
    if mask:
        counts[n] = _mask(row, filled + 2, sep_id, masked_lm_prob, max_predictions, whole_word,
                          mask_id, random_word_ids, is_continuation, state, candidates,
                          group_starts, group_order, chosen, chosen_kinds, positions[n],
                          labels[n], kinds[n])
    return n + 1


@compiled.njit()
def _mask(row, length, sep_id, masked_lm_prob, max_predictions, whole_word, mask_id,
          random_word_ids, is_continuation, state, candidates, group_starts, group_order,
          chosen, chosen_kinds, out_positions, out_labels, out_kinds):
    """`masking.mask_tokens` on `row[:length]` in place; returns the number of predictions."""
    groups = 0
    count = 0
    for index in range(1, length - 1):  # [CLS] and the last [SEP] are never candidates
        if row[index] == sep_id:  # nor any other [SEP] (text never tokenizes to one)
            continue
        if whole_word and groups > 0 and is_continuation[row[index]]:
            candidates[count] = index
            count += 1
            continue
        group_starts[groups] = count
        candidates[count] = index
        count += 1
        groups += 1
    group_starts[groups] = count
    for g in range(groups):
        group_order[g] = g
    shuffle(state, group_order[:groups])
    budget = min(max_predictions, max(1, python_round(length * masked_lm_prob)))
    picked = 0
    for g in range(groups):
        if picked >= budget:
            break
        group = group_order[g]
        size = group_starts[group + 1] - group_starts[group]
        if picked + size > budget:
            continue
        for c in range(group_starts[group], group_starts[group + 1]):
            index = candidates[c]
            chosen[picked] = index
            out_labels[picked] = row[index]
            if random_float(state) < 0.8:
                row[index] = mask_id
                chosen_kinds[picked] = KIND_MASK
            elif random_float(state) < 0.5:
                chosen_kinds[picked] = KIND_UNCHANGED
            else:
                row[index] = random_word_ids[randbelow(state, len(random_word_ids))]
                chosen_kinds[picked] = KIND_RANDOM
            picked += 1
    # sort the predictions by position (original labels were taken before the row changed)
    by_position = np.argsort(chosen[:picked])
    labels = out_labels[:picked].copy()
    for k in range(picked):
        out_positions[k] = chosen[by_position[k]]
        out_labels[k] = labels[by_position[k]]
        out_kinds[k] = chosen_kinds[by_position[k]]
    return picked
