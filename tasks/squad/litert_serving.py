"""The fast path of a SQuAD model: questions and contexts in, answers out, from the export's LiteRT
file (`engine.litert`), without TensorFlow.

It runs the runner's own pipeline in Python: the context split into the original's whitespace
words, the question cut to `max_query_length` pieces, windows every `doc_stride` pieces with their
max-context flags (`features.convert_examples`), then the original's decoding
(`postprocess.predict_answers`: n-best spans, `get_final_text`, the null answer of SQuAD 2.0).
So its answers are the runner's `predictions.json` for the same model (the SavedModel returns
the tokens' own characters where `get_final_text` cannot align them; docs/serving.md).
Outputs, per question: `answer`, `probability` (of the answer among the n-best), and
`null_score_diff` (SQuAD 2.0).
"""
from __future__ import annotations

import numpy as np

from bert_tf2.data_gen.tokenization import FullTokenizer
from bert_tf2.inference.litert_layout import LiteRTError, vocab_file
from bert_tf2.inference.litert_runtime import LiteRTModel
from bert_tf2.tasks.squad.features import SquadSettings, convert_examples
from bert_tf2.tasks.squad.postprocess import DecodeSettings, predict_answers
from bert_tf2.tasks.squad.reader import SquadExample, whitespace_words

_SCALARS = ("unique_ids", "start_positions", "end_positions", "is_impossible", "example_index",
            "doc_span_index")


class LiteRTReader:
    """`reader(questions, contexts)`: lists of strings -> dict of per-question lists."""

    def __init__(self, model: LiteRTModel, description: dict, vocab_file: str):
        self.model = model
        self.description = description
        self.tokenizer = FullTokenizer(vocab_file, description["do_lower_case"])
        self.windowing = SquadSettings(description["max_seq_length"], description["doc_stride"],
                                       description["max_query_length"])
        self.decoding = DecodeSettings(description["n_best_size"],
                                       description["max_answer_length"],
                                       description["do_lower_case"], description["version_2"],
                                       description["null_score_diff_threshold"])

    @classmethod
    def load(cls, export_dir: str, quantization: str | None = None, **kwargs):
        model, description = LiteRTModel.load(export_dir, quantization, ("squad", "SQuAD"),
                                               **kwargs)
        return cls(model, description, vocab_file(export_dir))

    input_names = ("question", "context")  # serve_text's inputs

    def warm_up(self, batches=(1,)) -> None:
        self(["Who?"], ["Ann wrote it."])
        self.model.warm_up(batches)

    def __call__(self, questions, contexts) -> dict:
        if len(questions) != len(contexts):
            raise LiteRTError(f"{len(questions)} questions but {len(contexts)} contexts")
        examples = [SquadExample(str(i), question, whitespace_words(context)[0])
                    for i, (question, context) in enumerate(zip(questions, contexts))]
        rows = list(convert_examples(examples, self.tokenizer, self.windowing, False))
        width = self.windowing.max_seq_length
        features = {name: np.asarray([row[name] for row in rows], np.int64).reshape(
            len(rows), *(() if name in _SCALARS else (width,))) for name in rows[0]} \
            if rows else {}
        start = np.full((len(rows), width), -1e9, np.float32)
        end = start.copy()
        if rows:
            length = max(int(features["input_mask"].sum(axis=1).max()), 1)
            out = self.model(features["input_ids"][:, :length].astype(np.int32),
                             features["input_mask"][:, :length].astype(np.int32),
                             features["segment_ids"][:, :length].astype(np.int32))
            start[:, :length], end[:, :length] = out["start_logits"], out["end_logits"]
        answers = predict_answers(examples, features, start, end, self.tokenizer.inv_vocab,
                                  self.decoding)
        ids = [example.qas_id for example in examples]
        result = {"answer": [answers.predictions[i] for i in ids],
                  "probability": [answers.nbest[i][0]["probability"] for i in ids]}
        if self.decoding.version_2:
            result["null_score_diff"] = [answers.null_odds[i] for i in ids]
        return result
