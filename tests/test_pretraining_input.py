"""The JAX input at tf.data's pace, held to the rules it had in Python.

- `tfrecord_frames.frame_bounds` finds the records `read_frames` reads (and TensorFlow's reader),
  and refuses a damaged or cut file with the same words;
- `numpy_dataset.pretraining_batches` (compiled parse, order worked out on record references,
  batches made by worker threads) gives batch for batch what the rule gives when written out
  plainly here: files in a seeded order each pass, interleaved one record at a time, a shuffle
  buffer of 100, several pipelines sharing files or records; a resumed stream (`skip`) goes on
  exactly; workers or none, the same batches;
- `--dynamic_masking` compiled equals the rule written in NumPy here, row for row;
- `engine.input_feed.DeviceFeed` keeps order, raises a pipeline's error where it happened, and
  counts the time the consumer waited.
"""
import itertools
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from bert_tf2.data_gen import example_proto, tfrecord_frames
from bert_tf2.data_gen.errors import DataError
from bert_tf2.data_gen.numpy_datasets import HostInputContext
from bert_tf2.data_gen.pretraining import numpy_dataset, schema
from bert_tf2.engine.input_feed import DeviceFeed

LENGTH, PREDICTIONS = 16, 3


def _record(i: int, rng) -> bytes:
    length = int(rng.integers(4, LENGTH + 1))
    ids = [101] + rng.integers(1000, 2000, length - 2).tolist() + [102]
    count = int(rng.integers(1, min(PREDICTIONS, length - 2) + 1))  # some slots unused
    positions = sorted(rng.choice(np.arange(1, length - 1), count, replace=False).tolist())
    masked = list(ids)
    for p in positions:
        masked[p] = 103
    features = schema.padded_features(masked, [0] * length, positions,
                                      [ids[p] for p in positions], i % 2, LENGTH, PREDICTIONS)
    features["input_ids"][0] = 101
    features["segment_ids"][LENGTH - 1] = i  # a record's number, to follow it through the stream
    return example_proto.encode(features, float_features=("masked_lm_weights",))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Five files of 70, 130, 0, 45 and 55 records (one empty), numbered through."""
    folder = tmp_path_factory.mktemp("records")
    rng = np.random.default_rng(0)
    paths, number = [], 0
    for i, count in enumerate((70, 130, 0, 45, 55)):
        path = folder / f"part-{i}.tfrecord"
        with open(path, "wb") as f:
            for _ in range(count):
                f.write(tfrecord_frames.framed(_record(number, rng)))
                number += 1
        paths.append(str(path))
    return paths


def _numbers(batch) -> list:
    return batch["segment_ids"][:, LENGTH - 1].tolist()


def _file_numbers(paths) -> list:
    """Each file's record numbers, read back plainly."""
    out = []
    for path in paths:
        out.append([int(example_proto.decode(r)["segment_ids"][LENGTH - 1])
                    for r in tfrecord_frames.read_frames(path)])
    return out


def _rule(paths, seed: int, cycle: int, training: bool, pipelines=1, pipeline=0):
    """The input rule written out plainly: record numbers in the order they are batched."""
    contents = dict(zip(paths, _file_numbers(paths)))
    share_records = 1 < pipelines and len(paths) < pipelines
    if 1 < pipelines and not share_records:
        paths = paths[pipeline::pipelines]

    def interleaved(order):
        pending = iter(order)
        readers = [iter(contents[p]) for p in itertools.islice(pending, min(cycle, len(order)))]
        while readers:
            for reader in list(readers):
                value = next(reader, None)
                if value is None:
                    readers.remove(reader)
                    following = next(pending, None)
                    if following is not None:
                        readers.append(iter(contents[following]))
                else:
                    yield value

    def stream():
        if not training:
            yield from (n for p in paths for n in contents[p])
            return
        draws, buffer, epoch = np.random.default_rng([seed, 2]), [], 0
        while True:
            order = [paths[i] for i in
                     np.random.default_rng([seed, 3, epoch]).permutation(len(paths))]
            for value in interleaved(order):
                if len(buffer) < 100:
                    buffer.append(value)
                    continue
                slot = int(draws.integers(len(buffer)))
                yield buffer[slot]
                buffer[slot] = value
            epoch += 1

    numbers = stream()
    if share_records:
        numbers = (n for i, n in enumerate(numbers) if i % pipelines == pipeline)
    return numbers


@pytest.mark.parametrize("training,cycle,pipelines,pipeline", [
    (True, 2, 1, 0), (True, 4, 1, 0), (False, 4, 1, 0), (True, 4, 2, 1), (True, 4, 8, 5),
    (False, 4, 2, 0)])
