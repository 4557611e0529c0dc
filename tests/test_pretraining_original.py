"""Our records against Google's own create_pretraining_data.py, run as an oracle.

The oracle is the `bert-tensorflow==1.0.4` package from PyPI (Google's release of the original
scripts; it predates `--do_whole_word_mask`), installed with --no-deps and run in a subprocess
under `tensorflow.compat.v1`. Records are compared as messages (deterministic bytes): the original
leaves the order of the feature map to the protobuf library, we write it sorted.
"""
import importlib.util
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from data_gen.pretraining.create_pretraining_data import create_pretraining_data
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
