"""SquadServing against the original run_squad on real SQuAD dev questions, with a tiny random BERT.

The model is tiny and random (2 layers, hidden 32) but has the real uncased vocabulary, so its spans
are arbitrary and exercise every rule of the decoding. The oracle is Google's run_squad.py
(bert-tensorflow 1.0.4): its `read_squad_examples` and `convert_examples_to_features` make the
windows, the exported model's `serve_token_ids` scores them, and its `write_predictions` decodes
them. The export's `serve_text`, given only the strings, must make the same windows and choose the
same spans. Windows are short (max_seq_length 128, doc_stride 32), so most contexts need several.
"""
import json
import pathlib
import random
import re
import string
import sys
import warnings

import numpy as np
import pytest
import tensorflow as tf
import warm_python
from conftest import TINY, serve_texts
from test_tokenization import HOSTILE, random_texts

from bert_tf2.data_gen import vocab_sanity
from bert_tf2.data_gen.graph_tokenizer import GraphTokenizer
from bert_tf2.data_gen.tokenization import BasicTokenizer, FullTokenizer

SEQ, STRIDE, QUERY = 128, 32, 64
ORIGINAL_WHITESPACE = " \t\r\n\u202f"  # read_squad_examples' is_whitespace


@pytest.fixture(scope="module")
def vocab_file(minilm_dir) -> pathlib.Path:
    return minilm_dir / "vocab.txt"


@pytest.fixture(scope="module")
def span_model():
    import keras

    from bert_tf2.modeling.config import BertConfig
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertSpanLabeler

    keras.utils.set_random_seed(11)
    return BertSpanLabeler(BertEncoder(BertConfig.from_dict(TINY)))


def serving_module(span_model, vocab_file, version_2: bool):
    from bert_tf2.tasks.squad.serving import SquadServing

    return SquadServing(span_model, vocab_file, do_lower_case=True, max_seq_length=SEQ,
                        doc_stride=STRIDE, max_query_length=QUERY, version_2=version_2)


@pytest.fixture(scope="module")
def exports(tmp_path_factory, span_model, vocab_file):
    """`version_2 -> (module, export_dir)`."""
    from bert_tf2.engine import export as serving

    root = tmp_path_factory.mktemp("squad_export")
    out = {}
    for version_2 in (False, True):
        module = serving_module(span_model, vocab_file, version_2)
        out[version_2] = module, serving.save(module, str(root / f"v2_{version_2}"),
                                              extra_files={"vocab.txt": str(vocab_file)})
    return out


# ------------------------------------------------------------------ the examples
def sample(shared_data) -> dict:
    """`version_2 -> [(id, question, context)]`: 30 dev questions (the first of paragraphs 0 and
    1 of the first 15 articles) and, for v1, two contexts with U+202F and U+00A0 for spaces; for
    v2 also 10 impossible questions (a question asked of another article's context)."""
    articles = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text())["data"]
    answerable = [(qa["id"], qa["question"], paragraph["context"])
                  for article in articles[:15] for paragraph in article["paragraphs"][:2]
                  for qa in paragraph["qas"][:1]]
    spaced = [(f"{qid}-nnbsp", question, context.replace(" ", "\u202f", 12))
              for qid, question, context in answerable[:2]]
    spaced += [(f"{qid}-nbsp", question, context.replace(" ", "\u00a0", 12))
               for qid, question, context in answerable[2:4]]
    impossible = [(f"{articles[i]['paragraphs'][0]['qas'][1]['id']}-impossible",
                   articles[i]["paragraphs"][0]["qas"][1]["question"],
                   articles[i + 1]["paragraphs"][2]["context"]) for i in range(10)]
    return {False: answerable + spaced, True: answerable + impossible}


def as_squad_file(examples, path) -> str:
    paragraphs = [{"context": context, "qas": [{"id": qid, "question": question, "answers": []}]}
                  for qid, question, context in examples]
    path.write_text(json.dumps({"version": "test", "data": [{"title": "sample",
                                                             "paragraphs": paragraphs}]}))
    return str(path)


