"""Task readers for `run_classifier.py`: GLUE, XNLI and a generic TSV/CSV task, as examples.

Why: fine-tuning must see the examples google-research/bert's `run_classifier.py` processors
produced (same columns, same guids, TSV read with tab delimiter and no quoting, so a quote
character inside a sentence such as `He said "yes` is kept verbatim). The original covered CoLA,
MRPC, MNLI (matched dev only) and XNLI; SST-2, STS-B, QQP, QNLI, RTE, WNLI, MNLI mismatched and a
generic task for user data are added in the same style (multi-label documents as JSON lines live
in `multilabel_reader.py`). Pure Python (no TensorFlow).

Differences from the original, all deliberate:
- bad input is a `DataError` naming the file and 1-based line ("PATH:LINE: ..."), not an
  IndexError or KeyError raised later far from the cause: a label outside `get_labels()`, a
  regression score that is not a number, a row missing a column the layout needs, a ragged row,
  an empty or missing file;
- rows of unlabelled test files get label None (the original put a dummy "0"/"contradiction");
- every example carries `example_id`, the file's own id for the row (an `index`/`id` column) where
  the layout has one, else the 0-based example number: test predictions map back through it;
- a UTF-8 byte-order mark at the start of a file (MRPC's files have one) is dropped.

Guids are built as the original builds them: f"{set_type}-{i}", where i is the 0-based row number
in the file counting the header (so MRPC's first example is "train-1", header-less CoLA's
"train-0"); MNLI uses its `index` column instead of i, and keeps the original's set types
("dev_matched", and "test" for test_matched).

Structure: `_read_table` turns a file into numbered rows and checks its shape; a `_Layout` says
which column holds what in one split's file; `_make_examples` builds and validates the examples.
Each task is then little more than a table of layouts.
"""
from __future__ import annotations

import csv
import dataclasses
import math
import os
from typing import NamedTuple

from bert_tf2.data_gen import csv_files
from bert_tf2.data_gen.errors import DataError, not_utf8


@dataclasses.dataclass(frozen=True)
class InputExample:
    guid: str            # as the original builds it, e.g. "train-1", "dev-3"
    text_a: str
    text_b: str | None
    label: str | tuple | None  # the label (STS-B: the score string, e.g. "3.800"; a multi-label
    #                            task: a tuple of label names); None: unlabelled
    example_id: str      # the file's id for the row if the layout has one, else the example number


# ----------------------------------------------------------------------------------------------
# Reading a file into checked rows


class _Row(NamedTuple):
    index: int           # 0-based row number in the file, header included (the original's `i`)
    line: int            # 1-based line of the file where the row starts
    fields: list


@dataclasses.dataclass(frozen=True)
class _Table:
    path: str
    header: list | None  # the header row's fields, when the layout has a header
    rows: list           # the data rows (_Row), never empty

    @property
    def width(self) -> int:
        return len(self.header) if self.header is not None else len(self.rows[0].fields)


def _read_table(path: str, header: bool, task: str, split: str) -> _Table:
    """All rows of one file. `.csv`: the csv module's excel dialect; otherwise TSV exactly as the
    original's `_read_tsv` (tab, no quote character). Every row must have as many fields as the
    header (or, without a header, as the first row)."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: missing file (task {task!r}, split {split!r})")
    if path.endswith(".csv"):
        dialect = {}
    else:
        dialect = {"delimiter": "\t", "quoting": csv.QUOTE_NONE}
    rows = []
    last_line = 0  # the line where the previous row ended
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv_files.reader(f, **dialect)
            for index, fields in enumerate(reader):
                rows.append(_Row(index, last_line + 1, fields))
                last_line = reader.line_num
    except csv.Error as e:
        raise DataError(f"{path}:{last_line + 1}: {e}") from None
    except UnicodeDecodeError:
        raise not_utf8(path) from None

    head = rows.pop(0).fields if header and rows else None
    if not rows:
        raise DataError(f"{path}: empty file")
    table = _Table(path, head, rows)
    reference = "the header has" if head is not None else "the first row has"
    for row in rows:
        if len(row.fields) != table.width:
            raise DataError(f"{path}:{row.line}: {len(row.fields)} fields, but {reference} "
                            f"{table.width}")
    return table


# ----------------------------------------------------------------------------------------------
# Which column holds what, and building the examples


@dataclasses.dataclass(frozen=True)
class _Layout:
    """One split's file. Columns are 0-based indexes (negative counts from the end); the generic
    task also uses header names, resolved against each file's header before reading."""
    file: str = ""                     # path relative to the data directory
    header: bool = True
    text_a: int | str = 0
    text_b: int | str | None = None
    label: int | str | None = None     # None: the split is unlabelled (label None)
    example_id: int | str | None = None  # None: the 0-based example number
    guid_column: int | None = None     # None: the row number i (the original's f"{set_type}-{i}")
    guid_prefix: str | None = None     # None: the split name
    keep: tuple | None = None          # (column, value): only rows with that value (XNLI language)
    label_map: tuple = ()              # (from, to) pairs applied to the raw label
    empty_label_is_none: bool = False  # an empty label cell means "unlabelled" (generic test)


