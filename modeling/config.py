"""`BertConfig`: the hyper-parameters of `bert_config.json`, read and written as the original does.

Released configs carry keys the model never reads (`directionality`, `pooler_fc_size`, ...); they are
kept in `extra` and written back, so a config survives a round trip unchanged. A config that cannot
work is rejected with a message naming the field.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
from typing import Any

from bert_tf2.modeling import activations
from bert_tf2.process import atomic_files
from bert_tf2.process.errors import UserError

# Hugging Face `config.json` keys that mean something other than the original's, or that the
# original lacks. `layer_norm_eps` is honoured; the rest are metadata.
# The fields that decide the weights' shapes: a config that leaves one to its default (as the
# original allows) gets it named when a checkpoint then does not fit.
SHAPE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "max_position_embeddings", "type_vocab_size")

LAYER_NORM_POSITIONS = ("post", "pre")
# BERT's value of each architecture field (`BertConfig.architecture_changes`).
ARCHITECTURE_DEFAULTS = {"layer_norm_position": "post", "use_bias": True,
                         "gated_feed_forward": False}

_HF_HIDDEN_ACT = {
    "gelu": "gelu_exact",  # Hugging Face's "gelu" is the erf form
    "gelu_new": "gelu",  # the tanh approximation, which the original calls "gelu"
    "gelu_pytorch_tanh": "gelu",
}


def defaults_note(message: str, unset) -> str:
    """For a message that names fields the file does not set: say so, and that the value shown
    is the original's default (`"; the file does not set 'num_attention_heads' ..."`)."""
    named = [name for name in unset if f"'{name}'" in message]
    if not named:
        return ""
    defaults = {f.name: f.default for f in dataclasses.fields(BertConfig) if f.name in named}
    return ("; the file does not set " + ", ".join(f"'{n}' (the original's default, "
                                                      f"{defaults[n]}, was used)" for n in named)
            + ": add the model's value")


class ConfigError(UserError):
    """A `bert_config.json` that cannot describe a working model; the message names the field."""


