"""The task readers of run_classifier.py: each GLUE/XNLI layout, the generic task, bad input, and
the real GLUE files under the shared data folder."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import warm_python

from bert_tf2.data_gen.errors import DataError
from bert_tf2.tasks.classification import reader as cp
from bert_tf2.tasks.classification.processors import PROCESSORS, get_processor
from bert_tf2.tasks.classification.reader import InputExample

BOM = "\ufeff"
UNBALANCED = 'He said "yes'  # an unbalanced quote: must survive verbatim (no quoting in TSV)


def write(directory, name, lines, bom=False, newline="\n"):
    """A TSV file from rows of fields (or raw strings), exactly as given."""
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    text = newline.join(l if isinstance(l, str) else "\t".join(l) for l in lines) + newline
    path.write_bytes(((BOM if bom else "") + text).encode("utf-8"))
    return path


def ex(guid, text_a, text_b, label, example_id):
    return InputExample(guid, text_a, text_b, label, example_id)


# ----------------------------------------------------------------------------------------------
# Each GLUE layout


def write_cola(directory):
    write(directory, "train.tsv", [["gj04", "1", "", UNBALANCED],
                                   ["gj04", "0", "*", "The more you eat, the fatter ."]])
    write(directory, "dev.tsv", [["cj99", "1", "", "'Tis done."]])
    write(directory, "test.tsv", [["index", "sentence"], ["0", "Bill whistled."],
                                  ["7", "A 'quote\" mix."]])


def test_cola_headerless_train_and_test_with_header(tmp_path):
    write_cola(tmp_path)
    p = get_processor("cola")
    assert p.get_train_examples(str(tmp_path)) == [
        ex("train-0", UNBALANCED, None, "1", "0"),
        ex("train-1", "The more you eat, the fatter .", None, "0", "1")]
    assert p.get_dev_examples(str(tmp_path)) == [ex("dev-0", "'Tis done.", None, "1", "0")]
    assert p.get_test_examples(str(tmp_path)) == [
        ex("test-1", "Bill whistled.", None, None, "0"),
        ex("test-2", "A 'quote\" mix.", None, None, "7")]
    assert (p.name, p.get_labels(), p.is_pair(), p.is_regression) == ("cola", ["0", "1"], False,
                                                                       False)


def test_sst2(tmp_path):
    write(tmp_path, "train.tsv", [["sentence", "label"], [f"{UNBALANCED} , it 's fine ", "1"],
                                  ["dull ", "0"]])
    write(tmp_path, "test.tsv", [["index", "sentence"], ["0", "uneasy mishmash ."]])
    p = get_processor("SST-2")
    assert p.get_examples(str(tmp_path), "train") == [
        ex("train-1", f"{UNBALANCED} , it 's fine ", None, "1", "0"),
        ex("train-2", "dull ", None, "0", "1")]
    assert p.get_examples(str(tmp_path), "test") == [
        ex("test-1", "uneasy mishmash .", None, None, "0")]
    assert get_processor("sst2").name == "sst-2"


MRPC_HEADER = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]


def write_mrpc(directory):
    write(directory, "train.tsv", [MRPC_HEADER,
                                   ["1", "702876", "702977", UNBALANCED, '"No," he said.'],
                                   ["0", "2108705", "2108831", "Yucaipa owned it.", "It sold."]],
          bom=True)
    write(directory, "test.tsv", [["index"] + MRPC_HEADER[1:],
                                  ["0", "1089874", "1089925", "PCCW's officer.", "Officer Mike."],
                                  ["5", "3019446", "3019327", "Two automakers.", "Sales fell."]],
          bom=True)


def test_mrpc_with_bom(tmp_path):
    write_mrpc(tmp_path)
    p = get_processor("mrpc")
    assert p.get_train_examples(str(tmp_path)) == [
        ex("train-1", UNBALANCED, '"No," he said.', "1", "0"),
        ex("train-2", "Yucaipa owned it.", "It sold.", "0", "1")]
    assert p.get_test_examples(str(tmp_path)) == [
        ex("test-1", "PCCW's officer.", "Officer Mike.", None, "0"),
        ex("test-2", "Two automakers.", "Sales fell.", None, "5")]
    assert p.is_pair() and p.get_labels() == ["0", "1"]


def test_mrpc_bom_on_a_headerless_first_field_is_dropped(tmp_path):
    """The BOM must not reach the first field: read a BOM'd header-less file by column 0."""
    write(tmp_path, "train.tsv", [["a1", "x", "0"], ["a2", "y", "1"]], bom=True)
    p = get_processor("generic", text_a_column=1, label_column=2, id_column=0, header=False)
    assert [e.example_id for e in p.get_train_examples(str(tmp_path))] == ["a1", "a2"]


