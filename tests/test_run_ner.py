"""run_ner.py end to end on slices of the real CoNLL-2003 files, with a small random BERT.

The model is small but has the real uncased vocabulary; the path is the real one: CoNLL columns
-> cached window features (long sentences in several windows) -> training with conlleval scoring
every epoch -> best checkpoint -> predictions in CoNLL format, which an independent reading of the
files must score as the runner did -> a SavedModel tagging raw sentences. Both modes run.
"""
import json
import pathlib
import re

import pytest
from conftest import read_results, run_script, serve_texts

from bert_tf2.tasks.ner import metrics as conlleval
from bert_tf2.tasks.ner.reader import read_conll


def run_ner(*flags, check=True):
    return run_script("run_ner.py", *flags, check=check)


results = read_results


def conll_slice(shared_data, destination: pathlib.Path, lines: dict) -> pathlib.Path:
    """The first `lines[name]` lines of each file (cut at a sentence end), as CoNLL ships them."""
    destination.mkdir(parents=True, exist_ok=True)
    for name, count in lines.items():
        text = (shared_data / "conll2003" / name).read_text(encoding="utf-8").split("\n")
        while text[count - 1].strip():
            count += 1
        (destination / name).write_text("\n".join(text[:count]) + "\n", encoding="utf-8")
    return destination


def read_predictions(path) -> tuple[list, list, list]:
    """`word gold predicted` lines back into per-sentence lists."""
    words, gold, predicted = [[]], [[]], [[]]
    for line in pathlib.Path(path).read_text(encoding="utf-8").split("\n"):
        if not line:
            if words[-1]:
                words.append([]), gold.append([]), predicted.append([])
            continue
        w, g, p = line.split(" ")
        words[-1].append(w), gold[-1].append(g), predicted[-1].append(p)
    return words[:-1], gold[:-1], predicted[:-1]


@pytest.fixture(scope="module")
def ner_run(tmp_path_factory, shared_data, tiny_checkpoint):
    """About 170 training and 40 evaluation sentences; max_seq_length 32 with stride 16, so the
    longer sentences take several windows."""
    root = tmp_path_factory.mktemp("ner")
    data = conll_slice(shared_data, root / "data", {"train.txt": 2500, "valid.txt": 700})
    out = root / "out"
    flags = [f"--data_dir={data}", f"--output_dir={out}",
             f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}", "--max_seq_length=32",
             "--doc_stride=16", "--train_batch_size=16", "--num_train_epochs=2",
             "--learning_rate=2e-3", "--predict_batch_size=32"]
    first = run_ner(*flags, "--do_train", "--do_eval", f"--export_dir={root / 'export'}")
    return {"root": root, "data": data, "out": out, "flags": flags, "log": first.stderr}


@pytest.mark.integration
def test_training_scores_every_epoch_as_conlleval(ner_run):
    out, log, data = ner_run["out"], ner_run["log"], ner_run["data"]
    train = read_conll(str(data / "train.txt"))
    assert f"{len(train)} training sentences in" in log
    assert "IOB2 tagging" in log
    steps_per_epoch = len(train) / 16
    step = round(steps_per_epoch)
    assert f"evaluation at step {step} (epoch {step / steps_per_epoch:.2f})" in log
    final = results(out / "eval_results.txt")
    assert final["global_step"] == int(len(train) / 16 * 2)
    assert {"eval_f1", "eval_precision", "eval_recall", "eval_accuracy",
            "eval_PER_f1"} <= set(final)
    best = results(out / "best" / "eval_results.txt")
    assert best["eval_f1"] >= final["eval_f1"]
    # The predictions file: every word of valid.txt, its gold tag, and the kept weights' tag.
    gold = read_conll(str(data / "valid.txt"))
    words, gold_tags, predicted = read_predictions(out / "eval_predictions.txt")
    assert words == [s.words for s in gold] and gold_tags == [s.labels for s in gold]
    scored = conlleval.evaluate(gold_tags, predicted)
    assert scored.f1 == pytest.approx(best["eval_f1"], abs=1e-12)
    assert scored.accuracy == pytest.approx(best["eval_accuracy"], abs=1e-12)
    assert (out / "eval_report.txt").read_text() == conlleval.report(scored)
    # Training moved: the second epoch's mean loss is below the first's.
    losses = [float(x) for x in re.findall(r"step \d+/\d+ \| loss ([0-9.]+)", log)]
    assert len(losses) == 2 and losses[1] < losses[0]


@pytest.mark.integration
def test_long_sentences_use_several_windows_and_every_word_is_tagged(ner_run):
    from bert_tf2.tasks.ner.features import load_features

    features = load_features(str(ner_run["out"] / "eval.tf_record"), 32)
    sentences = read_conll(str(ner_run["data"] / "valid.txt"))
    assert len(features["example_index"]) > len(sentences)  # some sentences have 2+ windows
    _, _, predicted = read_predictions(ner_run["out"] / "eval_predictions.txt")
    assert [len(tags) for tags in predicted] == [len(s.words) for s in sentences]