@dataclasses.dataclass
class BertConfig:
    """Configuration of a BERT encoder (SPEC.md section 1)."""

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 16
    initializer_range: float = 0.02
    # Not in the original (always 1e-12 there); Hugging Face configs may set it.
    layer_norm_eps: float = 1e-12
    # Not in the original: Cramming's architecture changes (docs/pretraining.md), each off by
    # default. A config that turns one on describes a model that only this project loads.
    layer_norm_position: str = "post"  # "pre": LayerNorm on each sublayer's input, one at the end
    use_bias: bool = True  # False: the transformer layers' dense layers have no bias
    gated_feed_forward: bool = False  # True: hidden_act(gate) * value, both [intermediate_size]
    # Keys this code does not use, kept so that writing a config back loses nothing.
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        self.validate()

    # ----------------------------------------------------------------------------- validation
    unset = ()  # set by from_dict: the shape fields the file leaves to the original's defaults
    source = ""  # set by from_json_file: the file it was read from, for messages

    def validate(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"bert config field '{name}' must be an integer, got {value!r}")
            if value <= 0:
                raise ConfigError(f"bert config field '{name}' must be positive, got {value}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
                raise ConfigError(f"bert config field '{name}' must be a number in [0, 1), "
                                  f"got {value!r}")
        for name in ("initializer_range", "layer_norm_eps"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"bert config field '{name}' must be a positive number, "
                                  f"got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"bert config field 'hidden_size' ({self.hidden_size}) must be a multiple of "
                f"'num_attention_heads' ({self.num_attention_heads})")
        if self.layer_norm_position not in LAYER_NORM_POSITIONS:
            raise ConfigError(f"bert config field 'layer_norm_position' is "
                              f"{self.layer_norm_position!r}; supported: "
                              f"{', '.join(LAYER_NORM_POSITIONS)}")
        for name in ("use_bias", "gated_feed_forward"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"bert config field '{name}' must be true or false, "
                                  f"got {getattr(self, name)!r}")
        if self.hidden_act not in activations.NAMES:
            raise ConfigError(f"bert config field 'hidden_act' is {self.hidden_act!r}; supported: "
                              f"{', '.join(sorted(activations.NAMES))}")

    @property
    def architecture_changes(self) -> tuple[str, ...]:
        """The fields set away from BERT's architecture (none for every released BERT): a model
        with any of them loads here only, never in Hugging Face, KerasHub or the original."""
        return tuple(name for name, bert in ARCHITECTURE_DEFAULTS.items()
                     if getattr(self, name) != bert)

    def require_bert_architecture(self, where: str) -> None:
        """Refuse, in one line naming `where`, a model that other BERT code would load wrongly."""
        changed = self.architecture_changes
        if changed:
            raise ConfigError(
                f"{where}: the model's config sets {', '.join(changed)}, which BERT's "
                f"architecture lacks; only this project's runners load such a model")

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    # ----------------------------------------------------------------------------- dict / JSON
    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "BertConfig":
        if not isinstance(values, dict):
            raise ConfigError(f"a bert config must be a JSON object, got {type(values).__name__}")
        if "vocab_size" not in values:
            raise ConfigError("bert config field 'vocab_size' is required and missing")
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kwargs = {k: v for k, v in values.items() if k in known}
        extra = copy.deepcopy({k: v for k, v in values.items() if k not in known})
        extra.update(copy.deepcopy(values.get("extra", {})))
        # The shape fields left to the original's defaults (as the original allows), named when
        # they do not fit each other or a checkpoint.
        unset = tuple(k for k in SHAPE_FIELDS if k not in values)
        try:
            config = cls(**kwargs, extra=extra)
        except ConfigError as e:
            raise ConfigError(f"{e}{defaults_note(str(e), unset)}") from None
        config.unset = unset
        return config

    def to_dict(self) -> dict[str, Any]:
        """The flat `bert_config.json` mapping: the fields plus the kept unknown keys.

        `layer_norm_eps` and the architecture changes are only written when they differ from the
        original's fixed ones, so that configs of original models are written back exactly as
        they were read.
        """
        out = copy.deepcopy(self.extra)
        fixed = {"layer_norm_eps": 1e-12, **ARCHITECTURE_DEFAULTS}
        for f in dataclasses.fields(self):
            if f.name == "extra" or (f.name in fixed and getattr(self, f.name) == fixed[f.name]):
                continue
            out[f.name] = getattr(self, f.name)
        return out

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> "BertConfig":
        try:
            with open(path, encoding="utf-8") as f:
                values = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}): "
                              f"{e.msg}") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at byte "
                              f"{e.start + 1}); save the file as UTF-8") from None
        try:
            config = cls.from_dict(values)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None
        config.source = os.fspath(path)
        return config

    def to_json_string(self) -> str:
        """JSON with indent 2 and sorted keys, as the original writes it."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, path: str | os.PathLike) -> None:
        atomic_files.write_text(path, self.to_json_string())

    # ----------------------------------------------------------------------------- Hugging Face
    @classmethod
    def from_hf_dict(cls, values: dict[str, Any]) -> "BertConfig":
        """A Hugging Face `config.json` (BertModel): same field names, but its "gelu" is exact."""
        values = dict(values)
        act = values.get("hidden_act", "gelu")
        if act in _HF_HIDDEN_ACT:
            values["hidden_act"] = _HF_HIDDEN_ACT[act]
        if values.get("position_embedding_type", "absolute") != "absolute":
            raise ConfigError("Hugging Face config field 'position_embedding_type' is "
                              f"{values['position_embedding_type']!r}; only 'absolute' is BERT")
        return cls.from_dict(values)

    def to_hf_dict(self) -> dict[str, Any]:
        self.require_bert_architecture(self.source or "config.json for Hugging Face")
        out = self.to_dict()
        out["hidden_act"] = {"gelu_exact": "gelu", "gelu": "gelu_new"}.get(self.hidden_act,
                                                                           self.hidden_act)
        out["layer_norm_eps"] = self.layer_norm_eps
        out.setdefault("model_type", "bert")
        out.setdefault("architectures", ["BertModel"])
        return out