ORACLE = r"""
import json, os, sys, types
for name in ("bert.modeling", "bert.optimization"):  # TF1-only modules run_squad's path never uses
    sys.modules[name] = types.ModuleType(name)
import numpy as np
import tensorflow as tf2
import tensorflow_text  # noqa: F401  (the export's tokenizer ops)
from bert import run_squad, tokenization

jobs, vocab, seq, stride, query = json.loads(sys.argv[1])
run_squad.FLAGS(["oracle"])
tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
results = []
for job in jobs:
    run_squad.FLAGS.version_2_with_negative = job["version_2"]
    examples = run_squad.read_squad_examples(job["squad_file"], is_training=False)
    features = []
    run_squad.convert_examples_to_features(examples, tokenizer, seq, stride, query, False,
                                           features.append)
    if "tie_seed" in job:  # small integer logits: ties everywhere
        rng = np.random.RandomState(job["tie_seed"])
        starts, ends = (rng.randint(-3, 4, size=(len(features), seq)) for _ in range(2))
    else:
        scorer = tf2.saved_model.load(job["export_dir"]).signatures["serve_token_ids"]
        logits = scorer(**{name: tf2.constant([getattr(f, key) for f in features], tf2.int32)
                           for name, key in [("input_word_ids", "input_ids"),
                                             ("input_mask", "input_mask"),
                                             ("input_type_ids", "segment_ids")]})
        starts, ends = logits["start_logits"].numpy(), logits["end_logits"].numpy()
    raw = [run_squad.RawResult(unique_id=f.unique_id, start_logits=[float(x) for x in s],
                               end_logits=[float(x) for x in e])
           for f, s, e in zip(features, starts, ends)]
    files = [os.path.join(job["out_dir"], name)
             for name in ("predictions.json", "nbest.json", "null_odds.json")]
    run_squad.write_predictions(examples, features, raw, 20, 30, True, *files)
    read = [json.load(open(f)) if os.path.exists(f) else None for f in files]
    result = {
        "features": [{"example": f.example_index, "input_ids": f.input_ids,
                      "input_mask": f.input_mask, "segment_ids": f.segment_ids,
                      "max_context": sorted(p for p, m in f.token_is_max_context.items() if m)}
                     for f in features],
        "predictions": read[0], "nbest": read[1], "null_odds": read[2]}
    if job["version_2"]:
        # Again with a threshold between the two middle null odds: half the answers are null.
        odds = sorted(read[2].values())
        middle = len(odds) // 2
        threshold = (odds[middle - 1] + odds[middle]) / 2
        run_squad.FLAGS.null_score_diff_threshold = threshold
        files = [name.replace(".json", "_median.json") for name in files]
        run_squad.write_predictions(examples, features, raw, 20, 30, True, *files)
        run_squad.FLAGS.null_score_diff_threshold = 0.0
        result["median_threshold"] = threshold
        result["median_predictions"] = json.load(open(files[0]))
    results.append(result)
print(json.dumps(results))
"""


def tie_logits(seed: int, windows: int) -> tuple:
    """The oracle's integer logits for the tie jobs: `(start, end)`, each `[windows, SEQ]`."""
    rng = np.random.RandomState(seed)
    return tuple(rng.randint(-3, 4, size=(windows, SEQ)).astype(np.float32) for _ in range(2))


@pytest.fixture(scope="module")
def oracle_runs(tmp_path_factory, shared_data, exports, vocab_file) -> dict:
    """`(logits, version_2) -> {"examples", "features", "predictions", "nbest", "null_odds"}` of
    run_squad, with the export's logits (`"model"`) or the tie jobs' integer ones (`"ties"`)."""
    import importlib.util

    if importlib.util.find_spec("bert") is None:
        pytest.skip("the oracle bert-tensorflow==1.0.4 is not installed")
    root = tmp_path_factory.mktemp("squad_oracle")
    examples = sample(shared_data)
    keys, jobs = [], []
    for logits in ("model", "ties"):
        for version_2 in (False, True):
            out_dir = root / f"{logits}_v2_{version_2}"
            out_dir.mkdir()
            job = {"version_2": version_2, "export_dir": exports[version_2][1],
                   "out_dir": str(out_dir),
                   "squad_file": as_squad_file(examples[version_2], out_dir / "dev.json")}
            if logits == "ties":
                job["tie_seed"] = 5 + version_2
            keys.append((logits, version_2))
            jobs.append(job)
    completed = warm_python.run(
        [sys.executable, "-c", ORACLE, json.dumps([jobs, str(vocab_file), SEQ, STRIDE, QUERY])],
        timeout=600, warm=True)
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads(completed.stdout.strip().splitlines()[-1])
    return {key: {"examples": examples[key[1]], **result} for key, result in zip(keys, results)}


