"""A field or line of any length, in every reader: a whole book in one TSV cell, one CSV cell,
one JSON line, one SQuAD context or question, one CoNLL token. Python's csv module alone refuses
a field over 131,072 characters; the readers lift that limit (`data_gen.csv_files`). Tasks that
truncate tokenize only the pieces a row can keep (`FullTokenizer.tokenize_prefix`), so a long
document costs the memory of its row, not of all its tokens; tasks that window it read it whole.

The long texts are real: Jane Austen's Emma (887 KB) from the shared corpus. Features are checked
against the original's algorithm written out here (tokenize everything, then truncate).
"""
import json
import random
import tracemalloc

import pytest
from conftest import read_tsv, run_script

from bert_tf2.data_gen.packing import pack, truncate_seq_pair
from bert_tf2.tasks.classification import features as classification
from bert_tf2.tasks.classification.processors import get_processor
from bert_tf2.tasks.multiple_choice import features as multiple_choice
from bert_tf2.tasks.multiple_choice.reader import read_swag

LIMIT = 131072  # the csv module's own default field limit


@pytest.fixture(scope="module")
def book(shared_data):
    text = (shared_data / "corpus" / "nltk_gutenberg" / "austen-emma.txt").read_text(
        encoding="utf-8")
    return " ".join(text.split())  # one line, 860 K characters


def original_pair(tokenizer, text_a, text_b, max_seq_length):
    """The original `convert_single_example`'s tokens: everything tokenized, then trimmed."""
    tokens_a = tokenizer.tokenize(text_a)
    tokens_b = tokenizer.tokenize(text_b) if text_b else None
    if tokens_b:
        truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    else:
        del tokens_a[max_seq_length - 2:]
    return pack(tokens_a, tokens_b or None, max_seq_length, tokenizer)


def test_tokenize_prefix_is_the_first_pieces_of_tokenize(tokenizer, book, shared_data):
    """Equal to `tokenize(text)[:k]` for every k tried, on English, accented and CJK text."""
    rng = random.Random(7)
    texts = [book[:20000], "Ça coûte 10 €: naïve résumé, 東京タワー and Straße.  " * 40,
             (shared_data / "corpus" / "wikitext-2" / "valid.txt").read_text(
                 encoding="utf-8")[:30000], "", "   "]
    for text in texts:
        full = tokenizer.tokenize(text)
        for k in [0, 1, 2, 126, 127, 128, len(full) - 1, len(full), len(full) + 5,
                  *rng.sample(range(1, len(full) + 2), min(20, len(full) + 1))]:
            assert tokenizer.tokenize_prefix(text, k) == full[:max(k, 0)], (text[:30], k)


def test_text_head_holds_the_first_tokens_of_the_text(tokenizer, book, shared_data):
    """`tokenize(text_head(t, k))[:k] == tokenize(t)[:k]` for every k tried, cut after a whole
    chunk (the serving runtimes tokenise only the head of a long text)."""
    rng = random.Random(11)
    texts = [book[:20000], "Ça coûte 10 €: naïve résumé, 東京タワー and Straße.  " * 40,
             (shared_data / "corpus" / "wikitext-2" / "valid.txt").read_text(
                 encoding="utf-8")[:30000], "", "   ", "x" * 500 + " tail"]
    for text in texts:
        full = tokenizer.tokenize(text)
        for k in [0, 1, 2, 126, 127, 128, len(full) - 1, len(full), len(full) + 5,
                  *rng.sample(range(1, len(full) + 2), min(20, len(full) + 1))]:
            head = tokenizer.text_head(text, k)
            assert text.startswith(head) and tokenizer.tokenize(head)[:k] == full[:max(k, 0)]
            if 0 < k < len(full):
                assert len(tokenizer.tokenize(head)) < k + 60  # a head, not the whole text
    assert len(tokenizer.text_head(book, 126)) < 1000 < len(book)


def test_tokenize_prefix_reads_only_what_it_keeps(tokenizer, book):
    """Peak memory of the first 126 pieces of an 860 K-character book: a few kilobytes, where
    tokenizing the whole book holds about 200,000 pieces (many megabytes)."""
    tracemalloc.start()
    tokenizer.tokenize_prefix(book, 126)
    prefix_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    tokenizer.tokenize(book)
    full_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert prefix_peak < 200_000 and full_peak > 50 * prefix_peak, (prefix_peak, full_peak)


def test_a_book_in_one_tsv_cell_is_read_and_truncated_as_the_original(tmp_path, tokenizer,
                                                                       book):
    assert len(book) > 6 * LIMIT
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
    rows = [header, f"1\t1\t2\t{book}\tA short second sentence.",
            f"0\t3\t4\tA short first sentence.\t{book[:LIMIT + 10]}"]
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    examples = get_processor("MRPC").get_train_examples(str(tmp_path))
    assert [len(e.text_a) for e in examples] == [len(book), 23]
    assert examples[1].text_b == book[:LIMIT + 10]
    for index, example in enumerate(examples):
        row = classification.convert_example(example, index, {"0": 0, "1": 1}, 128, tokenizer)
        expected = original_pair(tokenizer, example.text_a, example.text_b, 128)
        assert {k: row[k] for k in expected} == expected


