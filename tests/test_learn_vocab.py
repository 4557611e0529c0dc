"""`python -m bert_tf2.data_gen.learn_vocab`: the original layout, every character, clear errors."""
import collections
import os
import sys
import warnings

import pytest
import warm_python
from absl import flags
from absl.testing import flagsaver

from bert_tf2.data_gen import learn_vocab, vocab_sanity
from bert_tf2.data_gen.tokenization import BasicTokenizer, FullTokenizer, load_vocab_tokens
from bert_tf2.process.errors import UserError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(*args):
    return warm_python.run([sys.executable, "-m", "bert_tf2.data_gen.learn_vocab", *args],
                           cwd=REPO, timeout=300)


@pytest.fixture(scope="module")
def poems(shared_data):
    return shared_data / "corpus" / "nltk_gutenberg" / "blake-poems.txt"


@pytest.fixture(scope="module")
def learned(poems, tmp_path_factory):
    """`do_lower_case -> vocab path` learned from Blake's poems (38 kB) by the command line."""
    folder = tmp_path_factory.mktemp("learned")
    paths = {}
    for lower, flag in ((True, "--do_lower_case"), (False, "--nodo_lower_case")):
        paths[lower] = folder / f"vocab-{flag[2:]}.txt"
        result = run_cli(f"--input_file={poems}", "--vocab_size=1500", flag,
                         f"--output_file={paths[lower]}")
        assert result.returncode == 0, result.stderr
    return paths


@pytest.mark.integration
def test_layout_is_the_released_vocabularies(learned, poems, minilm_dir):
    tokens = load_vocab_tokens(learned[True])
    released = load_vocab_tokens(minilm_dir / "vocab.txt")
    assert len(tokens) == 1500
    assert tokens[:999] == released[:999]  # [PAD], [unused0..98], [UNK] .. [MASK], [unused99..]
    assert tokens[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = sorted({c for line in poems.read_bytes().splitlines()
                    for word in BasicTokenizer(True).tokenize(line) for c in word})
    assert tokens[999:999 + len(chars)] == chars
    assert tokens[-len(chars):] == ["##" + c for c in chars]
    learned_part = tokens[999 + len(chars):-len(chars)]
    assert len(set(learned_part)) == len(learned_part) == 1500 - 999 - 2 * len(chars)
    assert learned_part[:3] == ["th", "the", "##nd"]  # the most frequent pairs come first


@pytest.mark.integration
def test_casing_follows_the_flag(learned):
    with warnings.catch_warnings():
        warnings.simplefilter("error", vocab_sanity.VocabularyWarning)
        share_lower, _ = vocab_sanity.capitalised_share(load_vocab_tokens(learned[True]))
        share_cased, _ = vocab_sanity.capitalised_share(load_vocab_tokens(learned[False]))
    assert share_lower == 0.0
    assert share_cased > 0.05


@pytest.mark.integration
@pytest.mark.parametrize("do_lower_case", [True, False], ids=["lower", "cased"])
def test_its_own_text_has_no_unk(learned, poems, do_lower_case):
    tokenizer = FullTokenizer(learned[do_lower_case], do_lower_case=do_lower_case)
    lines = poems.read_bytes().splitlines()
    tokens = [t for line in lines for t in tokenizer.tokenize(line)]
    assert len(tokens) > 8000
    assert tokens.count("[UNK]") == 0


def test_merges_most_frequent_pair_first_ties_by_text():
    counts = collections.Counter({"low": 5, "lower": 2, "newest": 6, "widest": 3})
    # "##e ##s" and "##s ##t" both occur 9 times: "##e" sorts first; then "##es ##t" (9);
    # then "##o ##w" and "l ##o" (7 each): "#" sorts before "l".
    assert learn_vocab.learn_merges(counts, 4) == ["##es", "##est", "##ow", "low"]


def test_stops_when_no_pair_repeats(caplog):
    counts = collections.Counter({"abc": 1, "de": 1})
    vocab = learn_vocab.build_vocab(counts, vocab_size=2000)
    assert len(vocab) == 999 + 2 * 5  # no pair occurs twice: nothing is learned
    assert "the text supports only 1009 entries" in caplog.text
    # "##b ##c" sorts before "a ##b", and both before "d ##e"
    assert learn_vocab.learn_merges(counts, 10, min_frequency=1) == ["##bc", "abc", "de"]


@pytest.fixture
def parsed_flags():
    """absl flags usable in this process (the command line is parsed by `app.run` otherwise)."""
    learn_vocab.define_flags()
    was_parsed = flags.FLAGS.is_parsed()
    flags.FLAGS.mark_as_parsed()
    yield
    if not was_parsed:
        flags.FLAGS.unparse_flags()


def test_errors_name_the_flag_and_leave_the_output_alone(poems, tmp_path, parsed_flags):
    output = tmp_path / "vocab.txt"
    output.write_text("previous\n")
    empty = tmp_path / "empty.txt"
    empty.write_text(" \n\u200b\n", encoding="utf-8")  # a space and a dropped character only
    cases = [
        (dict(input_file=f"{poems},{tmp_path}/missing*.txt"),
         f"--input_file: no file matches '{tmp_path}/missing*.txt'"),
        (dict(vocab_size=1000),
         "--vocab_size=1000 is too small: 999 reserved entries (--num_unused_tokens=994) and "
         "45 characters seen, each alone and with '##', need 1089 before anything is learned"),
        (dict(num_unused_tokens=50),
         "--num_unused_tokens=50: [UNK] is id 100 only with at least 99 unused tokens before it"),
        (dict(output_file=f"{output}/vocab.txt"),  # a missing folder is made; a file is in the way
         f"--output_file {output}/vocab.txt: {output} is a file, not a folder; name a path whose "
         "folders are folders"),
        (dict(input_file=f"{empty}"), f"--input_file='{empty}': no words in 1 files"),
    ]
    for change, message in cases:
        values = {"input_file": str(poems), "vocab_size": 2000, "output_file": str(output),
                  **change}
        with flagsaver.flagsaver(**values), pytest.raises(UserError) as error:
            learn_vocab.main([])
        assert str(error.value) == message
    assert output.read_text() == "previous\n"
    assert sorted(os.listdir(tmp_path)) == ["empty.txt", "vocab.txt"]  # no temporary file left


@pytest.mark.integration
def test_command_line_error_exits_with_status_1(tmp_path):
    result = run_cli(f"--input_file={tmp_path}/missing.txt", "--vocab_size=2000",
                     f"--output_file={tmp_path}/vocab.txt")
    assert result.returncode == 1
    assert result.stderr.endswith(
        f"learn_vocab.py: error: --input_file: no file matches '{tmp_path}/missing.txt'\n")