STSB_HEADER = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
               "sentence1", "sentence2"]


def test_stsb_regression(tmp_path):
    write(tmp_path, "train.tsv", [STSB_HEADER + ["score"],
                                  ["0", "main-captions", "MSRvid", "2012test", "0001", "none",
                                   "none", "A plane is taking off.", UNBALANCED, "5.000"],
                                  ["1", "main-captions", "MSRvid", "2012test", "0004", "none",
                                   "none", "A man plays.", "A man plays a flute.", "3.800"]])
    write(tmp_path, "test.tsv", [STSB_HEADER, ["0", "main-captions", "MSRvid", "2012test", "0024",
                                               "none", "none", "A girl.", "A girl brushes."]])
    p = get_processor("stsb")
    assert p.name == "sts-b" and p.is_regression and p.get_labels() == []
    assert p.get_train_examples(str(tmp_path)) == [
        ex("train-1", "A plane is taking off.", UNBALANCED, "5.000", "0"),
        ex("train-2", "A man plays.", "A man plays a flute.", "3.800", "1")]
    assert p.get_test_examples(str(tmp_path)) == [
        ex("test-1", "A girl.", "A girl brushes.", None, "0")]


def test_qqp(tmp_path):
    write(tmp_path, "dev.tsv", [["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
                                ["201359", "303345", "303346", "Why are people so obsessed?",
                                 UNBALANCED, "0"]])
    write(tmp_path, "test.tsv", [["id", "question1", "question2"],
                                 ["0", "How do I lose weight?", "Best way to lose weight?"]])
    p = get_processor("qqp")
    assert p.get_dev_examples(str(tmp_path)) == [
        ex("dev-1", "Why are people so obsessed?", UNBALANCED, "0", "201359")]
    assert p.get_test_examples(str(tmp_path)) == [
        ex("test-1", "How do I lose weight?", "Best way to lose weight?", None, "0")]


MNLI_HEADER = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
               "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
               "sentence2"]


def mnli_row(index, s1, s2, *labels):
    return [index, "31193", "31193n", "government", "( b1 )", "( b2 )", "(P1)", "(P2)", s1, s2,
            *labels]


def write_mnli(directory):
    write(directory, "train.tsv", [MNLI_HEADER + ["label1", "gold_label"],
                                   mnli_row("0", UNBALANCED, "Cream.", "neutral", "neutral"),
                                   mnli_row("1", "You know.", "You lose.", "entailment",
                                            "entailment")])
    dev_header = MNLI_HEADER + [f"label{i}" for i in range(1, 6)] + ["gold_label"]
    write(directory, "dev_matched.tsv", [dev_header, mnli_row("10", "a", "b", *["neutral"] * 5,
                                                              "contradiction")])
    write(directory, "dev_mismatched.tsv", [dev_header, mnli_row("20", "c", "d", *["x"] * 5,
                                                                 "entailment")])
    write(directory, "test_matched.tsv", [MNLI_HEADER, mnli_row("30", "e", "f")])
    write(directory, "test_mismatched.tsv", [MNLI_HEADER, mnli_row("40", "g", "h")])


