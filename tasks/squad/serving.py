"""SavedModel export for extractive question answering (SQuAD): question and context in, answer out.

A SQuAD model scores token windows, not strings: the original's run_squad cuts the context into
overlapping windows, runs the network on each, and decodes the best span over all of them. A served
model that takes raw strings has to do all of that in its graph, exactly as the original does, or
it answers differently from the model that was evaluated. `SquadServing` therefore builds the
original's features and decoding from TensorFlow ops:

- the context's WordPiece tokens with their character spans (`GraphTokenizer.tokenize_with_offsets`:
  the ids of the original, which tokenises each whitespace word on its own, giving the same ids as
  the whole context at once); the question's tokens, cut to `max_query_length`;
- windows of `max_seq_length - len(query) - 3` context tokens advancing by `min(that, doc_stride)`,
  packed `[CLS] query [SEP] window [SEP]`, padded with 0 to `max_seq_length` (the padding's logits
  take part in the n-best selection, as in the original); each token's "max context" window is the
  first one maximising `min(left, right) + 0.01 * window length` (`_check_is_max_context`);
- one model call on all windows of all requests;
- `write_predictions`' decoding: the top `n_best_size` start and end positions of each window,
  spans kept if inside the window's context tokens, starting at a max-context token, not reversed
  and at most `max_answer_length` tokens; the best by start + end logit (ties: first window, then
  the original's candidate order); for SQuAD 2.0 the null score is the minimum over windows of
  start + end logit at [CLS], and the answer is null when null score - best span score exceeds
  `null_score_diff_threshold`.

The answer is the context from the start of the span's first token to the end of its last one, in
code points of the context (as decoded with invalid UTF-8 dropped). The original maps the span back
through `get_final_text`, a character alignment between the basic-tokenised and the original
whitespace words; where that alignment works (ASCII and most text) it selects the same characters.
Known differences from the original's predictions:
- where `get_final_text` gives up (it returns the whole whitespace words): a span with `[UNK]`, or
  in words whose normalised length differs (a decomposed accent, a dropped control character, a
  U+00A0 inside a word), this answer is the tokens' own span, without the rest of those words;
- `get_final_text` finds the span's text at its first occurrence in those words ("10" in "10-10"
  is the first "10" even when the model chose the second); this answer is the chosen occurrence;
- the original joins the whitespace words of a multi-word answer with single spaces; this answer
  keeps the context's own whitespace between them (a newline, two spaces, U+202F), so that it is
  `context[start_char:end_char]` (the official SQuAD normalisation makes both the same);
- a context without tokens (empty, only whitespace) answers null where the original writes
  "empty" (v1) or fails (v2); so does a request without any valid span (v1: "empty"; v2: fails).

Signatures (`signatures()`, saved by `engine.export.save`):
- `serve_text` (also `serving_default`): `question`, `context` (string `[batch]`) -> `answer`
  (string), `start_char`, `end_char` (int32; `context[start_char:end_char] == answer`; "" and
  -1, -1 when null), `score` (float32: start + end logit of the chosen span, or the null score
  when a v2 answer is null; 0 when there is neither: no window, or no valid span in v1), and for
  SQuAD 2.0 `null_score_diff` (float32: null score - best span score, the original's
  null_odds.json value; +inf when there is no valid span);
- `serve_token_ids`: the encoder's inputs -> `start_logits`, `end_logits` (float32 `[batch, seq]`).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import tensorflow as tf

from bert_tf2.data_gen.graph_tokenizer import GraphTokenizer
from bert_tf2.data_gen.graph_windows import (
    NEG_INF,
    Layout,
    first_max,
    max_context,
    window_positions,
)
from bert_tf2.data_gen.tokenization import special_token_ids
from bert_tf2.engine.export import token_id_spec
from bert_tf2.tasks.squad.features import SquadSettings
from bert_tf2.tasks.squad.postprocess import DecodeSettings

_POS_INF = float("inf")


class Windows(NamedTuple):
    """The original's features for a batch of requests: every window of every context, in order."""
    inputs: dict  # the encoder's inputs, int32 [windows, max_seq_length]
    counts: tf.Tensor  # int64 [batch]: windows of each request (0 for a context without tokens)
    request: tf.Tensor  # int64 [windows]: the request a window belongs to
    doc_start: tf.Tensor  # int64 [windows]: index of its first token among the context's tokens
    doc_offset: tf.Tensor  # int64 [windows]: position of that token in the row, len(query) + 2
    length: tf.Tensor  # int64 [windows]: context tokens in the window
    max_context: tf.Tensor  # bool [windows, max_seq_length]: the token's max-context window?
    token_starts: tf.RaggedTensor  # int64 [batch, (tokens)]: code-point span of each context token
    token_ends: tf.RaggedTensor
    context: tf.Tensor  # string [batch]: the context with invalid UTF-8 dropped (what spans index)


