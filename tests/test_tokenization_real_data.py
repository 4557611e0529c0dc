"""All tokenizers on every line of every text file of the shared data: same ids, faithful spans.

Compared with the Python `FullTokenizer.tokenize`: the graph tokenizer, the data tools' fast paths
(`tokenize_to_ids`, and `tokenize_lines_to_ids` on each batch of lines at once, in Python and
compiled: `compiled_wordpiece`, which the pretraining-data tools use) and, where
bert-tensorflow is installed, Google's own `FullTokenizer`.

Sources (bytes, as stored): every line of every file under corpus/ (Gutenberg, WikiText-2, tiny
Shakespeare, READMEs; one Gutenberg file is Latin-1, i.e. invalid UTF-8), the word column of the
CoNLL-2003 files, every SQuAD dev context, question and answer, and the sentence columns of the
GLUE files as the GLUE processors read them. Vocabularies: the real uncased one with lower-casing,
and a cased one learned here from part of the corpus. A quick run takes every 50th line; the slow
run takes them all.
"""
import importlib.util
import json
import warnings

import numpy as np
import pytest
import tensorflow as tf
from test_tokenization import span_mismatches

from bert_tf2.data_gen import learn_vocab, vocab_sanity
from bert_tf2.data_gen.compiled_wordpiece import CompiledWordpiece
from bert_tf2.data_gen.graph_tokenizer import GraphTokenizer
from bert_tf2.data_gen.text_ids import TextIds
from bert_tf2.data_gen.tokenization import FullTokenizer

LINES = {"corpus": 176590, "conll": 254983, "squad": 47363, "glue": 116267}
# file pattern under glue/ -> (header lines, sentence columns), as the GLUE processors read them
GLUE_COLUMNS = {
    "MRPC/train.tsv": (1, (3, 4)), "MRPC/dev.tsv": (1, (3, 4)), "MRPC/test.tsv": (1, (3, 4)),
    "CoLA/train.tsv": (0, (3,)), "CoLA/dev.tsv": (0, (3,)), "CoLA/raw/*.tsv": (0, (3,)),
    "SST-2/*.tsv": (1, (0,)), "STS-B/*.tsv": (1, (7, 8)),
}


def file_lines(path) -> list:
    """Lines split on "\\n" only, as bytes (a final newline opens no new line)."""
    lines = path.read_bytes().split(b"\n")
    return lines[:-1] if lines and not lines[-1] else lines


def glue_sentences(glue) -> list:
    sentences = []
    for pattern, (header, columns) in GLUE_COLUMNS.items():
        for path in sorted(glue.glob(pattern)):
            for line in file_lines(path)[header:]:
                fields = line.rstrip(b"\r").split(b"\t")
                sentences.extend(fields[c] for c in columns if c < len(fields))
    return sentences


def squad_texts(path) -> list:
    texts = []
    for article in json.loads(path.read_bytes())["data"]:
        for paragraph in article["paragraphs"]:
            texts.append(paragraph["context"].encode("utf-8"))
            for qa in paragraph["qas"]:
                texts.append(qa["question"].encode("utf-8"))
                texts.extend(answer["text"].encode("utf-8") for answer in qa["answers"])
    return texts


@pytest.fixture(scope="module")
def real_texts(shared_data) -> dict:
    corpus = sorted(p for p in (shared_data / "corpus").rglob("*") if p.is_file())
    conll = sorted((shared_data / "conll2003").glob("*.txt"))
    return {
        "corpus": [line for path in corpus for line in file_lines(path)],
        "conll": [line.split(b" ")[0] for path in conll for line in file_lines(path)
                  if line.strip() and not line.startswith(b"-DOCSTART-")],
        "squad": squad_texts(shared_data / "squad" / "dev-v1.1.json"),
        "glue": glue_sentences(shared_data / "glue"),
    }