def test_mnli_matched_and_mismatched(tmp_path):
    write_mnli(tmp_path)
    p = get_processor("MNLI")
    assert p.eval_splits() == ["dev_matched", "dev_mismatched"]
    assert p.test_splits() == ["test_matched", "test_mismatched"]
    assert p.get_labels() == ["contradiction", "entailment", "neutral"]
    d = str(tmp_path)
    assert p.get_train_examples(d) == [ex("train-0", UNBALANCED, "Cream.", "neutral", "0"),
                                       ex("train-1", "You know.", "You lose.", "entailment", "1")]
    assert p.get_dev_examples(d) == [ex("dev_matched-10", "a", "b", "contradiction", "10")]
    assert p.get_examples(d, "dev_mismatched") == [
        ex("dev_mismatched-20", "c", "d", "entailment", "20")]
    assert p.get_test_examples(d) == [ex("test-30", "e", "f", None, "30")]  # the original's "test"
    assert p.get_examples(d, "test_mismatched") == [ex("test_mismatched-40", "g", "h", None, "40")]
    assert p.split_files(d, "dev_mismatched") == [os.path.join(d, "dev_mismatched.tsv")]


@pytest.mark.parametrize("task, header, labels", [
    ("qnli", ["index", "question", "sentence", "label"], ["entailment", "not_entailment"]),
    ("rte", ["index", "sentence1", "sentence2", "label"], ["entailment", "not_entailment"]),
    ("wnli", ["index", "sentence1", "sentence2", "label"], ["0", "1"]),
])
def test_index_pair_label_tasks(tmp_path, task, header, labels):
    write(tmp_path, "train.tsv", [header, ["0", UNBALANCED, "B one.", labels[1]],
                                  ["1", "A two.", "B two.", labels[0]]])
    write(tmp_path, "test.tsv", [header[:3], ["9", "A test.", "B test."]])
    p = get_processor(task)
    assert p.get_labels() == labels and p.is_pair()
    assert p.get_train_examples(str(tmp_path)) == [
        ex("train-1", UNBALANCED, "B one.", labels[1], "0"),
        ex("train-2", "A two.", "B two.", labels[0], "1")]
    assert p.get_test_examples(str(tmp_path)) == [ex("test-1", "A test.", "B test.", None, "9")]


XNLI_HEADER = ["language", "gold_label", "sentence1_binary_parse", "sentence2_binary_parse",
               "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "promptID",
               "pairID"]


def xnli_row(language, label, s1, s2):
    return [language, label, "(b1)", "(b2)", "(p1)", "(p2)", s1, s2, "1", "2"]


def write_xnli(directory):
    write(directory, "multinli/multinli.train.zh.tsv", [["premise", "hypo", "label"],
                                                        ["前提一", "假设一", "contradictory"],
                                                        ["前提二", UNBALANCED, "neutral"]])
    write(directory, "multinli/multinli.train.de.tsv", [["premise", "hypo", "label"],
                                                        ["Prämisse", "Hypothese", "entailment"]])
    dev_rows = [XNLI_HEADER, xnli_row("ar", "neutral", "a", "b"),
                xnli_row("zh", "entailment", "中文", "句子"), xnli_row("de", "neutral", "x", "y"),
                xnli_row("zh", "contradiction", "第二", "第三")]
    write(directory, "xnli.dev.tsv", dev_rows)
    write(directory, "xnli.test.tsv", dev_rows[:3])


def test_xnli_language_option(tmp_path):
    write_xnli(tmp_path)
    d = str(tmp_path)
    zh = get_processor("xnli")
    assert zh.language == "zh" and zh.eval_splits() == ["dev"] and zh.is_pair()
    assert zh.get_train_examples(d) == [ex("train-1", "前提一", "假设一", "contradiction", "0"),
                                        ex("train-2", "前提二", UNBALANCED, "neutral", "1")]
    # guids count every row of the file (other languages included), as the original's
    assert zh.get_dev_examples(d) == [ex("dev-2", "中文", "句子", "entailment", "0"),
                                      ex("dev-4", "第二", "第三", "contradiction", "1")]
    assert zh.get_test_examples(d) == [ex("test-2", "中文", "句子", "entailment", "0")]
    de = get_processor("xnli", language="de")
    assert de.split_files(d, "train") == [os.path.join(d, "multinli", "multinli.train.de.tsv")]
    assert de.get_train_examples(d) == [ex("train-1", "Prämisse", "Hypothese", "entailment", "0")]
    assert de.get_dev_examples(d) == [ex("dev-3", "x", "y", "neutral", "0")]
    with pytest.raises(DataError, match=r"xnli\.dev\.tsv: no rows with 'fr' .*found: ar, de, zh"):
        get_processor("xnli", language="fr").get_dev_examples(d)


