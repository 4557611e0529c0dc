"""The encoder's building blocks as Keras 3 layers, written from SPEC.md section 2.

Every weight has the shape the original stores (kernels [in, out]), so checkpoint conversion is a
name mapping, never a reshape. LayerNorm and softmax run in float32 under mixed precision.
"""
import contextlib
import math

import keras
from keras import ops

from bert_tf2.modeling import activations
from bert_tf2.process.errors import UserError


def initializer(stddev: float):
    """The original's `create_initializer`: truncated normal (cut at 2 stddev)."""
    return keras.initializers.TruncatedNormal(stddev=stddev)


def layer_norm(epsilon: float, name: str, policy):
    """LayerNorm over the last axis. Keras computes its statistics in at least float32 and casts
    back, so under a mixed-precision policy it stays accurate without a policy of its own."""
    return keras.layers.LayerNormalization(axis=-1, epsilon=epsilon, name=name, dtype=policy)


def flat_rows(x):
    """[B, L, H] -> [B * L, H], a reshape of static shape. A dense layer on rank-2 rows is one
    matrix product; on [B, L, H] with B and L free, TensorFlow's lowering (and a LiteRT file
    converted from it) adds shape arithmetic around every product."""
    return ops.reshape(x, (-1, x.shape[-1]))


# The original clips the global norm of the gradients, and TensorFlow counts an embedding lookup's
# gradient (its IndexedSlices) per looked-up row: a token seen twice in a batch counts twice, where
# the summed dense gradient of the table (JAX's, PyTorch's) would count it once. A trainer on
# another backend installs a tap here while it traces a step: each lookup whose table gets no
# other gradient passes its rows through `tap(rows, table)`, an identity whose backward pass adds
# the rows' squared gradient norm to the trainer's probe (`engine.keras_training`), so that the
# clip divides by the norm TensorFlow computes. `tests/test_backends.py` checks that it does.
_lookup_tap = None


@contextlib.contextmanager
def lookup_gradient_tap(tap):
    """Route the encoder's embedding lookups through `tap(rows, table_variable)` within the block."""
    global _lookup_tap
    previous, _lookup_tap = _lookup_tap, tap
    try:
        yield
    finally:
        _lookup_tap = previous


def tapped(rows, table):
    """`rows` looked up in `table`, through the installed tap if there is one."""
    return rows if _lookup_tap is None else _lookup_tap(rows, table)


class SequenceLengthError(UserError):
    """An input longer than the position table (`max_position_embeddings`)."""


def checked_sequence_length(length, max_length: int):
    """`length`, once it is known not to exceed the position table: checked statically, or, for a
    graph traced with an unknown length, by an assertion the returned length depends on (so it runs
    before anything uses the length)."""
    if isinstance(length, int) or length is None:
        if length is not None and length > max_length:
            raise SequenceLengthError(
                f"input sequence length {length} exceeds max_position_embeddings={max_length}")
        return length
    if keras.backend.backend() != "tensorflow":
        return length
    import tensorflow as tf
    check = tf.debugging.assert_less_equal(
        length, max_length,
        message=f"input sequence length exceeds max_position_embeddings={max_length}")
    with tf.control_dependencies([check]):
        return tf.identity(length)


