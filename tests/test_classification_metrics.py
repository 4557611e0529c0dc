"""GLUE metrics (SPEC.md section 8): hand-computed cases, brute-force references, edge cases.

Every expected value is derived here from the metric's definition (in comments or in an
independent plain-Python implementation), never taken from `tasks.classification.metrics` itself.
"""
import math

import numpy as np
import pytest

from bert_tf2.tasks.classification import metrics as gm


def confusion(tp, tn, fp, fn):
    """Binary labels/predictions with exactly these counts (positive class 1)."""
    labels = [1] * tp + [0] * tn + [0] * fp + [1] * fn
    predictions = [1] * tp + [0] * tn + [1] * fp + [0] * fn
    return labels, predictions


# ------------------------------------------------------------------ plain-Python references


def brute_ranks(values):
    """1-based ranks; ties share the mean of their positions: rank = #less + (#equal + 1) / 2."""
    values = list(values)
    return [sum(w < v for w in values) + (sum(w == v for w in values) + 1) / 2 for v in values]


def textbook_pearson(x, y):
    """r = (n Sxy - Sx Sy) / sqrt((n Sxx - Sx^2)(n Syy - Sy^2)) in Python floats."""
    x, y = [float(v) for v in x], [float(v) for v in y]
    n = len(x)
    sx, sy = sum(x), sum(y)
    sxx, syy = sum(v * v for v in x), sum(v * v for v in y)
    sxy = sum(a * b for a, b in zip(x, y))
    return (n * sxy - sx * sy) / math.sqrt((n * sxx - sx * sx) * (n * syy - sy * sy))


def brute_spearman(x, y):
    return textbook_pearson(brute_ranks(x), brute_ranks(y))


def brute_mcc(labels, predictions):
    tp = sum(1 for l, p in zip(labels, predictions) if l == 1 and p == 1)
    tn = sum(1 for l, p in zip(labels, predictions) if l != 1 and p != 1)
    fp = sum(1 for l, p in zip(labels, predictions) if l != 1 and p == 1)
    fn = sum(1 for l, p in zip(labels, predictions) if l == 1 and p != 1)
    den = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    return 0.0 if den == 0 else (tp * tn - fp * fn) / math.sqrt(den)


def brute_f1(labels, predictions, positive=1):
    tp = sum(1 for l, p in zip(labels, predictions) if l == positive and p == positive)
    fp = sum(1 for l, p in zip(labels, predictions) if l != positive and p == positive)
    fn = sum(1 for l, p in zip(labels, predictions) if l == positive and p != positive)
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


# ------------------------------------------------------------------------------ accuracy


def test_accuracy_by_hand():
    # 3 of 5 agree (positions 0, 1, 3).
    assert gm.accuracy([0, 1, 1, 0, 1], [0, 1, 0, 0, 0]) == pytest.approx(0.6)
    # Multi-class (MNLI-like): 2 of 4 agree.
    assert gm.accuracy([0, 1, 2, 2], [0, 2, 2, 1]) == pytest.approx(0.5)
    assert gm.accuracy([2, 2, 2], [2, 2, 2]) == 1.0
    assert gm.accuracy([0, 0, 0], [1, 1, 1]) == 0.0


# ------------------------------------------------------------------------------------ F1


def test_f1_by_hand():
    labels, predictions = confusion(tp=3, tn=4, fp=1, fn=2)
    # precision 3/4, recall 3/5 -> F1 = 2 * 0.75 * 0.6 / 1.35 = 2/3 (= 2tp / (2tp + fp + fn) = 6/9)
    assert gm.f1(labels, predictions) == pytest.approx(2 / 3, abs=1e-12)
    # Class 0 as positive: tp0 = 4, fp0 = fn = 2, fn0 = fp = 1 -> 8 / (8 + 2 + 1) = 8/11.
    assert gm.f1(labels, predictions, positive=0) == pytest.approx(8 / 11, abs=1e-12)


