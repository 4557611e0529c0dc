"""SavedModel export for sentence embeddings: raw strings in, one vector per string out.

`serve_text` (also `serving_default`) takes `text_a` (string `[batch]`; a pair written `A ||| B`
is not split: the served model embeds whole strings), tokenised in the graph as the original
tokenises, packed `[CLS] A [SEP]` and trimmed to `max_seq_length`, padded to the longest row of
the request; it returns `embedding` [batch, hidden]: `pool` of the last layer (mean over real
tokens, or `[CLS]`), L2-normalised when exported so. `serve_token_ids` takes the encoder's inputs.
Loads with only tensorflow and tensorflow_text.

With `doc_stride` a string longer than a row is read whole as `extract_features --doc_stride`
reads it: windows of `max_seq_length - 2` tokens (`data_gen.graph_windows.Layout`), the encoder
run on 64 windows at a time, each token taken from its max-context window and `[CLS]`, `[SEP]`
from the first; the mean is over every token of the string.
"""
from __future__ import annotations

import tensorflow as tf

from bert_tf2.data_gen.graph_tokenizer import GraphTokenizer, InputPacker
from bert_tf2.data_gen.graph_windows import Layout, map_in_batches, max_context, window_positions
from bert_tf2.engine.export import token_id_spec
from bert_tf2.tasks.feature_extraction.model import l2_normalized, pool


class EmbeddingServing(tf.Module):
    def __init__(self, encoder, vocab, do_lower_case: bool, max_seq_length: int, pooling: str,
                 normalize: bool, doc_stride: int | None = None, window_batch: int = 64):
        super().__init__()
        self.encoder = encoder
        self.tokenizer = GraphTokenizer(vocab, do_lower_case=do_lower_case)
        self.packer = InputPacker.for_tokenizer(self.tokenizer, max_seq_length,
                                                dynamic_length=True)
        self.pooling = pooling
        self.normalize = normalize
        self.max_seq_length = max_seq_length
        self.doc_stride = doc_stride
        self.window_batch = window_batch
        self.do_lower_case = do_lower_case

    @property
    def litert(self) -> bool:
        """Whether `litert_serving.LiteRTEmbedder` serves this export (not with windows)."""
        return not self.doc_stride

    def description(self) -> dict:
        """What `litert_serving.LiteRTEmbedder` needs beside the LiteRT file."""
        return {"task": "feature_extraction", "do_lower_case": self.do_lower_case,
                "max_seq_length": self.max_seq_length, "pooling": self.pooling,
                "normalize": self.normalize, "doc_stride": self.doc_stride}

    def outputs(self, inputs: dict) -> dict:
        sequence = self.encoder(inputs, training=False)["sequence_output"]
        return {"embedding": pool(sequence, inputs["input_mask"], self.pooling, self.normalize)}

    def text_outputs(self, text_a) -> dict:
        tokens = self.tokenizer(text_a)
        if not self.doc_stride:
            return self.outputs(self.packer([tokens]))
        layout = Layout.of(self.max_seq_length - 2, tokens.row_lengths(), self.doc_stride,
                           empty_window=True)
        request, index = layout.windows()
        start, length = layout.window(request, index)
        inputs = self.packer([tf.gather(tokens.flat_values,
                                        window_positions(tokens, request, start, length))])
        sequence = map_in_batches(  # [windows, width, hidden]
            lambda chunk: self.encoder(chunk, training=False)["sequence_output"], inputs,
            self.window_batch, [None, None, self.encoder.config.hidden_size])
        width = tf.shape(sequence)[1]
        # Each token's max-context window holds it at row position 1 + (token - start).
        read = max_context(layout, request, index, start, length).to_tensor(
            False, shape=[None, None])
        read = tf.pad(read, [[0, 0], [1, 0]])[:, :width]
        read = tf.pad(read, [[0, 0], [0, width - tf.shape(read)[1]]])
        token_sums = tf.reduce_sum(sequence * tf.cast(read, sequence.dtype)[:, :, None], axis=1)
        first = tf.cumsum(layout.counts, exclusive=True)  # each text's first window
        cls = tf.gather(sequence[:, 0], first)
        sep = tf.gather_nd(sequence, tf.stack([first, tf.gather(length, first) + 1], axis=1))
        if self.pooling == "cls":
            pooled = cls
        else:
            total = tf.math.segment_sum(token_sums, request) + cls + sep
            pooled = total / tf.cast(tokens.row_lengths() + 2, total.dtype)[:, None]
        return {"embedding": l2_normalized(pooled) if self.normalize else pooled}

    def signatures(self) -> dict:
        token_ids = tf.function(self.outputs, input_signature=[token_id_spec()], autograph=False)
        text = tf.function(self.text_outputs,
                           input_signature=[tf.TensorSpec([None], tf.string, name="text_a")],
                           autograph=False)
        return {"serving_default": text.get_concrete_function(),
                "serve_text": text.get_concrete_function(),
                "serve_token_ids": token_ids.get_concrete_function()}
