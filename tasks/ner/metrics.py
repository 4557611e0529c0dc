"""Entity-level NER scores exactly as the CoNLL `conlleval` script computes them, in pure Python.

Why: CoNLL-2003 results are quoted as conlleval's numbers (SPEC.md section 8), and small-looking
differences in how a scorer decides where a chunk starts and ends (an `I-` tag after `O`, two
adjacent entities of one type, a chunk running into the next sentence) move F1 by tenths of a
point. This module reimplements conlleval's algorithm, state machine included, rather than a
"set of gold spans vs set of predicted spans" shortcut that disagrees with it on malformed tags.

The algorithm (conlleval version 2004-01-26, default options):
- a tag is split at its FIRST '-' into a prefix and a type ("B-I-X" -> "B", "I-X"; "O" -> "O",
  ""); a tag without '-' is all prefix with type "" (and, as Perl truthiness has it, a type "0"
  counts as "");
- `chunk_starts(prev, cur)` / `chunk_ends(prev, cur)` decide from the previous and current prefix
  and type whether a chunk starts at / ended before the current token. B, I, O, E, '[' and ']'
  have rules of their own; any other prefix (S included: the original has no IOBES rules) and
  '.' only through "the type changed" (which '.' and O are exempt from);
- a gold chunk and a guessed chunk count as correct when both start at the same token with the
  same type and both end before the same token, with the types of their last tokens equal;
- token accuracy counts tokens whose gold and guessed (prefix, type) are equal.
Both IOB1 (I- starts an entity after O or another type; B- only between two adjacent entities of
one type) and IOB2 (every entity starts with B-) are scored as conlleval does, with no conversion:
the same entities written either way give the same counts.

Sentences: conlleval reads one stream in which a blank line is a boundary token tagged O/O that
is not counted as a token. `evaluate` feeds such a boundary after every sentence, so a chunk
never continues into the next sentence. (A `-DOCSTART-` line in a file given to conlleval is an
ordinary O/O token and is counted: `evaluate` never sees one, so its token count can be lower
than conlleval's on a file that kept them; chunk counts and scores are the same.)

Scores here are fractions in [0, 1]; `report` prints them as conlleval does (percentages with two
decimals, computed from the counts by conlleval's own formulas).
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence


@dataclasses.dataclass(frozen=True)
class TypeScores:
    """One chunk type's counts and scores (fractions; 0 where undefined, as conlleval)."""
    gold: int        # chunks of this type in the gold tags (conlleval's foundCorrect)
    guessed: int     # chunks of this type in the predicted tags (foundGuessed)
    correct: int     # predicted chunks matching a gold chunk exactly (correctChunk)
    precision: float
    recall: float
    f1: float


@dataclasses.dataclass(frozen=True)
class Scores:
    tokens: int          # tokens scored (sentence boundaries excluded)
    correct_tags: int    # tokens whose predicted tag equals the gold tag
    gold: int
    guessed: int
    correct: int
    accuracy: float
    precision: float
    recall: float
    f1: float
    per_type: dict       # chunk type -> TypeScores, in conlleval's (sorted) order
    report_types: tuple  # the types `report` prints, with conlleval's de-duplication quirk


def split_tag(tag: str) -> tuple[str, str]:
    """conlleval's split of a tag into (prefix, type): at the first '-'; no '-': type ''."""
    prefix, dash, chunk_type = tag.partition("-")
    if not dash:
        return tag, ""
    # Perl: `$type = $type ? $type : ""` -- the string "0" is false there, so it becomes "".
    return prefix, "" if chunk_type == "0" else chunk_type


def chunk_ends(prev_tag: str, tag: str, prev_type: str, chunk_type: str) -> bool:
    """conlleval's endOfChunk: did a chunk end between the previous token and this one?"""
    if (prev_tag, tag) in _END_PAIRS:
        return True
    if prev_tag not in ("O", ".") and prev_type != chunk_type:
        return True
    return prev_tag in ("[", "]")  # bracket chunks are one token long