def test_f1_is_of_class_one_not_symmetric():
    # tp=1, tn=8, fp=1, fn=0: F1(1) = 2/(2+1) = 2/3 while accuracy is 0.9 and F1(0) = 16/17.
    labels, predictions = confusion(tp=1, tn=8, fp=1, fn=0)
    assert gm.f1(labels, predictions) == pytest.approx(2 / 3, abs=1e-12)


def test_f1_is_zero_without_a_true_positive():
    assert gm.f1([1, 1, 0], [0, 0, 1]) == 0.0          # positives exist, none found
    assert gm.f1([0, 0, 0], [0, 0, 0]) == 0.0          # no positive anywhere (not nan)
    assert gm.f1([0, 0, 0], [1, 1, 1]) == 0.0          # only false positives
    assert gm.f1([1, 1, 1], [1, 1, 1]) == 1.0


# ------------------------------------------------------------------------------------ MCC


def test_matthews_by_hand():
    labels, predictions = confusion(tp=3, tn=4, fp=1, fn=2)
    # (tp*tn - fp*fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)) = (12 - 2) / sqrt(4*5*5*6)
    assert gm.matthews_corr(labels, predictions) == pytest.approx(10 / math.sqrt(600), abs=1e-12)
    # Order of the rows does not matter.
    order = np.random.default_rng(0).permutation(len(labels))
    assert gm.matthews_corr(np.array(labels)[order], np.array(predictions)[order]) == \
        pytest.approx(10 / math.sqrt(600), abs=1e-12)


def test_matthews_extremes():
    labels = [0, 1, 1, 0, 1, 0]
    assert gm.matthews_corr(labels, labels) == pytest.approx(1.0)
    assert gm.matthews_corr(labels, [1 - v for v in labels]) == pytest.approx(-1.0)
    # tp=2, tn=2, fp=2, fn=2: numerator 4 - 4 = 0.
    assert gm.matthews_corr(*confusion(2, 2, 2, 2)) == 0.0


@pytest.mark.parametrize("labels, predictions", [
    ([0, 1, 1, 0], [1, 1, 1, 1]),   # predictions all one class: a margin is empty
    ([0, 1, 1, 0], [0, 0, 0, 0]),
    ([1, 1, 1, 1], [0, 1, 1, 0]),   # labels all one class
    ([0, 0, 0, 0], [0, 1, 1, 0]),
    ([1, 1, 1], [1, 1, 1]),
])
def test_matthews_is_zero_when_a_margin_is_empty(labels, predictions):
    value = gm.matthews_corr(labels, predictions)
    assert value == 0.0 and not math.isnan(value)


def test_matthews_and_f1_match_brute_force_on_random_data():
    rng = np.random.default_rng(1)
    for n in (1, 2, 5, 17, 100):
        for _ in range(20):
            labels = rng.integers(0, 2, n)
            predictions = np.where(rng.random(n) < 0.7, labels, 1 - labels)
            assert gm.matthews_corr(labels, predictions) == pytest.approx(
                brute_mcc(labels.tolist(), predictions.tolist()), abs=1e-12)
            assert gm.f1(labels, predictions) == pytest.approx(
                brute_f1(labels.tolist(), predictions.tolist()), abs=1e-12)


# ---------------------------------------------------------------------------- correlations


def test_pearson_by_hand():
    # x = 1,2,3 (deviations -1,0,1); y = 2,4,7 (mean 13/3, deviations -7/3,-1/3,8/3)
    # Sxy = 7/3 + 8/3 = 5, Sxx = 2, Syy = 114/9 -> r = 5 / sqrt(228/9) = 15 / sqrt(228)
    assert gm.pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(15 / math.sqrt(228), abs=1e-12)
    assert gm.pearson([1, 2, 3], [-2, -4, -6]) == pytest.approx(-1.0, abs=1e-12)
    # Invariant to positive affine maps of either side: x -> 10x, y -> (y - 1) / 2.
    assert gm.pearson([10, 20, 30], [0.5, 1.5, 3.0]) == pytest.approx(15 / math.sqrt(228),
                                                                    abs=1e-12)


