"""The instance algorithm on synthetic documents: layout, pairing, truncation, masking."""
import collections
import random

import pytest

from bert_tf2.data_gen.pretraining import masking
from bert_tf2.data_gen.pretraining.instances import (
    DrawCounts,
    InstanceSettings,
    create_pool_instances,
    packed_rows,
    truncate_seq_pair,
)

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"v{i}" for i in range(300)]


def synthetic_documents(rng: random.Random, count: int = 40) -> list:
    """Documents of sentences whose tokens name their origin: d{doc}.s{sentence}.t{token}."""
    return [[[f"d{d}.s{s}.t{t}" for t in range(rng.randint(1, 40))]
             for s in range(rng.randint(1, 30))] for d in range(count)]


def origin(token: str) -> tuple:
    doc, sentence, _ = token.split(".")
    return int(doc[1:]), int(sentence[1:])


def unmasked(instance) -> list:
    tokens = list(instance.tokens)
    for position, label in zip(instance.masked_lm_positions, instance.masked_lm_labels):
        tokens[position] = label
    return tokens


@pytest.fixture(scope="module")
def instances_and_draws():
    settings = InstanceSettings(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=3)
    draws = DrawCounts()
    instances = create_pool_instances(synthetic_documents(random.Random(1)), settings, VOCAB,
                                      random.Random(12345), draws)
    return settings, instances, draws


def test_layout_is_cls_a_sep_b_sep_with_segment_ids(instances_and_draws):
    settings, instances, _ = instances_and_draws
    assert len(instances) > 500
    for instance in instances:
        tokens = unmasked(instance)
        first_sep = tokens.index("[SEP]")
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and tokens.count("[SEP]") == 2
        assert 1 < first_sep < len(tokens) - 2  # A and B have a token each at least
        assert instance.segment_ids == [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)
        assert len(tokens) <= settings.max_seq_length


def test_actual_next_continues_the_document_and_random_next_does_not(instances_and_draws):
    _, instances, draws = instances_and_draws
    labels = collections.Counter()
    for instance in instances:
        tokens = unmasked(instance)
        first_sep = tokens.index("[SEP]")
        a = [origin(t) for t in tokens[1:first_sep]]
        b = [origin(t) for t in tokens[first_sep + 1:-1]]
        labels[instance.is_random_next] += 1
        if instance.is_random_next:
            assert b[0][0] != a[0][0]  # with 40 documents, 10 draws never all hit the same one
        else:
            assert {doc for doc, _ in a + b} == {a[0][0]}
            assert max(s for _, s in a) < min(s for _, s in b)  # B follows A
    assert draws.random_next_same_document == 0
    # Forced random B (one-sentence chunks) aside, the coin is fair.
    flips = len(instances) - draws.one_sentence_chunks
    assert abs((labels[True] - draws.one_sentence_chunks) / flips - 0.5) < 0.04


def test_masking_follows_the_num_to_predict_rule(instances_and_draws):
    settings, instances, _ = instances_and_draws
    for instance in instances:
        expected = min(settings.max_predictions_per_seq, max(1, round(len(instance.tokens) * 0.15)))
        assert len(instance.masked_lm_positions) == expected
        assert instance.masked_lm_positions == sorted(set(instance.masked_lm_positions))
        for position, label, kind in zip(instance.masked_lm_positions,
                                         instance.masked_lm_labels, instance.mask_kinds):
            assert label not in ("[CLS]", "[SEP]")
            now = instance.tokens[position]
            assert {masking.MASK: now == "[MASK]", masking.UNCHANGED: now == label,
                    masking.RANDOM: now in VOCAB}[kind]


@pytest.mark.parametrize("num_tokens, expected", [
    (3, 1), (5, 1), (10, 2), (30, 4), (50, 8), (70, 10), (128, 19), (200, 20)])
def test_num_to_predict_uses_python3_round_and_the_cap(num_tokens, expected):
    # 30 * 0.15 and 70 * 0.15 round half to even (4, 10); Python 2's round gave 5 and 11.
    assert masking.num_to_predict(num_tokens, 0.15, 20) == expected


def test_whole_word_groups_join_pieces_even_across_sep():
    tokens = ["[CLS]", "un", "##want", "##ed", "[SEP]", "##x", "run", "[SEP]"]
    assert masking.candidate_groups(tokens, whole_word=True) == [[1, 2, 3, 5], [6]]
    assert masking.candidate_groups(tokens, whole_word=False) == [[1], [2], [3], [5], [6]]


