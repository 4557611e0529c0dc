"""KerasHub's preset format both ways (`modeling/keras_hub_preset.py`), with keras-hub itself as
the other side: our classifier and encoder -> a preset folder -> KerasHub's `from_preset` gives
our outputs; the preset -> our model again (the converter, `--init_checkpoint`) gives them back.

On the real MiniLM weights. MiniLM was trained with the exact GELU, which KerasHub's BertBackbone
does not compute (it has the original BERT's tanh approximation), so the round trips run those
weights under the original's `gelu`; the exact-GELU model itself is refused in one line."""
import json
import os

import numpy as np
import pytest
from conftest import read_results, read_tsv, run_script
from reference_runs import glue_slice

keras_hub = pytest.importorskip(
    "keras_hub", reason="keras-hub is not installed (make test installs it: the keras-hub extra)")


@pytest.fixture(scope="module")
def minilm_tanh(minilm_dir):
    """MiniLM's config with the original's (tanh) GELU."""
    from bert_tf2.modeling import checkpoints

    config = checkpoints.read_config(str(minilm_dir))
    assert config.hidden_act == "gelu_exact"
    config.hidden_act = "gelu"
    return config


def batch():
    """Token ids of two pairs and a padded single text (real ids of the uncased vocabulary)."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 20000, size=(3, 24)).astype(np.int32)
    ids[:, 0], ids[:, -1], ids[:, 11] = 101, 102, 102
    types = np.zeros_like(ids)
    types[:, 12:] = 1
    mask = np.ones_like(ids)
    ids[2, 16:], mask[2, 16:], types[2, :] = 0, 0, 0
    ids[2, 15] = 102
    return ids, types, mask


def ours(model, ids, types, mask):
    return model({"input_word_ids": ids, "input_type_ids": types, "input_mask": mask},
                 training=False)


def hub(model, ids, types, mask):
    return model({"token_ids": ids, "segment_ids": types, "padding_mask": mask})


@pytest.fixture(scope="module")
def classifier_preset(tmp_path_factory, minilm_dir, minilm_tanh):
    import keras

    from bert_tf2.modeling import checkpoints, keras_hub_preset
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertClassifier

    keras.utils.set_random_seed(5)
    classifier = BertClassifier(BertEncoder(minilm_tanh), num_labels=3)
    checkpoints.load_checkpoint(classifier, str(minilm_dir), allow_new_heads=True)
    folder = tmp_path_factory.mktemp("preset") / "classifier"
    keras_hub_preset.save_preset(classifier, str(folder), str(minilm_dir / "vocab.txt"),
                                 sequence_length=64)
    return classifier, folder


def test_our_classifier_is_keras_hubs_bert_text_classifier(classifier_preset):
    classifier, folder = classifier_preset
    assert {"config.json", "model.weights.h5", "tokenizer.json", "metadata.json", "task.json",
            "task.weights.h5"} <= set(os.listdir(folder))
    assert (folder / "assets" / "tokenizer" / "vocabulary.txt").is_file()
    ids, types, mask = batch()
    expected = np.asarray(ours(classifier, ids, types, mask)["logits"])
    loaded = keras_hub.models.BertTextClassifier.from_preset(str(folder))
    np.testing.assert_allclose(np.asarray(hub(loaded, ids, types, mask)), expected, atol=1e-5)
    backbone = keras_hub.models.BertBackbone.from_preset(str(folder))
    theirs, mine = hub(backbone, ids, types, mask), ours(classifier.encoder, ids, types, mask)
    np.testing.assert_allclose(np.asarray(theirs["pooled_output"]),
                               np.asarray(mine["pooled_output"]), atol=1e-5)
    np.testing.assert_allclose(np.asarray(theirs["sequence_output"]) * mask[..., None],
                               np.asarray(mine["sequence_output"]) * mask[..., None], atol=1e-5)


def test_raw_text_through_keras_hubs_preprocessor_gets_our_predictions(classifier_preset,
                                                                       tokenizer):
    """The preset's tokenizer is the vocabulary's WordPiece: on plain pairs, KerasHub's
    preprocessing and ours give the same ids, so the same logits."""
    classifier, folder = classifier_preset
    pairs = [("The cat sat on the mat.", "A cat was sitting on a mat."),
             ("Stocks fell sharply on Monday.", "The weather was sunny in Paris.")]
    loaded = keras_hub.models.BertTextClassifier.from_preset(str(folder))
    theirs = np.asarray(loaded.predict(([a for a, _ in pairs], [b for _, b in pairs]),
                                       verbose=0))
    ids, types = [], []
    for a, b in pairs:
        ta, tb = tokenizer.tokenize(a), tokenizer.tokenize(b)
        ids.append(tokenizer.convert_tokens_to_ids(["[CLS]", *ta, "[SEP]", *tb, "[SEP]"]))
        types.append([0] * (len(ta) + 2) + [1] * (len(tb) + 1))
    width = max(map(len, ids))
    mask = np.array([[1] * len(row) + [0] * (width - len(row)) for row in ids], np.int32)
    ids = np.array([row + [0] * (width - len(row)) for row in ids], np.int32)
    types = np.array([row + [0] * (width - len(row)) for row in types], np.int32)
    np.testing.assert_allclose(theirs, np.asarray(ours(classifier, ids, types, mask)["logits"]),
                               atol=1e-5)


def test_a_keras_hub_preset_loads_back_as_our_classifier(classifier_preset):
    from bert_tf2.modeling import checkpoints
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertClassifier

    classifier, folder = classifier_preset
    assert checkpoints.detect_format(folder) == "keras_hub"
    config = checkpoints.read_config(folder)
    assert (config.hidden_size, config.num_hidden_layers, config.hidden_act) == (384, 6, "gelu")
    assert checkpoints.vocab_beside(folder) == str(folder / "assets/tokenizer/vocabulary.txt")
    back = BertClassifier(BertEncoder(config), num_labels=3)
    report = checkpoints.load_checkpoint(back, folder)
    assert not report.initialised and not report.unused
    ids, types, mask = batch()
    np.testing.assert_array_equal(np.asarray(ours(back, ids, types, mask)["logits"]),
                                  np.asarray(ours(classifier, ids, types, mask)["logits"]))


@pytest.mark.integration
def test_the_converter_writes_an_encoder_preset_and_reads_it_back(tmp_path, minilm_dir,
                                                                   minilm_tanh):
    """bert-convert --to keras_hub, and --from keras_hub back to Hugging Face's format."""
    tanh = tmp_path / "tanh"
    tanh.mkdir()
    (tanh / "config.json").write_text(json.dumps(minilm_tanh.to_hf_dict()))
    for name in ("model.safetensors", "vocab.txt"):
        os.symlink(minilm_dir / name, tanh / name)
    run_script("-m", "bert_tf2.modeling.convert", "--from=hf", f"--input={tanh}",
               "--to=keras_hub", f"--output={tmp_path / 'preset'}")
    backbone = keras_hub.models.BertBackbone.from_preset(str(tmp_path / "preset"))
    from bert_tf2.modeling import checkpoints
    from bert_tf2.modeling.encoder import BertEncoder

    encoder = BertEncoder(minilm_tanh)
    checkpoints.load_checkpoint(encoder, str(tanh))
    ids, types, mask = batch()
    np.testing.assert_allclose(np.asarray(hub(backbone, ids, types, mask)["pooled_output"]),
                               np.asarray(ours(encoder, ids, types, mask)["pooled_output"]),
                               atol=1e-5)
    run_script("-m", "bert_tf2.modeling.convert", "--from=keras_hub",
               f"--input={tmp_path / 'preset'}", "--to=hf", f"--output={tmp_path / 'hf'}")
    again = BertEncoder(checkpoints.read_config(str(tmp_path / "hf")))
    checkpoints.load_checkpoint(again, str(tmp_path / "hf"))
    np.testing.assert_array_equal(np.asarray(ours(again, ids, types, mask)["pooled_output"]),
                                  np.asarray(ours(encoder, ids, types, mask)["pooled_output"]))