def _field(table: _Table, row: _Row, column: int, role: str) -> str:
    n = len(row.fields)
    if not -n <= column < n:
        raise DataError(f"{table.path}:{row.line}: {n} columns, column {column} ({role}) is "
                        "missing")
    return row.fields[column]


def _check_label(table: _Table, row: _Row, label: str, labels: list | None, regression: bool):
    if regression:
        try:
            ok = math.isfinite(float(label))
        except ValueError:
            ok = False
        if not ok:
            raise DataError(f"{table.path}:{row.line}: label {label!r} is not a number "
                            "(regression task)")
    elif labels is not None and label not in labels:
        raise DataError(f"{table.path}:{row.line}: label {label!r} is not one of "
                        f"{', '.join(labels)}")


def _label_set(table: _Table, row: _Row, cell: str, labels: list | None, delimiter: str) -> tuple:
    names = [name.strip() for name in cell.split(delimiter)]
    if cell.strip() == "":
        raise DataError(f"{table.path}:{row.line}: empty label cell; every train and dev row of a "
                        "multi-label task needs a label (give rows without a topic a label such as "
                        "\"none\")")
    if "" in names:
        raise DataError(f"{table.path}:{row.line}: label cell {cell!r} has an empty name between "
                        f"{delimiter!r} delimiters")
    for name in names:
        _check_label(table, row, name, labels, False)
    return tuple(dict.fromkeys(names))


def _make_examples(table: _Table, layout: _Layout, split: str, labels: list | None,
                   regression: bool, label_delimiter: str | None = None) -> list:
    """`labels` None skips the label check of a classification task (used to infer the labels).
    With `label_delimiter` (a multi-label task) a label cell holds names split by it, and the
    example's label is their tuple."""
    set_type = layout.guid_prefix or split
    label_map = dict(layout.label_map)
    examples = []
    skipped = set()
    for row in table.rows:
        if layout.keep is not None:
            value = _field(table, row, layout.keep[0], "language")
            if value != layout.keep[1]:
                skipped.add(value)
                continue
        text_a = _field(table, row, layout.text_a, "text_a")
        text_b = None if layout.text_b is None else _field(table, row, layout.text_b, "text_b")
        label = None
        if layout.label is not None:
            label = _field(table, row, layout.label, "label")
            label = label_map.get(label, label)
            if label == "" and layout.empty_label_is_none:
                label = None
            elif label_delimiter is not None:
                label = _label_set(table, row, label, labels, label_delimiter)
            else:
                _check_label(table, row, label, labels, regression)
        if layout.example_id is None:
            example_id = str(len(examples))
        else:
            example_id = _field(table, row, layout.example_id, "id")
        key = row.index if layout.guid_column is None else _field(table, row, layout.guid_column,
                                                                  "id")
        examples.append(InputExample(f"{set_type}-{key}", text_a, text_b, label, example_id))
    if not examples:  # every row filtered out
        raise DataError(f"{table.path}: no rows with {layout.keep[1]!r} in column "
                        f"{layout.keep[0]} (found: {', '.join(sorted(skipped))})")
    return examples


# ----------------------------------------------------------------------------------------------
# Processors


