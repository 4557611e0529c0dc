"""SavedModel export for sentence embeddings: raw strings in, one vector per string out.

`serve_text` (also `serving_default`) takes `text_a` (string `[batch]`; a pair written `A ||| B`
is not split: the served model embeds whole strings), tokenised in the graph as the original
tokenises, packed `[CLS] A [SEP]` and trimmed to `max_seq_length`, padded to the longest row of
the request; it returns `embedding` [batch, hidden]: `pool` of the last layer (mean over real
tokens, or `[CLS]`), L2-normalised when exported so. `serve_token_ids` takes the encoder's inputs.
Loads with only tensorflow and tensorflow_text.
"""
from __future__ import annotations

import tensorflow as tf

from data_gen.graph_tokenizer import GraphTokenizer, InputPacker
from engine.export import token_id_spec
from tasks.feature_extraction.model import pool


class EmbeddingServing(tf.Module):
    def __init__(self, encoder, vocab, do_lower_case: bool, max_seq_length: int, pooling: str,
                 normalize: bool):
        super().__init__()
        self.encoder = encoder
        self.tokenizer = GraphTokenizer(vocab, do_lower_case=do_lower_case)
        self.packer = InputPacker.for_tokenizer(self.tokenizer, max_seq_length,
                                                dynamic_length=True)
        self.pooling = pooling
        self.normalize = normalize

    def outputs(self, inputs: dict) -> dict:
        sequence = self.encoder(inputs, training=False)["sequence_output"]
        return {"embedding": pool(sequence, inputs["input_mask"], self.pooling, self.normalize)}

    def signatures(self) -> dict:
        token_ids = tf.function(self.outputs, input_signature=[token_id_spec()])
        text = tf.function(lambda text_a: self.outputs(self.packer([self.tokenizer(text_a)])),
                           input_signature=[tf.TensorSpec([None], tf.string, name="text_a")])
        return {"serving_default": text.get_concrete_function(),
                "serve_text": text.get_concrete_function(),
                "serve_token_ids": token_ids.get_concrete_function()}