def chunk_starts(prev_tag: str, tag: str, prev_type: str, chunk_type: str) -> bool:
    """conlleval's startOfChunk: does a chunk start at this token?"""
    if (prev_tag, tag) in _START_PAIRS:
        return True
    if tag not in ("O", ".") and prev_type != chunk_type:
        return True
    return tag in ("[", "]")


_END_PAIRS = frozenset({("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"),
                        ("E", "E"), ("E", "I"), ("E", "O")})
_START_PAIRS = frozenset({("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"),
                          ("E", "E"), ("E", "I"), ("O", "E")})
_BOUNDARY = ("O", "")  # what a sentence break is tagged with, on both sides


@dataclasses.dataclass(frozen=True)
class Chunk:
    chunk_type: str
    start: int  # first token
    end: int    # one past the last token


def chunks(tags: Sequence[str]) -> list[Chunk]:
    """The chunks conlleval finds in one sentence's tags, in order.

    A chunk opens where `chunk_starts` says so (conlleval counts exactly these starts) and closes
    before the first later token where `chunk_ends` or `chunk_starts` holds, or at the sentence
    end. (Only malformed tags such as a '.' prefix can start a chunk without ending the previous
    one; the previous one is closed there.)
    """
    found = []
    prev_tag, prev_type = _BOUNDARY
    open_at, open_type = None, ""
    for i, tag in enumerate(tags):
        cur_tag, cur_type = split_tag(tag)
        starts = chunk_starts(prev_tag, cur_tag, prev_type, cur_type)
        if open_at is not None and (starts or chunk_ends(prev_tag, cur_tag, prev_type, cur_type)):
            found.append(Chunk(open_type, open_at, i))
            open_at = None
        if starts:
            open_at, open_type = i, cur_type
        prev_tag, prev_type = cur_tag, cur_type
    if open_at is not None:  # the sentence boundary closes what is still open
        found.append(Chunk(open_type, open_at, len(tags)))
    return found


def count_chunks(sequences: Iterable[Sequence[str]]) -> dict[str, int]:
    """Chunks per type over sentences, as conlleval counts them (its 'phrases')."""
    counts: dict[str, int] = {}
    for tags in sequences:
        for chunk in chunks(tags):
            counts[chunk.chunk_type] = counts.get(chunk.chunk_type, 0) + 1
    return counts


class _Counter:
    """conlleval's main loop: fed (gold, guess) tag pairs and sentence boundaries."""

    def __init__(self):
        self.tokens = self.correct_tags = 0
        self.gold: dict[str, int] = {}
        self.guessed: dict[str, int] = {}
        self.correct: dict[str, int] = {}
        self.in_correct = False
        self.last_gold = self.last_guess = _BOUNDARY

    def feed(self, gold: tuple[str, str], guess: tuple[str, str], boundary: bool) -> None:
        (lg_tag, lg_type), (lp_tag, lp_type) = self.last_gold, self.last_guess
        (g_tag, g_type), (p_tag, p_type) = gold, guess
        if self.in_correct:
            gold_ends = chunk_ends(lg_tag, g_tag, lg_type, g_type)
            guess_ends = chunk_ends(lp_tag, p_tag, lp_type, p_type)
            if gold_ends and guess_ends and lp_type == lg_type:
                self.in_correct = False
                self.correct[lg_type] = self.correct.get(lg_type, 0) + 1
            elif gold_ends != guess_ends or p_type != g_type:
                self.in_correct = False
        gold_starts = chunk_starts(lg_tag, g_tag, lg_type, g_type)
        guess_starts = chunk_starts(lp_tag, p_tag, lp_type, p_type)
        if gold_starts and guess_starts and p_type == g_type:
            self.in_correct = True
        if gold_starts:
            self.gold[g_type] = self.gold.get(g_type, 0) + 1
        if guess_starts:
            self.guessed[p_type] = self.guessed.get(p_type, 0) + 1
        if not boundary:
            self.correct_tags += gold == guess
            self.tokens += 1
        self.last_gold, self.last_guess = gold, guess

    def finish(self) -> None:
        if self.in_correct:
            chunk_type = self.last_gold[1]
            self.correct[chunk_type] = self.correct.get(chunk_type, 0) + 1
            self.in_correct = False


