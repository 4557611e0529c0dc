"""Output heads of SPEC.md section 3, as Keras layers over the encoder's outputs.

Every projection the original stores as `output_weights` [n, hidden] + `output_bias` [n] (next
sentence, classifier, SQuAD) is an `OutputProjection` holding exactly those two tensors, so
checkpoints map one to one. The masked-LM head reuses the encoder's word-embedding table.
"""
import keras
from keras import ops

from bert_tf2.modeling import activations
from bert_tf2.modeling.layers import initializer, layer_norm


@keras.saving.register_keras_serializable(package="bert")
class OutputProjection(keras.layers.Layer):
    """logits = x . output_weights^T + output_bias, with output_weights stored [units, hidden]."""

    def __init__(self, units, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.initializer_range = initializer_range

    def build(self, input_shape):
        self.output_weights = self.add_weight(name="output_weights",
                                              shape=(self.units, input_shape[-1]),
                                              initializer=initializer(self.initializer_range))
        self.output_bias = self.add_weight(name="output_bias", shape=(self.units,),
                                           initializer="zeros")
        self.built = True

    def call(self, x):
        return ops.matmul(x, ops.transpose(self.output_weights)) + self.output_bias

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self):
        return {**super().get_config(), "units": self.units,
                "initializer_range": self.initializer_range}


@keras.saving.register_keras_serializable(package="bert")
class MaskedLMHead(keras.layers.Layer):
    """Gathers the masked positions, transforms them and scores them against the embedding table.

    dense(H, hidden_act) -> LayerNorm -> x . word_embeddings^T + output_bias [V]. Only the
    `masked_lm_positions` are scored, so the logits are [B, P, V], not [B, L, V].
    The embedding layer is passed in by the model that owns both (it is not part of the config).
    """

    def __init__(self, embeddings, hidden_act="gelu", initializer_range=0.02,
                 layer_norm_eps=1e-12, **kwargs):
        super().__init__(**kwargs)
        self.embeddings = embeddings
        embeddings.word_embeddings_shared = True  # its gradient is dense: not tapped
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.transform = keras.layers.Dense(embeddings.hidden_size,
                                            activation=activations.get(hidden_act),
                                            kernel_initializer=initializer(initializer_range),
                                            name="transform_dense")
        self.layer_norm = layer_norm(layer_norm_eps, "transform_LayerNorm", self.dtype_policy)

    def build(self, sequence_output_shape, masked_lm_positions_shape=None):
        hidden = (None, None, self.embeddings.hidden_size)
        self.transform.build(hidden)
        self.layer_norm.build(hidden)
        self.output_bias = self.add_weight(name="output_bias",
                                           shape=(self.embeddings.vocab_size,),
                                           initializer="zeros")
        self.built = True

    def call(self, sequence_output, masked_lm_positions):
        positions = ops.cast(masked_lm_positions, "int32")[:, :, None]
        gathered = ops.take_along_axis(sequence_output, positions, axis=1)  # [B, P, H]
        x = self.layer_norm(self.transform(gathered))
        table = ops.cast(self.embeddings.word_embeddings, x.dtype)
        return ops.matmul(x, ops.transpose(table)) + ops.cast(self.output_bias, x.dtype)

    def compute_output_shape(self, sequence_output_shape, masked_lm_positions_shape):
        return (sequence_output_shape[0], masked_lm_positions_shape[1],
                self.embeddings.vocab_size)

    def get_config(self):
        return {**super().get_config(), "hidden_act": self.hidden_act,
                "initializer_range": self.initializer_range,
                "layer_norm_eps": self.layer_norm_eps}