@keras.saving.register_keras_serializable(package="bert")
class BertEmbeddings(keras.layers.Layer):
    """word + token-type + position embeddings, summed, then LayerNorm and dropout."""

    def __init__(self, vocab_size, hidden_size, type_vocab_size, max_position_embeddings,
                 dropout_rate, initializer_range, layer_norm_eps=1e-12, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.type_vocab_size = type_vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.layer_norm = layer_norm(layer_norm_eps, "LayerNorm", self.dtype_policy)
        self.dropout = keras.layers.Dropout(dropout_rate, name="dropout")
        # Set by a head that also reads the word embeddings (the masked LM's output layer): their
        # gradient is then dense in TensorFlow too, and not tapped (`lookup_gradient_tap`).
        self.word_embeddings_shared = False

    def build(self, input_shape=None):
        init = initializer(self.initializer_range)
        self.word_embeddings = self.add_weight(
            name="word_embeddings", shape=(self.vocab_size, self.hidden_size), initializer=init)
        self.token_type_embeddings = self.add_weight(
            name="token_type_embeddings", shape=(self.type_vocab_size, self.hidden_size),
            initializer=init)
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(self.max_position_embeddings, self.hidden_size),
            initializer=init)
        self.layer_norm.build((None, None, self.hidden_size))
        self.built = True

    def call(self, input_word_ids, input_type_ids, position_ids=None, training=None):
        """`position_ids` [B, L] (packed rows, where each example starts again at 0); None: the
        positions 0 .. L-1 of every row, as the original."""
        length = input_word_ids.shape[1]
        if length is None:
            length = ops.shape(input_word_ids)[1]
        length = checked_sequence_length(length, self.max_position_embeddings)
        words = ops.take(self.word_embeddings, input_word_ids, axis=0)
        if not self.word_embeddings_shared:
            words = tapped(words, self.word_embeddings)
        types = tapped(ops.take(self.token_type_embeddings, input_type_ids, axis=0),
                       self.token_type_embeddings)
        if position_ids is None:
            positions = ops.slice(ops.convert_to_tensor(self.position_embeddings), (0, 0),
                                  (length, self.hidden_size))
            positions = ops.expand_dims(positions, 0)
        else:
            positions = tapped(ops.take(self.position_embeddings, position_ids, axis=0),
                               self.position_embeddings)
        x = words + types + ops.cast(positions, words.dtype)
        x = self.layer_norm(x)
        return self.dropout(x, training=training)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.hidden_size,)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size,
                "hidden_size": self.hidden_size, "type_vocab_size": self.type_vocab_size,
                "max_position_embeddings": self.max_position_embeddings,
                "dropout_rate": self.dropout_rate, "initializer_range": self.initializer_range,
                "layer_norm_eps": self.layer_norm_eps}


@keras.saving.register_keras_serializable(package="bert")
class AttentionMask(keras.layers.Layer):
    """The original's additive mask: (1 - input_mask) * -10000, shaped [B, 1, 1, L] for the scores."""

    def call(self, input_mask):
        return attention_bias(input_mask)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], 1, 1, input_shape[1])


def attention_bias(input_mask):
    """The original's additive mask: (1 - input_mask) * -10000, shaped [B, 1, 1, L]."""
    mask = ops.cast(input_mask, "float32")
    # expand_dims rather than [:, None, None, :]: TFLite converts it at any length.
    return ops.expand_dims(ops.expand_dims((1.0 - mask) * -10000.0, 1), 1)


def packed_attention_bias(input_mask):
    """The additive mask of packed rows, whose `input_mask` holds each token's example number
    (1, 2, ...; 0: padding): a token attends only to the tokens of its own example (-10000
    elsewhere, as the original's mask), shaped [B, 1, L, L]. On an ordinary 0/1 mask every real
    token sees what the original's mask lets it see."""
    mask = ops.cast(input_mask, "int32")
    same = ops.logical_and(ops.equal(mask[:, :, None], mask[:, None, :]), mask[:, None, :] > 0)
    return ((1.0 - ops.cast(same, "float32")) * -10000.0)[:, None, :, :]


def packed_positions(input_mask):
    """Each token's position within its example in packed rows (examples numbered 1, 2, ...
    from the left in `input_mask`): its index less the tokens of earlier examples."""
    mask = ops.cast(input_mask, "int32")
    earlier = ops.logical_and(mask[:, None, :] > 0, mask[:, None, :] < mask[:, :, None])
    index = ops.arange(ops.shape(mask)[1], dtype="int32")[None, :]
    return index - ops.sum(ops.cast(earlier, "int32"), axis=-1)


def _on_cpu(backend: str) -> bool:
    """Whether Keras's `backend` computes on the CPU here."""
    if backend == "jax":
        import jax

        return jax.default_backend() == "cpu"
    import torch

    return not torch.cuda.is_available()


