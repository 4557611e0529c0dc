"""Multiple-choice files -> checked `ChoiceExample`s: SWAG's CSV layout and a generic JSON lines one.

Each example is a context, an optional question and N candidate choices, one of them right. BERT
reads every (context, choice) pair as a sentence pair: the first segment is the context, the second
the question followed by the choice (`pair_texts`), as the paper and the common SWAG runners build
it (SWAG: `sent1`, then `sent2 + " " + ending_i`).

Formats:
- `swag`: the original SWAG CSV (`train.csv`, `val.csv`, `test.csv`): an unnamed index column,
  then `video-id, fold-ind, startphrase, sent1, sent2, gold-source, ending0..ending3, label`;
  `test.csv` has no label. The index column is the example's id.
- `generic`: JSON lines `{"id", "context", "question" (optional), "choices": [...], "label"}`,
  any number of choices (2 or more) per example; `id` defaults to the line number.

Bad input is a `DataError` naming the file and line: an empty file, a row with a missing column or
an empty choice, fewer than 2 choices, a label outside 0..N-1, malformed JSON. Pure Python.
"""
from __future__ import annotations

import dataclasses
import json
import os

from bert_tf2.data_gen import csv_files
from bert_tf2.data_gen.errors import DataError, not_utf8

FORMATS = ("swag", "generic")
SWAG_ENDINGS = tuple(f"ending{i}" for i in range(4))


@dataclasses.dataclass(frozen=True)
class ChoiceExample:
    example_id: str
    context: str
    question: str  # "" when there is none
    choices: tuple
    label: int | None  # None: unlabelled
    line: int  # 1-based line of the file where the example starts
    path: str

    def pair_texts(self) -> list:
        """The second segment of each pair: the question and the choice, or the choice alone."""
        return [f"{self.question} {choice}" if self.question else choice
                for choice in self.choices]


def read_examples(path: str, input_format: str, labelled: bool = True) -> list:
    """Every example of a file in `input_format` (`swag` or `generic`), in file order."""
    if input_format not in FORMATS:
        raise ValueError(f"unknown multiple-choice format {input_format!r}; one of "
                         f"{', '.join(FORMATS)}")
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    try:
        examples = (read_swag if input_format == "swag" else read_jsonl)(path, labelled)
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    if not examples:
        raise DataError(f"{path}: empty file (no examples)")
    return examples


def has_labels(path: str, input_format: str) -> bool:
    """Whether a file carries labels: SWAG's header names `label`; a JSON line has `label`."""
    with open(path, encoding="utf-8-sig", newline="", errors="replace") as f:
        if input_format == "swag":
            return "label" in next(csv_files.reader(f), [])
        for line in f:
            if line.strip():
                try:
                    return "label" in json.loads(line)
                except ValueError:
                    return True  # reading it will name the fault
    return False


def read_swag(path: str, labelled: bool = True) -> list:
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv_files.reader(f)
        header = next(reader, None)
        if header is None:
            return []
        required = ["sent1", "sent2", *SWAG_ENDINGS] + (["label"] if labelled else [])
        missing = [name for name in required if name not in header]
        if missing:
            raise DataError(f"{path}:1: no column {', '.join(missing)} in the header (SWAG's "
                            f"layout: an index column, video-id, fold-ind, startphrase, sent1, "
                            f"sent2, gold-source, ending0..ending3, label)")
        column = {name: header.index(name) for name in header}
        examples, line = [], reader.line_num + 1
        for row in reader:
            if row:
                if len(row) != len(header):
                    raise DataError(f"{path}:{line}: {len(row)} fields, the header has "
                                    f"{len(header)}")
                choices = tuple(row[column[name]] for name in SWAG_ENDINGS)
                examples.append(_example(path, line, row[0], row[column["sent1"]],
                                         row[column["sent2"]], choices,
                                         row[column["label"]] if labelled else None))
            line = reader.line_num + 1
    return examples


def read_jsonl(path: str, labelled: bool = True) -> list:
    examples = []
    with open(path, encoding="utf-8-sig") as f:
        for number, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                value = json.loads(text)
            except ValueError as e:
                raise DataError(f"{path}:{number}: not a JSON object ({e})") from None
            if not isinstance(value, dict):
                raise DataError(f"{path}:{number}: not a JSON object")
            context, question = value.get("context"), value.get("question") or ""
            choices = value.get("choices")
            if not isinstance(context, str) or not isinstance(question, str):
                raise DataError(f"{path}:{number}: 'context' (and 'question', if given) must "
                                f"be strings")
            if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
                raise DataError(f"{path}:{number}: 'choices' must be a list of strings")
            if labelled and "label" not in value:
                raise DataError(f"{path}:{number}: no 'label'")
            examples.append(_example(path, number, str(value.get("id", number - 1)), context,
                                     question, tuple(choices),
                                     value.get("label") if labelled else None))
    return examples


def _example(path, line, example_id, context, question, choices, label) -> ChoiceExample:
    if len(choices) < 2:
        raise DataError(f"{path}:{line}: {len(choices)} choice(s); an example needs 2 or more")
    for index, choice in enumerate(choices):
        if not choice.strip():
            raise DataError(f"{path}:{line}: choice {index} is empty (a missing ending?)")
    if label is not None:
        try:
            if isinstance(label, bool) or (isinstance(label, float) and not label.is_integer()):
                raise ValueError
            label = int(label)
        except (TypeError, ValueError):
            raise DataError(f"{path}:{line}: label {label!r} is not a choice number "
                            f"0..{len(choices) - 1}") from None
        if not 0 <= label < len(choices):
            raise DataError(f"{path}:{line}: label {label} is outside 0..{len(choices) - 1}")
    return ChoiceExample(example_id, context, question.strip(), choices, label, line, path)