@pytest.fixture(scope="module")
def cased_vocab(shared_data, tmp_path_factory):
    """8,000 cased entries learned from three Austen novels and WikiText-2 valid (~2.5 MB)."""
    corpus = shared_data / "corpus"
    paths = sorted((corpus / "nltk_gutenberg").glob("austen-*.txt")) + [
        corpus / "wikitext-2" / "valid.txt"]
    vocab = learn_vocab.build_vocab(learn_vocab.count_words(paths, do_lower_case=False),
                                    vocab_size=8000, num_unused=99)
    path = tmp_path_factory.mktemp("cased") / "vocab.txt"
    path.write_text("".join(token + "\n" for token in vocab), encoding="utf-8")
    return path


def original_tokenizer(vocab_file, do_lower_case: bool):
    """Google's FullTokenizer (bert-tensorflow 1.0.4), or None where it is not installed."""
    if importlib.util.find_spec("bert") is None:
        return None
    from absl import flags
    from bert import tokenization

    if not flags.FLAGS.is_parsed():
        flags.FLAGS(["oracle"])  # it reads --preserve_unused_tokens (False: the original rules)
    return tokenization.FullTokenizer(str(vocab_file), do_lower_case)


def line_ids(tokenizer, batch: list) -> list:
    """`tokenize_lines_to_ids` on the batch at once, cut back into lines."""
    ids, counts = tokenizer.tokenize_lines_to_ids(batch)
    return [part.tolist() for part in np.split(ids, np.cumsum(counts)[:-1])]


def compare(vocab_file, do_lower_case: bool, texts: dict, every: int) -> dict:
    """Per source: lines compared, lines whose ids differ (per tokenizer), tokens, [UNK]s, span
    mismatches."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", vocab_sanity.VocabularyWarning)  # casing must fit
        python = FullTokenizer(vocab_file, do_lower_case)
        graph = GraphTokenizer(vocab_file, do_lower_case)
    compiled = CompiledWordpiece(python)
    original = original_tokenizer(vocab_file, do_lower_case)
    unk = python.vocab["[UNK]"]
    summary = {}
    for source, lines in texts.items():
        lines = lines[::every]
        differing = {"graph": [], "tokenize_to_ids": [], "tokenize_lines_to_ids": [],
                     "compiled": [], "original": []}
        tokens, unks, bad_spans = 0, 0, []
        for start in range(0, len(lines), 4096):
            batch = lines[start:start + 4096]
            graph_ids = graph(tf.constant(batch)).to_list()
            decoded = [line.decode("utf-8", "ignore") for line in batch]  # as the original does
            batch_ids = line_ids(python, decoded)
            compiled_ids = line_ids(compiled, decoded)
            for offset, line in enumerate(batch):
                python_ids = python.convert_tokens_to_ids(python.tokenize(line))
                others = {"graph": graph_ids[offset],
                          "tokenize_to_ids": python.tokenize_to_ids(line),
                          "tokenize_lines_to_ids": batch_ids[offset],
                          "compiled": compiled_ids[offset]}
                if original is not None:
                    others["original"] = original.convert_tokens_to_ids(original.tokenize(line))
                for name, ids in others.items():
                    if ids != python_ids:
                        differing[name].append(start + offset)
                tokens += len(python_ids)
                unks += python_ids.count(unk)
                bad_spans += span_mismatches(python, line)
        summary[source] = {"lines": len(lines), "differing_lines": differing, "tokens": tokens,
                           "unk": unks, "span_mismatches": bad_spans,
                           "original_compared": original is not None}
    return summary


@pytest.fixture(scope="module", params=[
    pytest.param(("uncased", 50), id="uncased-minilm-every-50th-line"),
    pytest.param(("cased", 50), id="cased-learned-every-50th-line"),
    pytest.param(("uncased", 1), id="uncased-minilm-every-line", marks=pytest.mark.slow),
    pytest.param(("cased", 1), id="cased-learned-every-line", marks=pytest.mark.slow)])
def results(request, real_texts, minilm_dir):
    casing, every = request.param
    if casing == "uncased":
        summary = compare(minilm_dir / "vocab.txt", True, real_texts, every)
    else:
        summary = compare(request.getfixturevalue("cased_vocab"), False, real_texts, every)
    return every, summary


def test_every_tokenizer_gives_the_same_ids_on_every_line(results):
    every, summary = results
    assert {source: s["lines"] for source, s in summary.items()} == {
        source: -(-count // every) for source, count in LINES.items()}
    no_difference = {"graph": [], "tokenize_to_ids": [], "tokenize_lines_to_ids": [],
                     "compiled": [], "original": []}
    assert {source: s["differing_lines"] for source, s in summary.items()} == {
        source: no_difference for source in LINES}


def test_the_original_tokenizer_was_compared(results):
    """Without bert-tensorflow (`make test` installs it) the test above does not hold the ids
    against Google's own code; say so."""
    _, summary = results
    if not all(s["original_compared"] for s in summary.values()):
        pytest.skip("the oracle bert-tensorflow==1.0.4 is not installed: "
                    "pip install --no-deps bert-tensorflow==1.0.4")


