"""Token ids of raw texts for a serving process: each text's head, by the original's rules.

Why: a served request is a few new sentences, and the Python `FullTokenizer` works out each chunk
it has not seen in Python (about 10 microseconds a chunk) and caches it (up to about 80 MB as a
server runs). `compile()`, which the fast paths' `warm_up` calls, switches to the compiled twin
(`data_gen.compiled_wordpiece`, the same ids, tested on every shared line): a single MRPC sentence
takes about 15 microseconds against 26-82. A one-shot call that never warms up skips its 0.4 s of
loading.
"""
from __future__ import annotations

import numpy as np


class TextIds:
    """`text_ids(texts, max_tokens)` -> one int32 array of ids per text, of the text's head
    (`FullTokenizer.text_head`: at least its first `max_tokens` tokens, whole words)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._lines_to_ids = tokenizer.tokenize_lines_to_ids

    def compile(self) -> None:
        if self.compiled:  # a second warm_up: the tables are built already
            return
        from bert_tf2.data_gen.compiled_wordpiece import CompiledWordpiece

        compiled = CompiledWordpiece(self.tokenizer)
        compiled.tokenize_lines_to_ids(["warm up", "café"])  # loads both compiled paths now
        self._lines_to_ids = compiled.tokenize_lines_to_ids

    @property
    def compiled(self) -> bool:
        return self._lines_to_ids != self.tokenizer.tokenize_lines_to_ids

    def __call__(self, texts: list, max_tokens: int) -> list:
        if not texts:
            return []
        ids, counts = self._lines_to_ids(self.tokenizer.text_heads(list(texts), max_tokens))
        return np.split(ids, np.cumsum(counts)[:-1])