@pytest.mark.integration
def test_prediction_input_and_bad_input(ner_run, tmp_path):
    data = ner_run["data"]
    sentences = read_conll(str(data / "valid.txt"))[:5]
    words_only = tmp_path / "test.txt"
    words_only.write_text("\n\n".join("\n".join(s.words) for s in sentences) + "\n")
    flags = [f for f in ner_run["flags"] if not f.startswith("--data_dir")]
    run_ner(*flags, f"--train_file={data / 'train.txt'}", f"--predict_file={words_only}",
            "--do_predict")
    lines = (ner_run["out"] / "test_predictions.txt").read_text().split("\n\n")
    assert [[row.split(" ")[0] for row in block.split("\n")] for block in lines[:5]] == [
        s.words for s in sentences]
    # A tag outside the training tag set, in a scored file: the file and line are named.
    bad = tmp_path / "bad.txt"
    bad.write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP B-VERB\n")
    result = run_ner(*flags, f"--train_file={data / 'train.txt'}", f"--predict_file={bad}",
                     "--do_predict", check=False)
    assert result.returncode != 0 and f"{bad}:2: label 'B-VERB'" in result.stderr
    # A line with the wrong number of columns.
    ragged = tmp_path / "ragged.txt"
    ragged.write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP\n")
    result = run_ner(*flags, f"--train_file={data / 'train.txt'}", f"--predict_file={ragged}",
                     "--do_predict", check=False)
    assert result.returncode != 0 and f"{ragged}:2: 3 columns" in result.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("-DOCSTART- -X- -X- O\n\n")
    result = run_ner(*flags, f"--train_file={empty}", "--do_train", check=False)
    assert result.returncode != 0 and f"{empty}: empty file" in result.stderr


@pytest.mark.integration
def test_feature_based_mode_trains_only_the_bilstm(shared_data, tiny_checkpoint, tmp_path):
    data = conll_slice(shared_data, tmp_path / "data", {"train.txt": 1200, "valid.txt": 300})
    out = tmp_path / "out"
    run = run_ner(f"--data_dir={data}", f"--output_dir={out}",
                  f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}",
                  "--mode=feature_based", "--feature_layers=2", "--lstm_units=16",
                  "--max_seq_length=64", "--train_batch_size=16", "--num_train_epochs=1",
                  "--learning_rate=1e-2", "--do_train", "--do_eval")
    assert "feature_based" in run.stderr
    # The encoder is frozen: in the kept weights it still equals the initial checkpoint.
    import dataclasses

    import numpy as np
    import tensorflow as tf

    from bert_tf2.modeling.checkpoint_names import encoder_variable_map
    from bert_tf2.modeling.config import BertConfig
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertFeatureTagger

    labels = json.loads((out / "run_config.json").read_text())["identity"]["labels"]
    config = BertConfig.from_json_file(str(tiny_checkpoint / "bert_config.json"))
    model = BertFeatureTagger(BertEncoder(dataclasses.replace(
        config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)), len(labels),
        lstm_units=16, feature_layers=2)
    tf.train.Checkpoint(model=model).read(str(out / "best" / "model")) \
        .assert_existing_objects_matched()
    initial = tf.train.load_checkpoint(str(tiny_checkpoint / "bert_model.ckpt"))
    encoder = encoder_variable_map(model.encoder)
    assert len(encoder) == 39
    for name, variable in encoder.items():
        np.testing.assert_array_equal(variable.numpy(), initial.get_tensor(name), err_msg=name)
    assert len(model.trainable_weights) == 14  # 2 BiLSTM layers x 2 directions x 3, output 2
    final = results(out / "eval_results.txt")
    assert {"eval_f1", "eval_accuracy"} <= set(final)
    result = run_ner(f"--data_dir={data}", f"--output_dir={tmp_path / 'x'}",
                     f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}",
                     "--mode=feature_based", "--do_train", check=False)
    assert result.returncode != 0 and "--feature_layers=4: the model has 2 layers" in result.stderr


FRESH_PROCESS = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)
model = tf.saved_model.load(sys.argv[1])
out = model.signatures["serve_text"](text=tf.constant(json.load(open(sys.argv[2]))))
print(json.dumps({"words": [[w.decode() for w in row] for row in out["words"].numpy()],
                  "tags": [[t.decode() for t in row] for row in out["tags"].numpy()],
                  "num_words": out["num_words"].numpy().tolist(),
                  "modules": sorted(m for m in ("modeling", "data_gen") if m in sys.modules)}))