@keras.saving.register_keras_serializable(package="bert")
class SelfAttention(keras.layers.Layer):
    """Multi-head self-attention: Q, K, V projections, scaled dot product, masked softmax, dropout.

    Returns the per-head contexts concatenated back to [B, L, H]; the output projection, residual
    and LayerNorm belong to the transformer block, as in the original's variable scopes.
    """

    def __init__(self, num_heads, head_size, dropout_rate, initializer_range, use_bias=True,
                 **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.head_size = head_size
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        self.use_bias = use_bias
        width = num_heads * head_size
        init = initializer(initializer_range)
        self.query = keras.layers.Dense(width, kernel_initializer=init, use_bias=use_bias,
                                        name="query")
        self.key = keras.layers.Dense(width, kernel_initializer=init, use_bias=use_bias,
                                      name="key")
        self.value = keras.layers.Dense(width, kernel_initializer=init, use_bias=use_bias,
                                        name="value")
        self.dropout = keras.layers.Dropout(dropout_rate, name="dropout")

    def build(self, input_shape):
        for dense in (self.query, self.key, self.value):
            dense.build(input_shape)
        self.built = True

    def _split_heads(self, x, batch, length):
        x = ops.reshape(x, (batch, length, self.num_heads, self.head_size))
        return ops.transpose(x, (0, 2, 1, 3))  # [B, A, L, d]

    def call(self, x, bias, training=None, queries=None):
        """`queries` ([B, Q, H], default `x`): the tokens whose contexts to compute; keys and
        values are always all of `x`. Returns [B, Q, H]. The projections run on the rows
        flattened to [B * L, H] (`flat_rows`)."""
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        queries = x if queries is None else queries
        num_queries = ops.shape(queries)[1]
        rows = flat_rows(x)
        if self._fused(training):
            shape = (batch, -1, self.num_heads, self.head_size)  # [B, L, A, d]: no transposes
            q = ops.reshape(self.query(rows if queries is x else flat_rows(queries)), shape)
            k, v = ops.reshape(self.key(rows), shape), ops.reshape(self.value(rows), shape)
            context = ops.dot_product_attention(q, k, v, bias=bias,
                                                scale=1.0 / math.sqrt(float(self.head_size)))
            return ops.reshape(context, (batch, num_queries, self.num_heads * self.head_size))
        q = self._split_heads(self.query(rows if queries is x else flat_rows(queries)), batch,
                              num_queries)
        k = self._split_heads(self.key(rows), batch, length)
        v = self._split_heads(self.value(rows), batch, length)
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))
        scores = scores * (1.0 / math.sqrt(float(self.head_size)))
        scores = ops.cast(scores, "float32") + ops.cast(bias, "float32")
        probs = ops.cast(ops.softmax(scores, axis=-1), v.dtype)
        probs = self.dropout(probs, training=training)
        context = ops.transpose(ops.matmul(probs, v), (0, 2, 1, 3))  # [B, Q, A, d]
        return ops.reshape(context, (batch, num_queries, self.num_heads * self.head_size))

    def _fused(self, training) -> bool:
        """Whether the scores, softmax and weighted sum run as one `dot_product_attention`
        (cuDNN's flash attention on JAX GPUs): on JAX and PyTorch, wherever no dropout falls on
        the attention probabilities (evaluation, prediction, serving, or a dropout rate of 0),
        which that op cannot apply. The original's additive -10000 mask goes in as the op's bias,
        so that the sums are the original's, rows without a real token included. On a CPU only in
        float32: XLA:CPU has no float16 products with float32 sums, and under bfloat16 the fused
        op's float32 scores move the loss away from TensorFlow's by more than the 1e-2 the
        backends agree to. TensorFlow keeps the written-out graph that its exports and the LiteRT
        path are built from."""
        backend = keras.backend.backend()
        if backend == "tensorflow" or (training and self.dropout_rate > 0):
            return False
        return self.compute_dtype == "float32" or not _on_cpu(backend)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.num_heads * self.head_size,)

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads, "head_size": self.head_size,
                "dropout_rate": self.dropout_rate, "initializer_range": self.initializer_range,
                "use_bias": self.use_bias}


