"""NER readers (`tasks.ner.reader`): CoNLL columns and slash-tagged lines, label lists, tagging
schemes, bad input named by file and line, and the real CoNLL-2003 train/dev files."""
import pytest

from bert_tf2.data_gen.errors import DataError
from bert_tf2.tasks.ner.metrics import count_chunks
from bert_tf2.tasks.ner.reader import (
    Sentence,
    check_labels,
    detect_scheme,
    label_list,
    read_conll,
    read_slash_tagged,
    to_iob2,
)

IOB2_TAGS = ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER"]

CONLL = """\
-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER


-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP B-LOC
"""


def write(tmp_path, text, name="data.txt"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# ----------------------------------------------------------------------------- read_conll


def test_read_conll(tmp_path):
    path = write(tmp_path, CONLL)
    sentences = read_conll(path)
    assert sentences == [
        Sentence(["EU", "rejects", "German"], ["B-ORG", "O", "B-MISC"], 3, 0, path),
        Sentence(["Peter", "Blackburn"], ["B-PER", "I-PER"], 7, 1, path),
        Sentence(["BRUSSELS"], ["B-LOC"], 13, 2, path),
    ]
    assert sentences[0].word_line(2) == 5 and sentences[1].word_line(1) == 8


def test_read_conll_other_columns_and_no_labels(tmp_path):
    path = write(tmp_path, CONLL)
    assert read_conll(path, label_column=1)[0].labels == ["NNP", "VBZ", "JJ"]
    assert read_conll(path, label_column=-2)[1].labels == ["B-NP", "I-NP"]
    unlabelled = read_conll(path, has_labels=False)
    assert [s.words for s in unlabelled] == [["EU", "rejects", "German"],
                                             ["Peter", "Blackburn"], ["BRUSSELS"]]
    assert all(s.labels is None for s in unlabelled)
    # Words only (one column): fine without labels.
    words_only = write(tmp_path, "EU\nrejects\n\nPeter\n", "words.txt")
    assert [s.words for s in read_conll(words_only, has_labels=False)] == [["EU", "rejects"],
                                                                           ["Peter"]]


def test_read_conll_any_whitespace_crlf_and_bom(tmp_path):
    path = tmp_path / "tabs.txt"
    path.write_bytes("\ufeffEU\tNNP  B-ORG\r\nrejects \t VBZ\tO\r\n\r\n".encode("utf-8"))
    expected = Sentence(["EU", "rejects"], ["B-ORG", "O"], 1, 0, str(path))
    assert read_conll(str(path)) == [expected]


def test_a_wrong_column_count_names_file_and_line(tmp_path):
    path = write(tmp_path, CONLL.replace("Blackburn NNP I-NP I-PER", "Blackburn I-PER"))
    with pytest.raises(DataError) as error:
        read_conll(path)
    assert str(error.value) == (f"{path}:8: 2 columns, but the file's first token line has 4")


def test_bad_label_columns(tmp_path):
    path = write(tmp_path, CONLL)
    with pytest.raises(DataError, match=rf"^{path}:3: label column 4 is outside the 4 columns"):
        read_conll(path, label_column=4)
    with pytest.raises(DataError, match=r"label column -5 is outside the 4 columns"):
        read_conll(path, label_column=-5)
    with pytest.raises(DataError, match=r"label column -4 is the word column"):
        read_conll(path, label_column=-4)
    with pytest.raises(DataError,
                       match=r"one\.txt:1: label column -1 is the word column \(1 column\)"):
        read_conll(write(tmp_path, "EU\n", "one.txt"))


def test_empty_and_missing_files(tmp_path):
    for name, text in (("empty.txt", ""), ("blank.txt", "\n\n  \n"),
                       ("docstart.txt", "-DOCSTART- -X- -X- O\n\n")):
        path = write(tmp_path, text, name)
        with pytest.raises(DataError, match=rf"^{path}: empty file \(no sentences\)$"):
            read_conll(path)
    with pytest.raises(DataError, match=r"nope\.txt: missing file"):
        read_conll(str(tmp_path / "nope.txt"))
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9 O\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1\.txt:1: not UTF-8 text \(byte 0xe9 at column \d+\)"):
        read_conll(str(latin1))


# ----------------------------------------------------------------------- read_slash_tagged


def test_read_slash_tagged(tmp_path):
    path = write(tmp_path, "The/DT 1/2/CD share/NN\n\nGo/VB  home/NN ./.\n")
    assert read_slash_tagged(path) == [
        Sentence(["The", "1/2", "share"], ["DT", "CD", "NN"], 1, 0, path, word_per_line=False),
        Sentence(["Go", "home", "."], ["VB", "NN", "."], 3, 1, path, word_per_line=False),
    ]


def test_slash_tagged_errors(tmp_path):
    path = write(tmp_path, "The/DT cat/NN\nsat on/IN\n")
    with pytest.raises(DataError, match=rf"^{path}:2: token 'sat' has no '/TAG'$"):
        read_slash_tagged(path)
    path = write(tmp_path, "The/DT cat/\n", "empty_tag.txt")
    with pytest.raises(DataError, match=rf"^{path}:1: token 'cat/' has an empty tag$"):
        read_slash_tagged(path)
    path = write(tmp_path, "\n\n", "empty.txt")
    with pytest.raises(DataError, match=rf"^{path}: empty file"):
        read_slash_tagged(path)


# ---------------------------------------------------------------------------- label lists


def test_label_list_from_training_and_given(tmp_path):
    path = write(tmp_path, CONLL)
    sentences = read_conll(path)
    assert label_list(sentences) == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER"]
    assert label_list(sentences, IOB2_TAGS) == IOB2_TAGS
    # A training tag outside the given list: the error names the file and the tag's own line.
    with pytest.raises(DataError) as error:
        label_list(sentences, ["O", "B-ORG", "B-MISC", "B-LOC", "B-PER"])
    assert str(error.value) == (f"{path}:8: label 'I-PER' is not one of O, B-ORG, B-MISC, "
                                f"B-LOC, B-PER")
    with pytest.raises(DataError, match="repeats O"):
        label_list(sentences, ["O", "O", *IOB2_TAGS[1:]])
    with pytest.raises(DataError, match="has no labels"):
        label_list(read_conll(path, has_labels=False))


def test_check_labels_at_prediction_time(tmp_path):
    test_file = write(tmp_path, CONLL.replace("German JJ B-NP B-MISC", "German JJ B-NP B-MSC"),
                      "test.txt")
    sentences = read_conll(test_file)
    with pytest.raises(DataError, match=rf"^{test_file}:5: label 'B-MSC' is not one of O, "):
        check_labels(sentences, IOB2_TAGS)
    with pytest.raises(DataError, match=r"^other\.txt:5: label 'B-MSC'"):
        check_labels(sentences, IOB2_TAGS, "other.txt")
    slash = write(tmp_path, "Paris/B-LOC is/O nice/ADJ\n", "slash.txt")
    with pytest.raises(DataError, match=rf"^{slash}:1: label 'ADJ'"):
        check_labels(read_slash_tagged(slash), IOB2_TAGS)
    check_labels(read_conll(test_file, has_labels=False), IOB2_TAGS)  # nothing to check


# ------------------------------------------------------------------------ tagging schemes


def test_detect_scheme_and_to_iob2():
    iob2 = [["B-PER", "I-PER", "O", "B-LOC", "B-LOC"], ["B-ORG", "O"]]
    iob1 = [["I-PER", "I-PER", "O", "I-LOC", "B-LOC"], ["I-ORG", "O"]]
    assert detect_scheme(iob2) == "IOB2" and detect_scheme(iob1) == "IOB1"
    assert [to_iob2(tags) for tags in iob1] == iob2
    assert [to_iob2(tags) for tags in iob2] == iob2          # IOB2 unchanged
    # One IOB1 start anywhere makes the data IOB1: an I- after another type, or a sentence start
    # (a sentence start counts as after O even when the previous sentence ends in that type).
    assert detect_scheme(["B-PER", "I-ORG"]) == "IOB1"
    assert detect_scheme([["B-PER"], ["I-PER"]]) == "IOB1"
    assert detect_scheme(["B-PER", "I-PER"]) == "IOB2"      # one flat sentence
    assert detect_scheme([["O", "O"], []]) == "IOB2"         # no entity at all
    assert to_iob2(["I-ORG", "I-PER", "I-PER", "B-PER"]) == ["B-ORG", "B-PER", "I-PER", "B-PER"]
    with pytest.raises(ValueError, match="'S-PER' is not an IOB tag"):
        detect_scheme(["S-PER"])
    with pytest.raises(ValueError, match="'PER' is not an IOB tag"):
        to_iob2(["PER"])


# ------------------------------------------------------------------------------ real data


@pytest.mark.parametrize("split, num_sentences, num_entities, per_type, first_words", [
    ("train", 14041, 23499, {"LOC": 7140, "MISC": 3438, "ORG": 6321, "PER": 6600},
     ["EU", "rejects", "German"]),
    ("valid", 3250, 5942, {"LOC": 1837, "MISC": 922, "ORG": 1341, "PER": 1842},
     ["CRICKET", "-", "LEICESTERSHIRE"]),
])
def test_real_conll2003(shared_data, split, num_sentences, num_entities, per_type,
                        first_words):
    path = str(shared_data / "conll2003" / f"{split}.txt")
    sentences = read_conll(path)
    assert len(sentences) == num_sentences
    tags = [s.labels for s in sentences]
    # Entities as conlleval's chunker counts them on the gold tags (IOB2: one per B- tag).
    chunks = count_chunks(tags)
    assert sum(chunks.values()) == num_entities and chunks == per_type
    assert label_list(sentences) == IOB2_TAGS
    assert detect_scheme(tags) == "IOB2"
    assert sentences[0].line == 3 and sentences[0].words[:3] == first_words
    assert [s.sentence_id for s in sentences] == list(range(num_sentences))
    assert all(s.words and len(s.words) == len(s.labels) for s in sentences)
    assert all("-DOCSTART-" not in s.words for s in sentences)