def evaluate(gold_sequences: Iterable[Sequence[str]],
             predicted_sequences: Iterable[Sequence[str]]) -> Scores:
    """conlleval's scores of predicted tags against gold tags, one sequence per sentence.

    Raises ValueError when the two differ in the number of sentences or a sentence's length.
    """
    counter = _Counter()
    gold_sequences, predicted_sequences = list(gold_sequences), list(predicted_sequences)
    if len(gold_sequences) != len(predicted_sequences):
        raise ValueError(f"{len(gold_sequences)} gold sentences but "
                         f"{len(predicted_sequences)} predicted ones")
    for index, (gold_tags, predicted_tags) in enumerate(zip(gold_sequences, predicted_sequences)):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(f"sentence {index}: {len(gold_tags)} gold tags but "
                             f"{len(predicted_tags)} predicted ones")
        for gold, guess in zip(gold_tags, predicted_tags):
            counter.feed(split_tag(gold), split_tag(guess), boundary=False)
        counter.feed(_BOUNDARY, _BOUNDARY, boundary=True)
    counter.finish()
    return _scores(counter)


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole > 0 else 0.0


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def _scores(counter: _Counter) -> Scores:
    correct = sum(counter.correct.values())
    gold, guessed = sum(counter.gold.values()), sum(counter.guessed.values())
    per_type = {}
    for chunk_type in sorted(set(counter.gold) | set(counter.guessed)):
        c = counter.correct.get(chunk_type, 0)
        g, p = counter.gold.get(chunk_type, 0), counter.guessed.get(chunk_type, 0)
        precision, recall = _ratio(c, p), _ratio(c, g)
        per_type[chunk_type] = TypeScores(g, p, c, precision, recall, _f1(precision, recall))
    # conlleval merges the two key lists, sorts them and drops a repeat unless the previous name
    # is false in Perl: a type "" present in both is printed twice.
    report_types = []
    last = None
    for chunk_type in sorted([*counter.gold, *counter.guessed]):
        if not last or last != chunk_type:
            report_types.append(chunk_type)
        last = chunk_type
    precision, recall = _ratio(correct, guessed), _ratio(correct, gold)
    return Scores(tokens=counter.tokens, correct_tags=counter.correct_tags, gold=gold,
                  guessed=guessed, correct=correct,
                  accuracy=_ratio(counter.correct_tags, counter.tokens),
                  precision=precision, recall=recall, f1=_f1(precision, recall),
                  per_type=per_type, report_types=tuple(report_types))


def _percentages(correct: int, guessed: int, gold: int) -> tuple[float, float, float]:
    """conlleval's printed precision, recall, FB1: percentages first, F from the percentages."""
    precision = 100 * correct / guessed if guessed > 0 else 0.0
    recall = 100 * correct / gold if gold > 0 else 0.0
    fb1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return precision, recall, fb1


def report(scores: Scores) -> str:
    """The text conlleval prints (without -l), ending with a newline."""
    lines = [f"processed {scores.tokens} tokens with {scores.gold} phrases; "
             f"found: {scores.guessed} phrases; correct: {scores.correct}.\n"]
    if scores.tokens > 0:
        precision, recall, fb1 = _percentages(scores.correct, scores.guessed, scores.gold)
        lines.append("accuracy: %6.2f%%; precision: %6.2f%%; recall: %6.2f%%; FB1: %6.2f\n"
                     % (100 * scores.correct_tags / scores.tokens, precision, recall, fb1))
    for chunk_type in scores.report_types:
        t = scores.per_type[chunk_type]
        precision, recall, fb1 = _percentages(t.correct, t.guessed, t.gold)
        lines.append("%17s: precision: %6.2f%%; recall: %6.2f%%; FB1: %6.2f  %d\n"
                     % (chunk_type, precision, recall, fb1, t.guessed))
    return "".join(lines)
