"""Start/end logits of every window -> one answer per question, as the original `write_predictions`.

For each question: the `n_best_size` highest start and end logits of each window are paired;
spans outside the document, starting at a token whose max-context window is another one, reversed
or longer than `max_answer_length` are dropped; the rest are ranked by start + end logit. An
answer's WordPiece text is mapped back onto the context's own words (`get_final_text`: the
basic-tokenised words are aligned with the original characters, so "(1895-1943)." gives "1895").
SQuAD 2.0 adds the null answer, scored by the smallest start[0] + end[0] of any window, chosen
when `null - best non-null > null_score_diff_threshold`; `null_odds` records that difference.

Pure Python and NumPy: the runner collects the logits with the trainer's `predict`, then calls
`predict_answers`. One deliberate difference: where the original crashed on a SQuAD 2.0 question
with no valid non-null span (google-research/bert#211, #476; an empty context, say), the answer is
null and its null odds are the null score itself (as against a span scoring 0). SQuAD 1.1 keeps
the original's placeholder answer "empty" there.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import math

import numpy as np

from bert_tf2.data_gen.tokenization import BasicTokenizer

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
    n_best_size: int = 20
    max_answer_length: int = 30
    do_lower_case: bool = True
    version_2: bool = False
    null_score_diff_threshold: float = 0.0


@dataclasses.dataclass
class Answers:
    predictions: dict  # question id -> answer text ("" is the null answer)
    nbest: dict  # question id -> [{"text", "probability", "start_logit", "end_logit"}]
    null_odds: dict  # question id -> null score - best non-null score (SQuAD 2.0)


_Candidate = collections.namedtuple("_Candidate", "window start end start_logit end_logit")


def best_indexes(logits: np.ndarray, n: int) -> list:
    """Positions of the `n` largest logits, largest first (earlier position on ties)."""
    return [int(i) for i in np.argsort(-np.asarray(logits), kind="stable")[:n]]


def softmax(scores: list) -> list:
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(score - top) for score in scores]
    total = sum(exps)
    return [e / total for e in exps]


def predict_answers(examples: list, features: dict, start_logits: np.ndarray,
                    end_logits: np.ndarray, inv_vocab: dict, settings: DecodeSettings) -> Answers:
    """Answers for `examples` from their windows' `features` (`squad_data.load_features`) and
    logits (one row per window, in file order)."""
    windows_of = collections.defaultdict(list)
    for row, example_index in enumerate(features["example_index"]):
        windows_of[int(example_index)].append(row)
    basic = BasicTokenizer(do_lower_case=settings.do_lower_case)
    answers = Answers({}, {}, {})
    for index, example in enumerate(examples):
        _predict_one(example, windows_of[index], features, start_logits, end_logits, inv_vocab,
                     settings, basic, answers)
    return answers


def _predict_one(example, rows: list, features: dict, start_logits, end_logits, inv_vocab,
                 settings: DecodeSettings, basic: BasicTokenizer, answers: Answers) -> None:
    candidates = []
    null = (math.inf, 0, 0.0, 0.0)  # score, window, start logit, end logit
    for window, row in enumerate(rows):
        starts, ends = start_logits[row], end_logits[row]
        if settings.version_2 and float(starts[0]) + float(ends[0]) < null[0]:
            null = (float(starts[0]) + float(ends[0]), window, float(starts[0]), float(ends[0]))
        to_orig = features["token_to_orig"][row]
        is_max = features["token_is_max_context"][row]
        for start in best_indexes(starts, settings.n_best_size):
            for end in best_indexes(ends, settings.n_best_size):
                if start >= len(to_orig) or end >= len(to_orig):
                    continue
                if to_orig[start] < 0 or to_orig[end] < 0 or not is_max[start]:
                    continue
                if end < start or end - start + 1 > settings.max_answer_length:
                    continue
                candidates.append(_Candidate(window, start, end, float(starts[start]),
                                             float(ends[end])))
    if settings.version_2:
        candidates.append(_Candidate(null[1], 0, 0, null[2], null[3]))
    candidates.sort(key=lambda c: c.start_logit + c.end_logit, reverse=True)

    nbest, seen = [], set()
    for candidate in candidates:
        if len(nbest) >= settings.n_best_size:
            break
        text = ""
        if candidate.start > 0:
            text = _answer_text(example, features, rows[candidate.window], candidate, inv_vocab,
                                basic)
            if text in seen:
                continue
        seen.add(text)
        nbest.append((text, candidate.start_logit, candidate.end_logit))
    if settings.version_2 and "" not in seen:
        nbest.append(("", null[2], null[3]))
    if not nbest:
        nbest.append(("empty", 0.0, 0.0))

    probabilities = softmax([s + e for _, s, e in nbest])
    qid = example.qas_id
    answers.nbest[qid] = [{"text": text, "probability": p, "start_logit": s, "end_logit": e}
                          for (text, s, e), p in zip(nbest, probabilities)]
    if not settings.version_2:
        answers.predictions[qid] = nbest[0][0]
        return
    best = next((entry for entry in nbest if entry[0]), None)
    if best is None:  # no valid span at all: the null answer (the original crashed here)
        answers.null_odds[qid] = null[0]
        answers.predictions[qid] = ""
        return
    difference = null[0] - best[1] - best[2]
    answers.null_odds[qid] = difference
    answers.predictions[qid] = (
        "" if difference > settings.null_score_diff_threshold else best[0])


def _answer_text(example, features: dict, row: int, candidate: _Candidate, inv_vocab: dict,
                 basic: BasicTokenizer) -> str:
    ids = features["input_ids"][row][candidate.start:candidate.end + 1]
    pieces = " ".join(inv_vocab[int(i)] for i in ids)
    piece_text = " ".join(pieces.replace(" ##", "").replace("##", "").strip().split())
    to_orig = features["token_to_orig"][row]
    words = example.doc_tokens[to_orig[candidate.start]:to_orig[candidate.end] + 1]
    return get_final_text(piece_text, " ".join(words), basic)


def get_final_text(pred_text: str, orig_text: str, basic: BasicTokenizer) -> str:
    """The part of `orig_text` (whole context words) that the WordPiece answer `pred_text` spells:
    found in the basic-tokenised words, mapped back through the characters that are not spaces.
    Falls back to `orig_text` whole where the two cannot be aligned, as the original does."""
    tok_text = " ".join(basic.tokenize(orig_text))
    start = tok_text.find(pred_text)
    if start == -1:
        logger.debug("unable to find %r in %r", pred_text, orig_text)
        return orig_text
    end = start + len(pred_text) - 1
    orig_stripped, orig_map = _without_spaces(orig_text)
    tok_stripped, tok_map = _without_spaces(tok_text)
    if len(orig_stripped) != len(tok_stripped):
        logger.debug("lengths differ without spaces: %r vs %r", orig_stripped, tok_stripped)
        return orig_text
    tok_position_to_stripped = {position: i for i, position in tok_map.items()}
    try:
        orig_start = orig_map[tok_position_to_stripped[start]]
        orig_end = orig_map[tok_position_to_stripped[end]]
    except KeyError:
        logger.debug("could not map %r back onto %r", pred_text, orig_text)
        return orig_text
    return orig_text[orig_start:orig_end + 1]


def _without_spaces(text: str) -> tuple[str, dict]:
    """The text without " " characters, and each kept character's position in `text`."""
    kept, positions = [], {}
    for i, char in enumerate(text):
        if char == " ":
            continue
        positions[len(kept)] = i
        kept.append(char)
    return "".join(kept), positions
