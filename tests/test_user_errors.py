"""Every user mistake through the real command line: one line on stderr naming the file (and line)
or flag and what to do, the documented exit status (1; 2 for flags and settings), no traceback,
and a finished earlier run in the same --output_dir left byte for byte as it was: its listing,
hidden files and folders included, and that of the folder around it (no lock or temporary file
left either).

Each case builds its bad input from real data (GLUE MRPC, SQuAD, CoNLL-2003, WikiText-2) and the
small random checkpoint in Google's format; the finished runs are a short MRPC fine-tuning with
prediction and a short pretraining on records made from WikiText-2.
"""
import json
import os
import re
import shutil
import sys

import pytest
import reference_runs
import warm_python
from conftest import REPO, run_script, snapshot

pytestmark = pytest.mark.integration


def around(folder):
    """The names beside `folder` (where its lock file goes)."""
    return sorted(os.listdir(folder.parent))


@pytest.fixture(scope="module")
def finished(shared_data, tiny_checkpoint, mrpc_small, classifier_reference, pretraining_records,
             pretraining_reference, tmp_path_factory):
    """The finished runs the mistakes are made beside: copies of the small MRPC classifier run
    with its export and of the short pretraining run, made once for every test file (conftest);
    copies, so that a refused run here and a test of another file never meet on one folder."""
    root = tmp_path_factory.mktemp("finished")
    for source, name in ((classifier_reference["out"], "out"),
                         (classifier_reference["export"], "export"),
                         (pretraining_reference, "pretrained")):
        shutil.copytree(source, root / name)
    return {"glue": mrpc_small, "out": root / "out", "checkpoint": tiny_checkpoint,
            "squad": shared_data / "squad" / "dev-v1.1.json", "shared": shared_data,
            "records": pretraining_records, "pretrained": root / "pretrained",
            "export": root / "export"}


def pretraining(checkpoint, records, out, *flags):
    return ["run_pretraining.py", f"--input_file={records}", f"--output_dir={out}",
            f"--bert_config_file={checkpoint}/bert_config.json", "--max_seq_length=64",
            "--max_predictions_per_seq=10", "--train_batch_size=8", "--num_train_steps=6",
            "--num_warmup_steps=2", "--max_eval_steps=2", *flags]


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
    """The finished classifier run's settings (reference_runs.classifier), into its folder."""
    checkpoint = checkpoint or f"{case['checkpoint']}/bert_model.ckpt"
    return ["run_classifier.py", "--task_name=MRPC", f"--data_dir={data}",
            f"--init_checkpoint={checkpoint}", "--max_seq_length=64", "--train_batch_size=8",
            "--num_train_epochs=2", "--eval_every_steps=3", "--best_metric=eval_loss",
            "--learning_rate=1e-3", f"--output_dir={case['out']}", *flags]


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
    return classifier(case, case["glue"], "--do_train", "--learning_rate=5e-5")


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
    return ["-m", "bert_tf2.modeling.convert", "--from=tf1", "--to=hf",
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
     r"holds a run with other settings \(learning_rate was 0\.001, now 5e-05\)"),
    ("bad flag value", bad_flag_value, 2, r"flag --max_seq_length=abc: invalid literal"),
    ("unknown flag", unknown_flag, 2, r"Unknown command line flag 'num_train_epoch'"),
    ("missing vocabulary", missing_vocabulary, 2, r"--vocab_file \S+vocab\.txt: no such file"),
    ("data tool: no input", data_tool_missing_input, 1, r"nothing\.txt"),
    ("data tool: vocabulary without [MASK]", data_tool_vocabulary_without_mask, 1,
     r"vocab\.txt: has no \[MASK\] entry"),
    ("converter: truncated checkpoint", converter_truncated_checkpoint, 1,
     r"bert_model\.ckpt\.data-00000-of-00001: cannot read"),
]


# ----------------------------------------------------------------------------- issue 27's classes
def without_line(case, tmp_path, token):
    vocab = tmp_path / "vocab.txt"
    lines = (case["checkpoint"] / "vocab.txt").read_text(encoding="utf-8").splitlines()
    vocab.write_text("\n".join(t for t in lines if t != token) + "\n", encoding="utf-8")
    return vocab


