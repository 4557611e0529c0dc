"""Atomic writes: a failed write leaves the old file and no temporary behind."""
import os

import pytest

from modeling.atomic_files import atomic_path, write_text


def test_failed_write_keeps_previous_file_and_cleans_up(tmp_path):
    target = tmp_path / "bert_config.json"
    write_text(target, "old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            with open(tmp, "w") as f:
                f.write("half")
            raise RuntimeError("killed mid-write")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["bert_config.json"]


def test_suffix_is_kept_for_writers_that_insist_on_it(tmp_path):
    with atomic_path(tmp_path / "model.keras", suffix=".keras") as tmp:
        assert tmp.endswith(".keras") and tmp != str(tmp_path / "model.keras")
        open(tmp, "w").close()
    assert os.listdir(tmp_path) == ["model.keras"]
