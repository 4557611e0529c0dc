"""SQuAD reading, windowing and decoding against Google's own run_squad.py, run as an oracle.

The oracle is `bert-tensorflow==1.0.4` (the original scripts, installed by `make`), run in a
subprocess under `tensorflow.compat.v1` on real SQuAD articles. Its windows (tokens, maps,
max-context flags, ids, answer positions) must equal ours record for record, and, fed the same
logits, its `write_predictions` must give our predictions, n-best lists and null odds.
"""
import importlib.util
import json
import sys

import numpy as np
import pytest
import warm_python

from bert_tf2.data_gen.tokenization import FullTokenizer
from bert_tf2.tasks.squad import features as squad_data
from bert_tf2.tasks.squad import postprocess as squad_postprocess
from bert_tf2.tasks.squad.files import load_squad, make_v2, split_articles, write_json
from bert_tf2.tasks.squad.reader import read_squad_examples

if importlib.util.find_spec("bert") is None:
    pytest.skip("the oracle bert-tensorflow==1.0.4 (Google's original scripts) is not installed: "
                "pip install --no-deps bert-tensorflow==1.0.4", allow_module_level=True)

ORACLE = r"""
import collections, json, sys, types
import numpy as np
for name in ("bert.modeling", "bert.optimization"):  # TF1-only modules never used here
    sys.modules[name] = types.ModuleType(name)
from bert import run_squad, tokenization
args = json.loads(sys.argv[1])
run_squad.FLAGS(["oracle", f"--version_2_with_negative={args['version_2']}",
                 f"--null_score_diff_threshold={args['threshold']}"])
tokenizer = tokenization.FullTokenizer(args["vocab"], do_lower_case=True)
examples = run_squad.read_squad_examples(args["input"], is_training=args["is_training"])
features = []
run_squad.convert_examples_to_features(examples, tokenizer, args["max_seq_length"],
                                       args["doc_stride"], args["max_query_length"],
                                       args["is_training"], features.append)
out = {"examples": [[e.qas_id, e.doc_tokens, e.start_position, e.end_position,
                     e.is_impossible] for e in examples],
       "features": [[f.unique_id, f.example_index, f.doc_span_index, f.tokens,
                     {str(k): v for k, v in f.token_to_orig_map.items()},
                     {str(k): v for k, v in f.token_is_max_context.items()}, f.input_ids,
                     f.input_mask, f.segment_ids, f.start_position, f.end_position]
                    for f in features]}
if args.get("logits"):
    logits = np.load(args["logits"])
    Result = collections.namedtuple("Result", "unique_id start_logits end_logits")
    results = [Result(f.unique_id, [float(x) for x in logits["start"][i]],
                      [float(x) for x in logits["end"][i]]) for i, f in enumerate(features)]
    paths = [args["out"] + name for name in ("pred.json", "nbest.json", "null.json")]
    run_squad.write_predictions(examples, features, results, 20, 30, True, *paths)
with open(args["out"] + "features.json", "w") as f:
    json.dump(out, f)
"""


def run_oracle(tmp_path, input_file, vocab, settings, is_training, version_2=False,
               logits=None, threshold=0.0) -> dict:
    out = str(tmp_path / "oracle_")
    args = {"input": str(input_file), "vocab": vocab, "is_training": is_training,
            "version_2": version_2, "threshold": threshold, "out": out,
            "max_seq_length": settings.max_seq_length, "doc_stride": settings.doc_stride,
            "max_query_length": settings.max_query_length}
    if logits is not None:
        np.savez(tmp_path / "logits.npz", start=logits[0], end=logits[1])
        args["logits"] = str(tmp_path / "logits.npz")
    completed = warm_python.run([sys.executable, "-c", ORACLE, json.dumps(args)], timeout=900,
                                warm=True)
    assert completed.returncode == 0, completed.stderr[-3000:]
    with open(out + "features.json") as f:
        result = json.load(f)
    if logits is not None:
        for key, name in [("predictions", "pred.json"), ("nbest", "nbest.json"),
                          ("null_odds", "null.json")]:
            try:
                with open(out + name) as f:
                    result[key] = json.load(f)
            except FileNotFoundError:
                result[key] = {}
    return result


def our_features(input_file, tokenizer, settings, is_training, version_2=False):
    examples = read_squad_examples(str(input_file), is_training, version_2)
    return examples, list(squad_data.convert_examples(examples, tokenizer, settings,
                                                      is_training))


def assert_same_features(ours: list, original: list, tokenizer) -> None:
    assert len(ours) == len(original)
    for mine, (unique_id, example_index, span_index, tokens, to_orig, is_max, input_ids,
               input_mask, segment_ids, start, end) in zip(ours, original):
        assert mine["unique_ids"] == [unique_id]
        assert (mine["example_index"], mine["doc_span_index"]) == ([example_index], [span_index])
        assert mine["input_ids"] == input_ids
        assert mine["input_mask"] == input_mask and mine["segment_ids"] == segment_ids
        real = sum(input_mask)
        assert tokenizer.convert_ids_to_tokens(mine["input_ids"][:real]) == tokens
        assert {str(i): w for i, w in enumerate(mine["token_to_orig"]) if w >= 0} == to_orig
        assert {str(i): bool(mine["token_is_max_context"][int(i)]) for i in is_max} == is_max
        assert sum(mine["token_is_max_context"]) == sum(is_max.values())
        if start is not None:
            assert (mine["start_positions"], mine["end_positions"]) == ([start], [end])