class SquadServing(tf.Module):
    """A `BertSpanLabeler` (outputs `start_logits`, `end_logits`) answering raw questions."""

    def __init__(self, model, vocab, do_lower_case: bool, max_seq_length: int = 384,
                 doc_stride: int = 128, max_query_length: int = 64, n_best_size: int = 20,
                 max_answer_length: int = 30, version_2: bool = False,
                 null_score_diff_threshold: float = 0.0):
        super().__init__()
        if max_seq_length <= max_query_length + 3:
            raise ValueError(f"max_seq_length={max_seq_length} leaves no room for the context "
                             f"after a {max_query_length}-token question (it must exceed "
                             f"max_query_length + 3)")
        for name, value in [("doc_stride", doc_stride), ("n_best_size", n_best_size),
                            ("max_answer_length", max_answer_length)]:
            if value < 1:
                raise ValueError(f"{name}={value}: must be at least 1")
        config = getattr(model, "config", None)
        if config is not None and max_seq_length > config.max_position_embeddings:
            raise ValueError(f"max_seq_length={max_seq_length} exceeds the model's "
                             f"max_position_embeddings={config.max_position_embeddings}")
        self.model = model
        self.tokenizer = GraphTokenizer(vocab, do_lower_case=do_lower_case)
        self.cls_id, self.sep_id = special_token_ids(self.tokenizer.vocab)
        # The runner's two groups of settings, under the names its Python code gives them.
        self.windowing = SquadSettings(max_seq_length, doc_stride, max_query_length)
        self.decoding = DecodeSettings(n_best_size, max_answer_length, do_lower_case, version_2,
                                       null_score_diff_threshold)

    litert = True  # `litert_serving.LiteRTReader` serves it

    def description(self) -> dict:
        """What `litert_serving.LiteRTReader` needs beside the LiteRT file."""
        return {"task": "squad", "do_lower_case": self.decoding.do_lower_case,
                **dataclasses.asdict(self.windowing), **dataclasses.asdict(self.decoding)}

    # ------------------------------------------------------------------ signatures
    def signatures(self) -> dict:
        text = tf.function(self.answer, input_signature=[
            tf.TensorSpec([None], tf.string, name="question"),
            tf.TensorSpec([None], tf.string, name="context")], autograph=False)
        token_ids = tf.function(self.logits, input_signature=[token_id_spec()], autograph=False)
        return {"serving_default": text.get_concrete_function(),
                "serve_text": text.get_concrete_function(),
                "serve_token_ids": token_ids.get_concrete_function()}

    def logits(self, inputs: dict) -> dict:
        outputs = self.model(inputs, training=False)
        return {name: tf.cast(outputs[name], tf.float32)
                for name in ("start_logits", "end_logits")}

    def answer(self, question, context) -> dict:
        """The best answer span for each (question, context) pair; see the module docstring."""
        windows = self.windows(question, context)
        logits = self.logits(windows.inputs)
        return self.decode(windows, logits["start_logits"], logits["end_logits"])

    # ------------------------------------------------------------------ features
    def windows(self, question, context) -> Windows:
        """`convert_examples_to_features` for string tensors `[batch]`."""
        query = self.tokenizer(question)[:, :self.windowing.max_query_length]
        doc, token_starts, token_ends = self.tokenizer.tokenize_with_offsets(
            context, unit="UTF8_CHAR")
        layout = Layout.of(self.windowing.max_seq_length - query.row_lengths() - 3,
                           doc.row_lengths(), self.windowing.doc_stride)
        request, index = layout.windows()  # each window's request, its number within it
        doc_start, length = layout.window(request, index)
        doc_offset = tf.gather(query.row_lengths(), request) + 2

        window_doc = tf.gather(doc.flat_values, window_positions(doc, request, doc_start, length))
        window_query = tf.gather(query, request)
        cls, sep = (tf.RaggedTensor.from_tensor(tf.fill([tf.size(request), 1], tf.constant(
            token_id, tf.int64))) for token_id in (self.cls_id, self.sep_id))
        ids = tf.concat([cls, window_query, sep, window_doc, sep], axis=1)
        type_ids = tf.concat([tf.zeros_like(cls), tf.zeros_like(window_query), tf.zeros_like(sep),
                              tf.ones_like(window_doc), tf.ones_like(sep)], axis=1)
        shape = [None, self.windowing.max_seq_length]
        inputs = {"input_word_ids": ids.to_tensor(0, shape=shape),
                  "input_mask": tf.ones_like(ids).to_tensor(0, shape=shape),
                  "input_type_ids": type_ids.to_tensor(0, shape=shape)}

        before_doc = tf.ragged.range(doc_offset)  # [CLS] query [SEP]: never max-context
        is_max_context = tf.concat([tf.zeros_like(before_doc, tf.bool),
                                    max_context(layout, request, index, doc_start, length)], axis=1)
        context = tf.strings.unicode_encode(
            tf.strings.unicode_decode(context, "UTF-8", errors="ignore"), "UTF-8")
        return Windows({name: tf.cast(value, tf.int32) for name, value in inputs.items()},
                       layout.counts, request, doc_start, doc_offset, length,
                       is_max_context.to_tensor(False, shape=shape), token_starts, token_ends,
                       context)

    # ------------------------------------------------------------------ decoding
    def decode(self, windows: Windows, start_logits, end_logits) -> dict:
        """`write_predictions`' choice for each request, from the logits of every window."""
        k = min(self.decoding.n_best_size, self.windowing.max_seq_length)
        top_starts = tf.math.top_k(start_logits, k).indices  # ties: lower position first
        top_ends = tf.math.top_k(end_logits, k).indices
        start_logits = tf.cast(start_logits, tf.float64)  # the original sums Python floats
        end_logits = tf.cast(end_logits, tf.float64)
        starts = tf.cast(top_starts, tf.int64)[:, :, None]
        ends = tf.cast(top_ends, tf.int64)[:, None, :]
        first = windows.doc_offset[:, None, None]
        limit = first + windows.length[:, None, None]
        valid = ((starts >= first) & (starts < limit) & (ends >= first) & (ends < limit)
                 & tf.gather(windows.max_context, top_starts, batch_dims=1)[:, :, None]
                 & (ends >= starts) & (ends - starts + 1 <= self.decoding.max_answer_length))
        scores = (tf.gather(start_logits, top_starts, batch_dims=1)[:, :, None]
                  + tf.gather(end_logits, top_ends, batch_dims=1)[:, None, :])
        scores = tf.where(valid, scores, NEG_INF)
        # Per request, in the original's candidate order: window, start rank, end rank.
        per_request = tf.RaggedTensor.from_row_lengths(
            tf.reshape(scores, [-1, k * k]), windows.counts).merge_dims(1, 2)
        candidate, best = first_max(per_request.to_tensor(NEG_INF))
        has_span = best > NEG_INF

        # The chosen span's window and tokens; requests without one point at a padding row.
        window = tf.where(
            has_span, tf.cumsum(windows.counts, exclusive=True) + candidate // (k * k),
            tf.size(windows.request, out_type=tf.int64))
        rank = candidate % (k * k)
        start = tf.gather(tf.gather(_pad(tf.cast(top_starts, tf.int64)), window), rank // k,
                          batch_dims=1)
        end = tf.gather(tf.gather(_pad(tf.cast(top_ends, tf.int64)), window), rank % k,
                        batch_dims=1)
        shift = tf.gather(_pad(windows.doc_start - windows.doc_offset), window)
        start_char = _token_offset(windows.token_starts, start + shift, has_span)
        end_char = _token_offset(windows.token_ends, end + shift, has_span)

        if self.decoding.version_2:
            null_scores = tf.RaggedTensor.from_row_lengths(
                start_logits[:, 0] + end_logits[:, 0], windows.counts)
            null_score = -first_max(-null_scores.to_tensor(_POS_INF))[1]  # minimum
            null_score_diff = null_score - best
            is_null = ~has_span | (null_score_diff > self.decoding.null_score_diff_threshold)
            score = tf.where(is_null, null_score, best)
        else:
            is_null = ~has_span
            score = best
        score = tf.where(tf.math.is_finite(score), score, 0.0)
        start_char = tf.where(is_null, tf.constant(-1, tf.int64), start_char)
        end_char = tf.where(is_null, tf.constant(-1, tf.int64), end_char)
        answer = tf.strings.substr(windows.context, tf.maximum(start_char, 0),
                                   end_char - start_char, unit="UTF8_CHAR")
        outputs = {"answer": tf.where(is_null, "", answer),
                   "start_char": tf.cast(start_char, tf.int32),
                   "end_char": tf.cast(end_char, tf.int32),
                   "score": tf.cast(score, tf.float32)}
        if self.decoding.version_2:
            outputs["null_score_diff"] = tf.cast(null_score_diff, tf.float32)
        return outputs


def _pad(values):
    """`values` with one more (zero) row, so that the index one past the end is safe to gather."""
    return tf.pad(values, [[0, 1]] + [[0, 0]] * (len(values.shape) - 1))


def _token_offset(offsets: tf.RaggedTensor, token, present):
    """`offsets[request][token]` where `present`, else 0."""
    flat = tf.pad(offsets.flat_values, [[0, 1]])
    index = tf.where(present, offsets.row_starts() + token, tf.size(offsets.flat_values,
                                                                    out_type=tf.int64))
    return tf.gather(flat, index)
