"""The fast path of a multiple-choice model: contexts, questions and choices in, the chosen one
out, from the export's LiteRT file (`engine.litert`), without TensorFlow.

Each (context, question + " " + choice) pair is packed by the runner's own `convert_example`
(the original's `FullTokenizer`, `truncate_seq_pair`, `[CLS] A [SEP] B [SEP]`), so the model sees
what fine-tuning fed it. As in `serve_text`, the question is stripped and an empty one is none, a
choice "" marks one an example does not have, and a missing choice scores `MASKED_LOGIT`.
Outputs: `logits` and `probabilities` (`[batch, num_choices]`) and `choice`.
"""
from __future__ import annotations

import numpy as np

from bert_tf2.data_gen.batching import SEQUENCE_FEATURES
from bert_tf2.data_gen.tokenization import FullTokenizer
from bert_tf2.inference.litert_layout import LiteRTError, vocab_file
from bert_tf2.inference.litert_runtime import INPUT_NAMES, LiteRTModel
from bert_tf2.tasks.multiple_choice.features import MASKED_LOGIT, convert_example
from bert_tf2.tasks.multiple_choice.reader import ChoiceExample


class LiteRTChooser:
    """`chooser(context, question, choices)`: lists (choices: a list of texts per example) ->
    dict of NumPy outputs."""

    input_names = ("context", "question", "choices")  # serve_text's inputs
    list_inputs = ("choices",)  # a list of texts per example

    def __init__(self, model: LiteRTModel, description: dict, vocab_file: str):
        self.model = model
        self.tokenizer = FullTokenizer(vocab_file, description["do_lower_case"])
        self.max_seq_length = description["max_seq_length"]
        self.num_choices = description["num_choices"]

    @classmethod
    def load(cls, export_dir: str, quantization: str | None = None, **kwargs):
        model, description = LiteRTModel.load(
            export_dir, quantization, ("multiple_choice", "a multiple-choice model"), **kwargs)
        return cls(model, description, vocab_file(export_dir))

    def warm_up(self, batches=(1,)) -> None:
        self(["warm up"], [""], [["warm up"]])
        self.model.warm_up(batches)

    def inputs(self, context, question, choices) -> tuple:
        """The encoder's int32 inputs `[batch, num_choices, longest pair]` and which choices
        each example has (`[batch, num_choices]`)."""
        if not len(context) == len(question) == len(choices):
            raise LiteRTError(f"{len(context)} contexts, {len(question)} questions and "
                              f"{len(choices)} lists of choices: give one of each per example")
        batch, width = len(context), self.max_seq_length
        packed = {name: np.zeros((batch, self.num_choices, width), np.int32)
                  for name in SEQUENCE_FEATURES}
        present = np.zeros((batch, self.num_choices), bool)
        for i, (text, query, given) in enumerate(zip(context, question, choices)):
            if len(given) > self.num_choices:
                raise LiteRTError(f"example {i}: {len(given)} choices, more than the "
                                  f"{self.num_choices} the model scores")
            # Pairs are trimmed from their ends: a long text is packed from its head alone.
            text, query, *heads = self.tokenizer.text_heads([text, query, *given], width)
            example = ChoiceExample(str(i), text, query.strip(), tuple(heads), None, i + 1,
                                    "request")
            features = convert_example(example, i, self.num_choices, width, self.tokenizer)
            for name in SEQUENCE_FEATURES:
                packed[name][i] = np.reshape(features[name], (self.num_choices, width))
            present[i, :len(given)] = [choice != "" for choice in given]
        longest = max(int(packed["input_mask"].sum(axis=-1).max()) if batch else 0, 1)
        return ({name: packed[feature][..., :longest]
                 for name, feature in zip(INPUT_NAMES, SEQUENCE_FEATURES)}, present)

    def __call__(self, context, question, choices) -> dict:
        inputs, present = self.inputs(context, question, choices)
        logits = np.where(present, self.model(**inputs)["logits"], np.float32(MASKED_LOGIT))
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return {"logits": logits, "probabilities": shifted / shifted.sum(-1, keepdims=True),
                "choice": logits.argmax(axis=-1).astype(np.int32)}