@pytest.fixture(scope="module")
def oracle(oracle_runs) -> dict:
    """`version_2 -> run_squad's results` with the export's logits."""
    return {version_2: oracle_runs["model", version_2] for version_2 in (False, True)}


def serve(signature, examples) -> list:
    """One `serve_text` call on all examples: `[{answer, start_char, end_char, score, ...}]`."""
    outputs = signature(question=tf.constant([q for _, q, _ in examples]),
                        context=tf.constant([c for _, _, c in examples]))
    outputs = {name: value.numpy().tolist() for name, value in outputs.items()}
    outputs["answer"] = [a.decode("utf-8") for a in outputs["answer"]]
    return [dict(zip(outputs, row)) for row in zip(*outputs.values())]


@pytest.fixture(scope="module")
def served(oracle, exports) -> dict:
    """`version_2 -> outputs` of the reloaded export's serve_text, all requests in one batch."""
    return {version_2: serve(tf.saved_model.load(exports[version_2][1]).signatures["serve_text"],
                             oracle[version_2]["examples"]) for version_2 in (False, True)}


def normalize_answer(text: str) -> str:
    """The official SQuAD evaluation's normalisation: lower case, no punctuation, no articles,
    single spaces."""
    text = "".join(char for char in text.lower() if char not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def covering_words(context: str, start: int, end: int) -> str:
    """The original's whitespace words overlapping `context[start:end]`, joined by spaces: what
    `get_final_text` returns when it cannot align the answer (`orig_text`)."""
    words = [(m.start(), m.end()) for m in re.finditer(f"[^{ORIGINAL_WHITESPACE}]+", context)]
    return " ".join(context[s:e] for s, e in words if s < end and e > start)


def original_spacing(answer: str) -> str:
    """The answer's whitespace words joined by single spaces, as the original outputs them."""
    return " ".join(re.findall(f"[^{ORIGINAL_WHITESPACE}]+", answer))


def best_non_null(nbest: list) -> dict:
    return next(entry for entry in nbest if entry["text"])


# ------------------------------------------------------------------ against the original
@pytest.mark.integration
@pytest.mark.parametrize("version_2", [False, True], ids=["v1", "v2"])
def test_windows_are_the_originals_features(oracle, exports, version_2):
    """Ids, mask, segments and max-context positions of every window equal the original's."""
    module = exports[version_2][0]
    examples = oracle[version_2]["examples"]
    windows = module.windows(tf.constant([q for _, q, _ in examples]),
                             tf.constant([c for _, _, c in examples]))
    features = oracle[version_2]["features"]
    assert windows.counts.numpy().tolist() == [
        sum(f["example"] == i for f in features) for i in range(len(examples))]
    assert sum(count >= 3 for count in windows.counts.numpy()) >= 10  # sliding windows matter
    for name, key in [("input_word_ids", "input_ids"), ("input_mask", "input_mask"),
                      ("input_type_ids", "segment_ids")]:
        np.testing.assert_array_equal(windows.inputs[name].numpy(), [f[key] for f in features])
    max_context = windows.max_context.numpy()
    assert [np.flatnonzero(row).tolist() for row in max_context] == [
        f["max_context"] for f in features]


def get_final_text_fallbacks(examples, served, predictions) -> dict:
    """`id -> original answer` where that answer is the whole whitespace words around the span
    `serve_text` chose, not the span itself: `get_final_text` gave up aligning them."""
    fallbacks = {}
    for (qid, _, context), out in zip(examples, served):
        if out["start_char"] >= 0 and predictions[qid] != original_spacing(out["answer"]):
            words = covering_words(context, out["start_char"], out["end_char"])
            if predictions[qid] == words:
                fallbacks[qid] = words
    return fallbacks


def cannot_align(words: str) -> bool:
    """Whether `get_final_text` gives up on these whitespace words: without spaces, their basic
    tokenisation (lower-cased, accents stripped, controls dropped, split at U+00A0) is not as long
    as they are, so it has no character alignment."""
    basic = BasicTokenizer(do_lower_case=True)
    return len("".join(basic.tokenize(words))) != len(words.replace(" ", ""))


@pytest.mark.integration
def test_v1_answers_and_scores_are_the_originals(oracle, served):
    examples, original = oracle[False]["examples"], oracle[False]
    fallbacks = get_final_text_fallbacks(examples, served[False], original["predictions"])
    differing = []
    for (qid, _, context), out in zip(examples, served[False]):
        best = original["nbest"][qid][0]
        assert out["score"] == pytest.approx(best["start_logit"] + best["end_logit"], abs=1e-4)
        assert out["start_char"] >= 0, qid  # every example has a valid span in the original
        if normalize_answer(out["answer"]) != normalize_answer(original["predictions"][qid]):
            differing.append(qid)
    # The one difference to expect (this seed shows none): where get_final_text cannot align the
    # words (U+00A0 inside a word, a combining mark), it answers with the whole whitespace words,
    # serve_text with the tokens' own span. Every other answer is the same text.
    assert all(qid in fallbacks and cannot_align(fallbacks[qid]) for qid in differing), differing
    assert len(differing) <= 2


@pytest.mark.integration
@pytest.mark.parametrize("threshold", ["zero", "median"])
def test_v2_null_decisions_and_odds_are_the_originals(oracle, served, span_model, vocab_file,
                                                      threshold):
    """At threshold 0 (the export's) and at the median of the null odds, where half the answers
    are null."""
    from bert_tf2.tasks.squad.serving import SquadServing

    examples, original = oracle[True]["examples"], oracle[True]
    if threshold == "zero":
        outputs, predictions = served[True], original["predictions"]
    else:
        module = SquadServing(span_model, vocab_file, do_lower_case=True, max_seq_length=SEQ,
                              doc_stride=STRIDE, max_query_length=QUERY, version_2=True,
                              null_score_diff_threshold=original["median_threshold"])
        outputs = serve(module.answer, examples)
        predictions = original["median_predictions"]
    nulls = 0
    for (qid, _, _), out in zip(examples, outputs):
        odds = original["null_odds"][qid]
        assert out["null_score_diff"] == pytest.approx(odds, abs=1e-4), qid
        best = best_non_null(original["nbest"][qid])
        best_score = best["start_logit"] + best["end_logit"]
        assert (out["answer"] == "") == (predictions[qid] == ""), qid
        if predictions[qid] == "":
            nulls += 1
            assert (out["start_char"], out["end_char"]) == (-1, -1)
            assert out["score"] == pytest.approx(odds + best_score, abs=1e-4)  # the null score
        else:
            assert normalize_answer(out["answer"]) == normalize_answer(predictions[qid]), qid
            assert out["score"] == pytest.approx(best_score, abs=1e-4)
    if threshold == "median":
        assert nulls == len(examples) // 2


@pytest.mark.integration
@pytest.mark.parametrize("version_2", [False, True], ids=["v1", "v2"])
def test_ties_are_broken_as_the_original_breaks_them(oracle_runs, exports, version_2):
    """With integer logits in [-3, 3], n-best boundaries, span scores and null scores tie all the
    time: the choice must still be the original's (first window, then its candidate order)."""
    original = oracle_runs["ties", version_2]
    examples = original["examples"]
    module = exports[version_2][0]
    windows = module.windows(tf.constant([q for _, q, _ in examples]),
                             tf.constant([c for _, _, c in examples]))
    start, end = tie_logits(5 + version_2, int(tf.size(windows.request)))
    outputs = module.decode(windows, tf.constant(start), tf.constant(end))
    outputs = {name: value.numpy().tolist() for name, value in outputs.items()}
    outputs["answer"] = [a.decode("utf-8") for a in outputs["answer"]]
    outputs = [dict(zip(outputs, row)) for row in zip(*outputs.values())]
    fallbacks = get_final_text_fallbacks(examples, outputs, original["predictions"])
    for (qid, _, context), out in zip(examples, outputs):
        prediction = original["predictions"][qid]
        if qid not in fallbacks:  # see the v1 test
            # The original joins whitespace words with single spaces; serve_text slices.
            assert original_spacing(out["answer"]) == prediction, qid
        if out["answer"]:
            assert context[out["start_char"]:out["end_char"]] == out["answer"]
        nbest = original["nbest"][qid]
        if version_2:
            assert out["null_score_diff"] == original["null_odds"][qid]
            best = best_non_null(nbest)
            null_score = original["null_odds"][qid] + best["start_logit"] + best["end_logit"]
            assert out["score"] == (null_score if prediction == "" else
                                    best["start_logit"] + best["end_logit"])
        else:
            assert out["score"] == nbest[0]["start_logit"] + nbest[0]["end_logit"]
    # Explained differences: U+00A0 inside a word (v1), "ɐ̯" with a combining mark (v2).
    assert all(cannot_align(words) for words in fallbacks.values()), fallbacks
    assert len(fallbacks) <= 3


@pytest.mark.integration
@pytest.mark.parametrize("version_2", [False, True], ids=["v1", "v2"])
def test_answers_are_slices_of_the_context(oracle, served, version_2):
    for (_, _, context), out in zip(oracle[version_2]["examples"], served[version_2]):
        if out["answer"]:
            assert context[out["start_char"]:out["end_char"]] == out["answer"]
        else:
            assert (out["start_char"], out["end_char"]) == (-1, -1)


FRESH_PROCESS = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)
examples = json.load(open(sys.argv[2]))
model = tf.saved_model.load(sys.argv[1])
out = model.signatures["serve_text"](question=tf.constant([q for q, _ in examples]),
                                     context=tf.constant([c for _, c in examples]))
