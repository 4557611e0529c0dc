"""NER input readers: CoNLL column files and slash-tagged lines -> checked `Sentence`s.

Why: the NER runner needs its sentences, labels and label list validated before any tokenising,
with errors that point at the file and line that caused them (`DataError`, "PATH:LINE: ..."),
instead of a KeyError or a silently misaligned tag deep in feature conversion. Pure Python.

Formats:
- CoNLL column format (`read_conll`): one token per line, columns separated by any whitespace, the
  word in the first column and the tag in `label_column` (default the last one: CoNLL-2003's
  `word POS chunk NER`). Blank lines and `-DOCSTART-` lines separate sentences; a DOCSTART line
  is not a sentence, and is not held to the column count (files differ in how they write it).
- Slash-tagged text (`read_slash_tagged`): one sentence per line, `word/TAG` tokens separated by
  spaces, split at the LAST '/' so that words may contain slashes ("1/2/CD" is "1/2" tagged CD).

Tagging schemes: CoNLL-2003 was released in IOB1, where an entity starts with I- and B- only
marks the second of two adjacent entities of one type; the shared copy in this project is IOB2
(every entity starts with B-). Models are normally trained on IOB2: in IOB1 the B- tags are so
rare (a few hundred in CoNLL-2003) that a tagger barely learns to split adjacent entities, while
IOB2 makes every entity start an explicit decision. `detect_scheme` tells the two apart and
`to_iob2` converts; the scorer (`tasks.ner.metrics`) accepts either without conversion.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Iterable, Sequence

from bert_tf2.data_gen.errors import DataError, not_utf8

DOCSTART = "-DOCSTART-"
OUTSIDE = "O"


@dataclasses.dataclass
class Sentence:
    words: list[str]
    labels: list[str] | None  # None: unlabelled (prediction input)
    line: int                 # 1-based line of the first word in its file
    sentence_id: int          # 0-based number of the sentence in its file
    path: str = ""            # the file it was read from (for error messages)
    word_per_line: bool = True  # True: word i is on line `line + i`; False: all on `line`

    def word_line(self, index: int) -> int:
        """The 1-based line of word `index`."""
        return self.line + index if self.word_per_line else self.line


def _read_lines(path: str) -> list[str]:
    if not os.path.isfile(path):
        raise DataError(f"{path}: missing file")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.split("\n")


def read_conll(path: str, label_column: int = -1, has_labels: bool = True) -> list[Sentence]:
    """Sentences of a CoNLL column file: words from column 0, tags from `label_column`.

    Every token line must have as many columns as the first token line. `label_column` counts
    from the end when negative and may not be the word column. `has_labels=False` reads words
    only (labels None), for prediction input with one column or more.
    """
    path = os.fspath(path)
    sentences: list[Sentence] = []
    words: list[str] = []
    labels: list[str] = []
    first_line = 0
    width = None
    label_index = None

    def close_sentence():
        nonlocal words, labels
        if words:
            sentences.append(Sentence(words, labels if has_labels else None, first_line,
                                      len(sentences), path))
        words, labels = [], []

    for number, line in enumerate(_read_lines(path), start=1):
        columns = line.split()
        if not columns or columns[0] == DOCSTART:
            close_sentence()
            continue
        if width is None:
            width = len(columns)
            label_index = _label_index(path, number, width, label_column, has_labels)
        elif len(columns) != width:
            raise DataError(f"{path}:{number}: {len(columns)} columns, but the file's first "
                            f"token line has {width}")
        if not words:
            first_line = number
        words.append(columns[0])
        if has_labels:
            labels.append(columns[label_index])
    close_sentence()
    if not sentences:
        raise DataError(f"{path}: empty file (no sentences)")
    return sentences


def _label_index(path: str, line: int, width: int, label_column: int, has_labels: bool) -> int:
    if not has_labels:
        return 0
    if not -width <= label_column < width:
        raise DataError(f"{path}:{line}: label column {label_column} is outside the {width} "
                        f"columns of the file")
    index = label_column % width
    if index == 0:
        raise DataError(f"{path}:{line}: label column {label_column} is the word column "
                        f"({width} column{'s' if width > 1 else ''})")
    return index


def read_slash_tagged(path: str) -> list[Sentence]:
    """Sentences of a file with one sentence per line of `word/TAG` tokens (blank lines skipped)."""
    path = os.fspath(path)
    sentences = []
    for number, line in enumerate(_read_lines(path), start=1):
        tokens = line.split()
        if not tokens:
            continue
        words, labels = [], []
        for token in tokens:
            word, slash, tag = token.rpartition("/")
            if not slash:
                raise DataError(f"{path}:{number}: token {token!r} has no '/TAG'")
            if not word or not tag:
                raise DataError(f"{path}:{number}: token {token!r} has an empty "
                                f"{'word' if not word else 'tag'}")
            words.append(word)
            labels.append(tag)
        sentences.append(Sentence(words, labels, number, len(sentences), path,
                                  word_per_line=False))
    if not sentences:
        raise DataError(f"{path}: empty file (no sentences)")
    return sentences


def label_list(sentences: Sequence[Sentence], given: Sequence[str] | None = None) -> list[str]:
    """The label set of a training split: its tags sorted with "O" first, or `given` as is.

    With `given`, every training tag must be in it (DataError naming the file and line).
    """
    if given is not None:
        given = list(given)
        if not given:
            raise DataError("the given label list is empty")
        repeated = sorted({label for label in given if given.count(label) > 1})
        if repeated:
            raise DataError(f"the given label list repeats {', '.join(repeated)}")
        check_labels(sentences, given)
        return given
    found = set()
    for sentence in sentences:
        if sentence.labels is None:
            raise DataError(f"{sentence.path}:{sentence.line}: the sentence has no labels")
        found.update(sentence.labels)
    if not found:
        raise DataError("no labels: there are no labelled sentences")
    return sorted(found, key=lambda label: (label != OUTSIDE, label))


def check_labels(sentences: Iterable[Sentence], labels: Sequence[str],
                 path: str | None = None) -> None:
    """Every tag of labelled `sentences` is one of `labels`, else DataError "PATH:LINE: ..."."""
    known = set(labels)
    for sentence in sentences:
        for index, tag in enumerate(sentence.labels or ()):
            if tag not in known:
                raise DataError(f"{path or sentence.path}:{sentence.word_line(index)}: label "
                                f"{tag!r} is not one of {', '.join(labels)}")


def _as_sequences(tags) -> list[Sequence[str]]:
    """One tag sequence, or an iterable of them (one per sentence)."""
    tags = list(tags)
    return [tags] if tags and isinstance(tags[0], str) else tags


def _split(tag: str) -> tuple[str, str]:
    if tag == OUTSIDE:
        return OUTSIDE, ""
    prefix, dash, entity = tag.partition("-")
    if not dash or prefix not in ("B", "I") or not entity:
        raise ValueError(f"tag {tag!r} is not an IOB tag (O, B-TYPE or I-TYPE)")
    return prefix, entity


def _starts_inside(previous: str, tag: str) -> bool:
    """An I- tag that begins an entity: after O, at a sentence start, or after another type."""
    prefix, entity = _split(tag)
    return prefix == "I" and _split(previous)[1] != entity


def detect_scheme(labels) -> str:
    """"IOB2" if every entity starts with B-, else "IOB1" (some I- begins an entity).

    `labels`: the tags of one sentence, or an iterable of per-sentence tag sequences (a sentence
    start counts as after O). Tags must be O, B-TYPE or I-TYPE (ValueError otherwise); no entity
    at all is "IOB2". IOB1 data whose every entity is a B- between two of one type cannot occur.
    """
    for sequence in _as_sequences(labels):
        previous = OUTSIDE
        for tag in sequence:
            if _starts_inside(previous, tag):
                return "IOB1"
            previous = tag
    return "IOB2"


def to_iob2(tags: Sequence[str]) -> list[str]:
    """One sentence's IOB1 tags in IOB2: an I-X that begins an entity becomes B-X.

    IOB2 input comes back unchanged. (B-X between two adjacent X entities is already IOB2.)
    """
    converted = []
    previous = OUTSIDE
    for tag in tags:
        converted.append("B-" + _split(tag)[1] if _starts_inside(previous, tag) else tag)
        previous = tag
    return converted
