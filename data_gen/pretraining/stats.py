"""What a pretraining-data run produced, in numbers that show it matches the original's recipe.

Counts add up across pools and processes (`merge`), so the local run and the Beam pipeline report
the same figures for the same pools. `as_dict` is the JSON written beside the records; `summary`
is the printed table.
"""
import collections
import json

import numpy as np

from bert_tf2.data_gen.pretraining import compiled_instances, masking

LENGTH_BINS = 16  # length histogram bins across [0, max_seq_length]
_KIND_NAMES = {compiled_instances.KIND_MASK: masking.MASK,
               compiled_instances.KIND_RANDOM: masking.RANDOM,
               compiled_instances.KIND_UNCHANGED: masking.UNCHANGED}


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
        # Seconds per stage, summed over processes: not part of the JSON, which depends on the
        # input and seed alone.
        self.seconds = collections.Counter()

    # ------------------------------------------------------------------ counting
    def add_pool(self, pool) -> None:
        """The tokenized documents of one pool (`compiled_instances.TokenizedPool`)."""
        self.pools += 1
        self.documents += pool.documents
        self.sentences += pool.sentences
        self.input_tokens += len(pool.token_ids)
        self.seconds["tokenizing"] += pool.seconds

    def add_instances(self, instances) -> None:
        """A pool's instances and draw counts (`compiled_instances.PoolInstances`)."""
        self.instances += len(instances)
        self.tokens += int(instances.lengths.sum())
        self.next_sentence.update(_counts(instances.is_random_next))
        kinds = instances.mask_kinds[instances.mask_kinds >= 0]
        self.mask_kinds.update({_KIND_NAMES[kind]: count
                                for kind, count in _counts(kinds).items()})
        self.masks_per_instance.update(_counts(instances.masked_counts))
        self.lengths.update(_counts(instances.lengths))
        for name, count in instances.draws.items():
            setattr(self, name, getattr(self, name) + count)

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

    def time_split(self) -> str:
        """`stage 1.2 s (40%), ...` over the stages timed so far."""
        total = sum(self.seconds.values()) or 1.0
        return ", ".join(f"{stage} {seconds:.1f} s ({100 * seconds / total:.0f}%)"
                         for stage, seconds in self.seconds.items())

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


def _counts(values: np.ndarray) -> dict:
    """value -> how often it occurs, as Python ints."""
    found, counts = np.unique(values, return_counts=True)
    return dict(zip(found.tolist(), counts.tolist()))


def _keyed(counter: collections.Counter) -> dict:
    return {str(key): counter[key] for key in sorted(counter)}
