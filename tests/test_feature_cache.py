"""The feature cache: records written once, reused for the same fingerprint, rebuilt otherwise, and
never a fingerprint beside a partial file."""
import json
import logging
import os

import pytest
import tensorflow as tf

from bert_tf2.data_gen import feature_cache

LOGGER = "bert_tf2.data_gen.feature_cache"


def records(n, tag=b"r"):
    # Distinct payloads of different lengths, including an empty one and non-UTF-8 bytes.
    return [b""] + [tag + bytes([i % 256]) * (i + 1) + b"\xff\x00" for i in range(n - 1)]


class Maker:
    """make_records that counts its calls and can fail after `fail_after` records."""

    def __init__(self, payload, fail_after=None, error=RuntimeError):
        self.payload = list(payload)
        self.fail_after = fail_after
        self.error = error
        self.calls = 0

    def __call__(self):
        self.calls += 1
        for i, record in enumerate(self.payload):
            if self.fail_after is not None and i == self.fail_after:
                raise self.error("conversion interrupted")
            yield record


def read_back(path):
    return [bytes(r) for r in tf.data.TFRecordDataset(path).as_numpy_iterator()]


@pytest.fixture
def task(tmp_path):
    """Two task files and a vocabulary; `key(**settings)` fingerprints them."""
    files = {name: tmp_path / name for name in ("train.tsv", "dev.tsv", "vocab.txt")}
    files["train.tsv"].write_text("label\tsentence\n1\tgood\n0\tbad\n")
    files["dev.tsv"].write_text("label\tsentence\n1\tfine\n")
    files["vocab.txt"].write_text("[PAD]\n[CLS]\n[SEP]\ngood\nbad\n")
    out = tmp_path / "out"
    out.mkdir()

    class Task:
        path = str(out / "train.tf_record")

        @staticmethod
        def key(**settings):
            settings = {"max_seq_length": 128, "do_lower_case": True,
                        "labels": ["0", "1"], **settings}
            return feature_cache.fingerprint([str(f) for f in files.values()], **settings)

    Task.files = files
    Task.out = out
    return Task


