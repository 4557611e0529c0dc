"""KerasHub's preset format, both ways: a model of this project as a folder that
`keras_hub.models.BertBackbone.from_preset` (and, for a classifier,
`BertTextClassifier.from_preset`) loads, and such a folder as weights this project reads
(`--init_checkpoint`, the converter).

A preset folder holds `config.json` (the backbone's class and arguments), `model.weights.h5`,
`tokenizer.json` with `assets/tokenizer/vocabulary.txt`, `metadata.json`, and for a classifier
`task.json`, `task.weights.h5` and `preprocessor.json`; KerasHub itself writes and reads them
(`save_to_preset`, `from_preset`), so the keras-hub package is needed here (the `keras-hub`
extra). The weights are carried between the two models' variables by name (`KERAS_HUB_NAMES`: the
TF1 name of each backbone variable), the attention projections reshaped to KerasHub's
`[hidden, heads, head_size]` and the classifier's `[labels, hidden]` transposed.

KerasHub's `BertBackbone` computes GELU with the tanh approximation, the original BERT's (`gelu`
in a `bert_config.json`). A model trained with the exact GELU (`gelu_exact`: Hugging Face's
`gelu`, MiniLM's) gives outputs up to about 5e-3 apart there, so its export is refused unless
`approximate_gelu` accepts that; any other activation cannot be exported.
"""
from __future__ import annotations

import json
import logging
import os

import numpy as np

from bert_tf2.modeling import checkpoint_names as names
from bert_tf2.modeling.config import BertConfig
from bert_tf2.process.errors import UserError

logger = logging.getLogger(__name__)

CONFIG = "config.json"
WEIGHTS = "model.weights.h5"
TASK = "task.json"
VOCABULARY = os.path.join("assets", "tokenizer", "vocabulary.txt")
TOKENIZER = "tokenizer.json"
BACKBONE = "keras_hub>BertBackbone"
CLASSIFIER = "keras_hub>BertTextClassifier"

# KerasHub's variable path -> the TF1 name; `{i}` is the layer number.
_EMBEDDINGS = {
    "token_embedding/embeddings": "bert/embeddings/word_embeddings",
    "position_embedding/embeddings": "bert/embeddings/position_embeddings",
    "segment_embedding/embeddings": "bert/embeddings/token_type_embeddings",
    "embeddings_layer_norm/gamma": "bert/embeddings/LayerNorm/gamma",
    "embeddings_layer_norm/beta": "bert/embeddings/LayerNorm/beta",
    "pooled_dense/kernel": "bert/pooler/dense/kernel",
    "pooled_dense/bias": "bert/pooler/dense/bias",
}
_LAYER = {
    "self_attention_layer/query/{p}": "attention/self/query/{p}",
    "self_attention_layer/key/{p}": "attention/self/key/{p}",
    "self_attention_layer/value/{p}": "attention/self/value/{p}",
    "self_attention_layer/attention_output/{p}": "attention/output/dense/{p}",
    "self_attention_layer_norm/{n}": "attention/output/LayerNorm/{n}",
    "feedforward_intermediate_dense/{p}": "intermediate/dense/{p}",
    "feedforward_output_dense/{p}": "output/dense/{p}",
    "feedforward_layer_norm/{n}": "output/LayerNorm/{n}",
}
_HEAD = {"logits/kernel": "output_weights", "logits/bias": "output_bias"}


class KerasHubError(UserError):
    """A preset that cannot be written or read (one line: which folder or field, what to do)."""


def keras_hub_names(num_layers: int) -> dict:
    """KerasHub's variable path -> TF1 name, for a backbone of `num_layers` and a classifier."""
    table = dict(_EMBEDDINGS)
    for i in range(num_layers):
        for hub, tf1 in _LAYER.items():
            for p in ("kernel", "bias"):
                if "{p}" in hub:
                    table[f"transformer_layer_{i}/{hub.format(p=p)}"] = \
                        f"bert/encoder/layer_{i}/{tf1.format(p=p)}"
            for n in ("gamma", "beta"):
                if "{n}" in hub:
                    table[f"transformer_layer_{i}/{hub.format(n=n)}"] = \
                        f"bert/encoder/layer_{i}/{tf1.format(n=n)}"
    table.update(_HEAD)
    return table