def damaged_index(case, tmp_path):
    shutil.copytree(case["checkpoint"], tmp_path / "ckpt")
    (tmp_path / "ckpt" / "bert_model.ckpt.index").write_bytes(b"\x00garbage" * 50)
    return classifier(case, case["glue"], "--do_eval",
                      checkpoint=tmp_path / "ckpt" / "bert_model.ckpt")


def damaged_index_pretraining(case, tmp_path):
    damaged_index(case, tmp_path)
    return pretraining(case["checkpoint"], case["records"], tmp_path / "out", "--do_train",
                       f"--init_checkpoint={tmp_path / 'ckpt' / 'bert_model.ckpt'}")


def config_not_utf8(case, tmp_path):
    text = (case["checkpoint"] / "bert_config.json").read_bytes()
    (tmp_path / "bert_config.json").write_bytes(text.replace(b'"gelu"', b'"gel\xff"'))
    return classifier(case, case["glue"], f"--bert_config_file={tmp_path / 'bert_config.json'}",
                      "--do_eval")


def vocabulary_not_utf8(case, tmp_path):
    lines = (case["checkpoint"] / "vocab.txt").read_bytes().split(b"\n")
    lines[2000] = b"caf\xe9"
    (tmp_path / "vocab.txt").write_bytes(b"\n".join(lines))
    return classifier(case, case["glue"], f"--vocab_file={tmp_path / 'vocab.txt'}", "--do_train")


def ner_prediction_not_utf8(case, tmp_path):
    text = (case["shared"] / "conll2003" / "valid.txt").read_bytes().split(b"\n")[:40]
    text[5] = text[5].replace(b" ", b"\xff ", 1)
    (tmp_path / "test.txt").write_bytes(b"\n".join(text) + b"\n")
    return ["run_ner.py", f"--predict_file={tmp_path / 'test.txt'}", "--labels=O,B-PER,I-PER",
            f"--init_checkpoint={case['checkpoint']}/bert_model.ckpt",
            f"--output_dir={tmp_path / 'out'}", "--max_seq_length=32", "--do_predict"]


def vocabulary_without_unk(case, tmp_path):
    vocab = without_line(case, tmp_path, "[UNK]")
    return classifier(case, case["glue"], f"--vocab_file={vocab}", "--do_train")


def data_tool_vocabulary_without_unk(case, tmp_path):
    vocab = without_line(case, tmp_path, "[UNK]")
    return ["create_pretraining_data.py", f"--input_file={case['shared']}/corpus/wikitext-2/"
            f"valid.txt", f"--output_file={case['out']}/records.tfrecord", f"--vocab_file={vocab}"]


def flag(*flags, script="classifier"):
    def build(case, tmp_path):
        if script == "squad":
            return ["run_squad.py", f"--predict_file={case['squad']}", *flags,
                    f"--init_checkpoint={case['checkpoint']}/bert_model.ckpt",
                    f"--output_dir={case['out']}", "--do_predict"]
        if script == "pretraining":
            return pretraining(case["checkpoint"], case["records"], case["out"], "--do_train",
                               *flags)
        if script == "data":
            return ["create_pretraining_data.py", f"--input_file={case['records']}",
                    f"--output_file={case['out']}/records.tfrecord",
                    f"--vocab_file={case['checkpoint']}/vocab.txt", *flags]
        if script == "vocab":
            return ["-m", "bert_tf2.data_gen.learn_vocab", f"--input_file={case['glue']}/train.tsv",
                    f"--output_file={case['out']}/vocab.txt", *flags]
        return classifier(case, case["glue"], "--do_train", *flags)
    return build


def records_of_another_length(case, tmp_path):
    command = pretraining(case["checkpoint"], case["records"], tmp_path / "out", "--do_train")
    return [part.replace("--max_seq_length=64", "--max_seq_length=128") for part in command]


def records_of_other_predictions(case, tmp_path):
    command = pretraining(case["checkpoint"], case["records"], tmp_path / "out", "--do_train")
    return [part.replace("--max_predictions_per_seq=10", "--max_predictions_per_seq=20")
            for part in command]