# ----------------------------------------------------------------------------------------------
# The generic task


def test_generic_csv_with_quoted_commas_and_newlines(tmp_path):
    (tmp_path / "train.csv").write_text(
        'id,review,label\n'
        'r1,"Good, cheap, and fast",pos\n'
        'r2,"Two\nlines, ""quoted""",neg\n'
        'r3,plain,pos\n', encoding="utf-8")
    (tmp_path / "test.csv").write_text('id,review\nt1,"a, b"\n', encoding="utf-8")
    p = get_processor("generic", text_a_column="review", label_column="label", id_column="id")
    d = str(tmp_path)
    assert p.get_train_examples(d) == [
        ex("train-1", "Good, cheap, and fast", None, "pos", "r1"),
        ex("train-2", 'Two\nlines, "quoted"', None, "neg", "r2"),
        ex("train-3", "plain", None, "pos", "r3")]
    assert p.get_labels() == ["neg", "pos"]  # the sorted labels of the train split
    assert p.get_test_examples(d) == [ex("test-1", "a, b", None, None, "t1")]
    assert p.split_files(d, "train") == [os.path.join(d, "train.csv")]
    assert not p.is_pair() and not p.is_regression


def test_generic_labels_before_reading_and_given_labels(tmp_path):
    write(tmp_path, "train.tsv", [["s1", "s2", "y"], [UNBALANCED, "b", "2"], ["c", "d", "10"]])
    write(tmp_path, "dev.tsv", [["s1", "s2", "y"], ["e", "f", "10"]])
    inferred = get_processor("generic", text_a_column="s1", text_b_column="s2", label_column="y")
    with pytest.raises(ValueError, match="labels"):
        inferred.get_labels()
    assert inferred.get_labels(str(tmp_path)) == ["10", "2"]  # sorted as strings
    # reading dev first infers the labels from train, and dev ids are example numbers
    assert inferred.get_dev_examples(str(tmp_path)) == [ex("dev-1", "e", "f", "10", "0")]
    given = get_processor("generic", text_a_column="0", text_b_column=1, label_column="y",
                          labels=["2", "10", "99"])
    assert given.get_labels() == ["2", "10", "99"] and given.is_pair()
    assert given.get_train_examples(str(tmp_path))[0] == ex("train-1", UNBALANCED, "b", "2", "0")
    narrow = get_processor("generic", text_a_column="s1", label_column="y", labels=["10"])
    with pytest.raises(DataError, match=r"train\.tsv:2: label '2' is not one of 10$"):
        narrow.get_train_examples(str(tmp_path))


def test_generic_headerless_regression(tmp_path):
    write(tmp_path, "train.tsv", [["0.5", "x"], ["1.25", "y"]])
    write(tmp_path, "test.tsv", [["", "z"]])  # an empty label in test: unlabelled
    p = get_processor("generic", text_a_column=1, label_column=0, header=False, regression=True)
    assert p.get_labels() == [] and p.is_regression
    assert p.get_train_examples(str(tmp_path)) == [ex("train-0", "x", None, "0.5", "0"),
                                                   ex("train-1", "y", None, "1.25", "1")]
    assert p.get_test_examples(str(tmp_path)) == [ex("test-0", "z", None, None, "0")]
    write(tmp_path, "dev.tsv", [["0.5", "x"], ["nan", "y"]])
    with pytest.raises(DataError, match=r"dev\.tsv:2: label 'nan' is not a number"):
        p.get_dev_examples(str(tmp_path))


def test_generic_test_file_without_the_label_column(tmp_path):
    write(tmp_path, "train.tsv", [["x one", "a"], ["x two", "b"]])
    write(tmp_path, "test.tsv", [["t one"], ["t two"]])
    p = get_processor("generic", text_a_column=0, label_column="1", header=False)
    assert p.get_test_examples(str(tmp_path)) == [ex("test-0", "t one", None, None, "0"),
                                                  ex("test-1", "t two", None, None, "1")]
    write(tmp_path, "dev.tsv", [["d one"]])  # but dev needs its labels
    with pytest.raises(DataError, match=r"dev\.tsv:1: 1 columns, column 1 \(label\) is missing"):
        p.get_dev_examples(str(tmp_path))


