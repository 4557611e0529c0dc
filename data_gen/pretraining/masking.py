"""Masked-LM predictions for one instance, with the random draws of the original, in its order.

Candidates are all tokens but [CLS] and [SEP]; with whole-word masking a `##` piece joins the
previous candidate's group (even across the [SEP] between A and B, as in the original). Groups are
shuffled;
`num_to_predict = min(max_predictions_per_seq, max(1, round(len(tokens) * masked_lm_prob)))`
(Python 3 `round`); groups are taken in shuffled order and one that would overflow
`num_to_predict` is skipped; each chosen token becomes [MASK] with probability 0.8, else stays
unchanged with probability 0.5, else becomes a word drawn uniformly from the whole vocabulary.
Positions are returned sorted.
"""
import random
from typing import NamedTuple, Sequence

MASK, RANDOM, UNCHANGED = "mask", "random", "unchanged"  # what a chosen token became
SPECIAL_TOKENS = ("[CLS]", "[SEP]")


class MaskedTokens(NamedTuple):
    tokens: list  # the input with the chosen positions replaced
    positions: list  # sorted
    labels: list  # the original token at each position
    kinds: list  # MASK, RANDOM or UNCHANGED at each position


def candidate_groups(tokens: Sequence[str], whole_word: bool) -> list:
    """Lists of positions that are masked together: single tokens, or whole words."""
    if not whole_word:
        return [[index] for index, token in enumerate(tokens) if token not in SPECIAL_TOKENS]
    groups = []
    for index, token in enumerate(tokens):
        if token in SPECIAL_TOKENS:
            continue
        if groups and token.startswith("##"):
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


def num_to_predict(num_tokens: int, masked_lm_prob: float, max_predictions_per_seq: int) -> int:
    return min(max_predictions_per_seq, max(1, int(round(num_tokens * masked_lm_prob))))


def mask_tokens(tokens: Sequence[str], masked_lm_prob: float, max_predictions_per_seq: int,
                vocab_words: Sequence[str], rng: random.Random,
                whole_word: bool = False) -> MaskedTokens:
    groups = candidate_groups(tokens, whole_word)
    rng.shuffle(groups)
    budget = num_to_predict(len(tokens), masked_lm_prob, max_predictions_per_seq)
    output = list(tokens)
    chosen = []  # (position, label, kind)
    for group in groups:
        if len(chosen) >= budget:
            break
        if len(chosen) + len(group) > budget:
            continue
        for index in group:
            if rng.random() < 0.8:
                output[index], kind = "[MASK]", MASK
            elif rng.random() < 0.5:
                kind = UNCHANGED
            else:
                output[index], kind = vocab_words[rng.randint(0, len(vocab_words) - 1)], RANDOM
            chosen.append((index, tokens[index], kind))
    chosen.sort()
    return MaskedTokens(output, [c[0] for c in chosen], [c[1] for c in chosen],
                        [c[2] for c in chosen])
