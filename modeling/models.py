"""Encoder + head models: `BertPretrainer` and the fine-tuning models, each a functional Keras model.

Each takes a `BertEncoder`, wires a head from SPEC.md section 3 onto its outputs, and returns a dict.
They save and load as `.keras` files: the config holds the serialised encoder and the head's size.
Each declares its head's checkpoint names (`head_variable_map`, the original's TF1 names where the
original had the head), which `checkpoint_names.tf1_variable_map` adds to the encoder's.
"""
from __future__ import annotations

import keras
from keras import ops

from bert_tf2.modeling import checkpoint_names as names
from bert_tf2.modeling.encoder import (
    INPUT_NAMES,
    BertEncoder,
    encoder_inputs,
    packed_first_token_output,
    pooled_output,
)
from bert_tf2.modeling.heads import (
    BiLstmTaggingHead,
    ClassificationHead,
    MaskedLMHead,
    MultipleChoiceHead,
    NextSentenceHead,
    SpanHead,
    TokenTaggingHead,
)


class _EncoderTask(keras.Model):
    """A functional model of `encoder` plus one head; subclasses say how to wire the head."""

    def __init__(self, encoder: BertEncoder, inputs, outputs, **kwargs):
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.encoder = encoder

    @property
    def config(self):
        return self.encoder.config

    def _head_config(self) -> dict:
        return {}

    def head_variable_map(self) -> dict:
        """{TF1 name: variable} of the head; the classifier, tagging and multiple-choice heads
        all use the original classifier's unscoped `output_weights` / `output_bias`."""
        return names.projection("", self.head.projection)

    def get_config(self):
        return {"encoder": keras.saving.serialize_keras_object(self.encoder), "name": self.name,
                **self._head_config()}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


@keras.saving.register_keras_serializable(package="bert")
class BertPretrainer(_EncoderTask):
    """Encoder + masked LM + next sentence (the original's pretraining model).

    Inputs: the encoder's three plus `masked_lm_positions` [B, P]. Outputs: `mlm_logits` [B, P, V]
    and `nsp_logits` [B, 2] (`modeling.losses` and `tasks.pretraining` turn them into the
    original's losses).
    """

    def __init__(self, encoder: BertEncoder, max_predictions_per_seq: int | None = None, **kwargs):
        config = encoder.config
        inputs = encoder_inputs(encoder.sequence_length)
        inputs["masked_lm_positions"] = keras.Input(shape=(max_predictions_per_seq,),
                                                    dtype="int32", name="masked_lm_positions")
        masked_lm = MaskedLMHead(encoder.embeddings, config.hidden_act, config.initializer_range,
                                 config.layer_norm_eps, name="predictions",
                                 dtype=encoder.dtype_policy)
        next_sentence = NextSentenceHead(config.initializer_range, name="seq_relationship",
                                         dtype=encoder.dtype_policy)
        enc = encoder({k: inputs[k] for k in INPUT_NAMES})
        outputs = {
            "mlm_logits": masked_lm(enc["sequence_output"], inputs["masked_lm_positions"]),
            "nsp_logits": next_sentence(enc["pooled_output"]),
        }
        kwargs.setdefault("name", "bert_pretrainer")
        super().__init__(encoder, inputs, outputs, **kwargs)
        self.max_predictions_per_seq = max_predictions_per_seq
        self.masked_lm = masked_lm
        self.next_sentence = next_sentence

    def _head_config(self):
        return {"max_predictions_per_seq": self.max_predictions_per_seq}

    def head_variable_map(self):
        mlm = self.masked_lm
        return {**names.dense("cls/predictions/transform/dense", mlm.transform),
                **names.layer_norm("cls/predictions/transform/LayerNorm", mlm.layer_norm),
                "cls/predictions/output_bias": mlm.output_bias,
                **names.projection("cls/seq_relationship/", self.next_sentence.projection)}


@keras.saving.register_keras_serializable(package="bert")
class BertClassifier(_EncoderTask):
    """Sentence (pair) classification, or regression with `num_labels=1`: output `logits`."""

    def __init__(self, encoder: BertEncoder, num_labels: int, dropout_rate: float = 0.1, **kwargs):
        inputs = encoder_inputs(encoder.sequence_length)
        head = ClassificationHead(num_labels, dropout_rate, encoder.config.initializer_range,
                                  name="classifier", dtype=encoder.dtype_policy)
        outputs = {"logits": head(encoder(inputs)["pooled_output"])}
        kwargs.setdefault("name", "bert_classifier")
        super().__init__(encoder, inputs, outputs, **kwargs)
        self.num_labels = num_labels
        self.dropout_rate = dropout_rate
        self.head = head

    def _head_config(self):
        return {"num_labels": self.num_labels, "dropout_rate": self.dropout_rate}

    def call(self, inputs, training=None):
        """What the functional graph above computes, with the last layer run for [CLS] alone
        (`encoder.pooled_output`): the same logits up to round-off, a sixth less work on MiniLM."""
        pooled = pooled_output(self.encoder, inputs, training)
        return {"logits": self.head(pooled, training=training)}

    def packed_logits(self, inputs: dict, example_starts, training=None):
        """The logits [examples, num_labels] of packed rows (`data_gen.example_packing`): the
        pooler and head on each example's [CLS], found at `example_starts` in the row-major
        flattened rows (`encoder.packed_first_token_output`); each example's logits are those it
        gets alone, by the same weights."""
        first = packed_first_token_output(self.encoder, inputs, example_starts, training=training)
        return self.head(self.encoder.pooler.dense(first), training=training)


