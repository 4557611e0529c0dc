"""Multi-label documents as JSON lines (`--task_name=multilabel`): any number of labels per text.

Why: the original's processors give one label per example; every fork that needs topics or tags
adds a sigmoid head and a reader by hand. This reads the shared Reuters layout, one JSON object
per line of `train.jsonl`, `dev.jsonl` and `test.jsonl` in `--data_dir`:

    {"id": 7, "text": "BAHIA COCOA REVIEW ...", "labels": ["cocoa"]}

- `text` (a string) is required; `text_b` (a string) makes a pair task, decided by the first
  record of the training file (else of the test file);
- `labels`, a list of label names, is required in train and dev and must not be empty (a document
  with no topic needs a label of its own, such as "none"); in test it is ignored;
- `id` (any JSON scalar) names the document in the prediction files; default the line's example
  number;
- the label set is `labels.txt` (one name per line, in the order of the probability columns), or
  without it the sorted set of train's labels; a label outside the set is an error.
Every fault is a `DataError` naming the file and line. Blank lines are skipped.
"""
from __future__ import annotations

import json
import os

from bert_tf2.data_gen.errors import DataError, decode_line
from bert_tf2.tasks.classification.reader import DataProcessor, InputExample

LABELS_FILE = "labels.txt"


class MultiLabelProcessor(DataProcessor):
    """Documents with a set of labels each (examples' `label` is a tuple of names, None in test)."""
    name = "multilabel"
    is_multi_label = True

    def __init__(self):
        self._labels = {}  # data_dir -> its label list
        self._pair = {}    # data_dir -> whether its records carry text_b

    def split_files(self, data_dir: str, split: str) -> list:
        if split not in self._splits():
            raise ValueError(f"task 'multilabel' has no split {split!r}; its splits are "
                             f"{', '.join(self._splits())}")
        return [os.path.join(data_dir, f"{split}.jsonl")]

    def get_labels(self, data_dir: str | None = None) -> list:
        """`labels.txt` of data_dir, else the sorted labels of its train split."""
        if data_dir is None:
            if len(self._labels) != 1:
                raise ValueError("task 'multilabel': the labels come from data_dir; call "
                                 "get_labels(data_dir)")
            return list(next(iter(self._labels.values())))
        key = os.path.abspath(data_dir)
        if key not in self._labels:
            path = os.path.join(data_dir, LABELS_FILE)
            if os.path.isfile(path):
                self._labels[key] = _read_label_file(path)
            else:
                examples = self._read(data_dir, self.train_split(), None)
                self._labels[key] = sorted({name for e in examples for name in e.label})
        return list(self._labels[key])

    def is_pair(self, data_dir: str | None = None) -> bool:
        if data_dir is None:
            return any(self._pair.values())
        key = os.path.abspath(data_dir)
        if key not in self._pair:
            self._pair[key] = _first_record_has_text_b(
                [self.split_files(data_dir, split)[0] for split in ("train", "test")])
        return self._pair[key]

    def _labels_for(self, data_dir: str) -> list:
        return self.get_labels(data_dir)

    def _read(self, data_dir: str, split: str, labels: list | None) -> list:
        (path,) = self.split_files(data_dir, split)
        labelled = split not in self.test_splits()
        pair = self.is_pair(data_dir)
        examples = []
        for number, record in _records(path):
            text_a = _text(path, number, record, "text")
            text_b = _text(path, number, record, "text_b") if pair else None
            label = _labels(path, number, record, labels) if labelled else None
            example_id = str(record.get("id", len(examples)))
            examples.append(InputExample(f"{split}-{len(examples)}", text_a, text_b, label,
                                         example_id))
        if not examples:
            raise DataError(f"{path}: empty file")
        return examples


def _records(path: str):
    """(line number, JSON object) of every non-blank line of `path`."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: missing file (task 'multilabel')")
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            line = decode_line(path, number, raw).strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{number}: not JSON ({e.msg} at column {e.colno}); "
                                "each line must be one JSON object") from None
            if not isinstance(record, dict):
                raise DataError(f"{path}:{number}: a JSON object is expected, not "
                                f"{type(record).__name__}: {line[:60]}")
            yield number, record


def _text(path: str, number: int, record: dict, key: str) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        found = "missing" if value is None else f"a {type(value).__name__}"
        raise DataError(f"{path}:{number}: {key!r} must be a string, found {found}")
    return value


def _labels(path: str, number: int, record: dict, labels: list | None) -> tuple:
    value = record.get("labels")
    if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value):
        found = "missing" if value is None else json.dumps(value)[:60]
        raise DataError(f"{path}:{number}: 'labels' must be a list of label names, found "
                        f"{found}")
    if not value:
        raise DataError(f"{path}:{number}: empty label list; every train and dev document needs "
                        f"a label (give documents without a topic a label such as \"none\")")
    if labels is not None:
        for name in value:
            if name not in labels:
                raise DataError(f"{path}:{number}: label {name!r} is not in the label set "
                                f"({len(labels)} labels, {_label_source(path)})")
    return tuple(dict.fromkeys(value))  # in order, each once


def _label_source(path: str) -> str:
    labels_file = os.path.join(os.path.dirname(path), LABELS_FILE)
    return labels_file if os.path.isfile(labels_file) else "learned from train.jsonl"


def _read_label_file(path: str) -> list:
    labels = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            name = decode_line(path, number, raw).strip()
            if not name:
                continue
            if name in labels:
                raise DataError(f"{path}:{number}: label {name!r} is listed twice")
            labels.append(name)
    if not labels:
        raise DataError(f"{path}: no labels; write one label name per line")
    return labels


def _first_record_has_text_b(paths: list) -> bool:
    for path in paths:
        if os.path.isfile(path):
            for _, record in _records(path):
                return "text_b" in record
    return False