def test_batches_follow_the_rule_and_resume_by_skip(files, training, cycle, pipelines, pipeline):
    context = HostInputContext(pipelines, pipeline, pipelines) if pipelines > 1 else None
    batches = numpy_dataset.pretraining_batches(files, 8, LENGTH, PREDICTIONS, training,
                                                num_cpu_threads=cycle, seed=5,
                                                input_context=context)
    got = [_numbers(b) for b in itertools.islice(iter(batches), 120)]
    expected = list(itertools.islice(_rule(files, 5, cycle, training, pipelines, pipeline),
                                     8 * len(got)))
    assert sum(got, []) == expected
    if training:
        assert len(got) == 120  # endless, through several passes over the files
    else:  # once, the last partial batch dropped
        total = 300 if pipelines == 1 else len(sum(_file_numbers(files[pipeline::pipelines]), []))
        assert len(got) == total // 8
    resumed = [_numbers(b) for b in itertools.islice(iter(batches.skip(37)), 5)]
    assert resumed == got[37:42]
    alone = [_numbers(b) for b in itertools.islice(iter(batches.with_workers(0)), 40)]
    assert alone == got[:40]


def _mask_rule(batch, rng, vocab_size, mask_id, cls_id, sep_id, masked_lm_prob=0.15):
    """`dynamic_masking`'s rule in plain NumPy, drawing as the compiled one draws."""
    ids = batch["input_ids"].copy()
    positions, weights = batch["masked_lm_positions"], batch["masked_lm_weights"]
    for r in range(len(ids)):
        for p in range(positions.shape[1]):
            if weights[r, p] > 0:
                ids[r, positions[r, p]] = batch["masked_lm_ids"][r, p]
    scores = rng.random(ids.shape)
    roll = rng.random(positions.shape)
    random_ids = rng.integers(0, vocab_size, positions.shape)
    out = {k: np.zeros_like(v) for k, v in batch.items()}
    masked = ids.copy()
    for r in range(len(ids)):
        real = batch["input_mask"][r] > 0
        candidates = [t for t in range(ids.shape[1]) if real[t] and ids[r, t] not in
                      (cls_id, sep_id)]
        wanted = int(np.round(np.float32(real.sum()) * np.float32(masked_lm_prob)))
        count = min(positions.shape[1], max(1, wanted), len(candidates))
        chosen = sorted(sorted(candidates, key=lambda t: -scores[r, t])[:count])
        for p, t in enumerate(chosen):
            out["masked_lm_positions"][r, p] = t
            out["masked_lm_ids"][r, p] = ids[r, t]
            out["masked_lm_weights"][r, p] = 1.0
            masked[r, t] = (mask_id if roll[r, p] < 0.8 else ids[r, t] if roll[r, p] < 0.9
                            else random_ids[r, p])
    return {**batch, "input_ids": masked, "masked_lm_positions": out["masked_lm_positions"],
            "masked_lm_ids": out["masked_lm_ids"], "masked_lm_weights": out["masked_lm_weights"]}


def test_dynamic_masking_follows_the_rule_row_for_row(files):
    masking = {"vocab_size": 30522, "mask_id": 103, "cls_id": 101, "sep_id": 102}
    plain = numpy_dataset.pretraining_batches(files, 16, LENGTH, PREDICTIONS, True, seed=3)
    masked = numpy_dataset.pretraining_batches(files, 16, LENGTH, PREDICTIONS, True, seed=3,
                                               masking=masking)
    changed = 0
    for number, (batch, ours) in enumerate(itertools.islice(zip(plain, masked), 30)):
        expected = _mask_rule(batch, np.random.default_rng([3, 4, number]), **masking)
        for name in expected:
            np.testing.assert_array_equal(ours[name], expected[name], err_msg=name)
            assert ours[name].dtype == batch[name].dtype
        changed += int((ours["masked_lm_positions"] != batch["masked_lm_positions"]).any())
    assert changed == 30  # new masks every batch