def require():
    try:
        import keras_hub
    except ImportError:
        raise KerasHubError("KerasHub's preset format needs the keras-hub package: pip install "
                            "'bert-tf2[keras-hub]'") from None
    return keras_hub


def is_preset(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder KerasHub wrote for a BERT backbone (or a task on one)."""
    return _written_by_keras_hub(os.fspath(path)) == BACKBONE \
        and os.path.isfile(os.path.join(os.fspath(path), WEIGHTS))


def check_preset(path: str | os.PathLike) -> None:
    """A folder KerasHub wrote that cannot load here, refused in one line: a preset of another
    model (only BERT presets load), or one without its weights file. Anything else passes (a
    folder KerasHub did not write is another format's business)."""
    path = os.fspath(path)
    name = _written_by_keras_hub(path)
    if name is None:
        return
    config = os.path.join(path, CONFIG)
    if name != BACKBONE:
        raise KerasHubError(f"{config}: a KerasHub preset of {name.partition('>')[2]}, not "
                            f"BertBackbone: only BERT presets load here")
    if not os.path.isfile(os.path.join(path, WEIGHTS)):
        raise KerasHubError(f"{path}: a KerasHub BERT preset without its weights, {WEIGHTS}: "
                            f"copy the whole preset folder again")


def _written_by_keras_hub(path: str) -> str | None:
    """The class a folder's config.json names (`keras_hub>...`), or None when KerasHub did not
    write the folder (no config.json, or one of Hugging Face's)."""
    config = os.path.join(path, CONFIG)
    if not (os.path.isdir(path) and os.path.isfile(config)):
        return None
    try:
        with open(config, encoding="utf-8") as f:
            name = json.load(f).get("registered_name")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) and name.startswith("keras_hub>") else None


def _hub_value(tf1: str, value: np.ndarray, config: BertConfig) -> np.ndarray:
    """A TF1 tensor in the shape of the KerasHub variable it becomes."""
    heads = config.num_attention_heads
    size = config.hidden_size // heads
    if tf1 == "output_weights":
        return value.T
    if "/attention/self/" in tf1:
        return value.reshape((config.hidden_size, heads, size) if tf1.endswith("kernel")
                             else (heads, size))
    if "/attention/output/dense/kernel" in tf1:
        return value.reshape(heads, size, config.hidden_size)
    return value


def _tf1_value(tf1: str, value: np.ndarray, config: BertConfig) -> np.ndarray:
    """A KerasHub variable's value in the shape of its TF1 tensor."""
    if tf1 == "output_weights":
        return value.T
    if "/attention/self/" in tf1 or "/attention/output/dense/kernel" in tf1:
        return value.reshape(-1, config.hidden_size) if tf1.endswith("kernel") \
            else value.reshape(-1)
    return value


def check_activation(config: BertConfig, approximate_gelu: bool, where: str) -> None:
    """Refuse a model KerasHub's backbone would compute differently (`where`: what to name)."""
    if config.hidden_act == "gelu":
        return
    if config.hidden_act == "gelu_exact" and approximate_gelu:
        logger.warning("%s: hidden_act is gelu_exact; KerasHub's BertBackbone computes the tanh "
                       "approximation, so its outputs differ from this model's (by up to about "
                       "5e-3 on MiniLM)", where)
        return
    advice = ("; pass --keras_hub_approximate_gelu to export it with the tanh approximation "
              "anyway (outputs move by up to about 5e-3 on MiniLM)"
              if config.hidden_act == "gelu_exact" else "")
    raise KerasHubError(f"{where}: hidden_act is {config.hidden_act}, but KerasHub's "
                        f"BertBackbone computes GELU's tanh approximation (the original's "
                        f"\"gelu\"){advice}")


def save_preset(model, folder: str, vocab_file: str, do_lower_case: bool = True,
                sequence_length: int = 512, approximate_gelu: bool = False) -> str:
    """Write `model` (an encoder, a classifier, or any task model: its encoder alone) as a
    KerasHub preset folder, complete or not at all. `sequence_length`: the classifier's
    preprocessor's."""
    from bert_tf2.process.atomic_files import recover_directory, staged_directory

    config = model.config
    config.require_bert_architecture(folder)
    keras_hub = require()
    check_activation(config, approximate_gelu, config.source or "the model's config")
    if config.attention_probs_dropout_prob != config.hidden_dropout_prob:
        logger.info("KerasHub's BertBackbone has one dropout rate: %s (hidden_dropout_prob)",
                    config.hidden_dropout_prob)
    tensors = {tf1: np.asarray(variable.numpy())
               for tf1, variable in names.tf1_variable_map(model).items()}
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads, hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size, dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings,
        num_segments=config.type_vocab_size)
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocab_file, lowercase=do_lower_case)
    classifier = "output_weights" in tensors and "cls/squad/output_weights" not in tensors
    if classifier:
        preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
            tokenizer, sequence_length=sequence_length)
        saved = keras_hub.models.BertTextClassifier(
            backbone, num_classes=tensors["output_weights"].shape[0], preprocessor=preprocessor,
            dropout=config.hidden_dropout_prob)
    else:
        saved = backbone
        dropped = sorted(name for name in tensors if names.is_head(name))
        if dropped:
            logger.info("KerasHub's preset holds the encoder; this model's head (%s) is left "
                        "out", ", ".join(dropped[:4]))
    table = keras_hub_names(config.num_hidden_layers)
    assigned = 0
    for variable in saved.weights:
        tf1 = table.get(variable.path)
        if tf1 is None:
            raise KerasHubError(f"KerasHub's {type(saved).__name__} has a variable "
                                f"{variable.path} this export does not know (keras-hub "
                                f"{keras_hub.__version__})")
        variable.assign(_hub_value(tf1, tensors[tf1], config))
        assigned += 1
    folder = os.path.abspath(folder)
    recover_directory(folder)
    with staged_directory(folder) as staging:
        saved.save_to_preset(staging)
        if not classifier:
            tokenizer.save_to_preset(staging)
    logger.info("KerasHub preset written to %s (%s, %d variables)", folder,
                type(saved).__name__, assigned)
    return folder