@keras.saving.register_keras_serializable(package="bert")
class NextSentenceHead(keras.layers.Layer):
    """Two logits from the pooled output; label 0 = B follows A, 1 = B is random."""

    def __init__(self, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.initializer_range = initializer_range
        self.projection = OutputProjection(2, initializer_range, name="seq_relationship")

    def build(self, pooled_shape):
        self.projection.build(pooled_shape)
        self.built = True

    def call(self, pooled_output):
        return self.projection(pooled_output)

    def compute_output_shape(self, pooled_shape):
        return (pooled_shape[0], 2)

    def get_config(self):
        return {**super().get_config(), "initializer_range": self.initializer_range}


@keras.saving.register_keras_serializable(package="bert")
class ClassificationHead(keras.layers.Layer):
    """dropout(pooled) -> num_labels logits (num_labels=1 is regression, as for STS-B)."""

    def __init__(self, num_labels, dropout_rate=0.1, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.num_labels = num_labels
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        self.dropout = keras.layers.Dropout(dropout_rate, name="dropout")
        self.projection = OutputProjection(num_labels, initializer_range, name="output")

    def build(self, pooled_shape):
        self.projection.build(pooled_shape)
        self.built = True

    def call(self, pooled_output, training=None):
        return self.projection(self.dropout(pooled_output, training=training))

    def compute_output_shape(self, pooled_shape):
        return (pooled_shape[0], self.num_labels)

    def get_config(self):
        return {**super().get_config(), "num_labels": self.num_labels,
                "dropout_rate": self.dropout_rate, "initializer_range": self.initializer_range}


@keras.saving.register_keras_serializable(package="bert")
class SpanHead(keras.layers.Layer):
    """Per-token start and end logits (SQuAD): a [2, H] projection of the sequence output."""

    def __init__(self, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.initializer_range = initializer_range
        self.projection = OutputProjection(2, initializer_range, name="squad")

    def build(self, sequence_shape):
        self.projection.build(sequence_shape)
        self.built = True

    def call(self, sequence_output):
        logits = self.projection(sequence_output)  # [B, L, 2]
        return logits[..., 0], logits[..., 1]

    def compute_output_shape(self, sequence_shape):
        return (tuple(sequence_shape[:2]), tuple(sequence_shape[:2]))

    def get_config(self):
        return {**super().get_config(), "initializer_range": self.initializer_range}


@keras.saving.register_keras_serializable(package="bert")
class TokenTaggingHead(keras.layers.Layer):
    """dropout -> per-token num_tags logits (NER)."""

    def __init__(self, num_tags, dropout_rate=0.1, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.num_tags = num_tags
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        self.dropout = keras.layers.Dropout(dropout_rate, name="dropout")
        self.projection = OutputProjection(num_tags, initializer_range, name="output")

    def build(self, sequence_shape):
        self.projection.build(sequence_shape)
        self.built = True

    def call(self, sequence_output, training=None):
        return self.projection(self.dropout(sequence_output, training=training))

    def compute_output_shape(self, sequence_shape):
        return tuple(sequence_shape[:2]) + (self.num_tags,)

    def get_config(self):
        return {**super().get_config(), "num_tags": self.num_tags,
                "dropout_rate": self.dropout_rate, "initializer_range": self.initializer_range}


@keras.saving.register_keras_serializable(package="bert")
class MultipleChoiceHead(keras.layers.Layer):
    """One score per (context, ending) pair; the pooled outputs of B*N pairs become [B, N] logits."""

    def __init__(self, num_choices, dropout_rate=0.1, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.num_choices = num_choices
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        self.dropout = keras.layers.Dropout(dropout_rate, name="dropout")
        self.projection = OutputProjection(1, initializer_range, name="output")

    def build(self, pooled_shape):
        self.projection.build(pooled_shape)
        self.built = True

    def call(self, pooled_output, training=None):
        scores = self.projection(self.dropout(pooled_output, training=training))
        return ops.reshape(scores, (-1, self.num_choices))

    def compute_output_shape(self, pooled_shape):
        return (None, self.num_choices)

    def get_config(self):
        return {**super().get_config(), "num_choices": self.num_choices,
                "dropout_rate": self.dropout_rate, "initializer_range": self.initializer_range}


@keras.saving.register_keras_serializable(package="bert")
class BiLstmTaggingHead(keras.layers.Layer):
    """The paper's feature-based NER head: frozen BERT features -> a stack of BiLSTMs -> dropout
    -> per-token num_tags logits. Padded positions (`input_mask` 0) are masked in the LSTMs."""

    def __init__(self, num_tags, units, num_layers=2, dropout_rate=0.1, initializer_range=0.02,
                 **kwargs):
        super().__init__(**kwargs)
        self.num_tags = num_tags
        self.units = units
        self.num_layers = num_layers
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        self.lstms = [keras.layers.Bidirectional(
            keras.layers.LSTM(units, return_sequences=True), name=f"bilstm_{i}")
            for i in range(num_layers)]
        self.dropout = keras.layers.Dropout(dropout_rate, name="dropout")
        self.projection = OutputProjection(num_tags, initializer_range, name="output")
        self.projection.supports_masking = True  # the LSTMs' mask passes through, unused

    def build(self, features_shape, input_mask_shape=None):
        shape = tuple(features_shape)
        for lstm in self.lstms:
            lstm.build(shape)
            shape = shape[:2] + (2 * self.units,)
        self.projection.build(shape)
        self.built = True

    def call(self, features, input_mask, training=None):
        mask = ops.cast(input_mask, "bool")
        x = features
        for lstm in self.lstms:
            x = lstm(x, mask=mask, training=training)
        return self.projection(self.dropout(x, training=training))

    def compute_output_shape(self, features_shape, input_mask_shape=None):
        return tuple(features_shape[:2]) + (self.num_tags,)

    def get_config(self):
        return {**super().get_config(), "num_tags": self.num_tags, "units": self.units,
                "num_layers": self.num_layers, "dropout_rate": self.dropout_rate,
                "initializer_range": self.initializer_range}
