"""SavedModel export for multiple choice: a context, an optional question and choices in, the
probability of each choice and the chosen one out.

`serve_text` (also `serving_default`) takes `context` and `question` (string `[batch]`; an empty
question is none) and `choices` (string `[batch, m]`, m at most the model's `num_choices`; "" marks
a choice an example does not have). Each (context, question + " " + choice) pair is tokenised by
`GraphTokenizer` (the original's ids) and packed by `InputPacker` as the runner packs it; the
choices an example lacks are masked to a score of -10000. It returns `probabilities`
(`[batch, num_choices]`), `choice` (int32 `[batch]`) and `logits`. `serve_token_ids` takes the
encoder's inputs shaped `[batch, num_choices, length]` and returns `logits`. Saved by
`engine.export.save`; loads with only tensorflow and tensorflow_text.
"""
from __future__ import annotations

import tensorflow as tf

from bert_tf2.data_gen.graph_tokenizer import GraphTokenizer, InputPacker
from bert_tf2.modeling.encoder import INPUT_NAMES
from bert_tf2.tasks.multiple_choice.features import MASKED_LOGIT


class MultipleChoiceServing(tf.Module):
    """A `BertMultipleChoice` (output `logits` `[batch, num_choices]`) choosing among raw
    strings."""

    def __init__(self, model, vocab, do_lower_case: bool, max_seq_length: int, num_choices: int):
        super().__init__()
        self.model = model
        self.tokenizer = GraphTokenizer(vocab, do_lower_case=do_lower_case)
        self.packer = InputPacker.for_tokenizer(self.tokenizer, max_seq_length,
                                                dynamic_length=True)
        self.num_choices = num_choices
        self.do_lower_case, self.max_seq_length = do_lower_case, max_seq_length

    litert = True  # litert_serving.LiteRTChooser serves it

    def description(self) -> dict:
        """What `litert_serving.LiteRTChooser` needs beside the LiteRT file."""
        return {"task": "multiple_choice", "do_lower_case": self.do_lower_case,
                "max_seq_length": self.max_seq_length, "num_choices": self.num_choices}

    def signatures(self) -> dict:
        text = tf.function(self.choose, input_signature=[
            tf.TensorSpec([None], tf.string, name="context"),
            tf.TensorSpec([None], tf.string, name="question"),
            tf.TensorSpec([None, None], tf.string, name="choices")], autograph=False)
        token_ids = tf.function(self.logits, input_signature=[{
            name: tf.TensorSpec([None, self.num_choices, None], tf.int32, name=name)
            for name in INPUT_NAMES}], autograph=False)
        return {"serving_default": text.get_concrete_function(),
                "serve_text": text.get_concrete_function(),
                "serve_token_ids": token_ids.get_concrete_function()}

    def logits(self, inputs: dict) -> dict:
        return {"logits": tf.cast(self.model(inputs, training=False)["logits"], tf.float32)}

    def choose(self, context, question, choices) -> dict:
        given = tf.shape(choices)[1]
        tf.debugging.assert_less_equal(given, self.num_choices, message=(
            f"more choices than the model scores ({self.num_choices})"))
        choices = tf.pad(choices, [[0, 0], [0, self.num_choices - given]])
        present = choices != ""
        question = tf.broadcast_to(tf.strings.strip(question)[:, None], tf.shape(choices))
        second = tf.where(question != "", tf.strings.join([question, choices], " "), choices)
        batch = tf.shape(context)[0]
        first = tf.repeat(context, self.num_choices)
        packed = self.packer([self.tokenizer(first), self.tokenizer(tf.reshape(second, [-1]))])
        inputs = {name: tf.reshape(value, [batch, self.num_choices, -1])
                  for name, value in packed.items()}
        logits = tf.where(present, self.logits(inputs)["logits"], MASKED_LOGIT)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                "choice": tf.argmax(logits, axis=-1, output_type=tf.int32)}
