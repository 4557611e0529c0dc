"""Our records against Google's own create_pretraining_data.py, run as an oracle: the same records
in the faithful mode, the same statistics (within the original's seed-to-seed spread) by default.

The oracle is the `bert-tensorflow==1.0.4` package from PyPI (Google's release of the original
scripts; it predates `--do_whole_word_mask`), installed with --no-deps and run in a subprocess
under `tensorflow.compat.v1`. Records are compared as messages (deterministic bytes): the original
leaves the order of the feature map to the protobuf library, we write it sorted.
"""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from data_gen.pretraining.create_pretraining_data import create_pretraining_data
from data_gen.pretraining.dataset import load_records
from data_gen.pretraining.documents import InputOptions, stream_documents
from data_gen.pretraining.instances import InstanceSettings

if importlib.util.find_spec("bert") is None:
    pytest.skip("the oracle bert-tensorflow==1.0.4 (Google's original scripts) is not installed: "
                "pip install --no-deps bert-tensorflow==1.0.4", allow_module_level=True)


def original(inputs: list, outputs: list, vocab_file: str, **flags) -> None:
    arguments = [f"--input_file={','.join(inputs)}", f"--output_file={','.join(outputs)}",
                 f"--vocab_file={vocab_file}"] + [f"--{k}={v}" for k, v in flags.items()]
    completed = subprocess.run([sys.executable, "-m", "bert.create_pretraining_data", *arguments],
                               capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]


def messages(path: str) -> list:
    return [tf.train.Example.FromString(r).SerializeToString(deterministic=True)
            for r in tf.data.TFRecordDataset(path).as_numpy_iterator()]


@pytest.fixture(scope="module")
def sentence_lines(tmp_path_factory, shared_data) -> str:
    """WikiText-2 valid in the original layout: a sentence per line, blank line after articles."""
    path = tmp_path_factory.mktemp("lines") / "wiki.txt"
    wiki = str(shared_data / "corpus" / "wikitext-2" / "valid.txt")
    with open(path, "w", encoding="utf-8") as f:
        for document in stream_documents([wiki], InputOptions("wikitext")):
            f.write("".join(f"{sentence}\n" for sentence in document.sentences) + "\n")
    return str(path)


def test_in_memory_and_one_pool_streaming_write_the_originals_records(tmp_path, sentence_lines,
                                                                       minilm_dir):
    vocab = str(minilm_dir / "vocab.txt")
    shards = {mode: [str(tmp_path / f"{mode}-{i}.tfrecord") for i in range(2)]
              for mode in ("original", "memory", "stream")}
    original([sentence_lines], shards["original"], vocab, dupe_factor=2)
    settings = InstanceSettings(dupe_factor=2)
    create_pretraining_data([sentence_lines], shards["memory"], vocab, settings=settings,
                            faithful_in_memory=True)
    create_pretraining_data([sentence_lines], shards["stream"], vocab, settings=settings,
                            pool_bytes=10**9, num_workers=2)
    for i in range(2):
        expected = messages(shards["original"][i])
        assert len(expected) > 2_500
        assert messages(shards["memory"][i]) == expected
        assert messages(shards["stream"][i]) == expected


