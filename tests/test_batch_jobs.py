"""Batch jobs on Apache Beam (DirectRunner, two worker processes) against the local tools: feature
extraction over several files, and prediction with exported SavedModels (a fine-tuned MRPC
classifier on GLUE's own test file, the sentence embedder). Every output line equals the local
tool's; only the order of lines in the shards differs.
"""
import json

import numpy as np
import pytest
from conftest import read_tsv, run_script

pytestmark = pytest.mark.integration

BEAM = ["--", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]

pytest.importorskip("apache_beam", reason="apache-beam is not installed (pip install .[beam])")


def beam_lines(prefix):
    files = sorted(prefix.parent.glob(prefix.name + "-*-of-*"))
    assert files, f"no output shards {prefix}-*"
    return sorted(line for path in files for line in path.read_text(encoding="utf-8")
                  .splitlines())


def test_extraction_on_beam_equals_the_local_tool(shared_data, tiny_checkpoint, tmp_path):
    with open(shared_data / "glue" / "STS-B" / "dev.tsv", encoding="utf-8-sig") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    first = [f"{r[7]} ||| {r[8]}" for r in rows[:100]]
    second = [r[7] for r in rows[100:160]] + ["", "Café 中文"]
    (tmp_path / "a.txt").write_text("\n".join(first) + "\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("\n".join(second) + "\n", encoding="utf-8")
    (tmp_path / "all.txt").write_text("\n".join(first + second) + "\n", encoding="utf-8")
    common = [f"--init_checkpoint={tiny_checkpoint}/bert_model.ckpt", "--layers=-1,0",
              "--max_seq_length=48", "--batch_size=8", "--lines_per_shard=50"]
    run_script("extract_features.py", *common, f"--input_file={tmp_path / 'all.txt'}",
               f"--output_file={tmp_path / 'local.jsonl'}")
    run_script("-m", "bert_tf2.tasks.feature_extraction.beam_pipeline", *common,
               f"--input_file={tmp_path / 'a.txt'},{tmp_path / 'b.txt'}",
               f"--output_file={tmp_path / 'beam' / 'part'}", "--num_output_shards=3", *BEAM)
    local = (tmp_path / "local.jsonl").read_text(encoding="utf-8").splitlines()
    assert beam_lines(tmp_path / "beam" / "part") == sorted(local)
    assert [json.loads(line)["linex_index"] for line in local] == list(range(162))


def test_classifier_predictions_on_beam_equal_the_runners(classifier_reference, mrpc_small,
                                                          tmp_path):
    """GLUE's test.tsv (its first 8 rows) through the exported classifier (conftest's small MRPC
    run): the local tool gives the runner's own test predictions, and the Beam pipeline, on
    three shards of lines, the local tool's lines."""
    test = mrpc_small / "test.tsv"
    common = [f"--saved_model={classifier_reference['export']}", f"--input_file={test}",
              "--columns=,,,text_a,text_b", "--header", "--batch_size=4",
              "--lines_per_shard=3"]
    run_script("batch_predict.py", *common, f"--output_file={tmp_path / 'local.jsonl'}")
    local = (tmp_path / "local.jsonl").read_text(encoding="utf-8").splitlines()
    predicted = [json.loads(line) for line in local]
    assert [p["index"] for p in predicted] == list(range(1, 9))  # line 0 is the header
    runner = read_tsv(classifier_reference["out"] / "test_predictions.tsv")[1:]
    np.testing.assert_allclose([p["probabilities"] for p in predicted],
                               [[float(v) for v in row[2:]] for row in runner], atol=1e-5)
    assert [p["label"] for p in predicted] == [row[1] for row in runner]
    run_script("batch_predict.py", *common, "--beam",
               f"--output_file={tmp_path / 'beam' / 'part'}", *BEAM)
    assert beam_lines(tmp_path / "beam" / "part") == sorted(local)


def test_embeddings_from_json_lines(tiny_checkpoint, tmp_path):
    run_script("extract_features.py", f"--init_checkpoint={tiny_checkpoint}/bert_model.ckpt",
               "--pooling=mean", f"--export_dir={tmp_path / 'embedder'}", "--export_litert=none")
    texts = ["A first sentence.", "Another one, a little longer than the first.", ""]
    (tmp_path / "input.jsonl").write_text("".join(json.dumps({"text_a": t}) + "\n"
                                                  for t in texts), encoding="utf-8")
    (tmp_path / "input.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    run_script("batch_predict.py", f"--saved_model={tmp_path / 'embedder'}",
               f"--input_file={tmp_path / 'input.jsonl'}",
               f"--output_file={tmp_path / 'served.jsonl'}")
    run_script("extract_features.py", f"--init_checkpoint={tiny_checkpoint}/bert_model.ckpt",
               "--pooling=mean", f"--input_file={tmp_path / 'input.txt'}",
               f"--output_file={tmp_path / 'local.npy'}")
    served = [json.loads(line) for line in (tmp_path / "served.jsonl").read_text().splitlines()]
    np.testing.assert_allclose([s["embedding"] for s in served], np.load(tmp_path / "local.npy"),
                               atol=1e-5)


def test_bad_lines_are_named(classifier_reference, tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"text_a": "x", "text_b": "y"}\n{"text_a": "x"}\n')
    result = run_script("batch_predict.py", f"--saved_model={classifier_reference['export']}",
                        f"--input_file={tmp_path / 'bad.jsonl'}",
                        f"--output_file={tmp_path / 'out.jsonl'}", check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].endswith(
        "bad.jsonl:2: no text_b (the signature takes text_a, text_b)")
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.slow  # repeats the classifier's batch runs on other tasks (make test-all)
def test_squad_and_multiple_choice_saved_models(shared_data, tiny_checkpoint, tmp_path):
    """Questions through an exported SQuAD model give the runner's predictions.json answers;
    multiple-choice rows with 2, 3 and 5 choices (padded with "" in a batch) give its
    test_predictions.tsv probabilities; the Beam run gives the local lines."""
    from test_multiple_choice import generic_rows, write_jsonl

    from bert_tf2.tasks.squad.files import load_squad, write_json

    source = load_squad(shared_data / "squad" / "dev-v1.1.json")["data"][3]
    dataset = {"version": "1.1", "data": [{"title": source["title"],
                                           "paragraphs": source["paragraphs"][:3]}]}
    write_json(tmp_path / "squad.json", dataset)
    run_script("run_squad.py", f"--train_file={tmp_path / 'squad.json'}",
               f"--predict_file={tmp_path / 'squad.json'}", f"--output_dir={tmp_path / 'sq'}",
               f"--init_checkpoint={tiny_checkpoint}/bert_model.ckpt", "--max_seq_length=128",
               "--doc_stride=64", "--num_train_epochs=3", "--learning_rate=1e-3",
               "--train_batch_size=8", "--do_train", "--do_predict",
               f"--export_dir={tmp_path / 'sq_export'}", "--export_litert=none")
    questions = [(qa["id"], qa["question"], p["context"]) for p in dataset["data"][0]
                 ["paragraphs"] for qa in p["qas"]]
    (tmp_path / "questions.jsonl").write_text("".join(
        json.dumps({"question": q, "context": c}) + "\n" for _, q, c in questions),
        encoding="utf-8")
    run_script("batch_predict.py", f"--saved_model={tmp_path / 'sq_export'}",
               f"--input_file={tmp_path / 'questions.jsonl'}", "--batch_size=4",
               f"--output_file={tmp_path / 'answers.jsonl'}")
    answers = [json.loads(line)["answer"] for line in
               (tmp_path / "answers.jsonl").read_text(encoding="utf-8").splitlines()]
    expected = json.loads((tmp_path / "sq" / "predictions.json").read_text())
    # SQuAD 1.1's file says "empty" where no span is valid; the served model answers "".
    expected = {qid: "" if text == "empty" else text for qid, text in expected.items()}
    assert answers == [expected[qid] for qid, _, _ in questions]
    assert sum(bool(answer) for answer in answers) >= len(answers) // 2

    data = tmp_path / "mc"
    data.mkdir()
    write_jsonl(data / "train.jsonl", generic_rows(16))
    write_jsonl(data / "test.jsonl", generic_rows(9, labelled=False))
    run_script("run_multiple_choice.py", "--task_name=generic", f"--data_dir={data}",
               f"--output_dir={tmp_path / 'mc_out'}", f"--init_checkpoint={tiny_checkpoint}",
               "--max_seq_length=32", "--train_batch_size=8", "--num_train_steps=2", "--do_train",
               "--do_predict",
               f"--export_dir={tmp_path / 'mc_export'}", "--export_litert=none")
    common = [f"--saved_model={tmp_path / 'mc_export'}", f"--input_file={data / 'test.jsonl'}",
              "--batch_size=4", "--lines_per_shard=4"]
    run_script("batch_predict.py", *common, f"--output_file={tmp_path / 'choices.jsonl'}")
    local = (tmp_path / "choices.jsonl").read_text(encoding="utf-8").splitlines()
    runner = read_tsv(tmp_path / "mc_out" / "test_predictions.tsv")[1:]
    for line, row, example in zip(local, runner, generic_rows(9, labelled=False)):
        served = json.loads(line)["probabilities"]
        n = len(example["choices"])
        np.testing.assert_allclose(served[:n], [float(v) for v in row[2:2 + n]], atol=1e-5)
    run_script("batch_predict.py", *common, "--beam",
               f"--output_file={tmp_path / 'beam' / 'part'}", *BEAM)
    assert beam_lines(tmp_path / "beam" / "part") == sorted(local)
