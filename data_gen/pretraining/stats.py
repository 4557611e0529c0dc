"""What a pretraining-data run produced, in numbers that show it matches the original's recipe.

Counts add up across pools and processes (`merge`), so the local run and the Beam pipeline report
the same figures for the same pools. `as_dict` is the JSON written beside the records; `summary`
is the printed table.
"""
import collections
import json

from data_gen.pretraining import masking
from data_gen.pretraining.instances import DrawCounts, TrainingInstance

LENGTH_BINS = 16  # length histogram bins across [0, max_seq_length]


class PretrainingStats:
    def __init__(self, max_seq_length: int):
        self.max_seq_length = max_seq_length
        self.pools = 0
        self.documents = 0  # non-empty after tokenization
        self.sentences = 0
        self.input_tokens = 0  # WordPiece tokens of the input, before duplication
        self.instances = 0
        self.tokens = 0  # real (unpadded) tokens of all instances, [CLS]/[SEP] included
        self.next_sentence = collections.Counter()  # 0 actual next, 1 random next
        self.mask_kinds = collections.Counter()
        self.masks_per_instance = collections.Counter()
        self.lengths = collections.Counter()
        self.target_lengths = 0
        self.short_target_lengths = 0
        self.one_sentence_chunks = 0
        self.random_next_same_document = 0

    # ------------------------------------------------------------------ counting
    def add_documents(self, documents: list) -> None:
        """Tokenized documents (lists of token lists) of one pool."""
        self.pools += 1
        self.documents += len(documents)
        self.sentences += sum(len(document) for document in documents)
        self.input_tokens += sum(len(sentence) for document in documents for sentence in document)

    def add_instance(self, instance: TrainingInstance) -> None:
        self.instances += 1
        self.tokens += len(instance.tokens)
        self.next_sentence[int(instance.is_random_next)] += 1
        self.mask_kinds.update(instance.mask_kinds)
        self.masks_per_instance[len(instance.masked_lm_positions)] += 1
        self.lengths[len(instance.tokens)] += 1

    def add_draws(self, draws: DrawCounts) -> None:
        self.target_lengths += draws.target_lengths
        self.short_target_lengths += draws.short_target_lengths
        self.one_sentence_chunks += draws.one_sentence_chunks
        self.random_next_same_document += draws.random_next_same_document

    def merge(self, other: "PretrainingStats") -> "PretrainingStats":
        for name, value in vars(other).items():
            if name != "max_seq_length":
                setattr(self, name, getattr(self, name) + value)
        return self

    # ------------------------------------------------------------------ reporting
    @property
    def masks(self) -> int:
        return sum(self.mask_kinds.values())

    def as_dict(self) -> dict:
        masks, instances = self.masks, self.instances
        width = max(1, -(-self.max_seq_length // LENGTH_BINS))
        histogram = collections.Counter()
        for length, count in self.lengths.items():
            histogram[length // width] += count
        return {
            "pools": self.pools,
            "documents": self.documents,
            "sentences": self.sentences,
            "input_tokens": self.input_tokens,
            "instances": instances,
            "tokens": self.tokens,
            "mean_tokens_per_instance": _ratio(self.tokens, instances),
            "next_sentence_labels": {
                "actual_next (0)": self.next_sentence[0],
                "random_next (1)": self.next_sentence[1],
                "random_fraction": _ratio(self.next_sentence[1], instances),
                # A one-sentence chunk always takes a random B; the others flip a fair coin.
                "one_sentence_chunks": self.one_sentence_chunks,
                "random_fraction_of_coin_flips": _ratio(
                    self.next_sentence[1] - self.one_sentence_chunks,
                    instances - self.one_sentence_chunks),
                "random_document_same_as_current": self.random_next_same_document,
            },
            "masked_lm": {
                "masked_positions": masks,
                "fraction_of_tokens": _ratio(masks, self.tokens),
                "per_instance_mean": _ratio(masks, instances),
                "per_instance_histogram": _keyed(self.masks_per_instance),
                "replaced_by_mask": self.mask_kinds[masking.MASK],
                "replaced_by_random": self.mask_kinds[masking.RANDOM],
                "unchanged": self.mask_kinds[masking.UNCHANGED],
                "fractions": {kind: _ratio(self.mask_kinds[kind], masks)
                              for kind in (masking.MASK, masking.RANDOM, masking.UNCHANGED)},
            },
            "target_length": {
                "draws": self.target_lengths,
                "short": self.short_target_lengths,
                "short_fraction": _ratio(self.short_target_lengths, self.target_lengths),
            },
            "length_histogram": {
                "bin_width": width,
                "counts": {f"{b * width}-{b * width + width - 1}": histogram[b]
                           for b in sorted(histogram)},
            },
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2) + "\n"

    def summary(self) -> str:
        d = self.as_dict()
        nsp, mlm, target = d["next_sentence_labels"], d["masked_lm"], d["target_length"]
        f = mlm["fractions"]
        rows = [
            ("documents / sentences / input tokens",
             f"{self.documents:,} / {self.sentences:,} / {self.input_tokens:,}"),
            ("pools", f"{self.pools:,}"),
            ("instances / tokens", f"{self.instances:,} / {self.tokens:,}"),
            ("next sentence: random (label 1)", f"{nsp['random_fraction']:.4f} "
             f"({nsp['random_next (1)']:,} of {self.instances:,}; "
             f"{nsp['random_fraction_of_coin_flips']:.4f} of the coin flips)"),
            ("masked positions / tokens", f"{mlm['fraction_of_tokens']:.4f} "
             f"({self.masks:,}, {mlm['per_instance_mean']:.2f} per instance)"),
            ("[MASK] / random / unchanged", f"{f[masking.MASK]:.4f} / {f[masking.RANDOM]:.4f} / "
             f"{f[masking.UNCHANGED]:.4f}"),
            ("short target length", f"{target['short_fraction']:.4f} "
             f"({target['short']:,} of {target['draws']:,} draws)"),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {value}" for name, value in rows]
        bins = d["length_histogram"]["counts"]
        peak = max(bins.values(), default=1)
        lines.append("instance length histogram (tokens):")
        lines += [f"  {span:>9}  {count:>10,}  {'#' * round(40 * count / peak)}"
                  for span, count in bins.items()]
        return "\n".join(lines)


def _ratio(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else 0.0


def _keyed(counter: collections.Counter) -> dict:
    return {str(key): counter[key] for key in sorted(counter)}