def records_replaced(content):
    def build(case, tmp_path):
        records = tmp_path / "records.tfrecord"
        records.write_bytes(content(case))
        return pretraining(case["checkpoint"], records, tmp_path / "out", "--do_train")
    return build


def classifier_into_pretraining_folder(case, tmp_path):
    command = classifier(case, case["glue"], "--do_train", "--do_eval")
    return [f"--output_dir={case['pretrained']}" if part.startswith("--output_dir=") else part
            for part in command]


def pretraining_into_classifier_folder(case, tmp_path):
    return pretraining(case["checkpoint"], case["records"], case["out"], "--do_train")


def pretraining_resumed_with_another_rate(case, tmp_path):
    """The finished pretraining run's command (reference_runs.pretraining), another rate."""
    return reference_runs.pretraining(case["records"], case["checkpoint"], case["pretrained"],
                                      "--learning_rate=5e-5")


def damaged_saved_model(case, tmp_path):
    shutil.copytree(case["export"], tmp_path / "export")
    data = next((tmp_path / "export" / "variables").glob("variables.data-*"))
    data.write_bytes(data.read_bytes()[:1000])
    lines = tmp_path / "pairs.jsonl"
    lines.write_text('{"text_a": "A sentence.", "text_b": "Another one."}\n')
    return ["batch_predict.py", f"--saved_model={tmp_path / 'export'}", f"--input_file={lines}",
            f"--output_file={case['out']}/predictions.jsonl"]


def number_for_text(case, tmp_path):
    lines = tmp_path / "pairs.jsonl"
    lines.write_text('{"text_a": "A sentence.", "text_b": "Another one."}\n'
                     '{"text_a": 1987, "text_b": "A year."}\n')
    return ["batch_predict.py", f"--saved_model={case['export']}", f"--input_file={lines}",
            f"--output_file={case['out']}/predictions.jsonl"]


def squad_question_ids_repeated(case, tmp_path):
    squad = json.loads(case["squad"].read_text(encoding="utf-8"))
    paragraphs = squad["data"][0]["paragraphs"][:2]
    paragraphs[1]["qas"][0]["id"] = paragraphs[0]["qas"][3]["id"]
    (tmp_path / "dev.json").write_text(json.dumps({"version": "1.1", "data": [
        {"title": "Repeated", "paragraphs": paragraphs}]}), encoding="utf-8")
    return ["run_squad.py", f"--predict_file={tmp_path / 'dev.json'}",
            f"--init_checkpoint={case['checkpoint']}/bert_model.ckpt",
            f"--output_dir={tmp_path / 'out'}", "--max_seq_length=128", "--do_predict"]