def test_generic_errors(tmp_path):
    write(tmp_path, "train.tsv", [["text", "label"], ["a", "x"]])
    p = get_processor("generic", text_a_column="sentence", label_column="label")
    with pytest.raises(DataError, match=r"train\.tsv: column 'sentence' \(text_a\) is not in the "
                                        r"header: text, label"):
        p.get_train_examples(str(tmp_path))
    write(tmp_path, "train.tsv", [["text", "text", "label"], ["a", "b", "x"]])
    twice = get_processor("generic", text_a_column="text", label_column="label")
    with pytest.raises(DataError, match=r"train\.tsv: column 'text' \(text_a\) appears 2 times"):
        twice.get_train_examples(str(tmp_path))
    write(tmp_path, "train.csv", ["text,label", "a,x"])
    with pytest.raises(DataError, match=r"both train\.tsv and train\.csv exist"):
        p.split_files(str(tmp_path), "train")
    given = get_processor("generic", text_a_column="text", label_column="label", labels=["x"])
    with pytest.raises(DataError, match=r"dev\.tsv: missing file, nor is there dev\.csv "
                                        r"\(task 'generic'"):
        given.get_dev_examples(str(tmp_path))
    # without labels=, reading dev first reads train for them: the ambiguous train is reported
    with pytest.raises(DataError, match=r"both train\.tsv and train\.csv exist"):
        p.get_dev_examples(str(tmp_path))
    with pytest.raises(ValueError, match="header=False"):
        get_processor("generic", text_a_column="text", label_column=1, header=False)
    with pytest.raises(ValueError, match="text_a_column is required"):
        get_processor("generic", text_a_column=None, label_column=0)


def test_generic_predict_only_without_label_column(tmp_path):
    write(tmp_path, "test.tsv", [["id", "text", "label"], ["q7", "a b", "pos"]])
    p = get_processor("generic", text_a_column="text", id_column="id", labels=["neg", "pos"])
    assert p.get_labels() == ["neg", "pos"]
    assert p.get_test_examples(str(tmp_path)) == [ex("test-1", "a b", None, None, "q7")]
    with pytest.raises(ValueError, match="split 'train' needs a label_column"):
        p.get_train_examples(str(tmp_path))
    with pytest.raises(ValueError, match="without label_column, labels="):
        get_processor("generic", text_a_column="text").get_labels(str(tmp_path))
    assert get_processor("generic", text_a_column=1, regression=True).get_labels() == []
    with pytest.raises(ValueError, match="takes options text_a_column"):
        get_processor("generic", text_a_column=0, label_column=1, delimiter=";")


def test_generic_csv_error_line_is_where_the_record_starts(tmp_path):
    (tmp_path / "train.csv").write_text('t,l\n"multi\nline",a\n"x",b,extra\n', encoding="utf-8")
    p = get_processor("generic", text_a_column="t", label_column="l")
    with pytest.raises(DataError, match=r"train\.csv:4: 3 fields, but the header has 2"):
        p.get_train_examples(str(tmp_path))


# ----------------------------------------------------------------------------------------------
# Bad input in the GLUE layouts: file name and 1-based line in the message


def test_label_outside_the_labels(tmp_path):
    write(tmp_path, "train.tsv", [MRPC_HEADER, ["1", "1", "2", "a", "b"],
                                  ["x", "3", "4", "c", "d"]], bom=True)
    with pytest.raises(DataError) as e:
        get_processor("mrpc").get_train_examples(str(tmp_path))
    assert str(e.value) == f"{tmp_path / 'train.tsv'}:3: label 'x' is not one of 0, 1"


def test_stsb_score_not_a_number(tmp_path):
    write(tmp_path, "dev.tsv", [STSB_HEADER + ["score"],
                                ["0", "g", "f", "y", "o", "n", "n", "a", "b", "4.0"],
                                ["1", "g", "f", "y", "o", "n", "n", "a", "b", "high"]])
    with pytest.raises(DataError, match=r"dev\.tsv:3: label 'high' is not a number"):
        get_processor("sts-b").get_dev_examples(str(tmp_path))


