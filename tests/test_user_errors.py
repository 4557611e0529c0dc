"""Every user mistake through the real command line: one line on stderr naming the file (and line)
or flag and what to do, the documented exit status (1; 2 for flags and settings), no traceback,
and a finished earlier run in the same --output_dir left byte for byte as it was.

Each case builds its bad input from real data (GLUE MRPC, SQuAD, WikiText-2) and the small random
checkpoint in Google's format; the finished run is a short MRPC fine-tuning with prediction.
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, run_script
from tests.test_run_classifier import glue_slice


def snapshot(folder):
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory, shared_data, tiny_checkpoint):
    root = tmp_path_factory.mktemp("finished")
    glue = glue_slice(shared_data, "MRPC", root / "MRPC", {"train": 32, "dev": 8, "test": 8})
    out = root / "out"
    run_script("run_classifier.py", "--task_name=MRPC", f"--data_dir={glue}",
               f"--init_checkpoint={tiny_checkpoint}/bert_model.ckpt", "--max_seq_length=64",
               "--train_batch_size=16", "--num_train_epochs=1", f"--output_dir={out}",
               "--do_train", "--do_eval", "--do_predict")
    return {"glue": glue, "out": out, "checkpoint": tiny_checkpoint,
            "squad": shared_data / "squad" / "dev-v1.1.json", "shared": shared_data}


def copy_glue(case, tmp_path):
    data = tmp_path / "MRPC"
    shutil.copytree(case["glue"], data)
    return data


def edit_line(path, number, edit):
    """Replace line `number` (1-based) of a file by `edit(old_bytes)`."""
    lines = path.read_bytes().split(b"\n")
    lines[number - 1] = edit(lines[number - 1])
    path.write_bytes(b"\n".join(lines))


def classifier(case, data, *flags, checkpoint=None):
    checkpoint = checkpoint or f"{case['checkpoint']}/bert_model.ckpt"
    return ["run_classifier.py", "--task_name=MRPC", f"--data_dir={data}",
            f"--init_checkpoint={checkpoint}", "--max_seq_length=64", "--train_batch_size=16",
            "--num_train_epochs=1", f"--output_dir={case['out']}", *flags]


# Each case: (name, builder(case, tmp_path) -> command line, exit status, pattern of the message).
def truncated_checkpoint(case, tmp_path):
    shutil.copytree(case["checkpoint"], tmp_path / "ckpt")
    data = next((tmp_path / "ckpt").glob("bert_model.ckpt.data-*"))
    data.write_bytes(data.read_bytes()[:5000])
    return classifier(case, case["glue"], "--do_eval",
                      checkpoint=tmp_path / "ckpt" / "bert_model.ckpt")


def vocabulary_without_cls(case, tmp_path, script="run_classifier.py"):
    vocab = tmp_path / "vocab.txt"
    lines = (case["checkpoint"] / "vocab.txt").read_text(encoding="utf-8").splitlines()
    vocab.write_text("\n".join(t for t in lines if t != "[CLS]") + "\n", encoding="utf-8")
    if script == "run_squad.py":
        return ["run_squad.py", f"--vocab_file={vocab}", f"--train_file={case['squad']}",
                f"--init_checkpoint={case['checkpoint']}/bert_model.ckpt",
                f"--output_dir={case['out']}", "--max_seq_length=128", "--do_train"]
    return classifier(case, case["glue"], f"--vocab_file={vocab}", "--do_train")


def invalid_utf8(case, tmp_path):
    data = copy_glue(case, tmp_path)
    edit_line(data / "train.tsv", 3, lambda line: line.replace(b"the", b"th\xff", 1))
    return classifier(case, data, "--do_train")


def ragged_row(case, tmp_path):
    data = copy_glue(case, tmp_path)
    edit_line(data / "train.tsv", 5, lambda line: line.rsplit(b"\t", 1)[0])
    return classifier(case, data, "--do_train")


def label_outside_the_list(case, tmp_path):
    data = copy_glue(case, tmp_path)
    edit_line(data / "dev.tsv", 4, lambda line: b"7" + line[1:])
    return classifier(case, data, "--do_train", "--do_eval")


def missing_column(case, tmp_path):
    return ["run_classifier.py", "--task_name=generic", f"--data_dir={case['glue']}",
            "--text_a_column=#1 String", "--text_b_column=sentence two", "--label_column=Quality",
            f"--init_checkpoint={case['checkpoint']}/bert_model.ckpt",
            f"--output_dir={tmp_path / 'out'}", "--do_train"]


def empty_file(case, tmp_path):
    data = copy_glue(case, tmp_path)
    (data / "train.tsv").write_bytes(b"")
    return classifier(case, data, "--do_train")


def missing_file(case, tmp_path):
    data = copy_glue(case, tmp_path)
    (data / "dev.tsv").unlink()
    return classifier(case, data, "--do_eval")


def edited_config(**changes):
    """A case evaluating with the checkpoint's bert_config.json, `changes` applied."""
    def build(case, tmp_path):
        config = json.loads((case["checkpoint"] / "bert_config.json").read_text())
        (tmp_path / "bert_config.json").write_text(json.dumps({**config, **changes}))
        return classifier(case, case["glue"],
                          f"--bert_config_file={tmp_path / 'bert_config.json'}", "--do_eval")
    return build


