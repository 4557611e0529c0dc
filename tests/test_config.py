"""BertConfig: the original's fields and defaults, unknown keys kept, errors naming the field."""
import json

import pytest

from bert_tf2.modeling.config import BertConfig, ConfigError


def test_released_config_round_trips_with_unknown_keys(tf1_tiny_dir, tmp_path):
    path = tf1_tiny_dir / "bert_config.json"
    config = BertConfig.from_json_file(path)
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (15, 4, 2)
    assert config.extra["directionality"] == "bidi"
    assert config.extra["pooler_type"] == "first_token_transform"
    config.to_json_file(tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text()) == json.loads(path.read_text())
    text = config.to_json_string()
    assert text == json.dumps(json.loads(path.read_text()), indent=2, sort_keys=True) + "\n"


def test_defaults_are_the_originals():
    config = BertConfig(vocab_size=30522)
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
            config.intermediate_size, config.hidden_act, config.hidden_dropout_prob,
            config.attention_probs_dropout_prob, config.max_position_embeddings,
            config.type_vocab_size, config.initializer_range) == (
        768, 12, 12, 3072, "gelu", 0.1, 0.1, 512, 16, 0.02)


@pytest.mark.parametrize("change,message", [
    ({"hidden_size": 10}, "'hidden_size' (10) must be a multiple of 'num_attention_heads' (4)"),
    ({"num_hidden_layers": 0}, "'num_hidden_layers' must be positive, got 0"),
    ({"intermediate_size": -5}, "'intermediate_size' must be positive, got -5"),
    ({"vocab_size": "30522"}, "'vocab_size' must be an integer, got '30522'"),
    ({"hidden_act": "swish"}, "'hidden_act' is 'swish'; supported:"),
    ({"hidden_dropout_prob": 1.5}, "'hidden_dropout_prob' must be a number in [0, 1)"),
    ({"initializer_range": 0}, "'initializer_range' must be a positive number"),
])
def test_bad_fields_are_rejected_by_name(tf1_tiny_dir, tmp_path, change, message):
    values = json.loads((tf1_tiny_dir / "bert_config.json").read_text())
    values.update(change)
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ConfigError) as err:
        BertConfig.from_json_file(path)
    assert str(err.value).startswith(f"{path}: bert config field ")
    assert message in str(err.value)


def test_missing_vocab_size_and_broken_json(tmp_path):
    with pytest.raises(ConfigError, match="'vocab_size' is required"):
        BertConfig.from_dict({"hidden_size": 8})
    path = tmp_path / "bert_config.json"
    path.write_text('{"vocab_size": 10,\n "hidden_size": }')
    with pytest.raises(ConfigError, match=r"bert_config.json: not valid JSON \(line 2, column 17\)"):
        BertConfig.from_json_file(path)


def test_a_field_left_to_its_default_is_named_as_missing(tmp_path):
    """The original lets a config leave fields to its defaults; when a default does not fit the
    file's own values, the message says the file does not set it."""
    path = tmp_path / "bert_config.json"
    path.write_text('{"vocab_size": 100, "hidden_size": 128, "intermediate_size": 512}')
    with pytest.raises(ConfigError) as err:
        BertConfig.from_json_file(path)
    assert str(err.value) == (
        f"{path}: bert config field 'hidden_size' (128) must be a multiple of "
        f"'num_attention_heads' (12); the file does not set 'num_attention_heads' (the "
        f"original's default, 12, was used): add the model's value")
    path.write_text('{"vocab_size": 100, "hidden_size": 10, "num_attention_heads": 4}')
    with pytest.raises(ConfigError) as err:  # both set: no note
        BertConfig.from_json_file(path)
    assert str(err.value).endswith("'num_attention_heads' (4)")
    path.write_text('{"vocab_size": 100, "hidden_size": 384}')
    config = BertConfig.from_json_file(path)  # 384 heads of 12 work: defaults are allowed
    assert (config.num_attention_heads, config.source) == (12, str(path))
    assert "num_attention_heads" in config.unset


def test_hugging_face_gelu_is_exact_and_round_trips():
    hf = {"vocab_size": 10, "hidden_size": 8, "num_attention_heads": 2, "hidden_act": "gelu",
          "layer_norm_eps": 1e-7, "model_type": "bert"}
    config = BertConfig.from_hf_dict(hf)
    assert config.hidden_act == "gelu_exact" and config.layer_norm_eps == 1e-7
    assert config.to_hf_dict()["hidden_act"] == "gelu"
    assert BertConfig.from_hf_dict({**hf, "hidden_act": "gelu_new"}).hidden_act == "gelu"
    with pytest.raises(ConfigError, match="position_embedding_type"):
        BertConfig.from_hf_dict({**hf, "position_embedding_type": "relative_key"})
