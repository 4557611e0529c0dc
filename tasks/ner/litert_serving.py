"""The fast path of a named-entity tagger: raw sentences in, words and tags out, from the export's
LiteRT file (`engine.litert`), without TensorFlow.

It does what `run_ner.py` does in Python, with the runner's own functions: each sentence split on
whitespace, each word WordPiece-tokenised on its own (`features.convert_sentence`), a long
sentence cut into windows at word boundaries every `doc_stride` pieces, each word tagged at its
first piece in the window where that piece has the most context (`features.reassemble`). So a
long sentence is tagged as the runner tags it (the SavedModel cuts its windows at any piece).
Outputs, per sentence: `words`, `tags`, `tag_ids` (lists), and `num_words`.
"""
from __future__ import annotations

import numpy as np

from bert_tf2.data_gen.tokenization import FullTokenizer
from bert_tf2.inference.litert_layout import vocab_file
from bert_tf2.inference.litert_runtime import LiteRTModel
from bert_tf2.tasks.ner.features import convert_sentence, reassemble
from bert_tf2.tasks.ner.reader import Sentence


class LiteRTTagger:
    """`tagger(texts)`: a list of sentences -> dict of per-sentence lists."""

    def __init__(self, model: LiteRTModel, description: dict, vocab_file: str):
        self.model = model
        self.description = description
        self.tokenizer = FullTokenizer(vocab_file, description["do_lower_case"])
        self.labels = description["labels"]
        self.max_seq_length = description["max_seq_length"]
        self.doc_stride = description["doc_stride"]

    @classmethod
    def load(cls, export_dir: str, quantization: str | None = None, **kwargs):
        model, description = LiteRTModel.load(export_dir, quantization, ("ner", "a tagger"),
                                               **kwargs)
        return cls(model, description, vocab_file(export_dir))

    input_names = ("text",)  # serve_text's input

    def warm_up(self, batches=(1,)) -> None:
        self(["Warm up in Paris ."])
        self.model.warm_up(batches)

    def __call__(self, texts) -> dict:
        sentences = [Sentence(words=text.split(), labels=None, line=1, sentence_id=i)
                     for i, text in enumerate(texts)]
        worded = [i for i, s in enumerate(sentences) if s.words]
        features = [f for n, i in enumerate(worded) for f in convert_sentence(
            sentences[i], n, None, self.max_seq_length, self.tokenizer, self.doc_stride)]
        tag_ids = [[] for _ in sentences]
        if features:
            mask = np.asarray([f["input_mask"] for f in features], np.int32)
            width = int(mask.sum(axis=1).max())
            logits = self.model(
                np.asarray([f["input_ids"] for f in features], np.int32)[:, :width],
                mask[:, :width],
                np.asarray([f["segment_ids"] for f in features], np.int32)[:, :width])["logits"]
            predicted = np.zeros(mask.shape, np.int64)
            predicted[:, :width] = logits.argmax(axis=-1)
            for n, ids in enumerate(reassemble(features, predicted, len(worded))):
                tag_ids[worded[n]] = ids
        return {"words": [s.words for s in sentences], "tag_ids": tag_ids,
                "tags": [[self.labels[i] for i in ids] for ids in tag_ids],
                "num_words": [len(s.words) for s in sentences]}
