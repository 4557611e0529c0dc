"""The fast path of a sentence (pair) classifier: raw strings in, the SavedModel's outputs out,
from the export's LiteRT file (`engine.litert`), without TensorFlow.

The texts are tokenised by the original's `FullTokenizer` (the ids fine-tuning used) and packed
as `convert_example` packs them (`[CLS] A [SEP] B [SEP]`, a pair trimmed from the longer text, B
on a tie; a `text_b` without tokens makes a single-text example, as `serve_text` does), padded
to the longest row; `inference.litert_runtime.LiteRTModel` runs them. The outputs are those of
`serve_text`: `logits` and `probabilities`, `label_id`, `label` (classification), `score`
(regression), or `probabilities`, `predicted`, `labels` (multi-label, with the export's
thresholds).
"""
from __future__ import annotations

import numpy as np

from bert_tf2.data_gen.packing import truncate_seq_pair
from bert_tf2.data_gen.text_ids import TextIds
from bert_tf2.data_gen.tokenization import FullTokenizer, special_token_ids
from bert_tf2.inference.litert_layout import LiteRTError, refuse_windows, vocab_file
from bert_tf2.inference.litert_runtime import LiteRTModel, padded_inputs


class LiteRTClassifier:
    """`classifier(text_a, text_b=None)`: lists of strings -> dict of NumPy outputs."""

    def __init__(self, model: LiteRTModel, description: dict, vocab_file: str):
        self.model = model
        self.description = description
        self.tokenizer = FullTokenizer(vocab_file, description["do_lower_case"])
        self.text_ids = TextIds(self.tokenizer)
        self.cls_id, self.sep_id = special_token_ids(self.tokenizer.vocab, source=vocab_file)
        self.max_seq_length = description["max_seq_length"]
        self.labels = np.array(description["labels"] or [""], dtype=object)
        self.regression = not description["labels"]
        thresholds = description.get("thresholds")
        self.thresholds = None if thresholds is None else np.asarray(thresholds, np.float32)

    @classmethod
    def load(cls, export_dir: str, quantization: str | None = None, **kwargs):
        model, description = LiteRTModel.load(
            export_dir, quantization, ("classification", "a sentence classifier"), **kwargs)
        refuse_windows(export_dir, description)
        return cls(model, description, vocab_file(export_dir))

    def warm_up(self, batches=(1,)) -> None:
        """Compile the tokenizer (`TextIds.compile`) and size the interpreter for the largest of
        these batch sizes now, so that no request pays for them."""
        self.text_ids.compile()
        self(["warm up"], ["warm up"] if self.pair else None)
        self.model.warm_up(batches)

    @property
    def pair(self) -> bool:
        return self.description["pair"]

    @property
    def input_names(self) -> tuple:
        """The texts `__call__` takes, in order (serve_text's input names)."""
        return ("text_a", "text_b") if self.pair else ("text_a",)

    def inputs(self, text_a, text_b=None) -> dict:
        """The encoder's int32 inputs `[batch, longest row]`, as fine-tuning packed the texts."""
        return self.pack(*self.token_ids(text_a, text_b))

    def token_ids(self, text_a, text_b=None) -> tuple:
        """`(ids of each text_a, ids of each text_b or None)`. Only the first max_seq_length
        tokens of each text can be kept (a pair is trimmed from its longer text's end), so a
        long text is tokenised from its head alone."""
        if text_b is not None and len(text_b) != len(text_a):
            raise LiteRTError(f"{len(text_a)} text_a but {len(text_b)} text_b")
        texts = list(text_a) + (list(text_b) if text_b is not None else [])
        pieces = self.text_ids(texts, self.max_seq_length)
        n = len(text_a)
        return pieces[:n], (pieces[n:] if text_b is not None else None)

    def pack(self, a_ids: list, b_ids: list | None) -> dict:
        """`[CLS] A [SEP] B [SEP]` per row (`[CLS] A [SEP]` where B has no tokens), the pair
        trimmed from its longer text as `convert_example` trims it."""
        rows = []
        for i, a in enumerate(a_ids):
            a = a.tolist()
            b = b_ids[i].tolist() if b_ids is not None else []
            if b:
                truncate_seq_pair(a, b, self.max_seq_length - 3)
                rows.append(([self.cls_id, *a, self.sep_id], [*b, self.sep_id] if b else []))
            else:
                rows.append(([self.cls_id, *a[:self.max_seq_length - 2], self.sep_id], []))
        return padded_inputs(rows)

    def __call__(self, text_a, text_b=None) -> dict:
        if self.pair and text_b is None:
            raise LiteRTError("this classifier takes pairs: give text_b too")
        if not self.pair and text_b is not None:
            raise LiteRTError("this classifier takes single texts: give text_a only")
        logits = self.model(**self.inputs(text_a, text_b))["logits"]
        return self.outputs(logits)

    def outputs(self, logits: np.ndarray) -> dict:
        if self.regression:
            return {"logits": logits, "score": logits[:, 0]}
        if self.thresholds is not None:
            probabilities = 1.0 / (1.0 + np.exp(-logits))
            predicted = probabilities > self.thresholds
            labels = [",".join(self.labels[row]) for row in predicted]
            return {"logits": logits, "probabilities": probabilities,
                    "predicted": predicted.astype(np.int32), "labels": labels}
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        label_id = logits.argmax(axis=-1).astype(np.int32)
        return {"logits": logits, "probabilities": shifted / shifted.sum(-1, keepdims=True),
                "label_id": label_id, "label": self.labels[label_id].tolist()}

