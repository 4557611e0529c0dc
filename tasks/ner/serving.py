"""SavedModel export for named-entity recognition: raw sentences in, words and tags out.

`NerServing` does in its graph what `run_ner.py` does in Python: a sentence is split into words on
whitespace, each word is WordPiece-tokenised on its own (a word with no piece becomes `[UNK]`), the
pieces are packed `[CLS] pieces [SEP]`, and each word takes the tag predicted at its first piece.
A sentence longer than `max_seq_length - 2` pieces is cut into windows of that many pieces
starting every `doc_stride` pieces, and each word is read from the window where its first piece
has the most context (SQuAD's rule, `data_gen.graph_windows`). Deliberate difference: the
runner's windows start and end at word boundaries, these at any piece, so a word of a long sentence
can be read from another window than the runner reads it from (sentences that fit one window, 3,247
of CoNLL-2003 valid's 3,250 at sequence 128, are tagged identically).

Signatures (`signatures()`, saved by `engine.export.save`):
- `serve_text` (also `serving_default`): `text` (string `[batch]`) -> `words` (string
  `[batch, most words]`, padded with ""), `tags` (string, padded with ""), `tag_ids` (int32,
  padded with -1), `num_words` (int32 `[batch]`);
- `serve_token_ids`: the encoder's inputs -> `logits` (float32 `[batch, length, tags]`).
"""
from __future__ import annotations

import tensorflow as tf

from bert_tf2.data_gen.graph_tokenizer import GraphTokenizer
from bert_tf2.data_gen.graph_windows import Layout, max_context, window_positions
from bert_tf2.data_gen.tokenization import special_token_ids
from bert_tf2.engine.export import token_id_spec


class NerServing(tf.Module):
    """A token tagger (`BertTokenClassifier` or `BertFeatureTagger`) tagging raw sentences."""

    def __init__(self, model, vocab, do_lower_case: bool, max_seq_length: int, labels,
                 doc_stride: int = 64):
        super().__init__()
        if max_seq_length < 3:
            raise ValueError(f"max_seq_length={max_seq_length}: [CLS] piece [SEP] needs 3")
        self.model = model
        self.tokenizer = GraphTokenizer(vocab, do_lower_case=do_lower_case)
        self.cls_id, self.sep_id = special_token_ids(self.tokenizer.vocab)
        self.unk_id = self.tokenizer.unk_id
        self.labels = tf.constant(list(labels), tf.string)
        self.room = max_seq_length - 2
        self.doc_stride = max(1, doc_stride)
        self.do_lower_case = do_lower_case

    @property
    def litert(self) -> bool:
        """`litert_serving.LiteRTTagger` serves the fine-tuned tagger (not the feature-based
        BiLSTM, whose recurrent layers the LiteRT path does not take)."""
        from bert_tf2.modeling.models import BertTokenClassifier

        return isinstance(self.model, BertTokenClassifier)

    def description(self) -> dict:
        """What `litert_serving.LiteRTTagger` needs beside the LiteRT file."""
        return {"task": "ner", "do_lower_case": self.do_lower_case,
                "max_seq_length": self.room + 2, "doc_stride": self.doc_stride,
                "labels": [label.decode("utf-8") for label in self.labels.numpy().tolist()]}

    def signatures(self) -> dict:
        text = tf.function(self.tag, input_signature=[tf.TensorSpec([None], tf.string,
                                                                    name="text")], autograph=False)
        token_ids = tf.function(self.logits, input_signature=[token_id_spec()], autograph=False)
        return {"serving_default": text.get_concrete_function(),
                "serve_text": text.get_concrete_function(),
                "serve_token_ids": token_ids.get_concrete_function()}

    def logits(self, inputs: dict) -> dict:
        return {"logits": tf.cast(self.model(inputs, training=False)["logits"], tf.float32)}

    def tag(self, text) -> dict:
        words = tf.strings.split(text)  # [batch, (words)]
        pieces = self.tokenizer(words.flat_values)  # [all words, (pieces)]
        empty = tf.cast(pieces.row_lengths() == 0, tf.int64)
        pieces = tf.concat([pieces, tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(empty)], tf.constant(self.unk_id, tf.int64)), empty)], axis=1)
        per_request = tf.RaggedTensor.from_row_lengths(pieces.row_lengths(),
                                                       words.row_lengths())
        doc = tf.RaggedTensor.from_row_lengths(pieces.flat_values,
                                               tf.reduce_sum(per_request, axis=1))

        layout = Layout.of(self.room, doc.row_lengths(), self.doc_stride)
        request, index = layout.windows()
        doc_start, length = layout.window(request, index)
        piece = window_positions(doc, request, doc_start, length)  # [windows, (length)]
        window = tf.gather(doc.flat_values, piece)
        edge = [tf.RaggedTensor.from_tensor(tf.fill([tf.size(request), 1], tf.constant(
            token_id, tf.int64))) for token_id in (self.cls_id, self.sep_id)]
        ids = tf.concat([edge[0], window, edge[1]], axis=1)
        inputs = {"input_word_ids": ids.to_tensor(0), "input_mask": tf.ones_like(ids).to_tensor(0),
                  "input_type_ids": tf.zeros_like(ids).to_tensor(0)}
        inputs = {name: tf.cast(value, tf.int32) for name, value in inputs.items()}
        predicted = tf.argmax(self.logits(inputs)["logits"], axis=-1, output_type=tf.int32)
        predicted = tf.RaggedTensor.from_tensor(predicted[:, 1:], lengths=length)

        # Each word's tag: at its first piece, in that piece's max-context window.
        is_first = tf.scatter_nd(pieces.row_starts()[:, None],
                                 tf.ones_like(pieces.row_starts(), tf.bool),
                                 tf.shape(pieces.flat_values, out_type=tf.int64))
        read = max_context(layout, request, index, doc_start, length) & tf.gather(is_first, piece)
        # `read` has the rows of `piece` and `predicted`: masking their flat values is enough.
        word = tf.gather(pieces.value_rowids(), tf.boolean_mask(piece.flat_values, read.flat_values))
        tag_ids = tf.scatter_nd(word[:, None], tf.boolean_mask(predicted.flat_values,
                                                               read.flat_values),
                                tf.shape(words.flat_values, out_type=tf.int64))
        tag_ids = words.with_flat_values(tag_ids)
        return {"words": words.to_tensor(""), "tag_ids": tag_ids.to_tensor(-1),
                "tags": tag_ids.with_flat_values(tf.gather(self.labels, tag_ids.flat_values))
                .to_tensor(""),
                "num_words": tf.cast(words.row_lengths(), tf.int32)}