def test_missing_column(tmp_path):
    write(tmp_path, "train.tsv", [["Quality", "#1 ID", "#2 ID"], ["1", "a", "b"]])
    with pytest.raises(DataError) as e:
        get_processor("mrpc").get_train_examples(str(tmp_path))
    assert str(e.value) == f"{tmp_path / 'train.tsv'}:2: 3 columns, column 3 (text_a) is missing"
    write(tmp_path, "train.tsv", [["gj04", "1", ""], ["gj04", "0", "*"]])  # CoLA sentence absent
    with pytest.raises(DataError, match=r"train\.tsv:1: 3 columns, column 3 \(text_a\) is missing"):
        get_processor("cola").get_train_examples(str(tmp_path))


def test_ragged_rows(tmp_path):
    write(tmp_path, "train.tsv", [MRPC_HEADER, ["1", "1", "2", "a", "b"],
                                  ["0", "3", "4", "c", "d\textra"]])
    with pytest.raises(DataError) as e:
        get_processor("mrpc").get_train_examples(str(tmp_path))
    assert str(e.value) == f"{tmp_path / 'train.tsv'}:3: 6 fields, but the header has 5"
    write(tmp_path, "dev.tsv", [["gj04", "1", "", "One."], ["gj04", "1", "", "Two."],
                                ["gj04", "1", "Three."]])  # header-less: the first row's width
    with pytest.raises(DataError, match=r"dev\.tsv:3: 3 fields, but the first row has 4"):
        get_processor("cola").get_dev_examples(str(tmp_path))


def test_crlf_lines_and_blank_line(tmp_path):
    write(tmp_path, "train.tsv", [["sentence", "label"], ["ok .", "1"]], newline="\r\n")
    assert get_processor("sst-2").get_train_examples(str(tmp_path)) == [
        ex("train-1", "ok .", None, "1", "0")]
    write(tmp_path, "train.tsv", [["sentence", "label"], ["ok .", "1"], "", ["no .", "0"]])
    with pytest.raises(DataError, match=r"train\.tsv:3: 0 fields, but the header has 2"):
        get_processor("sst-2").get_train_examples(str(tmp_path))


def test_empty_and_missing_files(tmp_path):
    (tmp_path / "train.tsv").write_bytes(b"")
    with pytest.raises(DataError) as e:
        get_processor("cola").get_train_examples(str(tmp_path))
    assert str(e.value) == f"{tmp_path / 'train.tsv'}: empty file"
    write(tmp_path, "dev.tsv", [MRPC_HEADER], bom=True)  # a header and no data rows
    with pytest.raises(DataError, match=r"dev\.tsv: empty file$"):
        get_processor("mrpc").get_dev_examples(str(tmp_path))
    with pytest.raises(DataError) as e:
        get_processor("qnli").get_test_examples(str(tmp_path))
    assert str(e.value) == (f"{tmp_path / 'test.tsv'}: missing file (task 'qnli', "
                            "split 'test')")


def test_not_utf8(tmp_path):
    (tmp_path / "train.tsv").write_bytes(b"sentence\tlabel\ncaf\xe9\t1\n")
    with pytest.raises(DataError, match=r"train\.tsv:2: not UTF-8 text \(byte 0xe9 at column 4\)"):
        get_processor("sst-2").get_train_examples(str(tmp_path))


# ----------------------------------------------------------------------------------------------
# The registry and the interface


def test_registry():
    assert set(PROCESSORS) == {"cola", "sst-2", "sst2", "mrpc", "sts-b", "stsb", "qqp", "mnli",
                               "qnli", "rte", "wnli", "xnli", "generic", "multilabel"}
    assert type(get_processor("MrPc")) is cp.MrpcProcessor
    assert get_processor("STS-B").name == get_processor("stsb").name == "sts-b"
    with pytest.raises(ValueError, match=r"unknown task 'glue'; known tasks: cola, sst-2"):
        get_processor("glue")
    with pytest.raises(ValueError, match=r"task 'mrpc' takes no options; got language"):
        get_processor("mrpc", language="de")
    with pytest.raises(ValueError, match=r"task 'cola' has no split 'dev_matched'"):
        get_processor("cola").get_examples("/nonexistent", "dev_matched")