def test_a_book_in_one_swag_csv_cell_is_read_and_truncated_as_the_original(tmp_path, tokenizer,
                                                                             book):
    header = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2," \
             "ending3,label"
    text = book[:3 * LIMIT].replace('"', "'")
    row = f'0,v,1,x,"{text}",He,gold,runs.,walks.,sits.,"{text}",2'
    (tmp_path / "train.csv").write_text(f"{header}\n{row}\n", encoding="utf-8")
    [example] = read_swag(str(tmp_path / "train.csv"))
    assert example.context == text and example.choices[3] == text
    features = multiple_choice.convert_example(example, 0, 4, 64, tokenizer)
    for choice, second in enumerate(example.pair_texts()):
        expected = original_pair(tokenizer, example.context, second, 64)
        assert features["input_ids"][choice * 64:(choice + 1) * 64] == expected["input_ids"]
        assert features["segment_ids"][choice * 64:(choice + 1) * 64] == expected["segment_ids"]


def test_a_book_in_one_json_line_is_read_whole_and_windowed(tmp_path, tokenizer, book):
    (tmp_path / "train.jsonl").write_text(
        json.dumps({"text": book[:400000], "labels": ["emma"]}) + "\n"
        + json.dumps({"text": "short", "labels": ["other"]}) + "\n", encoding="utf-8")
    examples = get_processor("multilabel").get_examples(str(tmp_path), "train")
    assert examples[0].text_a == book[:400000]
    rows = classification.convert_document(examples[0], 0, {"emma": 0, "other": 1}, 128,
                                           tokenizer, True, 64)
    pieces = len(tokenizer.tokenize(book[:400000]))
    assert len(rows) == -(-(pieces - 126) // 64) + 1  # windows of 126 pieces, every 64


def test_a_book_as_a_squad_context_and_question(tmp_path, tokenizer, book):
    from bert_tf2.tasks.squad.features import SquadSettings, convert_example
    from bert_tf2.tasks.squad.reader import read_squad_examples

    context = book[:300000]
    answer = "Emma Woodhouse"
    dataset = {"version": "1.1", "data": [{"title": "Emma", "paragraphs": [{
        "context": context, "qas": [{"id": "q1", "question": book[:LIMIT + 1],
                                     "answers": [{"text": answer,
                                                  "answer_start": context.index(answer)}]}]}]}]}
    (tmp_path / "train.json").write_text(json.dumps(dataset), encoding="utf-8")
    [example] = read_squad_examples(str(tmp_path / "train.json"), is_training=True)
    assert example.question_text == book[:LIMIT + 1]
    settings = SquadSettings(max_seq_length=128, doc_stride=64, max_query_length=20)
    windows = convert_example(example, 0, tokenizer, settings, is_training=True)
    query = tokenizer.tokenize(book[:LIMIT + 1])[:20]
    first = tokenizer.convert_ids_to_tokens(windows[0]["input_ids"][1:21])
    assert first == query and len(windows) > 1000  # the context read whole, in windows


def test_a_long_conll_token_and_sentence(tmp_path, tokenizer, book):
    from bert_tf2.tasks.ner.features import convert_sentence
    from bert_tf2.tasks.ner.reader import read_conll

    words = book[:200000].split()
    lines = ["-DOCSTART- -X- -X- O", "", *(f"{w} NN O O" for w in words),
             f"{'x' * (LIMIT + 1)} NN O B-PER", ""]
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    sentences = read_conll(str(tmp_path / "train.txt"))
    long = [s for s in sentences if len(s.words) > 1000]
    assert len(long) == 1 and long[0].words[-1] == "x" * (LIMIT + 1)
    windows = convert_sentence(long[0], 0, {"O": 0, "B-PER": 1}, 64, tokenizer, 32)
    assert len(windows) > 100


@pytest.mark.integration
def test_run_classifier_trains_on_a_tsv_with_a_book_in_a_cell(tmp_path, tiny_checkpoint, book,
                                                              shared_data):
    """Through the command line, as the user who met "field larger than field limit" ran it."""
    data = tmp_path / "MRPC"
    data.mkdir()
    source = (shared_data / "glue" / "MRPC" / "train.tsv").read_text(
        encoding="utf-8-sig").splitlines()
    rows = source[:17]
    fields = rows[1].split("\t")
    fields[3] = book[:300000]
    rows[1] = "\t".join(fields)
    (data / "train.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (data / "dev.tsv").write_text("\n".join([source[0], *source[17:25]]) + "\n",
                                  encoding="utf-8")
    result = run_script("run_classifier.py", "--task_name=MRPC", f"--data_dir={data}",
                        f"--init_checkpoint={tiny_checkpoint}/bert_model.ckpt",
                        "--max_seq_length=64", "--train_batch_size=8", "--num_train_epochs=1",
                        f"--output_dir={tmp_path / 'out'}", "--do_train", "--do_eval",
                        check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "16 training examples" in result.stderr
    assert read_tsv(tmp_path / "out" / "eval_predictions.tsv")