@pytest.fixture(scope="module")
def vocab(minilm_dir) -> str:
    return str(minilm_dir / "vocab.txt")


@pytest.fixture(scope="module")
def tokenizer(vocab) -> FullTokenizer:
    return FullTokenizer(vocab, do_lower_case=True)


@pytest.fixture(scope="module")
def squad(shared_data) -> dict:
    return load_squad(shared_data / "squad" / "dev-v1.1.json")


def first_answers_only(dataset: dict) -> dict:
    """The original trains only on questions with exactly one answer."""
    for article in dataset["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["answers"] = qa["answers"][:1]
    return dataset


SMALL = squad_data.SquadSettings(max_seq_length=128, doc_stride=48, max_query_length=24)


@pytest.mark.integration
def test_training_windows_equal_the_originals(tmp_path, squad, vocab, tokenizer):
    """Four real articles (about 300 questions) at sequence 128, so most contexts need several
    windows and many windows miss the answer (start = end = 0)."""
    head, _ = split_articles(squad, 4)
    path = tmp_path / "train.json"
    write_json(path, first_answers_only(head))
    examples, ours = our_features(path, tokenizer, SMALL, is_training=True)
    original = run_oracle(tmp_path, path, vocab, SMALL, is_training=True)
    assert [[e.qas_id, e.doc_tokens, e.start_position, e.end_position, e.is_impossible]
            for e in examples] == original["examples"]
    assert_same_features(ours, original["features"], tokenizer)
    windows = len(ours) / len(examples)
    assert windows > 1.5, windows  # the case being tested: several windows per question
    outside = sum(f["start_positions"] == [0] for f in ours)
    assert 0 < outside < len(ours)


@pytest.mark.slow  # the original as an oracle over many documents; v1's windows in make test
def test_v2_training_windows_and_decoding_equal_the_originals(tmp_path, squad, vocab, tokenizer):
    """A SQuAD 2.0 set made from three articles (half its questions impossible): windows with
    their [CLS] targets, then predictions, n-best lists and null odds from the same random
    logits, at two null thresholds."""
    head, _ = split_articles(squad, 3)
    path = tmp_path / "train-v2.json"
    write_json(path, make_v2(first_answers_only(head), seed=7))
    examples, ours = our_features(path, tokenizer, SMALL, is_training=True, version_2=True)
    assert sum(e.is_impossible for e in examples) > 100
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, len(ours), SMALL.max_seq_length)).astype(np.float32)
    # Lift the max-context positions, so that every question has a valid non-null span: where
    # none survives, the original crashes (google-research/bert#211; see the test below).
    logits += 2.0 * np.array([f["token_is_max_context"] for f in ours], np.float32)
    logits[:, :, 0] += rng.uniform(0.0, 8.0, size=(2, len(ours)))  # so that some answers are null
    for threshold in (0.0, 1.5):
        original = run_oracle(tmp_path, path, vocab, SMALL, is_training=True, version_2=True,
                              logits=logits, threshold=threshold)
        assert_same_features(ours, original["features"], tokenizer)
        answers = decode(examples, ours, logits, tokenizer, version_2=True, threshold=threshold)
        assert_same_answers(answers, original)
        nulls = sum(text == "" for text in answers.predictions.values())
        assert 0 < nulls < len(examples)  # both decisions occur


def decode(examples, features, logits, tokenizer, version_2=False, threshold=0.0):
    arrays = {name: np.array([f[name] for f in features]) for name in features[0]}
    arrays = {name: value[:, 0] if value.shape[1] == 1 else value
              for name, value in arrays.items()}
    settings = squad_postprocess.DecodeSettings(version_2=version_2,
                                                null_score_diff_threshold=threshold)
    inv_vocab = {i: token for token, i in tokenizer.vocab.items()}
    return squad_postprocess.predict_answers(examples, arrays, logits[0], logits[1], inv_vocab,
                                             settings)


def assert_same_answers(answers, original) -> None:
    assert answers.predictions == original["predictions"]
    assert list(answers.nbest) == list(original["nbest"])
    for qid, entries in original["nbest"].items():
        mine = answers.nbest[qid]
        assert [e["text"] for e in mine] == [e["text"] for e in entries], qid
        np.testing.assert_allclose([e["probability"] for e in mine],
                                   [e["probability"] for e in entries], rtol=1e-9)
        np.testing.assert_allclose([e["start_logit"] for e in mine],
                                   [e["start_logit"] for e in entries], rtol=1e-9)
    assert list(answers.null_odds) == list(original["null_odds"])
    np.testing.assert_allclose(list(answers.null_odds.values()),
                               list(original["null_odds"].values()), rtol=1e-9, atol=1e-12)