@keras.saving.register_keras_serializable(package="bert")
class BertSpanLabeler(_EncoderTask):
    """Extractive QA (SQuAD): outputs `start_logits` and `end_logits`, [B, L] each."""

    def __init__(self, encoder: BertEncoder, **kwargs):
        inputs = encoder_inputs(encoder.sequence_length)
        head = SpanHead(encoder.config.initializer_range, name="span",
                        dtype=encoder.dtype_policy)
        start, end = head(encoder(inputs)["sequence_output"])
        kwargs.setdefault("name", "bert_span_labeler")
        super().__init__(encoder, inputs, {"start_logits": start, "end_logits": end}, **kwargs)
        self.head = head

    def head_variable_map(self):
        return names.projection("cls/squad/", self.head.projection)


@keras.saving.register_keras_serializable(package="bert")
class BertTokenClassifier(_EncoderTask):
    """Token tagging (NER): output `logits` [B, L, num_tags]."""

    def __init__(self, encoder: BertEncoder, num_tags: int, dropout_rate: float = 0.1, **kwargs):
        inputs = encoder_inputs(encoder.sequence_length)
        head = TokenTaggingHead(num_tags, dropout_rate, encoder.config.initializer_range,
                                name="tagger", dtype=encoder.dtype_policy)
        outputs = {"logits": head(encoder(inputs)["sequence_output"])}
        kwargs.setdefault("name", "bert_token_classifier")
        super().__init__(encoder, inputs, outputs, **kwargs)
        self.num_tags = num_tags
        self.dropout_rate = dropout_rate
        self.head = head

    def _head_config(self):
        return {"num_tags": self.num_tags, "dropout_rate": self.dropout_rate}


@keras.saving.register_keras_serializable(package="bert")
class BertFeatureTagger(_EncoderTask):
    """Feature-based token tagging (the paper's NER ablation): the encoder is frozen, the outputs
    of its top `feature_layers` layers are concatenated per token and a `num_layers`-deep BiLSTM
    of `lstm_units` per direction tags them. Output `logits` [B, L, num_tags].

    Build the encoder without dropout (its features are fixed, as extracted features are)."""

    def __init__(self, encoder: BertEncoder, num_tags: int, lstm_units: int = 0,
                 num_layers: int = 2, feature_layers: int = 4, dropout_rate: float = 0.1,
                 **kwargs):
        if not 1 <= feature_layers <= encoder.config.num_hidden_layers:
            raise ValueError(f"feature_layers={feature_layers}: the encoder has "
                             f"{encoder.config.num_hidden_layers} layers")
        encoder.trainable = False
        lstm_units = lstm_units or encoder.config.hidden_size
        inputs = encoder_inputs(encoder.sequence_length)
        layers = encoder(inputs)["encoder_outputs"][-feature_layers:]
        features = (layers[0] if len(layers) == 1 else
                    keras.layers.Concatenate(axis=-1, name="top_layers")(layers))
        head = BiLstmTaggingHead(num_tags, lstm_units, num_layers, dropout_rate,
                                 encoder.config.initializer_range, name="bilstm_tagger")
        outputs = {"logits": head(features, inputs["input_mask"])}
        kwargs.setdefault("name", "bert_feature_tagger")
        super().__init__(encoder, inputs, outputs, **kwargs)
        self.num_tags = num_tags
        self.lstm_units = lstm_units
        self.num_layers = num_layers
        self.feature_layers = feature_layers
        self.dropout_rate = dropout_rate
        self.head = head

    def _head_config(self):
        return {"num_tags": self.num_tags, "lstm_units": self.lstm_units,
                "num_layers": self.num_layers, "feature_layers": self.feature_layers,
                "dropout_rate": self.dropout_rate}

    def head_variable_map(self):
        """A head of our own (the original had none): its Keras paths under `feature_tagger/`."""
        return {f"feature_tagger/{v.path}": v for v in self.head.weights}


@keras.saving.register_keras_serializable(package="bert")
class BertMultipleChoice(_EncoderTask):
    """Multiple choice (SWAG): inputs [B, N, L]; each pair is encoded, scored, softmaxed over N."""

    def __init__(self, encoder: BertEncoder, num_choices: int, dropout_rate: float = 0.1,
                 **kwargs):
        length = encoder.sequence_length
        inputs = {name: keras.Input(shape=(num_choices, length), dtype="int32", name=name)
                  for name in INPUT_NAMES}
        flat = {name: _FlattenChoices(name=f"flatten_{name}")(inputs[name]) for name in inputs}
        head = MultipleChoiceHead(num_choices, dropout_rate, encoder.config.initializer_range,
                                  name="choice", dtype=encoder.dtype_policy)
        outputs = {"logits": head(encoder(flat)["pooled_output"])}
        kwargs.setdefault("name", "bert_multiple_choice")
        super().__init__(encoder, inputs, outputs, **kwargs)
        self.num_choices = num_choices
        self.dropout_rate = dropout_rate
        self.head = head

    def _head_config(self):
        return {"num_choices": self.num_choices, "dropout_rate": self.dropout_rate}

    def call(self, inputs, training=None):
        """The functional graph above with the last layer run for [CLS] alone
        (`encoder.pooled_output`), as `BertClassifier.call`."""
        flat = {name: ops.reshape(inputs[name], (-1, ops.shape(inputs[name])[-1]))
                for name in INPUT_NAMES}
        pooled = pooled_output(self.encoder, flat, training)
        return {"logits": self.head(pooled, training=training)}


@keras.saving.register_keras_serializable(package="bert")
class _FlattenChoices(keras.layers.Layer):
    """[B, N, L] -> [B * N, L]: every (context, ending) pair becomes one encoder row."""

    def call(self, x):
        return keras.ops.reshape(x, (-1, keras.ops.shape(x)[-1]))

    def compute_output_shape(self, input_shape):
        return (None, input_shape[-1])