"""


@pytest.mark.integration
def test_saved_model_in_a_fresh_process_tags_as_the_runner(ner_run, tmp_path, minilm_dir):
    """Raw sentences (the valid slice's words joined by spaces) through the SavedModel: the same
    tags as the runner's eval_predictions.txt for every sentence that fits one window; longer
    ones are windowed at any piece (see modeling/ner_serving.py) and still get a tag per word."""
    from bert_tf2.data_gen.tokenization import FullTokenizer

    words, _, predicted = read_predictions(ner_run["out"] / "eval_predictions.txt")
    served = serve_texts(FRESH_PROCESS, ner_run["root"] / "export",
                         [" ".join(sentence) for sentence in words] + ["", "  "], tmp_path)
    assert served["modules"] == []
    assert served["num_words"] == [len(sentence) for sentence in words] + [0, 0]
    tokenizer = FullTokenizer(str(minilm_dir / "vocab.txt"))
    one_window = 0
    for sentence, tags, row_words, row_tags, count in zip(
            words, predicted, served["words"], served["tags"], served["num_words"]):
        assert row_words[:count] == sentence
        assert all(row_tags[:count])
        if sum(len(tokenizer.tokenize(word) or [0]) for word in sentence) <= 30:
            assert row_tags[:count] == tags
            one_window += 1
    assert one_window >= len(words) // 2


@pytest.mark.integration
def test_litert_path_tags_every_sentence_as_the_runner(ner_run):
    """The export's LiteRT file (float32, made by export_litert.py) through `LiteRTTagger`: the
    runner's windows and reading rule, so the runner's tags for every sentence, long ones too;
    the int8 file the export wrote agrees with it on nearly every word."""
    from bert_tf2.tasks.ner.litert_serving import LiteRTTagger

    export = ner_run["root"] / "export"
    run_script("export_litert.py", f"--saved_model={export}", "--quantization=float32")
    words, _, predicted = read_predictions(ner_run["out"] / "eval_predictions.txt")
    texts = [" ".join(sentence) for sentence in words] + ["", "  "]
    float32 = LiteRTTagger.load(str(export), "float32")(texts)
    assert float32["words"][:-2] == words and float32["num_words"][-2:] == [0, 0]
    assert float32["tags"][:-2] == predicted
    assert any(len(s) > 30 for s in words)  # some sentences take several windows
    int8 = LiteRTTagger.load(str(export), "int8")(texts)
    flat8 = [t for tags in int8["tags"] for t in tags]
    flat32 = [t for tags in float32["tags"] for t in tags]
    assert len(flat8) == len(flat32) and sum(a == b for a, b in zip(flat8, flat32)) >= \
        0.98 * len(flat32)


@pytest.mark.integration
def test_the_export_served_over_http_tags_as_its_fast_path(ner_run):
    """serve.py on the export's int8 file: TF Serving's predict in rows and columns, and over
    TF Serving's gRPC, the words and tags of `LiteRTTagger` called directly, long sentences
    (several windows) included."""
    pytest.importorskip("uvicorn", reason="the serve extra is not installed")
    pytest.importorskip("tensorflow_serving", reason="tensorflow-serving-api is not installed "
                        "(make test installs it with --no-deps)")
    from conftest import free_port
    from http_server import call, grpc_predict, server

    from bert_tf2.tasks.ner.litert_serving import LiteRTTagger

    export = ner_run["root"] / "export"
    words, _, _ = read_predictions(ner_run["out"] / "eval_predictions.txt")
    texts = [" ".join(sentence) for sentence in words][:16] + [""]
    expected = LiteRTTagger.load(str(export), "int8")(texts)
    grpc_port = free_port()
    with server(export, "--runtime=int8", f"--tf_serving_grpc_port={grpc_port}") as (base, _):
        rows = call(base + "/v1/models/m:predict", {"instances": texts})[2]
        columns = call(base + "/v1/models/m:predict", {"inputs": {"text": texts}})[2]
        tensors = grpc_predict(grpc_port, text=texts)
    assert [p["tags"] for p in rows["predictions"]] == expected["tags"]
    assert [p["words"] for p in rows["predictions"]] == expected["words"]
    assert columns["outputs"]["tags"] == expected["tags"]
    # TF Serving's gRPC: the same, padded as the SavedModel pads them ("" and -1)
    width = max(expected["num_words"])
    assert tensors["tags"].tolist() == [[t.encode() for t in tags] + [b""] * (width - len(tags))
                                        for tags in expected["tags"]]
    assert tensors["tag_ids"].tolist() == [list(ids) + [-1] * (width - len(ids))
                                           for ids in expected["tag_ids"]]
    assert tensors["num_words"].tolist() == list(expected["num_words"])
