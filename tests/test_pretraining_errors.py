"""Bad input and failures: a clear error naming the file, line or flag; no output left behind."""
import os
import sys

import pytest
import warm_python

from bert_tf2.data_gen.pretraining import pool_worker
from bert_tf2.data_gen.pretraining.create_pretraining_data import create_pretraining_data
from bert_tf2.data_gen.pretraining.documents import InputFormatError, InputOptions
from bert_tf2.data_gen.pretraining.instances import InstanceSettings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWO_DOCUMENTS = b"The first document.\nIt has two sentences.\n\nThe second one.\n"


@pytest.fixture
def vocab_file(minilm_dir) -> str:
    return str(minilm_dir / "vocab.txt")


def write(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def run(tmp_path, vocab_file, inputs, **kwargs):
    """Records of `inputs` in two shards under tmp_path/out."""
    out = tmp_path / "out"
    return create_pretraining_data(inputs, [str(out / "a.tfrecord"), str(out / "b.tfrecord")],
                                   vocab_file, **kwargs)


def left_in_output(tmp_path) -> list:
    out = tmp_path / "out"
    return sorted(os.listdir(out)) if out.exists() else []


def assert_nothing_left(tmp_path):
    assert left_in_output(tmp_path) == []


def test_empty_files_are_an_error_naming_them(tmp_path, vocab_file):
    inputs = [write(tmp_path / "empty1.txt", b""), write(tmp_path / "empty2.txt", b"\n \n")]
    with pytest.raises(InputFormatError, match=r"no documents with text in --input_file "
                                               r"\(.*empty1.txt, .*empty2.txt\)"):
        run(tmp_path, vocab_file, inputs)
    assert_nothing_left(tmp_path)


def test_an_empty_file_among_others_is_skipped(tmp_path, vocab_file):
    inputs = [write(tmp_path / "empty.txt", b""), write(tmp_path / "two.txt", TWO_DOCUMENTS)]
    stats = run(tmp_path, vocab_file, inputs, settings=InstanceSettings(dupe_factor=1))
    assert stats.documents == 2 and stats.instances >= 2
    assert left_in_output(tmp_path) == ["a.tfrecord", "a.tfrecord.stats.json", "b.tfrecord"]


def test_a_single_document_needs_no_nsp(tmp_path, vocab_file):
    one = write(tmp_path / "no_blank_lines.txt", b"Sentence one.\nSentence two.\nThree.\n")
    with pytest.raises(InputFormatError, match=r"only one document in --input_file "
                                               r"\(.*no_blank_lines.txt\).*--no_nsp"):
        run(tmp_path, vocab_file, [one])
    assert_nothing_left(tmp_path)
    stats = run(tmp_path, vocab_file, [one], settings=InstanceSettings(dupe_factor=1, no_nsp=True))
    assert stats.instances == 1 and stats.next_sentence[0] == 1


def test_one_sentence_documents_always_take_a_random_next_sentence(tmp_path, vocab_file):
    lines = b"".join(b"Sentence number %d stands alone.\n\n" % i for i in range(50))
    stats = run(tmp_path, vocab_file, [write(tmp_path / "single.txt", lines)],
                settings=InstanceSettings(dupe_factor=2))
    assert stats.instances == stats.one_sentence_chunks == 100
    assert stats.next_sentence[1] == 100  # as in the original: no coin flip, B is random


@pytest.mark.parametrize("name, data, message", [
    ("latin1.txt", "Caf\u00e9 au lait.\n\nSecond.\n".encode("latin-1"),
     r"latin1.txt:1: not UTF-8 \(invalid continuation byte"),
    ("archive.gz", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", r"archive.gz:1: NUL byte"),
    ("utf16.txt", "One.\n\nTwo.\n".encode("utf-16-le"), r"utf16.txt:1: NUL byte .*binary"),
])
def test_undecodable_input_is_an_error_naming_file_and_line(tmp_path, vocab_file, name, data,
                                                            message):
    inputs = [write(tmp_path / "good.txt", TWO_DOCUMENTS), write(tmp_path / name, data)]
    with pytest.raises(InputFormatError, match=message):
        run(tmp_path, vocab_file, inputs)
    assert_nothing_left(tmp_path)


def test_max_seq_length_too_small_is_an_error_naming_the_flag(tmp_path, vocab_file):
    inputs = [write(tmp_path / "two.txt", TWO_DOCUMENTS)]
    with pytest.raises(ValueError, match=r"--max_seq_length=4 is too small"):
        run(tmp_path, vocab_file, inputs, settings=InstanceSettings(max_seq_length=4))
    stats = run(tmp_path, vocab_file, inputs,
                settings=InstanceSettings(max_seq_length=5, dupe_factor=3))
    assert stats.lengths.keys() == {5}  # [CLS] a [SEP] b [SEP]


def test_a_vocabulary_without_mask_is_an_error_from_the_workers(tmp_path):
    vocab = write(tmp_path / "vocab.txt", b"[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
    inputs = [write(tmp_path / "two.txt", TWO_DOCUMENTS)]
    with pytest.raises(ValueError, match=r"vocab.txt: has no \[MASK\] entry"):
        run(tmp_path, vocab, inputs, num_workers=2)
    assert_nothing_left(tmp_path)


def test_a_failure_while_writing_leaves_no_partial_shard(tmp_path, vocab_file, monkeypatch,
                                                         shared_data):
    real_run = pool_worker.run

    def fail_on_third_pool(job):
        if job.index == 2:
            raise RuntimeError("disk on fire")
        return real_run(job)

    monkeypatch.setattr(pool_worker, "run", fail_on_third_pool)
    wikitext = [str(shared_data / "corpus" / "wikitext-2" / "valid.txt")]
    spill_parent = tmp_path / "spill"
    with pytest.raises(RuntimeError, match="disk on fire"):
        run(tmp_path, vocab_file, wikitext, settings=InstanceSettings(dupe_factor=1),
            input_options=InputOptions("wikitext"), pool_bytes=200_000,
            tmp_dir=str(spill_parent))
    assert_nothing_left(tmp_path)
    assert os.listdir(spill_parent) == []  # the temporary pool files are gone too


@pytest.mark.integration
def test_cli_exits_1_with_the_message_and_writes_nothing(tmp_path, vocab_file):
    missing = str(tmp_path / "nothing-*.txt")
    out = tmp_path / "out"
    completed = warm_python.run(
        [sys.executable, "-m", "bert_tf2.data_gen.pretraining.create_pretraining_data", f"--input_file={missing}",
         f"--output_file={out}/train.tfrecord", f"--vocab_file={vocab_file}"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 1
    assert f"--input_file: '{missing}' matches no file" in completed.stderr
    assert not out.exists()
    completed = warm_python.run(
        [sys.executable, "-m", "bert_tf2.data_gen.pretraining.create_pretraining_data", "--input_file=x.txt"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    # A required flag left out is a flag error: one line, exit status 2.
    assert completed.returncode == 2 and "--output_file" in completed.stderr
    assert completed.stderr.startswith("create_pretraining_data.py: error: ")
    assert len(completed.stderr.strip().splitlines()) == 1