default = model.signatures["serving_default"](question=tf.constant([q for q, _ in examples]),
                                              context=tf.constant([c for _, c in examples]))
print(json.dumps({"answer": [a.decode("utf-8") for a in out["answer"].numpy()],
                  "start_char": out["start_char"].numpy().tolist(),
                  "end_char": out["end_char"].numpy().tolist(),
                  "score": out["score"].numpy().tolist(),
                  "null_score_diff": out["null_score_diff"].numpy().tolist(),
                  "same_default": all(bool(tf.reduce_all(default[k] == out[k])) for k in out),
                  "modules": sorted(m for m in ("modeling", "data_gen", "keras_hub")
                                    if m in sys.modules)}))
"""


@pytest.mark.integration
def test_export_answers_the_same_in_a_fresh_process(oracle, served, exports, tmp_path):
    examples = oracle[True]["examples"] + [("empty", "Who?", "")]
    fresh = serve_texts(FRESH_PROCESS, exports[True][1], [[q, c] for _, q, c in examples],
                        tmp_path)
    assert fresh["modules"] == [] and fresh["same_default"]
    expected = served[True]
    assert fresh["answer"][:-1] == [out["answer"] for out in expected]
    assert fresh["start_char"][:-1] == [out["start_char"] for out in expected]
    assert fresh["end_char"][:-1] == [out["end_char"] for out in expected]
    np.testing.assert_allclose(fresh["score"][:-1], [out["score"] for out in expected], atol=1e-5)
    assert (fresh["answer"][-1], fresh["start_char"][-1], fresh["null_score_diff"][-1]) == (
        "", -1, float("inf"))
    assert (pathlib.Path(exports[True][1]) / "assets.extra" / "vocab.txt").is_file()


# ------------------------------------------------------------------ edge cases
@pytest.mark.integration  # builds the exports
@pytest.mark.parametrize("version_2", [False, True], ids=["v1", "v2"])
def test_contexts_without_tokens_answer_null(exports, version_2):
    module = exports[version_2][0]
    contexts = ["", " \t\n\u202f\u00a0\u3000 ", "\u200b\x00\ufffd", b"\xff\xfe"]
    out = module.answer(tf.constant(["Who won?"] * len(contexts)), tf.constant(contexts))
    assert out["answer"].numpy().tolist() == [b""] * len(contexts)
    assert out["start_char"].numpy().tolist() == [-1] * len(contexts)
    assert out["end_char"].numpy().tolist() == [-1] * len(contexts)
    assert out["score"].numpy().tolist() == [0.0] * len(contexts)
    if version_2:
        assert np.isposinf(out["null_score_diff"].numpy()).all()
    empty = module.answer(tf.constant([], tf.string), tf.constant([], tf.string))
    assert empty["answer"].shape == [0]


@pytest.mark.integration  # builds the exports
def test_long_question_is_cut_to_max_query_length(exports, vocab_file):
    module = exports[False][0]
    question = " ".join(f"word{i}" for i in range(200))
    context = "The quick brown fox jumps over the lazy dog. " * 20
    windows = module.windows(tf.constant([question]), tf.constant([context]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vocab_sanity.VocabularyWarning)
        python = FullTokenizer(vocab_file, do_lower_case=True)
    query_ids = python.convert_tokens_to_ids(python.tokenize(question))
    doc_ids = python.convert_tokens_to_ids(python.tokenize(context))
    assert len(query_ids) > QUERY
    cls, sep = python.vocab["[CLS]"], python.vocab["[SEP]"]
    room = SEQ - QUERY - 3
    ids = windows.inputs["input_word_ids"].numpy()
    assert ids[0].tolist() == [cls, *query_ids[:QUERY], sep, *doc_ids[:room], sep]
    # 200 context tokens in windows of 61 advancing by 32: starts 0, 32, ..., 160.
    assert len(doc_ids) == 200 and windows.counts.numpy().tolist() == [6]
    assert ids[-1].tolist() == [cls, *query_ids[:QUERY], sep, *doc_ids[160:], sep] + [0] * 21
    out = module.answer(tf.constant([question]), tf.constant([context]))
    answer, start, end = (out[k].numpy()[0] for k in ("answer", "start_char", "end_char"))
    assert context[start:end] == answer.decode("utf-8")


@pytest.mark.integration  # builds the exports
def test_unicode_spaces_and_marks_in_the_context(exports, tokenizers):
    """U+202F splits the original's words, U+00A0 and U+2009 only the tokenizer's; token spans
    are the Python tokenizer's, in code points, and never include a space."""
    module = exports[False][0]
    context = "Zo\u00eb Ba\u0308r\u202fwon\u00a0the 1995\u00a0Ren\u00e9\u2009Prize in K\u00f6ln."
    windows = module.windows(tf.constant(["Who won?"]), tf.constant([context]))
    starts, ends = windows.token_starts.to_list()[0], windows.token_ends.to_list()[0]
    assert (starts, ends) == tokenizers[True][0].tokenize_with_offsets(context)[1:]
    assert not any(char.isspace() for s, e in zip(starts, ends) for char in context[s:e])
    assert context[starts[1]:ends[1]] == "Ba\u0308r"  # the decomposed accent is inside
    out = module.answer(tf.constant(["Who won?", "Where?"]), tf.constant([context] * 2))
    for answer, start, end in zip(*(out[k].numpy() for k in ("answer", "start_char",
                                                              "end_char"))):
        assert context[start:end] == answer.decode("utf-8") or (start, end) == (-1, -1)