def test_pearson_of_a_constant_is_zero_not_nan():
    for x, y in (([1, 2, 3], [5, 5, 5]), ([2.5, 2.5], [1.0, 3.0]), ([0, 0, 0], [0, 0, 0])):
        value = gm.pearson(x, y)
        assert value == 0.0 and not math.isnan(value)
        assert gm.spearman(x, y) == 0.0


def test_ranks_by_hand():
    # sorted: 1,1 (positions 1,2 -> 1.5), 3 -> 3, 4 -> 4, 5 -> 5
    np.testing.assert_array_equal(gm.ranks([3, 1, 4, 1, 5]), [3, 1.5, 4, 1.5, 5])
    # three-way tie at positions 2,3,4 -> 3
    np.testing.assert_array_equal(gm.ranks([0.2, 0.7, 0.7, 0.7, -1.0]), [2, 4, 4, 4, 1])
    np.testing.assert_array_equal(gm.ranks([7, 7, 7]), [2, 2, 2])
    np.testing.assert_array_equal(gm.ranks([5.0]), [1])


def test_spearman_by_hand():
    # x = 10,20,20,30 -> ranks 1, 2.5, 2.5, 4 (deviations -1.5, 0, 0, 1.5)
    # y = 1,3,2,4     -> ranks 1, 3, 2, 4     (deviations -1.5, 0.5, -0.5, 1.5)
    # Sxy = 2.25 + 2.25 = 4.5, Sxx = 4.5, Syy = 5 -> rho = 4.5 / sqrt(22.5) = sqrt(0.9)
    assert gm.spearman([10, 20, 20, 30], [1, 3, 2, 4]) == pytest.approx(math.sqrt(0.9), abs=1e-12)
    # Any strictly increasing map gives 1, a decreasing one -1, though Pearson is below 1.
    x = np.array([0.1, 2.0, -3.0, 4.5, 1.0])
    assert gm.spearman(x, np.exp(3 * x)) == pytest.approx(1.0, abs=1e-12)
    assert gm.spearman(x, -x ** 3) == pytest.approx(-1.0, abs=1e-12)
    assert gm.pearson(x, np.exp(3 * x)) < 0.99


def test_ranks_and_correlations_match_brute_force_on_random_data_with_ties():
    rng = np.random.default_rng(2)
    for n in (2, 3, 7, 30, 101):
        for _ in range(10):
            # Few distinct values: many ties (STS-B scores come in steps of 0.2 or so).
            x = rng.integers(0, 6, n) * 0.2
            y = x + rng.normal(0, 0.5, n).round(1)
            if len(set(x.tolist())) < 2 or len(set(y.tolist())) < 2:
                continue
            np.testing.assert_allclose(gm.ranks(x), brute_ranks(x.tolist()), rtol=0, atol=0)
            np.testing.assert_allclose(gm.ranks(y), brute_ranks(y.tolist()), rtol=0, atol=0)
            assert gm.pearson(x, y) == pytest.approx(textbook_pearson(x, y), abs=1e-9)
            assert gm.spearman(x, y) == pytest.approx(brute_spearman(x, y), abs=1e-9)


def test_ranks_of_integer_and_float_values_agree():
    values = [3, 3, 1, 2, 2, 2, 9]
    np.testing.assert_array_equal(gm.ranks(values), gm.ranks(np.array(values, np.float32)))
    np.testing.assert_array_equal(gm.ranks(values), brute_ranks(values))


# ---------------------------------------------------------------------------- glue_metrics


def test_cola_main_is_matthews():
    labels, predictions = confusion(tp=3, tn=4, fp=1, fn=2)
    for task in ("cola", "CoLA", "COLA"):
        result = gm.glue_metrics(task, np.array(labels), np.array(predictions))
        assert set(result) == {"matthews_corr", "accuracy", "main"}
        assert result["matthews_corr"] == pytest.approx(10 / math.sqrt(600), abs=1e-12)
        assert result["accuracy"] == pytest.approx(7 / 10)
        assert result["main"] == result["matthews_corr"]