class DataProcessor:
    """A task: its labels, splits and per-split layouts. Subclasses set the class attributes."""
    name: str = ""
    is_regression: bool = False
    is_multi_label: bool = False       # examples carry a tuple of labels (sigmoid head)
    labels: tuple = ()
    layouts: dict = {}                 # split -> _Layout
    _eval_splits: tuple = ("dev",)
    _test_splits: tuple = ("test",)

    def get_labels(self, data_dir: str | None = None) -> list:
        """The label list; `data_dir` is needed only by a generic task that learns it from train."""
        return list(self.labels)

    def is_pair(self, data_dir: str | None = None) -> bool:
        return self._layout(self.train_split()).text_b is not None

    def train_split(self) -> str:
        return "train"

    def eval_splits(self) -> list:
        return list(self._eval_splits)

    def test_splits(self) -> list:
        return list(self._test_splits)

    def split_files(self, data_dir: str, split: str) -> list:
        return [os.path.join(data_dir, self._layout(split).file)]

    def get_examples(self, data_dir: str, split: str) -> list:
        labels = None if self.is_regression else self._labels_for(data_dir)
        return self._read(data_dir, split, labels)

    # The original's entry points: its dev and test sets are the first eval and test splits.
    def get_train_examples(self, data_dir: str) -> list:
        return self.get_examples(data_dir, self.train_split())

    def get_dev_examples(self, data_dir: str) -> list:
        return self.get_examples(data_dir, self.eval_splits()[0])

    def get_test_examples(self, data_dir: str) -> list:
        return self.get_examples(data_dir, self.test_splits()[0])

    # -- shared machinery
    def _splits(self) -> list:
        return [self.train_split(), *self.eval_splits(), *self.test_splits()]

    def _layout(self, split: str) -> _Layout:
        if split not in self._splits():
            raise ValueError(f"task {self.name!r} has no split {split!r}; its splits are "
                             f"{', '.join(self._splits())}")
        return self.layouts[split]

    def _labels_for(self, data_dir: str) -> list:
        return self.get_labels()

    def _resolve(self, layout: _Layout, table: _Table, split: str) -> _Layout:
        return layout

    def _read(self, data_dir: str, split: str, labels: list | None) -> list:
        layout = self._layout(split)
        (path,) = self.split_files(data_dir, split)
        table = _read_table(path, layout.header, self.name, split)
        return _make_examples(table, self._resolve(layout, table, split), split, labels,
                              self.is_regression)


def _glue(labelled: _Layout, test: _Layout) -> dict:
    """train.tsv and dev.tsv share one layout, test.tsv (unlabelled) has its own."""
    return {"train": dataclasses.replace(labelled, file="train.tsv"),
            "dev": dataclasses.replace(labelled, file="dev.tsv"),
            "test": dataclasses.replace(test, file="test.tsv")}


_BINARY = ("0", "1")
_NLI = ("contradiction", "entailment", "neutral")
_ENTAILMENT = ("entailment", "not_entailment")


class ColaProcessor(DataProcessor):
    """train/dev: no header; source, label, (original label), sentence. test: `index sentence`."""
    name, labels = "cola", _BINARY
    layouts = _glue(_Layout(header=False, text_a=3, label=1),
                    _Layout(text_a=1, example_id=0))


class Sst2Processor(DataProcessor):
    """train/dev: `sentence label`; test: `index sentence`."""
    name, labels = "sst-2", _BINARY
    layouts = _glue(_Layout(text_a=0, label=1), _Layout(text_a=1, example_id=0))


class MrpcProcessor(DataProcessor):
    """`Quality #1 ID #2 ID #1 String #2 String`; test has `index` in place of Quality."""
    name, labels = "mrpc", _BINARY
    layouts = _glue(_Layout(text_a=3, text_b=4, label=0),
                    _Layout(text_a=3, text_b=4, example_id=0))


class StsbProcessor(DataProcessor):
    """`index genre filename year old_index source1 source2 sentence1 sentence2 score`; test has
    no score."""
    name, is_regression = "sts-b", True
    layouts = _glue(_Layout(text_a=7, text_b=8, label=-1, example_id=0),
                    _Layout(text_a=7, text_b=8, example_id=0))


class QqpProcessor(DataProcessor):
    """`id qid1 qid2 question1 question2 is_duplicate`; test: `id question1 question2`."""
    name, labels = "qqp", _BINARY
    layouts = _glue(_Layout(text_a=3, text_b=4, label=5, example_id=0),
                    _Layout(text_a=1, text_b=2, example_id=0))


class QnliProcessor(DataProcessor):
    """`index question sentence label`; test has no label."""
    name, labels = "qnli", _ENTAILMENT
    layouts = _glue(_Layout(text_a=1, text_b=2, label=-1, example_id=0),
                    _Layout(text_a=1, text_b=2, example_id=0))


class RteProcessor(DataProcessor):
    """`index sentence1 sentence2 label`; test has no label."""
    name, labels = "rte", _ENTAILMENT
    layouts = QnliProcessor.layouts


class WnliProcessor(DataProcessor):
    """`index sentence1 sentence2 label` with labels 0/1; test has no label."""
    name, labels = "wnli", _BINARY
    layouts = QnliProcessor.layouts