@pytest.mark.parametrize("task", sorted(set(PROCESSORS) - {"generic", "multilabel"}))
def test_splits_and_pairs(task, tmp_path):
    p = get_processor(task)
    assert p.train_split() == "train"
    assert p.eval_splits() == (["dev_matched", "dev_mismatched"] if task == "mnli" else ["dev"])
    assert p.test_splits() == (["test_matched", "test_mismatched"] if task == "mnli" else ["test"])
    assert p.is_pair() == (task not in ("cola", "sst-2", "sst2"))
    assert p.is_regression == (task in ("sts-b", "stsb"))
    for split in [p.train_split(), *p.eval_splits(), *p.test_splits()]:
        (path,) = p.split_files(str(tmp_path), split)
        assert path.startswith(str(tmp_path)) and path.endswith(".tsv")


@pytest.mark.integration
def test_no_tensorflow_import():
    code = ("import sys; import bert_tf2.tasks.classification.reader; "
            "print('tensorflow' in sys.modules, 'keras' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.stdout.split() == ["False", "False"]


# ----------------------------------------------------------------------------------------------
# Against Google's own processors (bert-tensorflow==1.0.4, the oracle `make` installs)

ORACLE = r"""
import json, sys, types
for name in ("bert.modeling", "bert.optimization"):  # TF1-only modules the processors never use
    sys.modules[name] = types.ModuleType(name)
from bert import run_classifier
out = []
for cls, language, method, data_dir in json.loads(sys.argv[1]):
    processor = getattr(run_classifier, cls)()
    if language:
        processor.language = language
    examples = getattr(processor, method)(data_dir)
    out.append([[e.guid, e.text_a, e.text_b, e.label] for e in examples])
with open(sys.argv[2], "w", encoding="utf-8") as f:
    json.dump(out, f)
"""


@pytest.mark.integration
def test_same_examples_as_the_original(tmp_path, shared_data):
    """guid, text_a, text_b and label as the original's processors give them, on the fixtures
    (unbalanced quotes, BOM, XNLI languages) and on the real MRPC and CoLA files. The original's
    test labels are dummies ("0", "contradiction"); ours are None."""
    if importlib.util.find_spec("bert") is None:
        pytest.skip("the oracle bert-tensorflow==1.0.4 is not installed")
    for name, writer in [("cola", write_cola), ("mrpc", write_mrpc), ("mnli", write_mnli),
                         ("xnli", write_xnli)]:
        writer(tmp_path / name)
    glue = shared_data / "glue"
    cases = [("ColaProcessor", "cola", None, tmp_path / "cola", ("train", "dev", "test")),
             ("MrpcProcessor", "mrpc", None, tmp_path / "mrpc", ("train", "test")),
             ("MnliProcessor", "mnli", None, tmp_path / "mnli", ("train", "dev", "test")),
             ("XnliProcessor", "xnli", None, tmp_path / "xnli", ("train", "dev")),
             ("XnliProcessor", "xnli", "de", tmp_path / "xnli", ("train", "dev")),
             ("MrpcProcessor", "mrpc", None, glue / "MRPC", ("train", "dev", "test")),
             ("ColaProcessor", "cola", None, glue / "CoLA", ("train", "dev"))]
    calls = [(cls, language, f"get_{split}_examples", str(directory))
             for cls, _, language, directory, splits in cases for split in splits]
    output = tmp_path / "original.json"
    completed = warm_python.run([sys.executable, "-c", ORACLE, json.dumps(calls), str(output)],
                                timeout=300, warm=True)
    assert completed.returncode == 0, completed.stderr[-3000:]
    originals = iter(json.loads(output.read_text(encoding="utf-8")))
    compared = 0
    for _, task, language, directory, splits in cases:
        processor = get_processor(task, **({"language": language} if language else {}))
        for split in splits:
            ours = getattr(processor, f"get_{split}_examples")(str(directory))
            theirs = next(originals)
            assert len(ours) == len(theirs) > 0
            for mine, (guid, text_a, text_b, label) in zip(ours, theirs):
                assert (mine.guid, mine.text_a, mine.text_b) == (guid, text_a, text_b)
                assert mine.label == (None if split == "test" else label)
            compared += len(ours)
    assert compared == 3668 + 408 + 1725 + 8551 + 1043 + 19  # real files + fixtures


# ----------------------------------------------------------------------------------------------
# The real GLUE files


@pytest.fixture(scope="module")
def glue(shared_data):
    path = shared_data / "glue"
    if not path.is_dir():
        pytest.skip(f"{path} is absent")
    return path


@pytest.mark.parametrize("task, folder, counts", [
    ("mrpc", "MRPC", {"train": 3668, "dev": 408, "test": 1725}),
    ("cola", "CoLA", {"train": 8551, "dev": 1043}),
    ("sst-2", "SST-2", {"train": 67349, "dev": 872}),
    ("sts-b", "STS-B", {"train": 5749, "dev": 1500, "test": 1379}),
])
def test_real_glue_counts(glue, task, folder, counts):
    p = get_processor(task)
    found = {split: len(p.get_examples(str(glue / folder), split)) for split in counts}
    assert found == counts


def test_real_glue_first_examples(glue):
    def first(task, folder, split):
        return get_processor(task).get_examples(str(glue / folder), split)[0]

    assert first("mrpc", "MRPC", "train") == ex(
        "train-1",
        'Amrozi accused his brother, whom he called "the witness", of deliberately distorting '
        'his evidence.',
        'Referring to him as only "the witness", Amrozi accused his brother of deliberately '
        'distorting his evidence.', "1", "0")
    # an unbalanced opening quote in the real data, kept verbatim
    assert first("mrpc", "MRPC", "dev") == ex(
        "dev-1", "He said the foodservice pie business doesn't fit the company's long-term "
        "growth strategy.", '"The foodservice pie business does not fit our long-term growth '
        'strategy.', "1", "0")
    assert first("mrpc", "MRPC", "test") == ex(
        "test-1", "PCCW's chief operating officer, Mike Butcher, and Alex Arena, the chief "
        "financial officer, will report directly to Mr So.", "Current Chief Operating Officer "
        "Mike Butcher and Group Chief Financial Officer Alex Arena will report to So.", None, "0")
    assert first("cola", "CoLA", "train") == ex(
        "train-0", "Our friends won't buy this analysis, let alone the next one we propose.",
        None, "1", "0")
    assert first("cola", "CoLA", "dev") == ex(
        "dev-0", "The sailors rode the breeze clear of the rocks.", None, "1", "0")
    assert first("sst-2", "SST-2", "train") == ex(
        "train-1", "hide new secretions from the parental units ", None, "0", "0")
    assert first("sst-2", "SST-2", "dev") == ex(
        "dev-1", "it 's a charming and often affecting journey . ", None, "1", "0")
    assert first("sts-b", "STS-B", "train") == ex(
        "train-1", "A plane is taking off.", "An air plane is taking off.", "5.000", "0")
    assert first("sts-b", "STS-B", "dev") == ex(
        "dev-1", "A man with a hard hat is dancing.", "A man wearing a hard hat is dancing.",
        "5.000", "0")
    assert first("sts-b", "STS-B", "test") == ex(
        "test-1", "A girl is styling her hair.", "A girl is brushing her hair.", None, "0")


def test_real_mrpc_dev_label_balance(glue):
    path = glue / "MRPC" / "dev.tsv"
    lines = path.read_text(encoding="utf-8").split("\n")[1:]  # header dropped
    independent = [line.split("\t")[0] for line in lines if line]
    assert len(independent) == 408 and independent.count("1") == 279
    labels = [e.label for e in get_processor("mrpc").get_dev_examples(str(glue / "MRPC"))]
    assert labels == independent
    assert labels.count("1") == 279 and labels.count("0") == 129


def test_real_test_ids_are_the_index_column(glue):
    examples = get_processor("sts-b").get_test_examples(str(glue / "STS-B"))
    assert [e.example_id for e in examples] == [str(i) for i in range(1379)]
    mrpc = get_processor("mrpc").get_test_examples(str(glue / "MRPC"))
    assert [e.example_id for e in mrpc[-2:]] == ["1723", "1724"]
    assert mrpc[-1].guid == "test-1725"