def _read_json(folder: str, name: str) -> dict:
    path = os.path.join(folder, name)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise KerasHubError(f"{path}: not a readable KerasHub preset file ({e})") from None


def read_config(folder: str) -> BertConfig:
    """The `BertConfig` of a preset's backbone (`config.json`)."""
    values = _read_json(folder, CONFIG).get("config", {})
    try:
        config = BertConfig.from_dict({
            "vocab_size": values["vocabulary_size"], "hidden_size": values["hidden_dim"],
            "num_hidden_layers": values["num_layers"],
            "num_attention_heads": values["num_heads"],
            "intermediate_size": values["intermediate_dim"], "hidden_act": "gelu",
            "hidden_dropout_prob": values.get("dropout", 0.1),
            "attention_probs_dropout_prob": values.get("dropout", 0.1),
            "max_position_embeddings": values.get("max_sequence_length", 512),
            "type_vocab_size": values.get("num_segments", 2), "initializer_range": 0.02})
    except KeyError as e:
        raise KerasHubError(f"{os.path.join(folder, CONFIG)}: no {e.args[0]} in its "
                            f"config") from None
    config.source = os.path.join(folder, CONFIG)
    return config


def vocab_file(folder: str) -> str | None:
    path = os.path.join(folder, VOCABULARY)
    return path if os.path.isfile(path) else None


def tensors(folder: str) -> dict:
    """TF1 name -> value of every weight of the preset: its backbone's, and a
    `BertTextClassifier`'s head where `task.json` holds one."""
    keras_hub = require()
    config = read_config(folder)
    task = os.path.isfile(os.path.join(folder, TASK)) and \
        _read_json(folder, TASK).get("registered_name") == CLASSIFIER
    try:
        loaded = (keras_hub.models.BertTextClassifier if task
                  else keras_hub.models.BertBackbone).from_preset(folder)
    except Exception as e:  # noqa: BLE001 - KerasHub's and h5py's errors alike
        raise KerasHubError(f"{folder}: KerasHub cannot load this preset "
                            f"({str(e).splitlines()[0][:200]})") from None
    table = keras_hub_names(config.num_hidden_layers)
    values = {}
    for variable in loaded.weights:
        tf1 = table.get(variable.path)
        if tf1 is not None:
            values[tf1] = _tf1_value(tf1, np.asarray(variable.numpy()), config)
    return values