_MNLI = _Layout(text_a=8, text_b=9, label=-1, example_id=0, guid_column=0)
_MNLI_TEST = dataclasses.replace(_MNLI, label=None)


class MnliProcessor(DataProcessor):
    """`index promptID pairID genre <4 parses> sentence1 sentence2 <label1..> gold_label`; the
    test files stop after sentence2. Guids use the `index` column, as the original's."""
    name, labels = "mnli", _NLI
    _eval_splits = ("dev_matched", "dev_mismatched")
    _test_splits = ("test_matched", "test_mismatched")
    layouts = {
        "train": dataclasses.replace(_MNLI, file="train.tsv"),
        "dev_matched": dataclasses.replace(_MNLI, file="dev_matched.tsv"),
        "dev_mismatched": dataclasses.replace(_MNLI, file="dev_mismatched.tsv"),
        "test_matched": dataclasses.replace(_MNLI_TEST, file="test_matched.tsv",
                                            guid_prefix="test"),
        "test_mismatched": dataclasses.replace(_MNLI_TEST, file="test_mismatched.tsv"),
    }


class XnliProcessor(DataProcessor):
    """train: `multinli/multinli.train.{language}.tsv` (`premise hypo label`, with "contradictory"
    for contradiction); dev/test: `xnli.dev.tsv`, `xnli.test.tsv`, all languages in one file
    (language col 0, gold_label col 1, sentence1 col 6, sentence2 col 7), only `language`'s rows
    kept. Guids count every row of the file, as the original's."""
    name, labels = "xnli", _NLI

    def __init__(self, language: str = "zh"):
        if not isinstance(language, str) or not language or os.sep in language:
            raise ValueError(f"task 'xnli': language must be a code such as 'zh', got {language!r}")
        self.language = language
        dev = _Layout(file="xnli.dev.tsv", text_a=6, text_b=7, label=1, keep=(0, language))
        self.layouts = {
            "train": _Layout(file=os.path.join("multinli", f"multinli.train.{language}.tsv"),
                             text_a=0, text_b=1, label=2,
                             label_map=(("contradictory", "contradiction"),)),
            "dev": dev,
            "test": dataclasses.replace(dev, file="xnli.test.tsv"),
        }


