"""The Beam pipeline (DirectRunner) makes the same records and statistics as the local run."""
import collections
import glob
import json
import os
import sys

import pytest
import tensorflow as tf
import warm_python

pytestmark = pytest.mark.integration

pytest.importorskip("apache_beam", reason="apache-beam is not installed: the Beam pipeline "
                    "needs the beam extra (pip install -e '.[beam]')")

from bert_tf2.data_gen.pretraining.create_pretraining_data import create_pretraining_data  # noqa: E402
from bert_tf2.data_gen.pretraining.dataset import load_records  # noqa: E402
from bert_tf2.data_gen.pretraining.documents import InputOptions  # noqa: E402
from bert_tf2.data_gen.pretraining.instances import InstanceSettings  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def records(paths) -> collections.Counter:
    return collections.Counter(r for path in paths
                               for r in tf.data.TFRecordDataset(path).as_numpy_iterator())


def test_beam_pipeline_matches_the_local_run(tmp_path, shared_data, minilm_dir):
    wikitext = [str(shared_data / "corpus" / "wikitext-2" / n) for n in ("valid.txt", "test.txt")]
    vocab = str(minilm_dir / "vocab.txt")
    prefix = str(tmp_path / "beam" / "train")
    completed = warm_python.run(
        [sys.executable, "-m", "bert_tf2.data_gen.pretraining.beam_pipeline", f"--input_file={','.join(wikitext)}",
         "--input_format=wikitext", f"--output_file={prefix}", "--num_output_shards=3",
         f"--vocab_file={vocab}", "--dupe_factor=2", "--pool_bytes=300000",
         "--", "--runner=DirectRunner", "--direct_num_workers=1"],
        cwd=REPO, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stderr[-3000:]
    beam_shards = sorted(glob.glob(prefix + "-*-of-00003"))
    assert len(beam_shards) == 3

    local_shards = [str(tmp_path / "local" / f"train-{i}") for i in range(2)]
    local = create_pretraining_data(wikitext, local_shards, vocab, pool_bytes=300_000,
                                    settings=InstanceSettings(dupe_factor=2),
                                    input_options=InputOptions("wikitext"))
    with open(prefix + ".stats.json") as f:
        assert json.load(f) == local.as_dict()  # every count, histogram and rate
    assert local.pools > 1 and local.instances > 10_000
    assert records(beam_shards) == records(local_shards)  # the same records, in other shards
    parsed = load_records(beam_shards, 128, 20)  # the original's feature spec
    assert len(parsed["input_ids"]) == local.instances


def test_a_bad_input_fails_the_pipeline_with_the_file_and_line(tmp_path, minilm_dir):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Fine.\n\nCaf\xe9.\n")
    completed = warm_python.run(
        [sys.executable, "-m", "bert_tf2.data_gen.pretraining.beam_pipeline", f"--input_file={bad}",
         f"--output_file={tmp_path / 'out' / 'train'}", f"--vocab_file={minilm_dir / 'vocab.txt'}",
         "--", "--runner=DirectRunner"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert completed.returncode != 0
    assert "bad.txt:3: not UTF-8" in completed.stderr
    assert not glob.glob(str(tmp_path / "out" / "train-*"))
