"""The fast path of a sentence embedder: raw strings in, one vector each out, from the export's
LiteRT file (`engine.litert`), without TensorFlow.

Each text is tokenised by the original's `FullTokenizer` and packed `[CLS] A [SEP]`, trimmed to
`max_seq_length` (as `serve_text` and `extract_features` pack it; a pair written `A ||| B` is not
split); the pooling and the L2 normalisation the export was made with are in the file. Output:
`embedding` `[batch, hidden]`. An export made with `--doc_stride` (windows of long texts) has no
fast path.
"""
from __future__ import annotations

import numpy as np

from data_gen.tokenization import FullTokenizer, special_token_ids
from engine.litert_layout import LiteRTError, vocab_file
from engine.litert_runtime import LiteRTModel


class LiteRTEmbedder:
    """`embedder(text_a)`: a list of strings -> `{"embedding": [batch, hidden] float32}`."""

    input_names = ("text_a",)  # serve_text's input

    def __init__(self, model: LiteRTModel, description: dict, vocab_file: str):
        self.model = model
        self.tokenizer = FullTokenizer(vocab_file, description["do_lower_case"])
        self.cls_id, self.sep_id = special_token_ids(self.tokenizer.vocab, source=vocab_file)
        self.max_seq_length = description["max_seq_length"]

    @classmethod
    def load(cls, export_dir: str, quantization: str | None = None, **kwargs):
        model, description = LiteRTModel.load(
            export_dir, quantization, ("feature_extraction", "a sentence embedder"), **kwargs)
        if description.get("doc_stride"):
            raise LiteRTError(f"{export_dir}: exported with --doc_stride (windows of long "
                              f"texts), which the LiteRT path does not cut; serve its "
                              f"SavedModel (serve_text)")
        return cls(model, description, vocab_file(export_dir))

    def warm_up(self, batches=(1,)) -> None:
        self(["warm up"])
        self.model.warm_up(batches)

    def inputs(self, text_a) -> dict:
        """The encoder's int32 inputs `[batch, longest row]`."""
        ids, counts = self.tokenizer.tokenize_lines_to_ids(list(text_a))
        room = self.max_seq_length - 2
        rows = [piece[:room] for piece in np.split(ids, np.cumsum(counts)[:-1])] \
            if len(text_a) else []
        length = max((len(row) + 2 for row in rows), default=2)
        word_ids = np.zeros((len(rows), length), np.int32)
        mask = np.zeros((len(rows), length), np.int32)
        for i, row in enumerate(rows):
            word_ids[i, :len(row) + 2] = [self.cls_id, *row.tolist(), self.sep_id]
            mask[i, :len(row) + 2] = 1
        return {"input_word_ids": word_ids, "input_mask": mask,
                "input_type_ids": np.zeros_like(word_ids)}

    def __call__(self, text_a) -> dict:
        return {"embedding": self.model(**self.inputs(text_a))["embedding"]}