def test_unk_is_rare_with_a_fitting_vocabulary(results):
    _, summary = results
    assert sum(s["unk"] for s in summary.values()) < 0.002 * sum(
        s["tokens"] for s in summary.values())


def test_token_spans_map_back_to_the_original_text(results):
    _, summary = results
    assert {source: s["span_mismatches"] for source, s in summary.items()} == {
        source: [] for source in LINES}


@pytest.mark.filterwarnings("ignore:.*looks UNCASED")
@pytest.mark.parametrize("lower", [True, False])
def test_compiled_ids_equal_the_python_fast_path_on_every_line(real_texts, shared_data,
                                                               minilm_dir, lower):
    """Every line of every source above, and every Reuters-21578 story, without sampling: the
    compiled tokenizer of the pretraining-data tools gives the ids of `tokenize_lines_to_ids`
    (which the tests above hold to `tokenize` and the original's), in batches of 1,000 lines."""
    python = FullTokenizer(minilm_dir / "vocab.txt", lower)
    compiled = CompiledWordpiece(python)
    reuters = [json.loads(line)["text"] for split in ("train", "dev", "test")
               for line in (shared_data / "reuters21578" / f"{split}.jsonl").open(
                   encoding="utf-8")]
    texts = {source: [line.decode("utf-8", "ignore") for line in lines]
             for source, lines in real_texts.items()}
    texts["reuters"] = reuters
    differing, tokens = {}, 0
    for source, lines in texts.items():
        for start in range(0, len(lines), 1000):
            batch = lines[start:start + 1000]
            expected = line_ids(python, batch)
            ours = line_ids(compiled, batch)
            differing[source] = differing.get(source, []) + [
                start + k for k, (a, b) in enumerate(zip(expected, ours)) if a != b]
            tokens += sum(map(len, expected))
    assert {source: len(lines) for source, lines in texts.items()} == {**LINES, "reuters": 10789}
    assert differing == {source: [] for source in texts} and tokens > 6_000_000


def test_serving_ids_are_the_same_compiled_or_not(real_texts, minilm_dir):
    """`TextIds`, the fast paths' tokenizer, gives the same ids before and after `compile()` (which
    their `warm_up` calls) on every GLUE sentence and SQuAD text, whole and cut to their heads;
    each head's ids start with the text's own first tokens."""
    python = TextIds(FullTokenizer(minilm_dir / "vocab.txt"))
    compiled = TextIds(FullTokenizer(minilm_dir / "vocab.txt"))
    compiled.compile()
    assert compiled.compiled and not python.compiled
    for source in ("glue", "squad"):
        lines = [line.decode("utf-8", "ignore") for line in real_texts[source]]
        for start in range(0, len(lines), 2000):
            batch = lines[start:start + 2000]
            for max_tokens in (16, 512):
                expected, ours = python(batch, max_tokens), compiled(batch, max_tokens)
                assert len(expected) == len(ours) == len(batch)
                assert all(np.array_equal(a, b) for a, b in zip(expected, ours)), source
    tokenizer = python.tokenizer
    contexts = [text.decode("utf-8") for text in real_texts["squad"] if len(text) > 400][:100]
    assert len(contexts) == 100  # paragraphs, each cut to its head (over 8 * 16 + 64 characters)
    for text, ids in zip(contexts, compiled(contexts, 16)):
        whole = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text))
        assert ids[:16].tolist() == whole[:16]