def test_invalid_settings_are_refused(span_model, vocab_file):
    from bert_tf2.tasks.squad.serving import SquadServing

    with pytest.raises(ValueError, match="max_query_length"):
        SquadServing(span_model, vocab_file, True, max_seq_length=67, max_query_length=64)
    with pytest.raises(ValueError, match="doc_stride"):
        SquadServing(span_model, vocab_file, True, max_seq_length=128, doc_stride=0)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        SquadServing(span_model, vocab_file, True, max_seq_length=384)


# ------------------------------------------------------------------ GraphTokenizer offsets
@pytest.fixture(scope="module")
def tokenizers(vocab_file):
    """`do_lower_case -> (FullTokenizer, GraphTokenizer)` on the uncased vocabulary."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vocab_sanity.VocabularyWarning)
        return {lower: (FullTokenizer(vocab_file, lower), GraphTokenizer(vocab_file, lower))
                for lower in (True, False)}


def squad_contexts(shared_data) -> list:
    articles = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text())["data"]
    return [paragraph["context"] for article in articles for paragraph in article["paragraphs"]]


def encode(texts) -> tf.Tensor:
    return tf.constant([t if isinstance(t, bytes) else t.encode("utf-8") for t in texts])


@pytest.mark.parametrize("do_lower_case", [True, False], ids=["lower", "cased"])
def test_offsets_are_the_python_spans_on_every_squad_context(tokenizers, shared_data,
                                                              do_lower_case):
    python, graph = tokenizers[do_lower_case]
    contexts = squad_contexts(shared_data)
    ids, starts, ends = graph.tokenize_with_offsets(encode(contexts), unit="UTF8_CHAR")
    assert ids.to_list() == graph(encode(contexts)).to_list()
    assert list(zip(starts.to_list(), ends.to_list())) == [
        python.tokenize_with_offsets(text)[1:] for text in contexts]


@pytest.mark.parametrize("do_lower_case", [True, False], ids=["lower", "cased"])
def test_offsets_are_the_python_spans_on_hostile_and_random_text(tokenizers, do_lower_case):
    """Accents (composed and not), final sigma, İ, CJK, Hangul, emoji, controls, U+1FEF, ..."""
    python, graph = tokenizers[do_lower_case]
    rng = random.Random(3)
    texts = ([case[1] for case in HOSTILE] + random_texts(3000, seed=21)
             + ["".join(rng.choice(random_texts(200, seed=5)) for _ in range(20))
                for _ in range(200)])
    ids, starts, ends = graph.tokenize_with_offsets(encode(texts), unit="UTF8_CHAR")
    assert ids.to_list() == graph(encode(texts)).to_list()
    assert list(zip(starts.to_list(), ends.to_list())) == [
        python.tokenize_with_offsets(text)[1:] for text in texts]


def test_byte_offsets_index_the_input_bytes(tokenizers):
    """Byte offsets point into the input as given, invalid UTF-8 included."""
    python, graph = tokenizers[True]
    texts = ["caf\u00e9 na\u0308ive \u4e2d\u6587 \U0001F600x", b"\xffab\xc3\xa9 \xed\xa0\x80xy"]
    _, starts, ends = graph.tokenize_with_offsets(encode(texts))
    _, char_starts, char_ends = graph.tokenize_with_offsets(encode(texts), unit="UTF8_CHAR")
    for text, s, e, cs, ce in zip(encode(texts).numpy(), starts.to_list(), ends.to_list(),
                                  char_starts.to_list(), char_ends.to_list()):
        decoded = text.decode("utf-8", "ignore")
        assert [text[a:b].decode("utf-8", "ignore") for a, b in zip(s, e)] == [
            decoded[a:b] for a, b in zip(cs, ce)]
    # "\xffab\xc3\xa9 \xed\xa0\x80xy": ab\xc3\xa9 at bytes 1-5, then x, ##y after 3 bad bytes
    assert list(zip(starts.to_list()[1], ends.to_list()[1])) == [(1, 5), (9, 10), (10, 11)]


def test_ascii_pieces_span_their_own_text(tokenizers, shared_data):
    """On ASCII text every piece, "##" aside, is its span lower-cased."""
    python, graph = tokenizers[True]
    contexts = [c for c in squad_contexts(shared_data) if c.isascii()][:400]
    assert len(contexts) == 400
    ids, starts, ends = graph.tokenize_with_offsets(encode(contexts))
    for text, row, s, e in zip(contexts, ids.to_list(), starts.to_list(), ends.to_list()):
        pieces = python.convert_ids_to_tokens(row)
        assert [text[a:b].lower() for a, b in zip(s, e)] == [
            piece.removeprefix("##") for piece in pieces]


def test_unknown_and_overlong_words_span_the_whole_word(tokenizers):
    _, graph = tokenizers[True]
    text = "ok x\U0001F600y " + "a" * 201 + " end"
    ids, starts, ends = graph.tokenize_with_offsets(tf.constant([text]), unit="UTF8_CHAR")
    spans = [text[s:e] for s, e in zip(starts.to_list()[0], ends.to_list()[0])]
    assert spans == ["ok", "x\U0001F600y", "a" * 201, "end"]
    assert ids.to_list()[0][1:3] == [graph.unk_id, graph.unk_id]