@pytest.mark.parametrize("task", ["mrpc", "MRPC", "qqp", "QQP"])
def test_mrpc_and_qqp_main_is_mean_of_accuracy_and_f1(task):
    labels, predictions = confusion(tp=3, tn=4, fp=1, fn=2)
    result = gm.glue_metrics(task, np.array(labels), np.array(predictions))
    assert set(result) == {"accuracy", "f1", "acc_and_f1", "main"}
    # accuracy 7/10, F1 2/3 -> mean (0.7 + 2/3) / 2 = 41/60
    assert result["accuracy"] == pytest.approx(0.7)
    assert result["f1"] == pytest.approx(2 / 3)
    assert result["acc_and_f1"] == pytest.approx(41 / 60, abs=1e-12)
    assert result["main"] == pytest.approx(41 / 60, abs=1e-12)


@pytest.mark.parametrize("task", ["sts-b", "STS-B", "stsb"])
def test_stsb_main_is_mean_of_pearson_and_spearman(task):
    labels = np.array([0.0, 1.2, 2.4, 2.4, 3.8, 5.0], np.float32)
    scores = np.array([0.3, 1.0, 2.9, 2.0, 4.1, 3.9], np.float32)
    result = gm.glue_metrics(task, labels, scores)
    assert set(result) == {"pearson", "spearman", "corr", "main"}
    p = textbook_pearson(labels.tolist(), scores.tolist())
    # label ranks 1, 2, 3.5, 3.5, 5, 6; score ranks 1, 2, 4, 3, 6, 5
    s = textbook_pearson([1, 2, 3.5, 3.5, 5, 6], [1, 2, 4, 3, 6, 5])
    assert result["pearson"] == pytest.approx(p, abs=1e-6)
    assert result["spearman"] == pytest.approx(s, abs=1e-12)
    assert result["main"] == pytest.approx((p + s) / 2, abs=1e-6)
    assert result["corr"] == result["main"]


def test_stsb_with_integer_scores_is_still_a_regression():
    # The task name, not the dtype, makes STS-B a correlation task.
    result = gm.glue_metrics("sts-b", [1, 2, 3], [2, 4, 7])
    assert result["pearson"] == pytest.approx(15 / math.sqrt(228), abs=1e-12)
    assert result["spearman"] == pytest.approx(1.0)


@pytest.mark.parametrize("task", ["sst-2", "SST-2", "mnli", "mnli-mm", "qnli", "rte", "wnli",
                                  "xnli"])
def test_other_tasks_main_is_accuracy(task):
    labels = np.array([0, 1, 2, 2, 1, 0, 0])
    predictions = np.array([0, 2, 2, 1, 1, 0, 1])
    result = gm.glue_metrics(task, labels, predictions)
    assert set(result) == {"accuracy", "main"}
    assert result["accuracy"] == pytest.approx(4 / 7)   # positions 0, 2, 4, 5
    assert result["main"] == result["accuracy"]


def test_results_are_python_floats():
    result = gm.glue_metrics("mrpc", np.array([1, 0, 1]), np.array([1, 1, 1]))
    assert all(type(value) is float for value in result.values())
    result = gm.glue_metrics("sts-b", np.array([1.0, 2.0, 3.5]), np.array([1.5, 2.0, 3.0]))
    assert all(type(value) is float for value in result.values())


def test_edge_cases_of_glue_metrics():
    # CoLA predicting one class: MCC 0 (not nan), accuracy the majority share.
    result = gm.glue_metrics("cola", np.array([1, 1, 0, 1]), np.array([1, 1, 1, 1]))
    assert result["main"] == 0.0 and result["accuracy"] == pytest.approx(0.75)
    # MRPC never predicting the positive class: F1 0, main = accuracy / 2.
    result = gm.glue_metrics("mrpc", np.array([1, 0, 0, 0]), np.array([0, 0, 0, 0]))
    assert result["f1"] == 0.0 and result["main"] == pytest.approx(0.75 / 2)
    # STS-B constant predictions: both correlations 0.
    result = gm.glue_metrics("sts-b", np.array([1.0, 2.0, 3.0]), np.array([2.5, 2.5, 2.5]))
    assert result["pearson"] == result["spearman"] == result["main"] == 0.0