def malformed_json(case, tmp_path):
    bad = tmp_path / "dev.json"
    bad.write_text(case["squad"].read_text(encoding="utf-8")[:3000], encoding="utf-8")
    return ["run_squad.py", f"--predict_file={bad}",
            f"--init_checkpoint={case['checkpoint']}/bert_model.ckpt",
            f"--output_dir={tmp_path / 'out'}", "--max_seq_length=128", "--do_predict"]


def pretraining_sequence_too_long(case, tmp_path):
    return ["run_pretraining.py", f"--input_file={case['glue']}/train.tsv",
            f"--bert_config_file={case['checkpoint']}/bert_config.json",
            f"--output_dir={case['out']}", "--max_seq_length=256", "--do_train"]


def reused_output_dir(case, tmp_path):
    return classifier(case, case["glue"], "--do_train", "--learning_rate=1e-3")


def bad_flag_value(case, tmp_path):
    return classifier(case, case["glue"], "--do_train", "--max_seq_length=abc")


def unknown_flag(case, tmp_path):
    return classifier(case, case["glue"], "--do_train", "--num_train_epoch=2")


def missing_vocabulary(case, tmp_path):
    return classifier(case, case["glue"], "--do_train", f"--vocab_file={tmp_path}/vocab.txt")


def data_tool_missing_input(case, tmp_path):
    return ["create_pretraining_data.py", f"--input_file={tmp_path}/nothing.txt",
            f"--output_file={case['out']}/records.tfrecord",
            f"--vocab_file={case['checkpoint']}/vocab.txt"]


def data_tool_vocabulary_without_mask(case, tmp_path):
    vocab = tmp_path / "vocab.txt"
    lines = (case["checkpoint"] / "vocab.txt").read_text(encoding="utf-8").splitlines()
    vocab.write_text("\n".join(t for t in lines if t != "[MASK]") + "\n", encoding="utf-8")
    text = tmp_path / "text.txt"
    text.write_text("One sentence here.\nAnother one there.\n\nA second document.\nIts end.\n")
    return ["create_pretraining_data.py", f"--input_file={text}",
            f"--output_file={case['out']}/records.tfrecord", f"--vocab_file={vocab}"]


def converter_truncated_checkpoint(case, tmp_path):
    truncated_checkpoint(case, tmp_path)
    return ["-m", "modeling.convert", "--from=tf1", "--to=hf",
            f"--input={tmp_path / 'ckpt'}", f"--output={case['out']}/converted"]