@pytest.mark.integration
def test_an_exact_gelu_model_is_refused_in_one_line(tmp_path, minilm_dir):
    result = run_script("-m", "bert_tf2.modeling.convert", "--from=hf", f"--input={minilm_dir}",
                        "--to=keras_hub", f"--output={tmp_path / 'preset'}", check=False)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "hidden_act is gelu_exact" in lines[0] and "--keras_hub_approximate_gelu" in lines[0]
    assert not (tmp_path / "preset").exists()
    accepted = run_script("-m", "bert_tf2.modeling.convert", "--from=hf",
                          f"--input={minilm_dir}", "--to=keras_hub",
                          f"--output={tmp_path / 'preset'}", "--keras_hub_approximate_gelu")
    assert "computes the tanh approximation" in accepted.stderr
    assert (tmp_path / "preset" / "model.weights.h5").is_file()


@pytest.mark.integration
def test_run_classifier_exports_a_preset_and_fine_tunes_from_one(shared_data, tiny_checkpoint,
                                                                  tmp_path):
    """--export_keras_hub writes the kept weights; KerasHub's classifier gives the probabilities
    of test_results.tsv; --init_checkpoint=PRESET evaluates as the run did."""
    data = glue_slice(shared_data, "MRPC", tmp_path / "data", {"train": 32, "dev": 16, "test": 8})
    # 128 tokens: no pair is cut (KerasHub's preprocessor trims a long pair round-robin, the
    # original from the longer text).
    common = ["--task_name=MRPC", f"--data_dir={data}", "--max_seq_length=128",
              "--eval_batch_size=16", "--predict_batch_size=8"]
    out, preset = tmp_path / "out", tmp_path / "preset"
    run_script("run_classifier.py", *common, f"--output_dir={out}",
               f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}",
               "--train_batch_size=16", "--num_train_epochs=1", "--do_train", "--do_eval",
               "--do_predict", f"--export_keras_hub={preset}")
    loaded = keras_hub.models.BertTextClassifier.from_preset(str(preset))
    texts = [row[3:5] for row in read_tsv(data / "test.tsv")[1:]]
    logits = np.asarray(loaded.predict(([a for a, _ in texts], [b for _, b in texts]),
                                       verbose=0))
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    expected = np.loadtxt(out / "test_results.tsv", delimiter="\t")
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)
    again = tmp_path / "again"
    run_script("run_classifier.py", *common, f"--output_dir={again}",
               f"--init_checkpoint={preset}", "--do_eval")
    first, second = read_results(out / "eval_results.txt"), read_results(
        again / "eval_results.txt")
    for key in ("eval_accuracy", "eval_f1", "eval_loss"):
        assert second[key] == pytest.approx(first[key], abs=1e-5), key
