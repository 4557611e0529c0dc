"""Atomic writes: a failed write leaves the old file and no temporary behind."""
import os
import pathlib

import pytest

from bert_tf2.process.atomic_files import (
    atomic_path,
    recover_directory,
    replace_directory,
    staging_directory,
    write_text,
)


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


def make_dir(path, text):
    path.mkdir()
    (path / "model").write_text(text)


def test_replace_directory_swaps_in_the_staged_copy(tmp_path):
    best = tmp_path / "best"
    make_dir(best, "v1")
    staging = staging_directory(best)
    make_dir(pathlib.Path(staging), "v2")
    replace_directory(staging, best)
    assert (best / "model").read_text() == "v2"
    assert os.listdir(tmp_path) == ["best"]


def test_a_kill_between_the_two_renames_is_recovered(tmp_path):
    # The state a kill after `best -> best.old<pid>` and before `best.tmp<pid> -> best` leaves
    # (pids of an earlier process): the previous copy comes back, the staging one goes.
    best = tmp_path / "best"
    make_dir(tmp_path / "best.old4242", "previous")
    make_dir(tmp_path / "best.tmp4242", "maybe partial")
    recover_directory(best)
    assert (best / "model").read_text() == "previous"
    assert sorted(os.listdir(tmp_path)) == ["best"]


def test_recovery_keeps_a_complete_directory_and_drops_leftovers(tmp_path):
    best = tmp_path / "best"
    make_dir(best, "current")
    make_dir(tmp_path / "best.old17", "older")         # killed before its rmtree
    make_dir(tmp_path / "best.tmp18", "partial")       # killed while staging
    make_dir(tmp_path / "best.older_notes", "mine")    # not ours: left alone
    recover_directory(best)
    assert (best / "model").read_text() == "current"
    assert sorted(os.listdir(tmp_path)) == ["best", "best.older_notes"]
    recover_directory(tmp_path / "never_written")      # nothing there: nothing happens
    assert sorted(os.listdir(tmp_path)) == ["best", "best.older_notes"]
