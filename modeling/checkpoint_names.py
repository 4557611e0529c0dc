"""Checkpoint variable names, a public interface: the Google TF1 names of SPEC.md section 4, and
the Hugging Face names derived from them.

`tf1_variable_map(model)` lists every weight of a model under its original TF1 name: the
encoder's from the table here, a head's from the model itself (each model of `modeling.models`
declares its own in `head_variable_map`, with the helpers `dense`, `layer_norm` and `projection`),
so a new task model needs no edit here. Hugging Face names follow from the TF1 name by a fixed rule
(`hf_name`), with dense kernels transposed.
"""
from __future__ import annotations

import re

from bert_tf2.modeling.encoder import BertEncoder

ENCODER_SCOPE = "bert/"

# TF1 names of the heads and their Hugging Face counterparts (no `bert.` prefix, never transposed:
# both store these projections [out, in]).
_HEAD_HF_NAMES = {
    "cls/predictions/output_bias": "cls.predictions.bias",
    "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
    "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
    "cls/squad/output_weights": "qa_outputs.weight",
    "cls/squad/output_bias": "qa_outputs.bias",
    "output_weights": "classifier.weight",
    "output_bias": "classifier.bias",
}

# Names a loader skips: optimiser state and step counters of TF1 checkpoints, and Hugging Face
# buffers or tied copies that hold no weight of their own.
_TF1_IGNORED = re.compile(r"(^|/)(adam_m|adam_v)$|^global_step$")
_HF_IGNORED = re.compile(r"(^|\.)position_ids$|^cls\.predictions\.decoder\.(weight|bias)$")


def is_ignored_tf1(name: str) -> bool:
    return bool(_TF1_IGNORED.search(name))


def is_ignored_hf(name: str) -> bool:
    return bool(_HF_IGNORED.search(name))


def is_head(name: str) -> bool:
    """Whether a TF1 name belongs to a head (anything outside the `bert/` encoder scope)."""
    return not name.startswith(ENCODER_SCOPE)


def dense(prefix: str, layer) -> dict:
    """A Dense layer's TF1 names: `PREFIX/kernel`, `PREFIX/bias` (if it has one)."""
    return {f"{prefix}/kernel": layer.kernel,
            **({f"{prefix}/bias": layer.bias} if layer.use_bias else {})}


def layer_norm(prefix: str, norm) -> dict:
    """A LayerNorm's TF1 names: `PREFIX/gamma`, `PREFIX/beta`."""
    return {f"{prefix}/gamma": norm.gamma, f"{prefix}/beta": norm.beta}


def projection(prefix: str, layer) -> dict:
    """An `OutputProjection`'s TF1 names: `PREFIXoutput_weights`, `PREFIXoutput_bias`."""
    return {f"{prefix}output_weights": layer.output_weights,
            f"{prefix}output_bias": layer.output_bias}


def encoder_variable_map(encoder: BertEncoder) -> dict:
    emb = encoder.embeddings
    names = {
        "bert/embeddings/word_embeddings": emb.word_embeddings,
        "bert/embeddings/token_type_embeddings": emb.token_type_embeddings,
        "bert/embeddings/position_embeddings": emb.position_embeddings,
        **layer_norm("bert/embeddings/LayerNorm", emb.layer_norm),
    }
    for i, block in enumerate(encoder.blocks):
        p = f"bert/encoder/layer_{i}"
        names.update(dense(f"{p}/attention/self/query", block.attention.query))
        names.update(dense(f"{p}/attention/self/key", block.attention.key))
        names.update(dense(f"{p}/attention/self/value", block.attention.value))
        names.update(dense(f"{p}/attention/output/dense", block.attention_output))
        names.update(layer_norm(f"{p}/attention/output/LayerNorm", block.attention_layer_norm))
        names.update(dense(f"{p}/intermediate/dense", block.intermediate))
        names.update(dense(f"{p}/output/dense", block.output_dense))
        names.update(layer_norm(f"{p}/output/LayerNorm", block.output_layer_norm))
    if encoder.final_layer_norm is not None:  # pre-LayerNorm (not in the original)
        names.update(layer_norm("bert/encoder/LayerNorm", encoder.final_layer_norm))
    names.update(dense("bert/pooler/dense", encoder.pooler.dense))
    return names


def tf1_variable_map(model) -> dict:
    """{TF1 name: Keras variable} for a `BertEncoder` or any model with an encoder and a
    `head_variable_map()` (every model of `modeling.models`)."""
    if isinstance(model, BertEncoder):
        return encoder_variable_map(model)
    if not hasattr(model, "head_variable_map"):
        raise TypeError(f"no TF1 checkpoint names for a {type(model).__name__}")
    return {**encoder_variable_map(model.encoder), **model.head_variable_map()}


def hf_name(tf1_name: str) -> tuple[str, bool]:
    """The Hugging Face name (without the `bert.` prefix) of a TF1 variable, and whether the
    tensor is transposed between the two (dense kernels: TF1 [in, out], Hugging Face [out, in])."""
    if tf1_name in _HEAD_HF_NAMES:
        return _HEAD_HF_NAMES[tf1_name], False
    name = tf1_name[len(ENCODER_SCOPE):] if tf1_name.startswith(ENCODER_SCOPE) else tf1_name
    name = re.sub(r"layer_(\d+)", r"layer.\1", name).replace("/", ".")
    if name.endswith("_embeddings"):
        return name + ".weight", False
    leaf = {"kernel": "weight", "gamma": "weight", "beta": "bias", "bias": "bias"}
    stem, _, last = name.rpartition(".")
    if last not in leaf:
        raise KeyError(f"no Hugging Face name for TF1 variable {tf1_name!r}")
    return f"{stem}.{leaf[last]}", last == "kernel"


def hf_prefixed(tf1_name: str, name: str) -> str:
    """Encoder weights sit under `bert.` in Hugging Face task checkpoints; heads never do."""
    return f"bert.{name}" if tf1_name.startswith(ENCODER_SCOPE) else name


def normalise_hf_name(name: str) -> str:
    """Strip an optional `bert.` prefix and map old `LayerNorm.gamma/beta` to `weight/bias`."""
    if name.startswith("bert."):
        name = name[len("bert."):]
    return re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight",
                  re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))


def tf1_name_from_hf(name: str) -> tuple[str, bool]:
    """Inverse of `hf_name`: the TF1 name of a (normalised) Hugging Face name, and the transpose."""
    for tf1, hf in _HEAD_HF_NAMES.items():
        if name == hf:
            return tf1, False
    stem, _, last = name.rpartition(".")
    scope = ENCODER_SCOPE if name.split(".")[0] in ("embeddings", "encoder", "pooler") else ""
    path = scope + re.sub(r"layer\.(\d+)", r"layer_\1", stem).replace(".", "/")
    if stem.endswith("_embeddings") and last == "weight":
        return path, False
    if stem.endswith("LayerNorm"):
        leaf = {"weight": "gamma", "bias": "beta"}.get(last)
    else:
        leaf = {"weight": "kernel", "bias": "bias"}.get(last)
    if leaf is None:
        raise KeyError(f"no TF1 name for Hugging Face tensor {name!r}")
    return f"{path}/{leaf}", leaf == "kernel"