def test_frame_bounds_find_what_tensorflow_reads_and_name_damage(files, tmp_path):
    for path in files:
        data = tfrecord_frames.read_whole(path)
        starts, ends = tfrecord_frames.frame_bounds(data, path)
        theirs = [r.numpy() for r in tf.data.TFRecordDataset(path)]
        assert [bytes(data[a:b]) for a, b in zip(starts, ends)] == theirs
    whole = tfrecord_frames.read_whole(files[0])
    for cut, words in ((whole[:-3], r"truncated or damaged at byte \d+ \(a record of \d+ bytes\)"),
                       (whole[:-len(whole) // 3 * 2 + 5], r"truncated or damaged at byte \d+"),
                       (np.concatenate([whole[:100], whole[100:101] ^ 1, whole[101:]]),
                        r"truncated or damaged at byte 0 \(a record of \d+ bytes\)")):
        path = tmp_path / "damaged.tfrecord"
        path.write_bytes(cut.tobytes())
        with pytest.raises(ValueError, match=words):
            list(tfrecord_frames.read_frames(str(path)))
        with pytest.raises(ValueError, match="damaged.tfrecord: " + words):
            tfrecord_frames.frame_bounds(tfrecord_frames.read_whole(str(path)), str(path))
        with pytest.raises(DataError, match="damaged.tfrecord: truncated or damaged"):
            next(iter(numpy_dataset.pretraining_batches([str(path)], 4, LENGTH, PREDICTIONS,
                                                        True)))


def test_no_records_at_all_is_named(files):
    with pytest.raises(DataError, match="part-2.tfrecord: no records"):
        next(iter(numpy_dataset.pretraining_batches([files[2]], 4, LENGTH, PREDICTIONS, True)))


def test_the_device_feed_keeps_order_counts_waiting_and_raises_where_it_broke():
    def slow():
        for i in range(5):
            time.sleep(0.05)
            yield i
        raise DataError("part-9: damaged")

    placed = []
    with DeviceFeed(slow(), lambda b: placed.append(threading.current_thread().name) or b * 10,
                    depth=2) as feed:
        assert [next(feed) for _ in range(5)] == [0, 10, 20, 30, 40]
        with pytest.raises(DataError, match="part-9: damaged"):
            next(feed)
    assert set(placed) == {"device-feed"}  # placed off the training thread
    assert 0.15 < feed.waited < 1.0
    with DeviceFeed(iter(range(3)), lambda b: b) as feed:
        time.sleep(0.1)
        assert list(feed) == [0, 1, 2] and feed.waited < 0.05


def test_a_file_of_two_lengths_names_the_first_record_of_the_other_on_both_readers(tmp_path):
    """Records of two runs concatenated (`cat` of files made at two --max_seq_length): the first
    record of the other length is named in one DataError, by the NumPy reader (JAX) and by
    TensorFlow's (its InvalidArgumentError turned into the same line)."""
    import dataclasses

    from bert_tf2.engine.pretraining import unreadable_input_reported
    from bert_tf2.tasks.pretraining.task import PretrainingTask

    rng = np.random.default_rng(5)
    path = tmp_path / "two.tfrecord"
    longer = example_proto.encode(schema.padded_features(
        [101, 1000, 102], [0] * 3, [1], [1000], 0, 2 * LENGTH, PREDICTIONS),
        float_features=("masked_lm_weights",))
    with open(path, "wb") as f:  # record 6, in the second batch of 4, is twice as long
        for i in range(12):
            f.write(tfrecord_frames.framed(longer if i == 6 else _record(i, rng)))
    expected = (f"{path}: record 6: feature 'input_ids' has {2 * LENGTH} values, {LENGTH} "
                f"expected; make the file again with create_pretraining_data and rerun")
    with pytest.raises(DataError) as jax_reader:
        list(numpy_dataset.pretraining_batches([str(path)], 4, LENGTH, PREDICTIONS, False))
    assert str(jax_reader.value).startswith(expected)
    task = dataclasses.replace(PretrainingTask(str(path), LENGTH, PREDICTIONS))
    task.files = [str(path)]
    with pytest.raises(DataError) as tf_reader, unreadable_input_reported(task):
        for _ in task.dataset(4, False, 0, None):
            pass
    assert str(tf_reader.value) == str(jax_reader.value)


@pytest.mark.parametrize("chunk_bytes", [64, 1000, 1 << 20])
def test_files_read_a_chunk_at_a_time_give_the_frames_of_the_whole_file(files, tmp_path,
                                                                        chunk_bytes):
    """The frames of a file read in chunks (frames cut by a chunk's end, and frames longer than a
    chunk) are those of the whole file; a truncated or damaged file is named alike."""
    from bert_tf2.data_gen.pretraining.record_files import walk_frames

    for path in files:
        whole = tfrecord_frames.read_whole(path)
        expected = tfrecord_frames.frame_bounds(whole, path)
        with open(path, "rb") as f:
            found = tfrecord_frames.file_frame_bounds(f, path, len(whole), chunk_bytes)
        np.testing.assert_array_equal(found[0], expected[0])
        np.testing.assert_array_equal(found[1], expected[1])
        assert walk_frames(path, chunk_bytes) is None
    whole = tfrecord_frames.read_whole(files[1])
    for cut in (whole[:-3], whole[:len(whole) // 2 + 7], whole[:5],
                np.concatenate([whole[:100], whole[100:101] ^ 1, whole[101:]])):
        path = tmp_path / "damaged.tfrecord"
        path.write_bytes(cut.tobytes())
        with pytest.raises(ValueError) as in_memory:
            tfrecord_frames.frame_bounds(cut, str(path))
        with pytest.raises(ValueError) as in_chunks, open(path, "rb") as f:
            tfrecord_frames.file_frame_bounds(f, str(path), len(cut), chunk_bytes)
        assert str(in_chunks.value) == str(in_memory.value)
        assert walk_frames(str(path), chunk_bytes) == walk_frames(str(path), 1 << 30)


@pytest.mark.parametrize("pread", ["libc", "python"])
def test_a_record_file_reads_any_records_asked_for(files, pread, monkeypatch):
    """Records read by runs with libc's pread in compiled code, or one by one in Python where
    there is no libc: the bytes TensorFlow reads."""
    if pread == "python":
        monkeypatch.setattr(tfrecord_frames, "_PREAD", None)
    else:
        assert tfrecord_frames._PREAD is not None
    rng = np.random.default_rng(3)
    records = tfrecord_frames.RecordFile(files[1])
    theirs = [r.numpy() for r in tf.data.TFRecordDataset(files[1])]
    for chosen in (np.arange(130), rng.integers(0, 130, 40), np.array([129, 0, 0, 64])):
        data, starts, ends = records.read(chosen)
        assert [data[a:b].tobytes() for a, b in zip(starts, ends)] == [theirs[i] for i in chosen]
    records.close()


@pytest.mark.parametrize("how", ["truncated", "rewritten"])
def test_a_file_rewritten_under_a_run_is_one_line_not_a_crash(files, tmp_path, how):
    """`cp other.tfrecord rec.tfrecord` while a JAX run reads rec.tfrecord: the run stops with a
    DataError naming the file (a memory-mapped file that shrank killed it with SIGBUS)."""
    import os
    import shutil

    path = tmp_path / "rec.tfrecord"
    shutil.copy(files[1], path)
    batches = iter(numpy_dataset.pretraining_batches([str(path)], 4, LENGTH, PREDICTIONS, False)
                   .with_workers(0))
    next(batches)
    if how == "truncated":  # cp's first step: the file cut to nothing, in place
        open(path, "wb").close()
    else:  # the same size, other bytes
        with open(path, "r+b") as f:
            f.write(b"\0" * 16)
        os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    with pytest.raises(DataError) as changed:
        for _ in batches:
            pass
    assert str(changed.value).startswith(
        f"{path}: the file changed while it was being read (it had "
        f"{os.path.getsize(files[1])} bytes, now {os.path.getsize(path)}): records were "
        f"rewritten in place; do not rewrite the records of a running training")
    assert str(changed.value).endswith("the same command resumes from the last checkpoint")


def test_a_file_cut_while_it_is_opened_is_named_not_waited_on(files, monkeypatch):
    """The file ends before the size it had a moment ago (cut in place while the frames are
    found): a FileChanged, and the start-up walk says so, where both read on forever."""
    from bert_tf2.data_gen.pretraining import record_files

    size = len(tfrecord_frames.read_whole(files[1]))
    with open(files[1], "rb") as f, pytest.raises(tfrecord_frames.FileChanged,
                                                  match="the file changed while it was being"):
        tfrecord_frames.file_frame_bounds(f, files[1], size + 100)
    monkeypatch.setattr(record_files.os.path, "getsize", lambda path: size + 100)
    assert record_files.walk_frames(files[1], 1000) == (
        f"{files[1]}: the file changed while it was being read (it had {size + 100} bytes, now "
        f"{size})")


def test_a_record_whose_checksum_breaks_is_named_by_the_search_for_what_broke(files, tmp_path):
    """What training found unreadable (TensorFlow's DataLossError) is looked for after the fact:
    a flipped byte inside a record passes the walk of the lengths, and is named by the byte."""
    from bert_tf2.data_gen.pretraining.record_files import (
        find_damaged_frame,
        find_unparsable_record,
    )

    whole = tfrecord_frames.read_whole(files[0])
    path = tmp_path / "flipped.tfrecord"
    path.write_bytes(np.concatenate([whole[:100], whole[100:101] ^ 1, whole[101:]]).tobytes())
    assert find_damaged_frame([str(path)]) is None
    assert find_unparsable_record([str(path)], LENGTH, PREDICTIONS) == (
        f"{path}: truncated or damaged at byte 0 (a record of "
        f"{int.from_bytes(whole[:8].tobytes(), 'little')} bytes)")