def test_whole_word_masking_skips_a_word_that_would_overflow():
    tokens = ["[CLS]"] + ["lo", "##ng", "##er"] * 3 + ["[SEP]"]  # 11 tokens: budget 2
    for seed in range(50):
        masked = masking.mask_tokens(tokens, 0.15, 20, VOCAB, random.Random(seed), whole_word=True)
        assert masked.positions == []  # every group has 3 pieces > budget 2


def test_truncation_trims_the_longer_side_from_either_end():
    class Coin:  # rng.random() values in turn
        def __init__(self, *values):
            self.values = list(values)

        def random(self):
            return self.values.pop(0)

    a, b = list("abcdef"), list("xyz")
    truncate_seq_pair(a, b, 6, Coin(0.1, 0.9, 0.1))  # A is longer: its front, back, front
    assert (a, b) == (list("cde"), list("xyz"))
    a, b = list("abcd"), list("wxyz")
    truncate_seq_pair(a, b, 6, Coin(0.9, 0.1))  # a tie trims B: its back, then A's front
    assert (a, b) == (list("bcd"), list("wxy"))


def test_no_nsp_makes_one_segment_with_label_0():
    settings = InstanceSettings(max_seq_length=32, dupe_factor=2, no_nsp=True)
    instances = create_pool_instances(synthetic_documents(random.Random(2), 5), settings, VOCAB,
                                      random.Random(1))
    assert instances
    for instance in instances:
        tokens = unmasked(instance)
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and tokens.count("[SEP]") == 1
        assert set(instance.segment_ids) == {0} and not instance.is_random_next
        assert len({doc for doc, _ in map(origin, tokens[1:-1])}) == 1
        assert len(tokens) <= 32


@pytest.mark.parametrize("width, rows", [
    (4, [["a", "b", "c"], ["d", "e", "f"]]),  # a [SEP] in the last slot: the row ends short
    (5, [["a", "b", "c", "[SEP]", "d"], ["e", "f"]]),  # a sentence goes on in the next row
    (3, [["a", "b", "c"], ["d", "e", "f"]]),  # a row ends with the document: no [SEP] opens one
    (2, [["a", "b"], ["c"], ["d", "e"], ["f"]]),
])
def test_packed_rows_cut_the_stream_with_a_sep_between_documents(width, rows):
    assert packed_rows([[["a", "b"], ["c"]], [["d", "e", "f"]]], width) == rows


def test_packed_sentences_fill_rows_with_every_token_once_per_pass():
    documents = synthetic_documents(random.Random(3), 12)
    settings = InstanceSettings(max_seq_length=48, max_predictions_per_seq=20, dupe_factor=3,
                                masked_lm_prob=0.3, no_nsp=True, pack_sentences=True)
    instances = create_pool_instances(documents, settings, VOCAB, random.Random(7))
    seen = collections.Counter()
    short = 0
    for instance in instances:
        tokens = unmasked(instance)
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "[SEP]" not in tokens[:2]
        assert set(instance.segment_ids) == {0} and not instance.is_random_next
        short += len(tokens) < 48
        body = tokens[1:-1]
        for before, after in zip(body, body[1:]):  # in order within a document; [SEP] between
            if "[SEP]" in (before, after):
                assert before != after
                continue
            assert origin(before)[0] == origin(after)[0] and origin(before) <= origin(after)
        for left, sep, right in zip(body, body[1:], body[2:]):
            if sep == "[SEP]":
                assert origin(left)[0] != origin(right)[0]
        seen.update(token for token in body if token != "[SEP]")
        assert "[SEP]" not in [tokens[p] for p in instance.masked_lm_positions]
        assert len(instance.masked_lm_positions) == min(20, round(len(tokens) * 0.3))
    every = [token for document in documents for sentence in document for token in sentence]
    assert seen == collections.Counter(every * 3)
    assert short <= 3 + len(documents) * 3  # a pass's last row, and a [SEP] in a last slot
    assert len(instances) > 3 * len(every) / 46


@pytest.mark.parametrize("change, message", [
    (dict(max_seq_length=4), r"--max_seq_length=4 is too small: \[CLS\] A \[SEP\] B \[SEP\]"),
    (dict(max_seq_length=3, no_nsp=True), r"--max_seq_length=3 is too small: \[CLS\] A \[SEP\]"),
    (dict(max_predictions_per_seq=0), "--max_predictions_per_seq=0"),
    (dict(masked_lm_prob=0.0), "--masked_lm_prob=0.0"),
    (dict(short_seq_prob=1.5), "--short_seq_prob=1.5"),
    (dict(dupe_factor=0), "--dupe_factor=0"),
])
def test_settings_that_cannot_work_name_their_flag(change, message):
    with pytest.raises(ValueError, match=message):
        InstanceSettings(**change).check()
    assert InstanceSettings(max_seq_length=5).check()  # the smallest that works
