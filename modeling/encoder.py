"""`BertEncoder`: the BERT transformer as a functional Keras model with named inputs and dict outputs.

Inputs `input_word_ids`, `input_mask`, `input_type_ids` ([batch, length] int32); outputs
`sequence_output` [B, L, H], `pooled_output` [B, H], `encoder_outputs` (every layer's output, the
original's `get_all_encoder_layers`) and `embedding_output`. The model is rebuilt from its
`BertConfig` on load, so `.keras` files round-trip.
"""
from __future__ import annotations

import keras
from keras import ops

from bert_tf2.modeling.config import BertConfig
from bert_tf2.modeling.layers import (
    AttentionMask,
    BertEmbeddings,
    Pooler,
    TransformerBlock,
    attention_bias,
    layer_norm,
    packed_attention_bias,
    packed_positions,
)

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")


def encoder_inputs(sequence_length: int | None = None) -> dict[str, keras.KerasTensor]:
    return {name: keras.Input(shape=(sequence_length,), dtype="int32", name=name)
            for name in INPUT_NAMES}


@keras.saving.register_keras_serializable(package="bert")
class BertEncoder(keras.Model):
    """The BERT encoder of SPEC.md section 2; dropout is active only when called with training=True."""

    def __init__(self, config: BertConfig | dict, sequence_length: int | None = None, **kwargs):
        if isinstance(config, dict):
            config = BertConfig.from_dict(config)
        kwargs.setdefault("name", "bert")
        policy = keras.dtype_policies.get(kwargs.get("dtype") or keras.config.dtype_policy())
        embeddings = BertEmbeddings(
            config.vocab_size, config.hidden_size, config.type_vocab_size,
            config.max_position_embeddings, config.hidden_dropout_prob, config.initializer_range,
            config.layer_norm_eps, name="embeddings", dtype=policy)
        blocks = [
            TransformerBlock(config.hidden_size, config.num_attention_heads,
                             config.intermediate_size, config.hidden_act,
                             config.hidden_dropout_prob, config.attention_probs_dropout_prob,
                             config.initializer_range, config.layer_norm_eps,
                             pre_layer_norm=config.layer_norm_position == "pre",
                             use_bias=config.use_bias, gated=config.gated_feed_forward,
                             name=f"layer_{i}", dtype=policy)
            for i in range(config.num_hidden_layers)]
        # Pre-LayerNorm layers add to an unnormalised stream: one LayerNorm ends the encoder.
        final_layer_norm = (layer_norm(config.layer_norm_eps, "encoder_LayerNorm", policy)
                            if config.layer_norm_position == "pre" else None)
        pooler = Pooler(config.hidden_size, config.initializer_range, name="pooler", dtype=policy)

        inputs = encoder_inputs(sequence_length)
        x = embeddings(inputs["input_word_ids"], inputs["input_type_ids"])
        embedding_output = x
        bias = AttentionMask(name="attention_mask")(inputs["input_mask"])
        layer_outputs = []
        for block in blocks:
            x = block(x, bias)
            layer_outputs.append(x)
        if final_layer_norm is not None:  # the last layer's output is the sequence output
            x = layer_outputs[-1] = final_layer_norm(x)
        outputs = {
            "sequence_output": x,
            "pooled_output": pooler(x),
            "encoder_outputs": layer_outputs,
            "embedding_output": embedding_output,
        }
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.config = config
        self.sequence_length = sequence_length
        self.embeddings = embeddings
        self.blocks = blocks
        self.final_layer_norm = final_layer_norm
        self.pooler = pooler

    @property
    def embedding_table(self):
        """The word-embedding matrix [vocab, hidden], which the masked-LM head reuses."""
        return self.embeddings.word_embeddings

    def get_config(self):
        return {"config": self.config.to_dict(), "sequence_length": self.sequence_length,
                "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _run_layers(encoder: BertEncoder, inputs: dict, bias, position_ids=None, training=None,
                **last_block):
    """The embeddings and every block of `encoder` (its own layers, the same weights) under an
    attention `bias`, and the final LayerNorm of a pre-LayerNorm encoder; `last_block` picks the
    last block's queries (`TransformerBlock.call`)."""
    x = encoder.embeddings(inputs["input_word_ids"], inputs["input_type_ids"],
                           position_ids=position_ids, training=training)
    for block in encoder.blocks[:-1]:
        x = block(x, bias, training=training)
    x = encoder.blocks[-1](x, bias, training=training, **last_block)
    return x if encoder.final_layer_norm is None else encoder.final_layer_norm(x)


def packed_first_token_output(encoder: BertEncoder, inputs: dict, example_starts,
                              training=None):
    """[examples, H]: each packed example's final [CLS] state in packed rows
    (`data_gen.example_packing`), in the order of `example_starts`
    (the row-major flat index of each example's first token). As `first_token_output`, the last
    layer runs for those tokens alone. `input_mask` holds each token's example number in its row
    (1, 2, ...; 0: padding), so attention stays within each example and positions restart at 0
    for each: every example's state is the one it gets alone in a row of its own."""
    mask = ops.cast(inputs["input_mask"], "int32")
    width = ops.shape(mask)[1]
    slots = ops.max(mask)  # examples in the fullest row
    numbers = ops.arange(1, slots + 1, dtype="int32")
    # Row b's k-th example starts at its first token numbered k (a row with fewer examples
    # points its spare slots at token 0; nothing reads them).
    query_positions = ops.cast(ops.argmax(ops.cast(
        mask[:, None, :] == numbers[None, :, None], "int32"), axis=-1), "int32")  # [B, slots]
    first = _run_layers(encoder, inputs, packed_attention_bias(mask),
                        position_ids=packed_positions(mask), training=training,
                        query_positions=query_positions)  # [B, slots, H]
    starts = ops.cast(example_starts, "int32")
    slot = ops.take(ops.reshape(mask, (-1,)), starts) - 1
    return ops.take(ops.reshape(first, (-1, encoder.config.hidden_size)),
                    (starts // width) * slots + slot, axis=0)


def first_token_output(encoder: BertEncoder, inputs: dict, training=None):
    """[B, H]: the final hidden state of each row's first token ([CLS]), which is all that the
    pooler, and so every sentence-level head, reads. The last layer runs for that token alone
    (its attention still reads every token): the other tokens' final states are never used, and
    skipping them saves most of one layer's work (a sixth of MiniLM's), in training and in
    prediction. Equal to `encoder(inputs)["sequence_output"][:, 0]` up to float32 round-off."""
    return _run_layers(encoder, inputs, attention_bias(inputs["input_mask"]), training=training,
                       first_token_only=True)[:, 0, :]


def pooled_output(encoder: BertEncoder, inputs: dict, training=None):
    """[B, H]: the encoder's `pooled_output` by way of `first_token_output`; what every
    sentence-level model's `call` feeds its head."""
    return encoder.pooler.dense(first_token_output(encoder, inputs, training))
