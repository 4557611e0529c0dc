"""The BERT sizes the benchmarks time, declared once (Google's small-BERT naming: L/H/A/I)."""
from __future__ import annotations

import dataclasses

VOCAB_SIZE = 30522


@dataclasses.dataclass(frozen=True)
class Architecture:
    layers: int
    hidden: int
    heads: int
    intermediate: int

    def bert_config(self, vocab_size: int = VOCAB_SIZE):
        from bert_tf2.modeling.config import BertConfig
        return BertConfig(vocab_size=vocab_size, hidden_size=self.hidden,
                          num_hidden_layers=self.layers, num_attention_heads=self.heads,
                          intermediate_size=self.intermediate, type_vocab_size=2)


ARCHITECTURES = {
    "tiny": Architecture(2, 128, 2, 512),
    "mini": Architecture(4, 256, 4, 1024),
    "minilm": Architecture(6, 384, 12, 1536),
    "base": Architecture(12, 768, 12, 3072),
}