@pytest.mark.filterwarnings("ignore:.*looks UNCASED")  # cased mode on purpose: another code path
def test_other_settings_and_a_document_running_across_files(tmp_path, sentence_lines,
                                                            minilm_dir):
    with open(sentence_lines, encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    first, second = str(tmp_path / "part1.txt"), str(tmp_path / "part2.txt")
    middle = len(lines) // 2 + 5  # inside an article, so that article runs on into part2
    with open(first, "w", encoding="utf-8") as f:
        f.writelines(lines[:middle])
    with open(second, "w", encoding="utf-8") as f:
        f.writelines(lines[middle:])
    assert lines[middle - 1].strip() and lines[middle].strip()
    vocab = str(minilm_dir / "vocab.txt")
    flags = dict(max_seq_length=64, max_predictions_per_seq=10, masked_lm_prob=0.2,
                 short_seq_prob=0.3, dupe_factor=1, random_seed=7, do_lower_case=False)
    original([first, second], [str(tmp_path / "original.tfrecord")], vocab, **flags)
    ours = str(tmp_path / "ours.tfrecord")
    create_pretraining_data(
        [first, second], [ours], vocab, do_lower_case=False, random_seed=7,
        faithful_in_memory=True,
        settings=InstanceSettings(max_seq_length=64, max_predictions_per_seq=10,
                                  masked_lm_prob=0.2, short_seq_prob=0.3, dupe_factor=1))
    expected = messages(str(tmp_path / "original.tfrecord"))
    assert len(expected) > 4_000
    assert messages(ours) == expected
    assert os.path.getsize(ours) == os.path.getsize(str(tmp_path / "original.tfrecord"))


# ------------------------------------------------------------------ statistics across seeds
SEEDS = (1, 2, 3, 4, 5)
SPREAD_SIGMAS = 4.0  # a seed of ours may lie this many of the original's standard deviations out


def record_statistics(paths: list, vocab_ids: dict, max_seq_length: int = 128) -> dict:
    """What a set of records says about the recipe, computed the same way for both sides."""
    records = load_records(paths, max_seq_length, 20)
    lengths = records["input_mask"].sum(axis=1)
    weights = records["masked_lm_weights"] > 0
    positions, labels = records["masked_lm_positions"], records["masked_lm_ids"]
    at_positions = np.take_along_axis(records["input_ids"], positions, axis=1)[weights]
    labels = labels[weights]
    masks = weights.sum()
    became_mask = (at_positions == vocab_ids["[MASK]"]).sum()
    unchanged = ((at_positions == labels) & (labels != vocab_ids["[MASK]"])).sum()
    return {
        "instances": len(lengths),
        "mean_length": lengths.mean(),
        "full_length_share": (lengths == max_seq_length).mean(),
        "short_share (under 64 tokens)": (lengths < 64).mean(),
        "masked_share_of_tokens": masks / lengths.sum(),
        "masks_per_instance": masks / len(lengths),
        "[MASK]_share": became_mask / masks,
        "random_share": (masks - became_mask - unchanged) / masks,
        "unchanged_share": unchanged / masks,
        "random_next_share": records["next_sentence_labels"].mean(),
    }


def spread(runs: list) -> dict:
    """statistic -> (mean, standard deviation over the runs)."""
    return {name: (float(np.mean([r[name] for r in runs])),
                   float(np.std([r[name] for r in runs], ddof=1))) for name in runs[0]}


@pytest.fixture(scope="module")
def ten_sentence_documents(tmp_path_factory, shared_data) -> str:
    """WikiText-2 valid cut into documents of 10 sentences (~750), original layout.

    Whole articles (60) would make the document-level draws (which article gets a short target
    length) swamp every statistic: 8 or 13 short targets of 120 draws is ordinary luck there.
    """
    path = tmp_path_factory.mktemp("ten") / "wiki-10.txt"
    wiki = str(shared_data / "corpus" / "wikitext-2" / "valid.txt")
    with open(path, "w", encoding="utf-8") as f:
        for document in stream_documents([wiki], InputOptions("wikitext")):
            for start in range(0, len(document.sentences), 10):
                f.write("".join(f"{s}\n" for s in document.sentences[start:start + 10]) + "\n")
    return str(path)


def test_default_mode_statistics_lie_within_the_originals_spread_over_seeds(
        tmp_path, ten_sentence_documents, minilm_dir, vocab_ids):
    """Pools change which records come out, not what they look like: over five seeds each, every
    statistic of the default streaming mode (here with ~8 pools) stays within the original's own
    seed-to-seed spread, and so does the mean of the five."""
    sentence_lines = ten_sentence_documents
    vocab = str(minilm_dir / "vocab.txt")
    original_runs, our_runs = [], []
    for seed in SEEDS:
        theirs = str(tmp_path / f"original-{seed}.tfrecord")
        original([sentence_lines], [theirs], vocab, dupe_factor=2, random_seed=seed)
        original_runs.append(record_statistics([theirs], vocab_ids))
        ours = str(tmp_path / f"ours-{seed}.tfrecord")
        stats = create_pretraining_data([sentence_lines], [ours], vocab, random_seed=seed,
                                        settings=InstanceSettings(dupe_factor=2),
                                        pool_bytes=150_000)
        assert stats.pools >= 6
        our_runs.append(record_statistics([ours], vocab_ids))
    expected, got = spread(original_runs), spread(our_runs)
    for name, (mean, sd) in expected.items():
        assert sd > 0, name  # each statistic does vary with the seed
        for run in our_runs:
            assert abs(run[name] - mean) <= SPREAD_SIGMAS * sd, (name, run[name], mean, sd)
        standard_error = np.sqrt(sd ** 2 / len(SEEDS) + got[name][1] ** 2 / len(SEEDS))
        assert abs(got[name][0] - mean) <= SPREAD_SIGMAS * standard_error, (name, got[name],
                                                                             mean, sd)