@keras.saving.register_keras_serializable(package="bert")
class TransformerBlock(keras.layers.Layer):
    """One encoder layer: attention sublayer, then the feed-forward sublayer.

    BERT's is post-LayerNorm: each sublayer's output plus its input, normalised. Cramming's
    architecture changes are options (`BertConfig`): `pre_layer_norm` normalises each sublayer's
    input instead and adds the sublayer's output to the unnormalised input (the encoder then ends
    in a LayerNorm of its own); `use_bias=False` drops the dense layers' biases; `gated` makes the
    feed-forward hidden_act(gate) * value, the intermediate dense giving both halves
    ([value, gate], 2 x intermediate_size wide).

    Sublayer names follow the original's scopes under `layer_{i}/`: `attention/self`,
    `attention/output/{dense,LayerNorm}`, `intermediate/dense`, `output/{dense,LayerNorm}`; under
    pre-LayerNorm the two LayerNorms keep those names (attention's, then the feed-forward's).
    """

    def __init__(self, hidden_size, num_heads, intermediate_size, hidden_act, hidden_dropout_prob,
                 attention_probs_dropout_prob, initializer_range, layer_norm_eps=1e-12,
                 pre_layer_norm=False, use_bias=True, gated=False, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.pre_layer_norm = pre_layer_norm
        self.use_bias = use_bias
        self.gated = gated
        init = initializer(initializer_range)
        self.attention = SelfAttention(num_heads, hidden_size // num_heads,
                                       attention_probs_dropout_prob, initializer_range,
                                       use_bias=use_bias, name="attention_self")
        self.attention_output = keras.layers.Dense(hidden_size, kernel_initializer=init,
                                                   use_bias=use_bias,
                                                   name="attention_output_dense")
        self.attention_dropout = keras.layers.Dropout(hidden_dropout_prob,
                                                      name="attention_output_dropout")
        self.attention_layer_norm = layer_norm(layer_norm_eps, "attention_output_LayerNorm",
                                               self.dtype_policy)
        self.activation = activations.get(hidden_act)
        self.intermediate = keras.layers.Dense(
            intermediate_size * (2 if gated else 1),
            activation=None if gated else self.activation, kernel_initializer=init,
            use_bias=use_bias, name="intermediate_dense")
        self.output_dense = keras.layers.Dense(hidden_size, kernel_initializer=init,
                                               use_bias=use_bias, name="output_dense")
        self.output_dropout = keras.layers.Dropout(hidden_dropout_prob, name="output_dropout")
        self.output_layer_norm = layer_norm(layer_norm_eps, "output_LayerNorm", self.dtype_policy)

    def build(self, input_shape):
        hidden = (None, None, self.hidden_size)
        self.attention.build(hidden)
        self.attention_output.build(hidden)
        self.attention_layer_norm.build(hidden)
        self.intermediate.build(hidden)
        self.output_dense.build((None, None, self.intermediate_size))
        self.output_layer_norm.build(hidden)
        self.built = True

    def call(self, x, bias, training=None, first_token_only=False, query_positions=None):
        """[B, L, H] -> [B, L, H]; with `first_token_only`, [B, 1, H]: the first token's output
        alone (it still attends to every token), all that the pooler reads from the last layer;
        with `query_positions` ([B, Q] int), [B, Q, H]: the outputs of those tokens of each row
        alone (packed rows' [CLS] tokens), under their rows of a per-token `bias` [B, 1, L, L]."""
        if query_positions is not None:
            def select(t):
                return ops.take_along_axis(t, query_positions[:, :, None], axis=1)

            if bias.shape[2] != 1:  # per-token rows (packed), not one row for all
                bias = ops.take_along_axis(bias, query_positions[:, None, :, None], axis=2)
        elif first_token_only:
            def select(t):
                return t[:, :1, :]
        else:
            def select(t):
                return t
        queries = select(x)
        # What attention reads: the layer's input, or (pre-LN) its normalised form.
        source = self.attention_layer_norm(x) if self.pre_layer_norm else x
        attended = flat_rows(self.attention(source, bias, training=training,
                                            queries=select(source)))
        attended = self.attention_dropout(self.attention_output(attended), training=training)
        rows = attended + flat_rows(queries)
        if not self.pre_layer_norm:
            rows = self.attention_layer_norm(rows)
        hidden = self._feed_forward(self.output_layer_norm(rows) if self.pre_layer_norm
                                    else rows)
        out = self.output_dropout(hidden, training=training) + rows
        if not self.pre_layer_norm:
            out = self.output_layer_norm(out)
        return ops.reshape(out, (ops.shape(queries)[0], ops.shape(queries)[1], self.hidden_size))

    def _feed_forward(self, rows):
        hidden = self.intermediate(rows)
        if self.gated:
            value, gate = ops.split(hidden, 2, axis=-1)
            hidden = value * (gate if self.activation is None else self.activation(gate))
        return self.output_dense(hidden)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "hidden_size": self.hidden_size,
                "num_heads": self.num_heads, "intermediate_size": self.intermediate_size,
                "hidden_act": self.hidden_act, "hidden_dropout_prob": self.hidden_dropout_prob,
                "attention_probs_dropout_prob": self.attention_probs_dropout_prob,
                "initializer_range": self.initializer_range,
                "layer_norm_eps": self.layer_norm_eps, "pre_layer_norm": self.pre_layer_norm,
                "use_bias": self.use_bias, "gated": self.gated}


@keras.saving.register_keras_serializable(package="bert")
class Pooler(keras.layers.Layer):
    """dense(H, tanh) on the first token's final hidden state."""

    def __init__(self, hidden_size, initializer_range, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range
        self.dense = keras.layers.Dense(hidden_size, activation="tanh",
                                        kernel_initializer=initializer(initializer_range),
                                        name="dense")

    def build(self, input_shape):
        self.dense.build((None, self.hidden_size))
        self.built = True

    def call(self, sequence_output):
        return self.dense(sequence_output[:, 0, :])

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.hidden_size)

    def get_config(self):
        return {**super().get_config(), "hidden_size": self.hidden_size,
                "initializer_range": self.initializer_range}
