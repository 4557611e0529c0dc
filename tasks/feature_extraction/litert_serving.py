"""The fast path of a sentence embedder: raw strings in, one vector each out, from the export's
LiteRT file (`engine.litert`), without TensorFlow.

Each text is tokenised by the original's `FullTokenizer` and packed `[CLS] A [SEP]`, trimmed to
`max_seq_length` (as `serve_text` and `extract_features` pack it; a pair written `A ||| B` is not
split); the pooling and the L2 normalisation the export was made with are in the file. Output:
`embedding` `[batch, hidden]`. An export made with `--doc_stride` (windows of long texts) has no
fast path.
"""
from __future__ import annotations

from bert_tf2.data_gen.text_ids import TextIds
from bert_tf2.data_gen.tokenization import FullTokenizer, special_token_ids
from bert_tf2.inference.litert_layout import refuse_windows, vocab_file
from bert_tf2.inference.litert_runtime import LiteRTModel, padded_inputs


class LiteRTEmbedder:
    """`embedder(text_a)`: a list of strings -> `{"embedding": [batch, hidden] float32}`."""

    input_names = ("text_a",)  # serve_text's input

    def __init__(self, model: LiteRTModel, description: dict, vocab_file: str):
        self.model = model
        self.tokenizer = FullTokenizer(vocab_file, description["do_lower_case"])
        self.text_ids = TextIds(self.tokenizer)
        self.cls_id, self.sep_id = special_token_ids(self.tokenizer.vocab, source=vocab_file)
        self.max_seq_length = description["max_seq_length"]

    @classmethod
    def load(cls, export_dir: str, quantization: str | None = None, **kwargs):
        model, description = LiteRTModel.load(
            export_dir, quantization, ("feature_extraction", "a sentence embedder"), **kwargs)
        refuse_windows(export_dir, description)
        return cls(model, description, vocab_file(export_dir))

    def warm_up(self, batches=(1,)) -> None:
        """Compile the tokenizer and size the interpreter for the largest batch now."""
        self.text_ids.compile()
        self(["warm up"])
        self.model.warm_up(batches)

    def inputs(self, text_a) -> dict:
        """The encoder's int32 inputs `[batch, longest row]`."""
        pieces = self.text_ids(text_a, self.max_seq_length)  # a long text: its head alone
        room = self.max_seq_length - 2
        return padded_inputs([([self.cls_id, *piece[:room].tolist(), self.sep_id], [])
                              for piece in pieces])

    def __call__(self, text_a) -> dict:
        return {"embedding": self.model(**self.inputs(text_a))["embedding"]}
