"""conlleval's entity-level scores (`tasks.ner.metrics`) on cases counted by hand, a random check
against an independent span reading of IOB tags, and the real CoNLL-2003 dev set."""
import random

import pytest

from bert_tf2.tasks.ner import metrics as conlleval
from bert_tf2.tasks.ner.metrics import Chunk, chunks, evaluate, report


def counts(scores):
    return scores.tokens, scores.correct_tags, scores.gold, scores.guessed, scores.correct


# ------------------------------------------------------------------------- chunk boundaries


def test_split_tag_at_the_first_dash():
    assert conlleval.split_tag("B-PER") == ("B", "PER")
    assert conlleval.split_tag("I-I-X") == ("I", "I-X")   # types may hold hyphens
    assert conlleval.split_tag("O") == ("O", "")
    assert conlleval.split_tag("PER") == ("PER", "")
    assert conlleval.split_tag("B-0") == ("B", "")        # Perl: "0" is false -> ""


def test_chunks_in_iob2_and_iob1():
    assert chunks(["B-PER", "I-PER", "O", "B-LOC"]) == [Chunk("PER", 0, 2), Chunk("LOC", 3, 4)]
    # I- after O, at the sentence start or after another type starts a chunk (IOB1).
    assert chunks(["I-PER", "I-PER", "O", "I-LOC"]) == [Chunk("PER", 0, 2), Chunk("LOC", 3, 4)]
    assert chunks(["I-ORG", "I-PER"]) == [Chunk("ORG", 0, 1), Chunk("PER", 1, 2)]
    # Adjacent entities of one type: B-PER B-PER (IOB2) and I-PER B-PER (IOB1) are two each;
    # B-PER I-PER is one.
    assert chunks(["B-PER", "B-PER"]) == [Chunk("PER", 0, 1), Chunk("PER", 1, 2)]
    assert chunks(["I-PER", "B-PER"]) == [Chunk("PER", 0, 1), Chunk("PER", 1, 2)]
    assert chunks(["B-PER", "I-PER"]) == [Chunk("PER", 0, 2)]
    assert chunks(["O", "O"]) == [] and chunks([]) == []


def test_chunks_with_conllevals_other_markers():
    # E: (O,E) and (E,E) start a chunk, (E,E) ends one; B-X E-X is one chunk.
    assert chunks(["B-NP", "E-NP", "E-NP"]) == [Chunk("NP", 0, 2), Chunk("NP", 2, 3)]
    # S has no rule of its own in conlleval (only the type-change rule): S-PER S-PER is ONE
    # chunk, S-PER S-LOC two.
    assert chunks(["S-PER", "S-PER"]) == [Chunk("PER", 0, 2)]
    assert chunks(["S-PER", "S-LOC"]) == [Chunk("PER", 0, 1), Chunk("LOC", 1, 2)]
    # '[' and ']' chunks are one token long.
    assert chunks(["[-NP", "]-NP"]) == [Chunk("NP", 0, 1), Chunk("NP", 1, 2)]
    # '.' starts nothing (it is exempt from the type rule) but a B chunk ends before it.
    assert chunks(["B-X", ".-Y", "O"]) == [Chunk("X", 0, 1)]


# ------------------------------------------------------------------ scores counted by hand


def test_boundary_error():
    # gold B-PER I-PER O: one PER (tokens 0-1). guess B-PER O O: one PER (token 0 only).
    # Same start and type, different end -> 0 correct. Tags equal at tokens 0 and 2: 2 of 3.
    scores = evaluate([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])
    assert counts(scores) == (3, 2, 1, 1, 0)
    assert (scores.precision, scores.recall, scores.f1) == (0.0, 0.0, 0.0)
    assert scores.accuracy == pytest.approx(2 / 3)
    assert scores.per_type["PER"] == conlleval.TypeScores(1, 1, 0, 0.0, 0.0, 0.0)