@pytest.mark.integration
def test_evaluation_windows_and_decoding_equal_the_originals(tmp_path, squad, vocab, tokenizer):
    """The last 10 articles of dev-v1.1 (1,988 questions, the project's evaluation split) at the
    original's settings (384 / 128 / 64): windows, then predictions and n-best lists from
    random logits."""
    _, tail = split_articles(squad, 38)
    path = tmp_path / "eval.json"
    write_json(path, tail)
    settings = squad_data.SquadSettings()
    examples, ours = our_features(path, tokenizer, settings, is_training=False)
    assert len(examples) == 1988
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(2, len(ours), settings.max_seq_length)).astype(np.float32)
    original = run_oracle(tmp_path, path, vocab, settings, is_training=False, logits=logits)
    assert_same_features(ours, original["features"], tokenizer)
    answers = decode(examples, ours, logits, tokenizer)
    assert_same_answers(answers, original)


# ----------------------------------------------------------------------------------------------
# Inputs the original crashed on or mishandled


def write_squad(path, paragraphs: list, version: str = "1.1") -> str:
    write_json(path, {"version": version, "data": [{"title": "t", "paragraphs": paragraphs}]})
    return str(path)


def test_hard_inputs_do_not_crash(tmp_path, tokenizer):
    """An empty context, a question far over max_query_length, unicode whitespace inside the
    context (U+202F splits words as in the original; U+00A0 is a word break for the tokenizer
    only), and a training answer that is not in the context (skipped with a warning)."""
    context = "Paris\u202fis the capital\u00a0of France . "
    long_question = "which city " * 60
    paris = {"context": context, "qas": [
        {"id": "long", "question": long_question, "answers": [{"text": "Paris", "answer_start": 0}]},
        {"id": "missing", "question": "q", "answers": [{"text": "France", "answer_start": 1}]}]}
    path = write_squad(tmp_path / "hard.json", [
        {"context": "", "qas": [{"id": "empty", "question": "what?", "answers": []}]}, paris])
    examples = read_squad_examples(path, is_training=False)
    assert [e.qas_id for e in examples] == ["empty", "long", "missing"]
    assert examples[1].doc_tokens == ["Paris", "is", "the", "capital\u00a0of", "France", "."]
    features = list(squad_data.convert_examples(examples, tokenizer, SMALL, False))
    assert [f["example_index"][0] for f in features] == [0, 1, 2]
    empty, long = features[0], features[1]
    query = tokenizer.tokenize(long_question)[:SMALL.max_query_length]
    assert sum(empty["input_mask"]) == len(tokenizer.tokenize("what?")) + 3  # no context tokens
    assert sum(long["segment_ids"]) == len(tokenizer.tokenize(context)) + 1
    assert long["input_ids"][1:1 + len(query)] == tokenizer.convert_tokens_to_ids(query)
    logits = np.zeros((2, 3, SMALL.max_seq_length), np.float32)
    logits[:, 1, len(query) + 2] = 5.0  # the first context token: "paris"
    answers = decode(examples, features, logits, tokenizer, version_2=True)
    assert answers.predictions["empty"] == ""
    assert answers.predictions["long"] == "Paris"
    # Training: the answer "France" at character 1 is inside "Paris", so it is skipped.
    training = read_squad_examples(write_squad(tmp_path / "train.json", [paris]),
                                              is_training=True)
    assert [e.qas_id for e in training] == ["long"]


def test_bad_files_name_the_file_and_question(tmp_path):
    path = write_squad(tmp_path / "bad.json", [
        {"context": "short", "qas": [{"id": "q1", "question": "?",
                                      "answers": [{"text": "shorter", "answer_start": 3}]}]}])
    with pytest.raises(ValueError, match=r"bad.json: question q1: answer_start 3 \+ 7"):
        read_squad_examples(path, is_training=True)
    path = write_squad(tmp_path / "noanswer.json", [
        {"context": "text", "qas": [{"id": "q2", "question": "?", "answers": []}]}])
    with pytest.raises(ValueError, match="noanswer.json: question q2: no answer to train on"):
        read_squad_examples(path, is_training=True)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match="broken.json"):
        read_squad_examples(str(tmp_path / "broken.json"), is_training=False)


def test_records_round_trip(tmp_path, squad, tokenizer):
    head, _ = split_articles(squad, 1)
    path = tmp_path / "one.json"
    write_json(path, head)
    examples = read_squad_examples(str(path), is_training=True)
    features = list(squad_data.convert_examples(examples, tokenizer, SMALL, True))
    from bert_tf2.data_gen.records import ShardedRecordWriter

    records = str(tmp_path / "train.tf_record")
    with ShardedRecordWriter([records]) as writer:
        for record in squad_data.feature_records(examples, tokenizer, SMALL, True):
            writer.write(record)
    loaded = squad_data.load_features(records, SMALL.max_seq_length)
    for name in features[0]:
        expected = np.array([f[name] for f in features])
        np.testing.assert_array_equal(loaded[name], expected[:, 0] if expected.shape[1] == 1
                                      else expected)