def test_writes_once_then_reuses(task, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    payload = records(7)
    make = Maker(payload)
    assert feature_cache.cached_records(task.path, task.key(), make) == 7
    assert make.calls == 1
    assert read_back(task.path) == payload
    meta = json.loads(open(task.path + ".json").read())
    assert meta["num_records"] == 7

    caplog.clear()
    mtime = os.stat(task.path).st_mtime_ns
    # A new fingerprint of the same, unchanged inputs: reused, make_records not called.
    assert feature_cache.cached_records(task.path, task.key(), make) == 7
    assert make.calls == 1
    assert os.stat(task.path).st_mtime_ns == mtime
    assert read_back(task.path) == payload
    assert "reusing" in caplog.text


def test_empty_conversion_is_cached_too(task):
    make = Maker([])
    assert feature_cache.cached_records(task.path, task.key(), make) == 0
    assert feature_cache.cached_records(task.path, task.key(), make) == 0
    assert make.calls == 1
    assert read_back(task.path) == []


@pytest.mark.parametrize("name", ["train.tsv", "vocab.txt"])
def test_rebuilds_when_a_file_changes(task, caplog, name):
    caplog.set_level(logging.INFO, logger=LOGGER)
    first = Maker(records(5, b"a"))
    feature_cache.cached_records(task.path, task.key(), first)
    # Same size, different content: the digest, not the size or the time, decides.
    path = task.files[name]
    text = path.read_text()
    path.write_text(text.replace("good", "gold"))
    assert len(path.read_text()) == len(text)
    caplog.clear()
    second = Maker(records(3, b"b"))
    assert feature_cache.cached_records(task.path, task.key(), second) == 3
    assert first.calls == 1 and second.calls == 1
    assert read_back(task.path) == records(3, b"b")
    rebuild = [r.getMessage() for r in caplog.records if "rebuilding" in r.getMessage()]
    assert len(rebuild) == 1 and name in rebuild[0]
    other = {"train.tsv", "dev.tsv", "vocab.txt"} - {name}
    assert not any(o in rebuild[0] for o in other), rebuild[0]
    # And the new one is reused.
    assert feature_cache.cached_records(task.path, task.key(), second) == 3
    assert second.calls == 1


@pytest.mark.parametrize("setting, value", [("max_seq_length", 64), ("do_lower_case", False),
                                            ("labels", ["1", "0"])])
def test_rebuilds_when_a_setting_changes(task, caplog, setting, value):
    caplog.set_level(logging.INFO, logger=LOGGER)
    first = Maker(records(4, b"a"))
    feature_cache.cached_records(task.path, task.key(), first)
    caplog.clear()
    second = Maker(records(6, b"b"))
    assert feature_cache.cached_records(task.path, task.key(**{setting: value}), second) == 6
    assert second.calls == 1
    assert read_back(task.path) == records(6, b"b")
    rebuild = [r.getMessage() for r in caplog.records if "rebuilding" in r.getMessage()]
    assert len(rebuild) == 1 and setting in rebuild[0]
    assert not any(f in rebuild[0] for f in ("train.tsv", "dev.tsv", "vocab.txt"))
    # Going back to the old setting rebuilds again (one cache per path).
    third = Maker(records(2, b"c"))
    assert feature_cache.cached_records(task.path, task.key(), third) == 2
    assert third.calls == 1


def test_rebuilds_when_the_format_version_changes(task, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger=LOGGER)
    feature_cache.cached_records(task.path, task.key(), Maker(records(2)))
    monkeypatch.setattr(feature_cache, "FORMAT_VERSION", feature_cache.FORMAT_VERSION + 1)
    make = Maker(records(3))
    feature_cache.cached_records(task.path, task.key(), make)
    assert make.calls == 1
    assert "format" in caplog.text


def test_a_different_file_list_is_a_different_key(task):
    make = Maker(records(2))
    feature_cache.cached_records(task.path, task.key(), make)
    fewer = feature_cache.fingerprint([str(task.files["train.tsv"])], max_seq_length=128)
    feature_cache.cached_records(task.path, fewer, make)
    assert make.calls == 2


def test_rebuilds_when_the_records_file_is_missing(task):
    make = Maker(records(3))
    feature_cache.cached_records(task.path, task.key(), make)
    os.remove(task.path)
    assert feature_cache.cached_records(task.path, task.key(), make) == 3
    assert make.calls == 2
    assert read_back(task.path) == records(3)


@pytest.mark.parametrize("meta", ["", "{not json", "[]", '{"key": {}}'])
def test_rebuilds_when_the_fingerprint_file_is_unreadable(task, meta):
    make = Maker(records(3))
    feature_cache.cached_records(task.path, task.key(), make)
    with open(task.path + ".json", "w") as f:
        f.write(meta)
    assert feature_cache.cached_records(task.path, task.key(), make) == 3
    assert make.calls == 2
    assert json.loads(open(task.path + ".json").read())["num_records"] == 3


def leftovers(directory):
    return sorted(os.listdir(directory))


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_an_interrupted_first_conversion_leaves_nothing(task, error):
    payload = records(10)
    broken = Maker(payload, fail_after=5, error=error)
    with pytest.raises(error, match="interrupted"):
        feature_cache.cached_records(task.path, task.key(), broken)
    # Neither the records nor a fingerprint, nor a hidden temporary file.
    assert leftovers(task.out) == []
    # A rerun converts again, completely.
    good = Maker(payload)
    assert feature_cache.cached_records(task.path, task.key(), good) == 10
    assert good.calls == 1
    assert read_back(task.path) == payload
    assert leftovers(task.out) == ["train.tf_record", "train.tf_record.json"]


def test_an_interrupted_rebuild_voids_the_old_fingerprint(task):
    old = records(4, b"old")
    feature_cache.cached_records(task.path, task.key(), Maker(old))
    new_key = task.key(max_seq_length=64)
    with pytest.raises(RuntimeError):
        feature_cache.cached_records(task.path, new_key, Maker(records(10, b"new"),
                                                               fail_after=5))
    # No fingerprint survives: in particular none claims the new key for a partial file.
    assert not os.path.exists(task.path + ".json")
    assert not [n for n in leftovers(task.out) if n.startswith(".")]
    # Whatever records file remains is a complete one, never the partial new one.
    if os.path.exists(task.path):
        assert read_back(task.path) == old
    # Reruns rebuild, with either key.
    for key, payload in ((new_key, records(10, b"new")), (task.key(), old)):
        make = Maker(payload)
        assert feature_cache.cached_records(task.path, key, make) == len(payload)
        assert make.calls == 1
        assert read_back(task.path) == payload


def test_fingerprint_contents(task):
    key = task.key()
    assert set(key["files"]) == {os.path.abspath(str(f)) for f in task.files.values()}
    import hashlib
    for path, digest in key["files"].items():
        assert digest == hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert key["settings"] == {"max_seq_length": 128, "do_lower_case": True, "labels": ["0", "1"]}
    # JSON-normalised (tuples become lists), so a key read back from disk compares equal.
    assert feature_cache.fingerprint([], labels=("0", "1")) == \
        json.loads(json.dumps(feature_cache.fingerprint([], labels=["0", "1"])))