CASES = [
    ("truncated checkpoint", truncated_checkpoint, 1,
     r"ckpt/bert_model\.ckpt\.data-00000-of-00001: cannot read \S+ \(.*\): the file is "
     r"truncated or damaged"),
    ("vocabulary without [CLS] (classifier)", vocabulary_without_cls, 1,
     r"vocab\.txt: has no \[CLS\] entry"),
    ("vocabulary without [CLS] (SQuAD)",
     lambda case, tmp: vocabulary_without_cls(case, tmp, "run_squad.py"), 1,
     r"vocab\.txt: has no \[CLS\] entry"),
    ("invalid UTF-8", invalid_utf8, 1,
     r"MRPC/train\.tsv:3: not UTF-8 text \(byte 0xff at column \d+\)"),
    ("ragged row", ragged_row, 1, r"MRPC/train\.tsv:5: 4 fields, but the header has 5"),
    ("label outside the list", label_outside_the_list, 1,
     r"MRPC/dev\.tsv:4: label '7' is not one of"),
    ("missing column", missing_column, 1, r"MRPC/train\.tsv: column 'sentence two' \(text_b\) "
                                          r"is not in the header"),
    ("empty file", empty_file, 1, r"MRPC/train\.tsv: empty file"),
    ("missing file", missing_file, 1, r"MRPC/dev\.tsv: missing file"),
    ("wrong config", edited_config(hidden_size=33), 1, r"bert_config\.json: .*hidden_size"),
    ("config and checkpoint disagree", edited_config(intermediate_size=128), 1,
     r"bert_model\.ckpt does not fit .*intermediate/dense/kernel: checkpoint shape \(32, 64\) "
     r"!= model shape \(32, 128\)"),
    ("malformed SQuAD JSON", malformed_json, 1, r"dev\.json:\d+: not valid JSON"),
    ("pretraining sequence above the positions", pretraining_sequence_too_long, 2,
     r"--max_seq_length=256 exceeds the model's max_position_embeddings=128"),
    ("output_dir of another run", reused_output_dir, 2,
     r"holds a run with other settings \(learning_rate was 5e-05, now 0\.001\)"),
    ("bad flag value", bad_flag_value, 2, r"flag --max_seq_length=abc: invalid literal"),
    ("unknown flag", unknown_flag, 2, r"Unknown command line flag 'num_train_epoch'"),
    ("missing vocabulary", missing_vocabulary, 2, r"--vocab_file \S+vocab\.txt: no such file"),
    ("data tool: no input", data_tool_missing_input, 1, r"nothing\.txt"),
    ("data tool: vocabulary without [MASK]", data_tool_vocabulary_without_mask, 1,
     r"vocab\.txt: has no \[MASK\] entry"),
    ("converter: truncated checkpoint", converter_truncated_checkpoint, 1,
     r"bert_model\.ckpt\.data-00000-of-00001: cannot read"),
]


@pytest.mark.parametrize("name,build,status,pattern", CASES, ids=[c[0] for c in CASES])
def test_user_error_is_one_line_and_leaves_the_finished_run_intact(finished, tmp_path, name,
                                                                    build, status, pattern):
    before = snapshot(finished["out"])
    command = build(finished, tmp_path)
    result = run_script(*command, check=False)
    program = "convert.py" if command[0] == "-m" else command[0]
    lines = result.stderr.strip().splitlines()
    assert result.returncode == status, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert lines[-1].startswith(f"{program}: error: "), lines[-1]
    assert re.search(pattern, lines[-1]), lines[-1]
    assert snapshot(finished["out"]) == before
    # A fresh output_dir (SQuAD and generic cases) holds no file either.
    assert not any(path.is_file() for path in (tmp_path / "out").rglob("*"))


def test_traceback_on_request(finished, tmp_path):
    command = ragged_row(finished, tmp_path)
    result = subprocess.run([sys.executable, str(REPO / command[0]), *command[1:]],
                            capture_output=True, text=True, cwd=REPO,
                            env={**os.environ, "BERT_TRACEBACK": "1"})
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "DataError: " in result.stderr
