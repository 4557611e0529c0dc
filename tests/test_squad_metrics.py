"""The official SQuAD scores on hand-worked cases, and on the real dev-v1.1.json."""
from __future__ import annotations

import json
import logging

import pytest

from bert_tf2.tasks.squad.metrics import (
    exact_match,
    f1_score,
    find_best_thresh,
    normalize_answer,
    squad_v1_scores,
    squad_v2_scores,
)


def _dataset(*questions: tuple[str, list[str]]) -> list:
    """One article, one paragraph; each question is (id, gold answer texts)."""
    qas = [{"id": qid, "question": "q?", "answers": [{"text": t, "answer_start": 0} for t in golds]}
           for qid, golds in questions]
    return [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]


@pytest.mark.parametrize("text, expected", [
    ("The Denver Broncos!", "denver broncos"),          # case, punctuation, leading article
    ("  An   apple,\ta  day\n", "apple day"),           # every article, any whitespace collapsed
    ("The theater", "theater"),                         # "the" inside a word stays
    ("Athena and anthem", "athena and anthem"),         # "a"/"an" inside words stay
    ("U.S.A.", "usa"),                                  # punctuation removed without a space
    ("a.b", "ab"),            # punctuation before articles: "ab" (articles first would give "b")
    ("the-end", "theend"),    # likewise: articles first would give "end"
    ("don't", "dont"),
    ("don\u2019t \u2014 x", "don\u2019t \u2014 x"),   # non-ASCII punctuation is not in string.punctuation
    ("the a an", ""),
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match():
    assert exact_match("the Denver Broncos", "Denver Broncos.") == 1.0
    assert exact_match("Denver Broncos team", "Denver Broncos") == 0.0
    assert exact_match("", "") == 1.0


def test_f1_partial_overlap():
    # pred tokens [denver, broncos, team], gold [denver, broncos]: 2 shared
    # P = 2/3, R = 2/2 = 1, F1 = 2 * (2/3) / (2/3 + 1) = (4/3) / (5/3) = 0.8
    assert f1_score("the Denver Broncos team", "Denver Broncos") == pytest.approx(0.8)
    # repeated tokens count once per match (Counter intersection): min(3, 1) = 1 shared
    # P = 1/3, R = 1/2, F1 = 2 * (1/6) / (5/6) = 0.4
    assert f1_score("Paris paris PARIS", "Paris London") == pytest.approx(0.4)
    assert f1_score("Santa Clara", "Denver") == 0.0


def test_f1_v1_and_v2_differ_only_on_empty_answers():
    # both normalise to no tokens: v1 finds no overlap -> 0, v2 says both empty -> 1
    for pred, gold in [("", ""), ("The", "a!"), ("", "an")]:
        assert f1_score(pred, gold) == 0.0
        assert f1_score(pred, gold, version_2=True) == 1.0
    # one side empty: 0 in both
    assert f1_score("", "Denver") == f1_score("", "Denver", version_2=True) == 0.0
    assert f1_score("the", "Denver", version_2=True) == 0.0
    # non-empty answers: identical
    assert f1_score("the Denver Broncos team", "Denver Broncos", version_2=True) == pytest.approx(0.8)


def test_v1_scores_max_over_golds_and_missing(caplog):
    dataset = _dataset(
        ("q1", ["Denver Broncos", "Broncos team of Denver"]),
        ("q2", ["Santa Clara"]),
        ("q3", ["1990"]),
        ("q4", ["Levi's Stadium"]),
    )
    predictions = {"q1": "Denver Broncos team", "q2": "Santa Clara, California", "q3": "1990"}
    # q1: vs gold 1 F1 = 0.8 (above); vs gold 2 [broncos team of denver]: 3 shared,
    #     P = 3/3, R = 3/4, F1 = 2 * 0.75 / 1.75 = 6/7 -> max 6/7; EM 0
    # q2: [santa clara california] vs [santa clara]: P = 2/3, R = 1 -> F1 0.8; EM 0
    # q3: EM 1, F1 1;  q4: missing -> 0
    # EM = 100 * 1/4 = 25;  F1 = 100 * (6/7 + 0.8 + 1 + 0) / 4 = 66.428571...
    with caplog.at_level(logging.WARNING, logger="bert_tf2.tasks.squad.metrics"):
        scores = squad_v1_scores(dataset, predictions)
    assert scores == pytest.approx({"exact_match": 25.0, "f1": 100 * (6 / 7 + 1.8) / 4, "total": 4})
    assert scores["f1"] == pytest.approx(66.4285714, abs=1e-6)
    assert "1 of 4 questions have no prediction" in caplog.text


def test_v2_splits_and_empty_answers():
    dataset = _dataset(
        ("a", ["Denver Broncos"]),
        ("b", ["Denver Broncos"]),
        ("c", ["Levi's Stadium"]),
        ("d", []),
        ("e", []),
        ("f", ["The", "1990"]),   # "The" normalises to nothing and is dropped: gold is ["1990"]
        ("g", ["an"]),            # only empty golds: gold becomes [""], yet it counts as HasAns
    )
    predictions = {"a": "Denver Broncos", "b": "the Denver Broncos team", "c": "", "d": "",
                   "e": "Santa Clara", "f": "", "g": ""}
    # (EM, F1): a (1, 1); b (0, 0.8); c (0, 0): empty vs non-empty; d (1, 1): "" is right for NoAns;
    # e (0, 0); f (0, 0): v1 would give EM 1 against "The"; g (1, 1)
    # HasAns a b c f g: EM 2/5 = 40%, F1 2.8/5 = 56%;  NoAns d e: EM 1/2, F1 1/2 = 50%
    # all 7: EM 3/7 = 42.857%, F1 3.8/7 = 54.286%
    scores = squad_v2_scores(dataset, predictions)
    assert scores == pytest.approx({
        "exact": 300 / 7, "f1": 380 / 7, "total": 7,
        "HasAns_exact": 40.0, "HasAns_f1": 56.0, "HasAns_total": 5,
        "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2})


def test_v2_without_no_answer_questions_has_no_noans_keys(caplog):
    dataset = _dataset(("a", ["Denver Broncos"]), ("b", ["Santa Clara"]))
    with caplog.at_level(logging.WARNING, logger="bert_tf2.tasks.squad.metrics"):
        scores = squad_v2_scores(dataset, {"a": "broncos"})
    # b has no prediction: left out of every average. a: P = 1, R = 1/2 -> F1 = 2/3
    assert scores == pytest.approx({"exact": 0.0, "f1": 200 / 3, "total": 1,
                                    "HasAns_exact": 0.0, "HasAns_f1": 200 / 3, "HasAns_total": 1})
    assert "1 questions have no prediction" in caplog.text


# Five questions for thresholding; (has answer, prediction, raw EM, raw F1, na_prob):
# q1 yes "Denver Broncos"          EM 1 F1 1    0.1
# q2 yes "the Denver Broncos team" EM 0 F1 0.8  0.6
# q3 no  "Santa Clara"             EM 0 F1 0    0.7
# q4 no  ""                        EM 1 F1 1    0.9
# q5 yes "Levi's Stadium"          EM 0 F1 0    0.8
THRESH_DATA = _dataset(("q1", ["Denver Broncos"]), ("q2", ["Denver Broncos"]), ("q3", []), ("q4", []),
                       ("q5", ["Denver"]))
THRESH_PREDS = {"q1": "Denver Broncos", "q2": "the Denver Broncos team", "q3": "Santa Clara", "q4": "",
                "q5": "Levi's Stadium"}
NA_PROBS = {"q1": 0.1, "q2": 0.6, "q3": 0.7, "q4": 0.9, "q5": 0.8}


def test_v2_na_prob_thresh_and_best_threshold():
    # thresh 1.0 (default): nothing is > 1.0, raw scores: EM 2/5 = 40, F1 2.8/5 = 56
    # best search: start at num_no_ans = 2 (q3, q4), best 2 at 0.0; in na_prob order:
    #   EM: q1 +1 -> 3 (best, 0.1); q2 +0 -> 3 (not >, stays 0.1); q3 -1 -> 2; q5 +0; q4 +0 -> 2
    #       best_exact = 100 * 3/5 = 60 at 0.1
    #   F1: q1 +1 -> 3 (best, 0.1); q2 +0.8 -> 3.8 (best, 0.6); q3 -1 -> 2.8; q5, q4 +0
    #       best_f1 = 100 * 3.8/5 = 76 at 0.6
    scores = squad_v2_scores(THRESH_DATA, THRESH_PREDS, NA_PROBS)
    assert scores == pytest.approx({
        "exact": 40.0, "f1": 56.0, "total": 5,
        "HasAns_exact": 100 / 3, "HasAns_f1": 180 / 3, "HasAns_total": 3,
        "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2,
        "best_exact": 60.0, "best_exact_thresh": 0.1, "best_f1": 76.0, "best_f1_thresh": 0.6})
    # thresh 0.5: q2 q3 q5 q4 (na > 0.5) become "no answer", scoring float(not has_ans):
    # q1 1, q2 0, q3 1, q4 1, q5 0 for both EM and F1 -> 60; HasAns 1/3; NoAns 2/2
    scores = squad_v2_scores(THRESH_DATA, THRESH_PREDS, NA_PROBS, na_prob_thresh=0.5)
    assert scores["exact"] == scores["f1"] == pytest.approx(60.0)
    assert scores["HasAns_f1"] == pytest.approx(100 / 3)
    assert scores["NoAns_exact"] == scores["NoAns_f1"] == pytest.approx(100.0)
    assert scores["best_f1"] == pytest.approx(76.0)   # the search does not depend on the threshold
    # applying the best F1 threshold reproduces best_f1: q1 1, q2 0.8, q3 1, q4 1, q5 0 -> 3.8/5
    assert squad_v2_scores(THRESH_DATA, THRESH_PREDS, NA_PROBS, 0.6)["f1"] == pytest.approx(76.0)


def test_best_threshold_ties_follow_na_probs_order():
    # x: no answer, predicted "Broncos" (-1 when answered); y: has answer, right (+1); equal na_prob.
    # num_no_ans = 1. Order x, y: 1 -> 0 -> 1, never > 1: 100 * 1/2 = 50 at 0.0.
    # Order y, x: 1 -> 2 (best, 0.5) -> 1: 100 * 2/2 = 100 at 0.5 (the official quirk: at 0.5 both
    # are answered and the real score is 50).
    preds = {"x": "Broncos", "y": "Denver"}
    scores = {"x": 0.0, "y": 1.0}
    has_ans = {"x": False, "y": True}
    assert find_best_thresh(preds, scores, {"x": 0.5, "y": 0.5}, has_ans) == (50.0, 0.0)
    assert find_best_thresh(preds, scores, {"y": 0.5, "x": 0.5}, has_ans) == (100.0, 0.5)


def test_best_threshold_all_no_answer_is_best():
    # q: has answer, predicted wrong (+0); n: no answer, predicted non-empty (-1). num_no_ans = 1.
    # 1 -> 1 -> 0: best stays 1 at 0.0 -> 50
    dataset = _dataset(("q", ["Denver"]), ("n", []))
    scores = squad_v2_scores(dataset, {"q": "Paris", "n": "Paris"}, {"q": 0.2, "n": 0.4})
    assert (scores["best_exact"], scores["best_exact_thresh"]) == (50.0, 0.0)
    assert (scores["best_f1"], scores["best_f1_thresh"]) == (50.0, 0.0)
    assert scores["exact"] == 0.0


def test_real_dev_v1_gold_answers_score_100(shared_data):
    with open(shared_data / "squad" / "dev-v1.1.json", encoding="utf-8") as f:
        dataset = json.load(f)["data"]
    qas = [qa for article in dataset for p in article["paragraphs"] for qa in p["qas"]]
    first_golds = {qa["id"]: qa["answers"][0]["text"] for qa in qas}
    assert len(first_golds) == len(qas) == 10570
    assert squad_v1_scores(dataset, first_golds) == {"exact_match": 100.0, "f1": 100.0, "total": 10570}
    # a wrong answer everywhere scores far below (the scorer can fail)
    wrong = squad_v1_scores(dataset, {qid: "Denver Broncos" for qid in first_golds})
    assert wrong["exact_match"] < 1.0 and wrong["f1"] < 5.0