class GenericProcessor(DataProcessor):
    """User data: `train`, `dev` and `test` files in data_dir, each `.tsv` (tab, no quoting) or
    `.csv` (excel dialect: quoted fields may hold commas and newlines). A column is a header name
    (with header=True) or a 0-based index (an int or a digit string). Without `labels`, the labels
    are the sorted set of (non-empty) labels in the train split. The test file may lack the label
    column (or leave it empty): such rows get label None. Without `label_column` (a predict-only
    run) every split is unlabelled, only the test split can be read, and a classification task
    needs `labels`. Guids are f"{split}-{i}" with i the row number counting the header, as for
    MRPC. With `multi_label`, a label cell holds any number of labels split by `label_delimiter`
    (an empty cell is refused in train and dev), and the example's label is their tuple."""
    name = "generic"

    def __init__(self, *, text_a_column, label_column=None, text_b_column=None, labels=None,
                 header: bool = True, regression: bool = False, id_column=None,
                 multi_label: bool = False, label_delimiter: str = ","):
        self._header = bool(header)
        self.is_regression = bool(regression)
        self.is_multi_label = bool(multi_label)
        if self.is_multi_label and self.is_regression:
            raise ValueError("task 'generic': multi_label=True and regression=True exclude each "
                             "other")
        if not isinstance(label_delimiter, str) or not label_delimiter:
            raise ValueError(f"task 'generic': label_delimiter must be a non-empty string, got "
                             f"{label_delimiter!r}")
        self._delimiter = label_delimiter
        columns = {"text_a": text_a_column, "text_b": text_b_column, "label": label_column,
                   "id": id_column}
        for role, column in columns.items():
            if column is None and role == "text_a":
                raise ValueError("task 'generic': text_a_column is required")
            self._check_column(role, column)
        self._columns = columns
        if labels is not None:
            if self.is_regression:
                raise ValueError("task 'generic': labels= makes no sense with regression=True")
            labels = list(labels)
            if not labels or not all(isinstance(x, str) and x for x in labels) \
                    or len(set(labels)) != len(labels):
                raise ValueError(f"task 'generic': labels must be distinct non-empty strings, "
                                 f"got {labels!r}")
        self._labels = labels
        self._inferred = {}  # data_dir -> labels found in its train split

    def _check_column(self, role: str, column):
        if column is None or (isinstance(column, int) and not isinstance(column, bool)
                              and column >= 0):
            return
        if not isinstance(column, str) or not column:
            raise ValueError(f"task 'generic': {role}_column must be a header name or a 0-based "
                             f"index, got {column!r}")
        if not self._header and not _is_index(column):
            raise ValueError(f"task 'generic': {role}_column {column!r} is a name, but "
                             "header=False: give a 0-based index")

    def get_labels(self, data_dir: str | None = None) -> list:
        """The labels: `labels=` as given, else those found in data_dir's train split (also known
        once any split of a single data_dir has been read); [] for regression."""
        if self.is_regression:
            return []
        if self._labels is not None:
            return list(self._labels)
        if self._columns["label"] is None:
            raise ValueError("task 'generic': without label_column, labels=[...] must be given")
        if data_dir is None:
            if len(self._inferred) != 1:
                raise ValueError("task 'generic': labels are taken from the train split; pass "
                                 "labels=[...] or call get_labels(data_dir)")
            return list(next(iter(self._inferred.values())))
        key = os.path.abspath(data_dir)
        if key not in self._inferred:
            examples = self._read(data_dir, self.train_split(), None)
            found = sorted({name for e in examples if e.label
                            for name in (e.label if self.is_multi_label else (e.label,))})
            if not found:
                raise DataError(f"{self.split_files(data_dir, self.train_split())[0]}: no labels "
                                "in the label column")
            self._inferred[key] = found
        return list(self._inferred[key])

    def is_pair(self, data_dir: str | None = None) -> bool:
        return self._columns["text_b"] is not None

    def split_files(self, data_dir: str, split: str) -> list:
        self._layout(split)  # checks the split name
        candidates = [os.path.join(data_dir, f"{split}.{ext}") for ext in ("tsv", "csv")]
        found = [path for path in candidates if os.path.isfile(path)]
        if len(found) > 1:
            raise DataError(f"{data_dir}: both {split}.tsv and {split}.csv exist (task 'generic');"
                            " keep one")
        if not found:
            raise DataError(f"{candidates[0]}: missing file, nor is there {split}.csv "
                            f"(task 'generic', split {split!r})")
        return found

    def _labels_for(self, data_dir: str) -> list:
        return self.get_labels(data_dir)

    def _layout(self, split: str) -> _Layout:
        if split not in self._splits():
            return super()._layout(split)  # raises
        c = self._columns
        if c["label"] is None and split not in self.test_splits():
            raise ValueError(f"task 'generic': split {split!r} needs a label_column")
        return _Layout(header=self._header, text_a=c["text_a"], text_b=c["text_b"],
                       label=c["label"], example_id=c["id"],
                       empty_label_is_none=split in self.test_splits())

    def _resolve(self, layout: _Layout, table: _Table, split: str) -> _Layout:
        unlabelled_ok = split in self.test_splits()
        return dataclasses.replace(
            layout,
            text_a=_column_index(table, layout.text_a, "text_a"),
            text_b=_column_index(table, layout.text_b, "text_b"),
            label=_column_index(table, layout.label, "label", absent_ok=unlabelled_ok),
            example_id=_column_index(table, layout.example_id, "id"))

    def _read(self, data_dir: str, split: str, labels: list | None) -> list:
        layout = self._layout(split)
        (path,) = self.split_files(data_dir, split)
        table = _read_table(path, layout.header, self.name, split)
        return _make_examples(table, self._resolve(layout, table, split), split, labels,
                              self.is_regression,
                              self._delimiter if self.is_multi_label else None)


def _is_index(column) -> bool:
    return isinstance(column, int) or (column.isascii() and column.isdigit())


def _column_index(table: _Table, column, role: str, absent_ok: bool = False) -> int | None:
    """A generic column spec as an index into `table`'s rows; None when absent and absent_ok."""
    if column is None:
        return None
    header = table.header
    if header is not None and isinstance(column, str) and column in header:
        if header.count(column) > 1:
            raise DataError(f"{table.path}: column {column!r} ({role}) appears "
                            f"{header.count(column)} times in the header")
        return header.index(column)
    if _is_index(column):
        index = int(column)
        return None if absent_ok and index >= table.width else index
    if absent_ok:
        return None
    raise DataError(f"{table.path}: column {column!r} ({role}) is not in the header: "
                    f"{', '.join(header)}")