def test_type_error():
    # gold: PER(0-1), LOC(3); guess: ORG(0-1), LOC(3). Only LOC matches: 1 of 2 each way.
    # Tags equal at tokens 2 (O) and 3 (B-LOC): accuracy 2/4.
    scores = evaluate([["B-PER", "I-PER", "O", "B-LOC"]], [["B-ORG", "I-ORG", "O", "B-LOC"]])
    assert counts(scores) == (4, 2, 2, 2, 1)
    assert (scores.precision, scores.recall, scores.f1, scores.accuracy) == (0.5, 0.5, 0.5, 0.5)
    assert scores.per_type["LOC"] == conlleval.TypeScores(1, 1, 1, 1.0, 1.0, 1.0)
    assert scores.per_type["PER"] == conlleval.TypeScores(1, 0, 0, 0.0, 0.0, 0.0)
    assert scores.per_type["ORG"] == conlleval.TypeScores(0, 1, 0, 0.0, 0.0, 0.0)
    assert list(scores.per_type) == ["LOC", "ORG", "PER"]


def test_an_i_tag_without_b_starts_an_entity():
    # gold O I-PER I-PER O (IOB1), guess O B-PER I-PER O (IOB2): both one PER over tokens 1-2,
    # so it is correct; only token 1's tag differs (I-PER vs B-PER): accuracy 3/4.
    scores = evaluate([["O", "I-PER", "I-PER", "O"]], [["O", "B-PER", "I-PER", "O"]])
    assert counts(scores) == (4, 3, 1, 1, 1)
    assert (scores.precision, scores.recall, scores.f1) == (1.0, 1.0, 1.0)
    # An I- of another type right after a chunk starts a new one (type change): gold has
    # ORG(0) and PER(1); the guess I-ORG I-ORG is one ORG(0-1) -> ends differ, 0 correct.
    scores = evaluate([["I-ORG", "I-PER"]], [["I-ORG", "I-ORG"]])
    assert counts(scores) == (2, 1, 2, 1, 0)


