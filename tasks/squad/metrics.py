"""The official SQuAD v1.1 and v2.0 scores (evaluate-v1.1.py, evaluate-v2.0.py), as importable functions.

SQuAD results are only comparable with published ones when scored exactly as the official scripts
score them, down to their quirks (v1.1 and v2.0 disagree on empty answers; v2.0's best-threshold
search depends on the order of ties). Rewritten from the algorithm so that fine-tuning can report
them without shelling out to the scripts; pure Python, no TensorFlow.
"""
from __future__ import annotations

import collections
import logging
import re
import string
from typing import Iterator, Mapping

logger = logging.getLogger(__name__)

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s: str) -> str:
    """Lowercase, drop ASCII punctuation, drop the words a/an/the, collapse whitespace.

    In this order, which both official scripts share: punctuation goes before articles, so "a.b"
    becomes "ab" (not "b") and "the-end" becomes "theend".
    """
    text = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str, version_2: bool = False) -> float:
    """Token-overlap F1 of the normalised answers (bag of tokens: Counter intersection).

    v1.1 returns 0 whenever no token is shared, so also when both normalise to nothing.
    v2.0 (`version_2=True`) first checks for empty answers: if either side normalises to no
    tokens, F1 is 1 when both do and 0 otherwise. The two differ only on empty answers.
    """
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if version_2 and (not pred_tokens or not gold_tokens):
        return float(pred_tokens == gold_tokens)
    num_same = sum((collections.Counter(pred_tokens) & collections.Counter(gold_tokens)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _questions(dataset: list) -> Iterator[dict]:
    for article in dataset:
        for paragraph in article["paragraphs"]:
            yield from paragraph["qas"]


def squad_v1_scores(dataset: list, predictions: Mapping[str, str]) -> dict:
    """evaluate-v1.1.py: EM and F1 in percent, max over gold answers; a missing prediction scores 0."""
    exact = f1 = 0.0
    total = missing = 0
    for qa in _questions(dataset):
        total += 1
        if qa["id"] not in predictions:
            missing += 1
            continue
        golds = [answer["text"] for answer in qa["answers"]]
        if not golds:
            raise ValueError(f"question {qa['id']} has no gold answer (a SQuAD 2.0 file? use squad_v2_scores)")
        prediction = predictions[qa["id"]]
        exact += max(exact_match(prediction, gold) for gold in golds)
        f1 += max(f1_score(prediction, gold) for gold in golds)
    if missing:
        logger.warning("%d of %d questions have no prediction and score 0", missing, total)
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total, "total": total}


def raw_v2_scores(dataset: list, predictions: Mapping[str, str]) -> tuple[dict, dict]:
    """Per-question EM and F1 as evaluate-v2.0.py's get_raw_scores; unpredicted questions are left out.

    Gold answers that normalise to nothing are dropped; with none left the only gold is "".
    """
    exact, f1, missing = {}, {}, 0
    for qa in _questions(dataset):
        qid = qa["id"]
        golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
        if qid not in predictions:
            missing += 1
            continue
        exact[qid] = max(exact_match(predictions[qid], gold) for gold in golds)
        f1[qid] = max(f1_score(predictions[qid], gold, version_2=True) for gold in golds)
    if missing:
        logger.warning("%d questions have no prediction and are left out of the scores", missing)
    return exact, f1


def apply_no_ans_threshold(scores: Mapping[str, float], na_probs: Mapping[str, float],
                           has_ans: Mapping[str, bool], na_prob_thresh: float) -> dict:
    """Questions with na_prob > thresh count as answered "no answer": right iff they have none."""
    return {qid: float(not has_ans[qid]) if na_probs[qid] > na_prob_thresh else score
            for qid, score in scores.items()}


def find_best_thresh(predictions: Mapping[str, str], scores: Mapping[str, float],
                     na_probs: Mapping[str, float], has_ans: Mapping[str, bool]) -> tuple[float, float]:
    """The official search: start from "no answer everywhere", answer questions in rising na_prob.

    Answering a has-answer question adds its score; answering a no-answer question costs 1 if the
    prediction is non-empty. Only a strict improvement moves the threshold, and questions with equal
    na_prob are taken one at a time in `na_probs` order (stable sort), exactly as the official code,
    even though a threshold cannot separate them. Returns (percent over scored questions, threshold).
    """
    current = best = sum(1 for qid in has_ans if not has_ans[qid])
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if has_ans[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best:
            best, best_thresh = current, na_probs[qid]
    return 100.0 * best / len(scores), best_thresh


def _averages(exact: Mapping[str, float], f1: Mapping[str, float], qids: list, prefix: str = "") -> dict:
    return {f"{prefix}exact": 100.0 * sum(exact[q] for q in qids) / len(qids),
            f"{prefix}f1": 100.0 * sum(f1[q] for q in qids) / len(qids),
            f"{prefix}total": len(qids)}


def squad_v2_scores(dataset: list, predictions: Mapping[str, str],
                    na_probs: Mapping[str, float] | None = None, na_prob_thresh: float = 1.0) -> dict:
    """evaluate-v2.0.py: exact/f1/total, HasAns_* and NoAns_* splits, best_* when na_probs is given.

    A question is NoAns when its `answers` list is empty. Without na_probs every na_prob is 0 (no
    thresholding). Unpredicted questions are left out of every average (the official script leaves
    them out of the overall score and then fails on the splits; here the splits skip them too).
    """
    has_ans = {qa["id"]: bool(qa["answers"]) for qa in _questions(dataset)}
    exact_raw, f1_raw = raw_v2_scores(dataset, predictions)
    if not exact_raw:
        raise ValueError("no question of the dataset has a prediction")
    probs = na_probs if na_probs is not None else {qid: 0.0 for qid in predictions}
    exact = apply_no_ans_threshold(exact_raw, probs, has_ans, na_prob_thresh)
    f1 = apply_no_ans_threshold(f1_raw, probs, has_ans, na_prob_thresh)
    result = _averages(exact, f1, list(exact))
    for prefix, answerable in (("HasAns_", True), ("NoAns_", False)):
        qids = [qid for qid in exact if has_ans[qid] == answerable]
        if qids:
            result.update(_averages(exact, f1, qids, prefix))
    if na_probs is not None:
        result["best_exact"], result["best_exact_thresh"] = find_best_thresh(
            predictions, exact_raw, na_probs, has_ans)
        result["best_f1"], result["best_f1_thresh"] = find_best_thresh(predictions, f1_raw, na_probs, has_ans)
    return result