def latin1_corpus(case, tmp_path):
    text = (case["shared"] / "corpus" / "wikitext-2" / "valid.txt").read_text(encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes(
        text[:20000].replace("the", "th\u00e9").encode("latin-1", "replace"))
    return ["-m", "bert_tf2.data_gen.learn_vocab", f"--input_file={tmp_path / 'latin1.txt'}",
            "--vocab_size=2000", f"--output_file={tmp_path / 'out' / 'vocab.txt'}"]


def config_without(key):
    def build(case, tmp_path):
        config = json.loads((case["checkpoint"] / "bert_config.json").read_text())
        del config[key]
        (tmp_path / "bert_config.json").write_text(json.dumps(config))
        return classifier(case, case["glue"],
                          f"--bert_config_file={tmp_path / 'bert_config.json'}", "--do_eval")
    return build


def output_dir_is_a_file(case, tmp_path):
    (tmp_path / "out").write_text("not a folder\n")
    return classifier(case, case["glue"], "--do_train", f"--output_dir={tmp_path / 'out'}")


def predict_without_trained_weights(case, tmp_path):
    return classifier(case, case["glue"], "--do_predict", f"--output_dir={tmp_path / 'out'}")


def file_in_the_way(case, tmp_path):
    (tmp_path / "afile").write_text("a file\n")
    return classifier(case, case["glue"], "--do_train", f"--output_dir={tmp_path}/afile/out")


def truncated_records(case):
    data = case["records"].read_bytes()
    return data[:len(data) // 2]


CASES += [
    ("damaged checkpoint index", damaged_index, 1,
     r"ckpt/bert_model\.ckpt\.index: not a readable (TF1 )?checkpoint index"),
    ("damaged checkpoint index (pretraining)", damaged_index_pretraining, 1,
     r"ckpt/bert_model\.ckpt\.index: not a readable (TF1 )?checkpoint index"),
    ("bert_config.json not UTF-8", config_not_utf8, 1,
     r"bert_config\.json: not UTF-8 text \(byte 0xff at byte \d+\)"),
    ("vocab.txt not UTF-8", vocabulary_not_utf8, 1,
     r"vocab\.txt:2001: not UTF-8 text \(byte 0xe9 at column 4\)"),
    ("NER prediction file not UTF-8", ner_prediction_not_utf8, 1,
     r"test\.txt:6: not UTF-8 text \(byte 0xff"),
    ("vocabulary without [UNK]", vocabulary_without_unk, 1, r"vocab\.txt: has no \[UNK\] entry"),
    ("data tool: vocabulary without [UNK]", data_tool_vocabulary_without_unk, 1,
     r"vocab\.txt: has no \[UNK\] entry"),
    ("--max_seq_length=0", flag("--max_seq_length=0"), 2,
     r"flag --max_seq_length=0: must be at least 3"),
    ("--max_seq_length=2", flag("--max_seq_length=2"), 2,
     r"flag --max_seq_length=2: must be at least 3"),
    ("--train_batch_size=0", flag("--train_batch_size=0"), 2,
     r"flag --train_batch_size=0: must be at least 1"),
    ("--learning_rate=nan", flag("--learning_rate=nan"), 2,
     r"flag --learning_rate=nan: must be above 0"),
    ("--warmup_proportion=-1", flag("--warmup_proportion=-1"), 2,
     r"flag --warmup_proportion=-1\.0: must be in \[0, 1\]"),
    ("SQuAD --doc_stride=0", flag("--doc_stride=0", script="squad"), 2,
     r"flag --doc_stride=0: must be at least 1"),
    ("pretraining --max_predictions_per_seq=0",
     flag("--max_predictions_per_seq=0", script="pretraining"), 2,
     r"flag --max_predictions_per_seq=0: must be at least 1"),
    ("data tool: --masked_lm_prob=2", flag("--masked_lm_prob=2", script="data"), 2,
     r"--masked_lm_prob=2\.0: must be in \(0, 1\]"),
    ("data tool: --max_seq_length=2", flag("--max_seq_length=2", script="data"), 2,
     r"--max_seq_length=2 is too small"),
    ("learn_vocab --vocab_size=0", flag("--vocab_size=0", script="vocab"), 2,
     r"flag --vocab_size=0: 0 is not a positive integer"),
    ("records of another --max_seq_length", records_of_another_length, 1,
     r"records-64\.tfrecord: its records were made with --max_seq_length=64 "
     r"--max_predictions_per_seq=10, but this run has --max_seq_length=128"),
    ("records of another --max_predictions_per_seq", records_of_other_predictions, 1,
     r"its records were made with --max_seq_length=64 --max_predictions_per_seq=10, but this "
     r"run has --max_seq_length=64 --max_predictions_per_seq=20"),
    ("records: a text file", records_replaced(lambda case: (
        case["shared"] / "corpus" / "wikitext-2" / "valid.txt").read_bytes()[:5000]), 1,
     r"records\.tfrecord: not a TFRecord file"),
    ("records: random bytes", records_replaced(lambda case: bytes(range(256)) * 20), 1,
     r"records\.tfrecord: not a TFRecord file"),
    ("records: truncated", records_replaced(truncated_records), 1,
     r"records\.tfrecord: truncated or damaged at byte \d+ \(after \d+ whole records"),
    ("records: empty", records_replaced(lambda case: b""), 1,
     r"records\.tfrecord: empty file, no records"),
    ("classifier into a pretraining folder", classifier_into_pretraining_folder, 2,
     r"pretrained holds a pretraining run \(run_config\.json\), not a fine-tuning one"),
    ("pretraining into a classifier folder", pretraining_into_classifier_folder, 2,
     r"out holds a fine-tuning run \(run_config\.json\), not a pretraining one"),
    ("pretraining resumed with another learning rate", pretraining_resumed_with_another_rate, 2,
     r"pretrained holds a run with other settings \(learning_rate was 0\.001, now 5e-05\)"),
    ("batch_predict: damaged SavedModel", damaged_saved_model, 1,
     r"export: not a readable SavedModel \(.*\); export it again"),
    ("batch_predict: a number for text", number_for_text, 1,
     r"pairs\.jsonl:2: 'text_a' must be text \(a JSON string\), not 1987"),
    ("SQuAD question ids repeated", squad_question_ids_repeated, 1,
     r"dev\.json: question id '\w+' is used twice \(article 'Repeated', paragraph 1, and "
     r"article 'Repeated', paragraph 2\)"),
    ("learn_vocab on Latin-1 text", latin1_corpus, 1,
     r"latin1\.txt:\d+: not UTF-8 .*--skip_invalid_utf8"),
    ("config without intermediate_size", config_without("intermediate_size"), 1,
     r"does not fit bert_classifier: the bert config does not set intermediate_size, so the "
     r"original's defaults were used"),
    ("config without num_hidden_layers", config_without("num_hidden_layers"), 1,
     r"does not fit bert_classifier: the bert config does not set num_hidden_layers"),
    ("config without num_attention_heads", config_without("num_attention_heads"), 1,
     r"bert_config\.json: bert config field 'hidden_size' \(32\) must be a multiple of "
     r"'num_attention_heads' \(12\); the file does not set 'num_attention_heads' \(the "
     r"original's default, 12, was used\): add the model's value"),
    ("config vocab_size below the vocabulary's", edited_config(vocab_size=1000), 1,
     r"vocab\.txt: 30522 tokens, but \S+/bert_config\.json says vocab_size=1000, so ids 1000 "
     r"to 30521 have no embedding"),
    ("config vocab_size above the checkpoint's", edited_config(vocab_size=40000), 1,
     r"bert_model\.ckpt does not fit bert_classifier: its word embeddings have 30522 rows but "
     r"\S+/bert_config\.json says vocab_size=40000; use the checkpoint's own bert_config\.json"),
    ("--output_dir is a file", output_dir_is_a_file, 2,
     r"--output_dir \S+/out: is a file, not a folder"),
    ("a file in the way of --output_dir", file_in_the_way, 2,
     r"--output_dir \S+/afile/out: \S+/afile is a file, not a folder"),
    ("prediction without trained weights", predict_without_trained_weights, 2,
     r"no trained weights: \S+/out has no checkpoint and --init_checkpoint lacks output_weights, "
     r"output_bias; train first \(--do_train\)"),
]


@pytest.mark.parametrize("name,build,status,pattern", CASES, ids=[c[0] for c in CASES])
def test_user_error_is_one_line_and_leaves_the_finished_run_intact(finished, tmp_path, name,
                                                                    build, status, pattern):
    kept = [finished["out"], finished["pretrained"]]
    before = [snapshot(folder) for folder in kept] + [around(finished["out"])]
    command = build(finished, tmp_path)
    fresh = sorted(os.listdir(tmp_path))
    result = run_script(*command, check=False)
    program = (command[1].rsplit(".", 1)[-1] + ".py") if command[0] == "-m" else command[0]
    lines = result.stderr.strip().splitlines()
    assert result.returncode == status, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert lines[-1].startswith(f"{program}: error: "), lines[-1]
    assert re.search(pattern, lines[-1]), lines[-1]
    assert len(lines[-1]) < 1000, lines[-1]
    # Nothing written: the finished runs, the folder around them, and a fresh output folder.
    assert [snapshot(folder) for folder in kept] + [around(finished["out"])] == before
    assert sorted(os.listdir(tmp_path)) == fresh


def test_traceback_on_request(finished, tmp_path):
    command = ragged_row(finished, tmp_path)
    result = warm_python.run([sys.executable, str(REPO / command[0]), *command[1:]], cwd=REPO,
                             env={**os.environ, "BERT_TRACEBACK": "1"})
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "DataError: " in result.stderr