GOLD_IOB2 = [["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "O", "B-ORG", "I-ORG"],
             ["B-MISC", "O", "B-PER"]]
GUESS_IOB2 = [["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O", "B-ORG", "O"],
              ["B-MISC", "O", "B-LOC"]]
GOLD_IOB1 = [["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "O", "I-ORG", "I-ORG"],
             ["I-MISC", "O", "I-PER"]]
GUESS_IOB1 = [["I-PER", "I-PER", "O", "I-LOC", "I-LOC", "O", "I-ORG", "O"],
              ["I-MISC", "O", "I-LOC"]]


def test_iob1_and_iob2_encodings_score_the_same():
    # Gold: PER(0-1) LOC(3) LOC(4) ORG(6-7) | MISC(0) PER(2)      -> 6 phrases
    # Guess: PER(0-1) LOC(3-4) ORG(6) | MISC(0) LOC(2)           -> 5 phrases
    # Correct: PER(0-1) and MISC(0)                              -> 2
    # P = 2/5, R = 2/6, F = 2PR/(P+R) = (4/15)/(11/15) = 4/11.
    # Tags differ at s1 tokens 4 and 7 and s2 token 2: 8 of 11 equal (in either encoding).
    expected = None
    for gold, guess in ((GOLD_IOB2, GUESS_IOB2), (GOLD_IOB1, GUESS_IOB1)):
        scores = evaluate(gold, guess)
        assert counts(scores) == (11, 8, 6, 5, 2)
        assert scores.precision == pytest.approx(0.4) and scores.recall == pytest.approx(1 / 3)
        assert scores.f1 == pytest.approx(4 / 11) and scores.accuracy == pytest.approx(8 / 11)
        assert expected is None or scores.per_type == expected
        expected = scores.per_type
    assert expected["PER"] == conlleval.TypeScores(2, 1, 1, 1.0, 0.5, pytest.approx(2 / 3))
    assert expected["LOC"] == conlleval.TypeScores(2, 2, 0, 0.0, 0.0, 0.0)
    # Mixed: IOB2 gold against an IOB1 guess finds the same phrases; only the tags differ more
    # (the guess's I-PER/I-LOC/I-ORG/I-MISC starts: s1 tokens 0, 3, 4, 6, 7; s2 tokens 0, 2).
    scores = evaluate(GOLD_IOB2, GUESS_IOB1)
    assert counts(scores)[2:] == (6, 5, 2) and scores.f1 == pytest.approx(4 / 11)
    assert scores.correct_tags == 11 - 7


def test_adjacent_entities_of_one_type():
    # IOB2 gold B-PER B-PER (two PER) vs the IOB1 guess I-PER B-PER (also two): both correct;
    # only token 0's tag differs.
    scores = evaluate([["B-PER", "B-PER"]], [["I-PER", "B-PER"]])
    assert counts(scores) == (2, 1, 2, 2, 2) and scores.f1 == 1.0
    # Merged into one (B-PER I-PER): one guessed phrase, matching neither gold phrase.
    scores = evaluate([["B-PER", "B-PER"]], [["B-PER", "I-PER"]])
    assert counts(scores) == (2, 1, 2, 1, 0) and scores.f1 == 0.0


def test_no_chunk_crosses_a_sentence_boundary():
    # s1 ends with PER, s2 starts with I-PER: the sentence break ends the first, so the I-PER
    # starts a second one. Gold: PER(s1:1), PER(s2:0); guess the same in IOB2: 2 correct;
    # tags equal but at s2 token 0 (I-PER vs B-PER): 3 of 4.
    gold = [["O", "B-PER"], ["I-PER", "O"]]
    guess = [["O", "B-PER"], ["B-PER", "O"]]
    scores = evaluate(gold, guess)
    assert counts(scores) == (4, 3, 2, 2, 2) and scores.f1 == 1.0
    # As one sentence, the gold tags are one PER over tokens 1-2 (0 correct out of 2 guessed).
    scores = evaluate([sum(gold, [])], [sum(guess, [])])
    assert counts(scores) == (4, 3, 1, 2, 0)
    # A correct chunk open at a sentence end is counted there, not merged with the next one.
    scores = evaluate([["B-LOC"], ["I-LOC"]], [["B-LOC"], ["B-LOC"]])
    assert counts(scores)[2:] == (2, 2, 2)


def test_report_layout():
    scores = evaluate(GOLD_IOB2, GUESS_IOB2)
    # precision 2/5 = 40.00%, recall 2/6 = 33.33%, FB1 36.36, accuracy 8/11 = 72.73%;
    # per type (sorted), the last number is the guessed phrases of the type.
    assert report(scores) == (
        "processed 11 tokens with 6 phrases; found: 5 phrases; correct: 2.\n"
        "accuracy:  72.73%; precision:  40.00%; recall:  33.33%; FB1:  36.36\n"
        "              LOC: precision:   0.00%; recall:   0.00%; FB1:   0.00  2\n"
        "             MISC: precision: 100.00%; recall: 100.00%; FB1: 100.00  1\n"
        "              ORG: precision:   0.00%; recall:   0.00%; FB1:   0.00  1\n"
        "              PER: precision: 100.00%; recall:  50.00%; FB1:  66.67  1\n")


def test_report_without_tokens_and_types():
    assert report(evaluate([], [])) == (
        "processed 0 tokens with 0 phrases; found: 0 phrases; correct: 0.\n")
    scores = evaluate([["O"]], [["O"]])
    assert report(scores) == (
        "processed 1 tokens with 0 phrases; found: 0 phrases; correct: 0.\n"
        "accuracy: 100.00%; precision:   0.00%; recall:   0.00%; FB1:   0.00\n")


def test_an_untyped_chunk_is_reported_twice_as_conlleval_does():
    # A bare "B" starts a chunk of type "": conlleval's de-duplication of the sorted type names
    # keeps a repeat after a false name (""), so that line is printed twice.
    scores = evaluate([["B"]], [["B"]])
    assert counts(scores) == (1, 1, 1, 1, 1) and scores.report_types == ("", "")
    assert report(scores).count("                 : precision: 100.00%") == 2


def test_mismatched_inputs():
    with pytest.raises(ValueError, match="2 gold sentences but 1 predicted"):
        evaluate([["O"], ["O"]], [["O"]])
    with pytest.raises(ValueError, match="sentence 1: 2 gold tags but 1 predicted"):
        evaluate([["O"], ["O", "O"]], [["O"], ["O"]])


# ------------------------------------------------ random tags vs an independent span reading


def spans(tags):
    """Entities of B/I/O tags read the textbook way: B-X starts one; I-X starts one unless the
    previous tag is of type X; an entity continues over I-X of its type."""
    found, current = set(), None
    for i, tag in enumerate([*tags, "O"]):
        kind, _, entity = tag.partition("-")
        continues = current is not None and kind == "I" and entity == current[0]
        if current is not None and not continues:
            found.add((current[0], current[1], i))
            current = None
        if kind in ("B", "I") and not continues:
            current = (entity, i)
    return found


def test_random_iob_tags_match_exact_span_matching():
    rng = random.Random(7)
    tagset = ["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG"]
    for _ in range(300):
        lengths = [rng.randint(0, 9) for _ in range(rng.randint(1, 5))]
        gold = [[rng.choice(tagset) for _ in range(n)] for n in lengths]
        guess = [[rng.choice(tagset) for _ in range(n)] for n in lengths]
        scores = evaluate(gold, guess)
        gold_spans = [spans(s) for s in gold]
        guess_spans = [spans(s) for s in guess]
        assert scores.gold == sum(map(len, gold_spans))
        assert scores.guessed == sum(map(len, guess_spans))
        assert scores.correct == sum(len(a & b) for a, b in zip(gold_spans, guess_spans))
        assert [set((c.chunk_type, c.start, c.end) for c in chunks(s)) for s in gold] \
            == gold_spans
        assert scores.correct_tags == sum(a == b for g, p in zip(gold, guess)
                                          for a, b in zip(g, p))


# ---------------------------------------------------------------------------- real data


def iob2_to_iob1(tags):
    """B-X stays only right after a tag of type X (adjacent entities); other B-X become I-X."""
    out = []
    for i, tag in enumerate(tags):
        if tag.startswith("B-") and not (i and tags[i - 1][2:] == tag[2:]):
            tag = "I-" + tag[2:]
        out.append(tag)
    return out


def test_real_dev_set(shared_data):
    from bert_tf2.tasks.ner.reader import read_conll

    gold = [s.labels for s in read_conll(str(shared_data / "conll2003" / "valid.txt"))]
    scores = evaluate(gold, gold)
    assert counts(scores) == (51362, 51362, 5942, 5942, 5942)
    assert (scores.precision, scores.recall, scores.f1, scores.accuracy) == (1, 1, 1, 1)
    assert {t: s.gold for t, s in scores.per_type.items()} == {
        "LOC": 1837, "MISC": 922, "ORG": 1341, "PER": 1842}
    # The same entities written in IOB1: every phrase still matches; the tags differ wherever
    # an entity's B- became I- (all but those right after an entity of their type).
    iob1 = [iob2_to_iob1(tags) for tags in gold]
    changed = sum(a != b for g, p in zip(gold, iob1) for a, b in zip(g, p))
    adjacent = sum(1 for tags in gold for i, tag in enumerate(tags)
                   if tag.startswith("B-") and i and tags[i - 1][2:] == tag[2:])
    assert changed == 5942 - adjacent
    scores = evaluate(gold, iob1)
    assert counts(scores) == (51362, 51362 - changed, 5942, 5942, 5942) and scores.f1 == 1.0
