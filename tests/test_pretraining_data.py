"""create_pretraining_data end to end on the shared corpus: the recipe's numbers, in the records.

The main run is the command line itself (a subprocess) on WikiText-2 with the original's defaults
(dupe_factor 10, max_seq_length 128, 20 predictions), 2 workers and 2 output shards.
"""
import json
import os
import sys

import numpy as np
import pytest
import warm_python

from bert_tf2.data_gen.pretraining import masking
from bert_tf2.data_gen.pretraining.create_pretraining_data import create_pretraining_data
from bert_tf2.data_gen.pretraining.dataset import load_records
from bert_tf2.data_gen.pretraining.documents import InputOptions, stream_documents
from bert_tf2.data_gen.pretraining.instances import InstanceSettings
from bert_tf2.data_gen.tokenization import load_vocab

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def vocab_file(minilm_dir) -> str:
    return str(minilm_dir / "vocab.txt")


@pytest.fixture(scope="module")
def ids(vocab_file) -> dict:
    vocab = load_vocab(vocab_file)
    return {token: vocab[token] for token in ("[CLS]", "[SEP]", "[MASK]")}


@pytest.fixture(scope="module")
def wikitext(shared_data) -> list:
    return [str(shared_data / "corpus" / "wikitext-2" / name) for name in ("valid.txt", "test.txt")]


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory, wikitext, vocab_file):
    out = tmp_path_factory.mktemp("corpus")
    shards = [str(out / "train-0.tfrecord"), str(out / "train-1.tfrecord")]
    # A fresh interpreter, as a user's: its two workers are forked (`parallel.start_method`),
    # where a fork of the warm Python, which holds TensorFlow, would spawn them.
    completed = warm_python.run(
        [sys.executable, "-m", "bert_tf2.data_gen.pretraining.create_pretraining_data",
         f"--input_file={','.join(wikitext)}", "--input_format=wikitext",
         f"--output_file={','.join(shards)}", f"--vocab_file={vocab_file}", "--num_workers=2",
         "--pool_bytes=600000"],
        cwd=REPO, capture_output=True, text=True, timeout=600, warm=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    with open(shards[0] + ".stats.json") as f:
        stats = json.load(f)
    return out, shards, stats, load_records(shards, 128, 20), completed.stderr


@pytest.mark.integration
def test_cli_reports_progress_and_the_summary(corpus_run):
    *_, stderr = corpus_run
    assert "documents in 4 pools; making records with 2 worker(s)" in stderr
    assert "pools 4/4 | documents 122 | instances" in stderr and "tokens/s" in stderr
    assert "[MASK] / random / unchanged" in stderr and "instance length histogram" in stderr


@pytest.mark.integration
def test_next_sentence_labels_are_about_half_random(corpus_run):
    nsp = corpus_run[2]["next_sentence_labels"]
    instances = corpus_run[2]["instances"]
    assert instances > 50_000
    # The coin flip is fair; one-sentence chunks (long sentences) always take a random B, which
    # lifts the overall share a little above one half, in the original as here.
    assert abs(nsp["random_fraction_of_coin_flips"] - 0.5) < 0.01
    assert 0.5 < nsp["random_fraction"] < 0.56
    assert nsp["random_document_same_as_current"] == 0


@pytest.mark.integration
def test_masked_positions_are_15_percent_split_80_10_10(corpus_run):
    mlm = corpus_run[2]["masked_lm"]
    assert mlm["masked_positions"] > 100_000
    assert abs(mlm["fraction_of_tokens"] - 0.15) < 0.005
    for kind, share in ((masking.MASK, 0.8), (masking.RANDOM, 0.1), (masking.UNCHANGED, 0.1)):
        assert abs(mlm["fractions"][kind] - share) < 0.01, (kind, mlm["fractions"])


@pytest.mark.integration
def test_short_target_length_rate_is_short_seq_prob(corpus_run):
    target = corpus_run[2]["target_length"]
    assert target["draws"] == 10 * corpus_run[2]["documents"] >= 1_000
    assert abs(target["short_fraction"] - 0.1) < 0.03  # 3 standard errors at 1,220 draws


@pytest.mark.integration
def test_every_record_parses_and_agrees_with_the_statistics(corpus_run, ids):
    _, shards, stats, records, _ = corpus_run
    n = len(records["input_ids"])
    assert n == stats["instances"]
    lengths = records["input_mask"].sum(axis=1)
    assert lengths.sum() == stats["tokens"] and lengths.max() == 128
    assert (records["input_mask"] == (np.arange(128) < lengths[:, None])).all()
    assert (records["input_ids"][:, 0] == ids["[CLS]"]).all()
    assert (records["input_ids"][np.arange(n), lengths - 1] == ids["[SEP]"]).all()
    labels = records["next_sentence_labels"][:, 0]
    assert labels.sum() == stats["next_sentence_labels"]["random_next (1)"]
    weights = records["masked_lm_weights"]
    assert set(np.unique(weights)) == {0.0, 1.0}
    assert weights.sum() == stats["masked_lm"]["masked_positions"]
    positions = records["masked_lm_positions"]
    real = weights > 0
    assert (positions[real] > 0).all()
    assert (positions[real] < np.broadcast_to(lengths[:, None], positions.shape)[real]).all()
    assert (positions[~real] == 0).all() and (records["masked_lm_ids"][~real] == 0).all()
    at_positions = np.take_along_axis(records["input_ids"], positions, axis=1)[real]
    assert abs((at_positions == ids["[MASK]"]).sum() - stats["masked_lm"]["replaced_by_mask"]) <= 5
    unchanged = (at_positions == records["masked_lm_ids"][real]).sum()
    assert 0 <= unchanged - stats["masked_lm"]["unchanged"] <= 5  # a random word can be the same
    original = records["input_ids"].copy()  # a random replacement can be "[SEP]" too
    rows, slots = np.nonzero(real)
    original[rows, positions[rows, slots]] = records["masked_lm_ids"][rows, slots]
    first_sep = (original == ids["[SEP]"]).argmax(axis=1)
    segments = (np.arange(128) > first_sep[:, None]) & (np.arange(128) < lengths[:, None])
    assert (records["segment_ids"] == segments).all()
    assert abs(os.path.getsize(shards[0]) - os.path.getsize(shards[1])) < 0.01 * os.path.getsize(
        shards[0])  # round-robin


@pytest.mark.integration
def test_length_histogram_matches_the_records(corpus_run):
    _, _, stats, records, _ = corpus_run
    histogram = stats["length_histogram"]
    width = histogram["bin_width"]
    lengths = records["input_mask"].sum(axis=1)
    recounted = {f"{b * width}-{b * width + width - 1}": int((lengths // width == b).sum())
                 for b in np.unique(lengths // width)}
    assert histogram["counts"] == recounted
    assert recounted["128-135"] > 0.7 * len(lengths)  # most instances fill max_seq_length


@pytest.mark.integration
def test_only_the_shards_and_statistics_are_left(corpus_run):
    out = corpus_run[0]
    assert sorted(os.listdir(out)) == ["train-0.tfrecord", "train-0.tfrecord.stats.json",
                                       "train-1.tfrecord"]


def words(tokens: list) -> list:
    """Positions of each word, grouped as the original does: a "##" piece joins the previous."""
    grouped = []
    for position, token in enumerate(tokens):
        if token in ("[CLS]", "[SEP]"):
            continue
        if grouped and token.startswith("##"):
            grouped[-1].append(position)
        else:
            grouped.append([position])
    return grouped


def test_whole_word_masking_never_splits_a_word(tmp_path, shared_data, vocab_file):
    books = [str(shared_data / "corpus" / "nltk_gutenberg" / name) for name in
             ("austen-persuasion.txt", "chesterton-brown.txt", "shakespeare-caesar.txt")]
    out = str(tmp_path / "wwm.tfrecord")
    stats = create_pretraining_data(
        books, [out], vocab_file, settings=InstanceSettings(dupe_factor=1, do_whole_word_mask=True),
        input_options=InputOptions("prose", skip_invalid_utf8=True))
    records = load_records([out], 128, 20)
    vocab = list(load_vocab(vocab_file))
    whole_words_masked = 0
    for row in range(len(records["input_ids"])):
        tokens = [vocab[i] for i in records["input_ids"][row]]
        real = records["masked_lm_weights"][row] > 0
        masked = set(records["masked_lm_positions"][row][real])
        for position, label in zip(records["masked_lm_positions"][row][real],
                                   records["masked_lm_ids"][row][real]):
            tokens[position] = vocab[label]
        for word in words(tokens[:int(records["input_mask"][row].sum())]):
            covered = [position in masked for position in word]
            assert all(covered) or not any(covered), (row, [tokens[p] for p in word])
            whole_words_masked += len(word) > 1 and all(covered)
    assert whole_words_masked > 1_000  # multi-piece words were masked, all pieces together
    assert abs(stats.masks / stats.tokens - 0.15) < 0.01


def test_no_nsp_fills_one_segment(tmp_path, wikitext, vocab_file, ids):
    out = str(tmp_path / "no_nsp.tfrecord")
    settings = InstanceSettings(dupe_factor=1, no_nsp=True, short_seq_prob=0.0)
    stats = create_pretraining_data(wikitext[:1], [out], vocab_file, settings=settings,
                                    input_options=InputOptions("wikitext"))
    records = load_records([out], 128, 20)
    assert (records["next_sentence_labels"] == 0).all() and (records["segment_ids"] == 0).all()
    lengths = records["input_mask"].sum(axis=1)
    assert (records["input_ids"][np.arange(len(lengths)), lengths - 1] == ids["[SEP]"]).all()
    # Only the last chunk of each of the 60 articles is shorter than max_seq_length.
    assert (lengths < 128).sum() <= stats.documents == 60 and stats.instances == len(lengths)


@pytest.mark.integration
def test_same_seed_input_and_workers_give_identical_bytes(tmp_path, wikitext, vocab_file):
    def run(name, workers, seed=12345):
        shards = [str(tmp_path / f"{name}-{i}") for i in range(3)]
        create_pretraining_data(wikitext[:1], shards, vocab_file, random_seed=seed,
                                settings=InstanceSettings(dupe_factor=2), num_workers=workers,
                                input_options=InputOptions("wikitext"), pool_bytes=300_000)
        return [open(shard, "rb").read() for shard in shards]

    first = run("a", 2)
    assert run("b", 2) == first
    assert run("c", 1) == first  # the worker count does not change the output either
    assert run("d", 2, seed=1) != first


def test_streaming_with_one_pool_equals_the_in_memory_mode(tmp_path, wikitext, vocab_file):
    def run(name, **kwargs):
        out = str(tmp_path / name)
        create_pretraining_data(wikitext[:1], [out], vocab_file, input_options=InputOptions(
            "wikitext"), settings=InstanceSettings(dupe_factor=1, short_seq_prob=0.5), **kwargs)
        return open(out, "rb").read()

    assert run("stream", pool_bytes=10**9) == run("memory", faithful_in_memory=True)


@pytest.mark.slow
def test_small_pools_keep_the_statistics_of_the_whole_corpus_draw(tmp_path, shared_data,
                                                                   vocab_file):
    """Random next documents from a pool of ~1/20 of the corpus instead of all of it."""
    corpus = shared_data / "corpus"
    lines = tmp_path / "corpus.txt"  # WikiText articles and Gutenberg books, original layout
    with open(lines, "w", encoding="utf-8") as f:
        for paths, input_format in ((sorted((corpus / "wikitext-2").glob("*.txt")), "wikitext"),
                                    (sorted((corpus / "nltk_gutenberg").glob("*.txt")), "prose")):
            for document in stream_documents([str(p) for p in paths],
                                             InputOptions(input_format, True)):
                f.write("".join(f"{s}\n" for s in document.sentences) + "\n")
    settings = InstanceSettings(dupe_factor=3)
    whole = create_pretraining_data([str(lines)], [str(tmp_path / "whole")], vocab_file,
                                    settings=settings, faithful_in_memory=True).as_dict()
    pooled = create_pretraining_data([str(lines)], [str(tmp_path / "pooled")], vocab_file,
                                     settings=settings, pool_bytes=400_000,
                                     num_workers=2).as_dict()
    assert pooled["pools"] >= 15 and whole["pools"] == 1
    assert pooled["input_tokens"] == whole["input_tokens"] > 1_900_000
    for stats in (whole, pooled):  # each about its expected value, within 3 standard errors
        nsp, mlm = stats["next_sentence_labels"], stats["masked_lm"]
        assert abs(nsp["random_fraction_of_coin_flips"] - 0.5) < 0.015
        assert nsp["random_document_same_as_current"] == 0
        assert abs(mlm["fraction_of_tokens"] - 0.15) < 0.005
        for kind, share in (("mask", 0.8), ("random", 0.1), ("unchanged", 0.1)):
            assert abs(mlm["fractions"][kind] - share) < 0.01
        assert abs(stats["target_length"]["short_fraction"] - 0.1) < 0.05  # 405 draws
