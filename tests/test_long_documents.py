"""Long documents in classification (`--doc_stride`): the windows by hand, the pooled logits against
a NumPy loop, the SavedModel's in-graph windows against the runner's on a random sweep, and
run_classifier end to end on long Reuters stories, served raw in a fresh process."""
import json
import random

import numpy as np
import pytest

from tests.conftest import read_results, read_tsv, run_script, serve_texts


def windows(tokens_a, tokens_b, max_seq_length, doc_stride):
    from tasks.classification.features import document_windows

    return document_windows(list(tokens_a), None if tokens_b is None else list(tokens_b),
                            max_seq_length, doc_stride)


def test_single_text_windows_by_hand():
    text = "abcdefghij"  # ten tokens
    # Rows of 8: [CLS] + 6 tokens + [SEP]; stride 3: starts 0, 3, 6 (6 + 6 reaches the end).
    assert windows(text, None, 8, 3) == [(list("abcdef"), None), (list("defghi"), None),
                                        (list("ghij"), None)]
    # A stride longer than a window: no overlap (the original run_squad's min(length, stride)).
    assert windows(text, None, 8, 100) == [(list("abcdef"), None), (list("ghij"), None)]
    # What fits is one row, as the original packs it; so is a text without tokens.
    assert windows("abc", None, 8, 3) == [(list("abc"), None)]
    assert windows("", None, 8, 3) == [([], None)]
    assert windows("abc", [], 8, 3) == [(list("abc"), None)]  # an empty B: a single text


def test_pair_windows_by_hand():
    # Rows of 12 hold 9 tokens of A and B. A 3 tokens, B 12: windows over B (the longer), A whole
    # in each; room 9 - 3 = 6, stride 4: B starts 0, 4, 8 (8 + 6 > 12).
    assert windows("xyz", "abcdefghijkl", 12, 4) == [
        (list("xyz"), list("abcdef")), (list("xyz"), list("efghij")),
        (list("xyz"), list("ijkl"))]
    # The longer is A: its windows stay first in the row.
    assert windows("abcdefghijkl", "xyz", 12, 4) == [
        (list("abcdef"), list("xyz")), (list("efghij"), list("xyz")),
        (list("ijkl"), list("xyz"))]
    # Both longer than half the room: the shorter keeps its first 9 // 2 = 4 tokens; windows of
    # 5 over the longer (B on a tie), stride 4.
    assert windows("abcdef", "uvwxyz", 12, 4) == [
        (list("abcd"), list("uvwxy")), (list("abcd"), list("yz"))]
    # A pair that fits is the original's one row, untrimmed.
    assert windows("abcd", "uvwxy", 12, 4) == [(list("abcd"), list("uvwxy"))]


def test_a_document_s_rows_carry_its_labels_and_index(tokenizer):
    from tasks.classification.features import convert_document, convert_example
    from tasks.classification.reader import InputExample

    words = " ".join(["the"] * 25)
    example = InputExample("d-0", words, None, ("acq", "earn"), "0")
    rows = convert_document(example, 7, {"acq": 0, "corn": 1, "earn": 2}, 16, tokenizer,
                            multi_label=True, doc_stride=10)
    # 25 tokens, 14 a row, stride 10: starts 0, 10, 20.
    assert [sum(row["input_mask"]) - 2 for row in rows] == [14, 14, 5]
    assert all(row["label_ids"] == [1.0, 0.0, 1.0] and row["example_index"] == [7]
               for row in rows)
    assert len(convert_document(example, 7, {"acq": 0, "corn": 1, "earn": 2}, 16, tokenizer,
                                multi_label=True, doc_stride=10, max_windows=2)) == 2
    short = InputExample("d-1", "a short one", "and its pair", "1", "1")
    assert convert_document(short, 0, {"0": 0, "1": 1}, 16, tokenizer, False, 10) == [
        convert_example(short, 0, {"0": 0, "1": 1}, 16, tokenizer)]


def test_pooled_logits_against_a_loop():
    from tasks.classification.task import pool_windows

    rng = np.random.default_rng(1)
    owner = np.array([0, 0, 0, 1, 2, 2, 3, 3, 3, 3])
    logits = rng.normal(size=(10, 4)).astype(np.float32)
    for pooling, reduce in (("mean", np.mean), ("max", np.max)):
        expected = [[reduce([float(logits[r, c]) for r in range(10) if owner[r] == doc])
                     for c in range(4)] for doc in range(4)]
        np.testing.assert_allclose(pool_windows(logits, owner, 4, pooling), expected, rtol=1e-12)
    with pytest.raises(RuntimeError, match="examples without a window"):
        pool_windows(logits, owner, 5, "mean")


def test_served_windows_are_the_runner_s(vocab_file, tokenizer):
    """A sweep of single texts and pairs (empty, short, long on either side) at several row
    lengths and strides: the graph's rows equal `convert_document`'s, in order."""
    import tensorflow as tf

    from tasks.classification.features import convert_document
    from tasks.classification.reader import InputExample
    from tasks.classification.serving import ClassifierServing

    words = ["the", "cat", "sat", "on", "a", "mat", "unaffable", "tokenization", "1987"]
    rng = random.Random(5)

    def text(n):
        return " ".join(rng.choice(words) for _ in range(n))

    for max_seq_length, stride, pair in [(16, 5, False), (16, 5, True), (12, 3, True),
                                         (20, 40, True), (10, 1, False)]:
        serving = ClassifierServing(None, str(vocab_file), True, max_seq_length, ["0", "1"],
                                    pair=pair, doc_stride=stride)
        lengths = [0, 1, 3, 7, 15, 30]
        cases = [(text(a), text(b) if pair else None) for a in lengths
                 for b in (lengths if pair else [0])]
        inputs, request = serving.windows(tf.constant([a for a, _ in cases]),
                                          tf.constant([b for _, b in cases]) if pair else None)
        expected = []
        for i, (a, b) in enumerate(cases):
            expected += [(i, row) for row in convert_document(
                InputExample("x", a, b, None, "x"), i, {"0": 0, "1": 1}, max_seq_length,
                tokenizer, False, stride)]
        assert request.numpy().tolist() == [i for i, _ in expected]
        width = inputs["input_word_ids"].shape[1]
        for name, ours in (("input_word_ids", "input_ids"), ("input_mask", "input_mask"),
                           ("input_type_ids", "segment_ids")):
            np.testing.assert_array_equal(
                inputs[name].numpy(), [row[ours][:width] for _, row in expected],
                err_msg=f"{name} at max_seq_length={max_seq_length}, stride={stride}")
            assert all(not any(row[ours][width:]) for _, row in expected)


# ------------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def long_run(tmp_path_factory, shared_data, tiny_checkpoint):
    """Reuters stories of 60+ words at rows of 64 (most need several windows)."""
    root = tmp_path_factory.mktemp("long")
    data = root / "data"
    data.mkdir()
    source = shared_data / "reuters21578"
    for split, count in (("train", 160), ("dev", 40), ("test", 24)):
        lines = [line for line in (source / f"{split}.jsonl").read_text().splitlines()
                 if len(json.loads(line)["text"].split()) >= 60][:count]
        (data / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    (data / "labels.txt").write_text((source / "labels.txt").read_text())
    out = root / "out"
    flags = ["--task_name=multilabel", f"--data_dir={data}", f"--output_dir={out}",
             f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}", "--max_seq_length=64",
             "--train_batch_size=16", "--num_train_epochs=1", "--learning_rate=1e-3",
             "--eval_batch_size=16", "--doc_stride=32", "--threshold=0.2"]
    run = run_script("run_classifier.py", *flags, "--do_train", "--do_eval", "--do_predict",
                     f"--export_dir={root / 'export'}")
    return {"root": root, "data": data, "out": out, "flags": flags, "log": run.stderr}



def test_runner_trains_on_windows_and_answers_once_per_document(long_run, tokenizer):
    from data_gen.windows import fixed_stride_spans
    from tasks.classification.features import load_features

    out, data = long_run["out"], long_run["data"]
    texts = {split: [json.loads(x)["text"] for x in (data / f"{split}.jsonl").open()]
             for split in ("train", "dev", "test")}
    # Each document's rows, counted from its WordPieces: rows of 62 tokens, stride 32.
    rows = {split: [len(fixed_stride_spans(len(tokenizer.tokenize(t)), 62, 32)) for t in docs]
            for split, docs in texts.items()}
    assert f"160 training examples in {sum(rows['train'])} windows" in long_run["log"]
    assert f"dev: 40 examples in {sum(rows['dev'])} windows" in long_run["log"]
    assert sum(rows["dev"]) > 2 * 40
    dev = load_features(str(out / "dev.tf_record"), 64, regression=False, multi_label_size=90)
    assert np.bincount(dev["example_index"]).tolist() == rows["dev"]
    # One line per document in every file, in input order.
    assert len(read_tsv(out / "eval_predictions.tsv")) == 41
    assert np.loadtxt(out / "test_results.tsv", ndmin=2).shape == (24, 90)
    results = read_results(out / "eval_results.txt")
    assert results["eval_main"] == results["eval_micro_f1"]


SERVE = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401
model = tf.saved_model.load(sys.argv[1])
texts = json.load(open(sys.argv[2]))
out = model.signatures["serve_text"](text_a=tf.constant(texts))
long = model.signatures["serve_text"](text_a=tf.constant([" ".join(texts * 4)]))
print(json.dumps({"probabilities": out["probabilities"].numpy().tolist(),
                  "labels": [x.decode() for x in out["labels"].numpy()],
                  "long": long["probabilities"].numpy().shape[0],
                  "modules": sorted(m for m in ("modeling", "data_gen") if m in sys.modules)}))
"""


def test_saved_model_windows_raw_documents_as_the_runner(long_run, tmp_path):
    texts = [json.loads(x)["text"] for x in (long_run["data"] / "test.jsonl").open()]
    served = serve_texts(SERVE, str(long_run["root"] / "export"), texts, tmp_path)
    assert served["modules"] == []
    rows = read_tsv(long_run["out"] / "test_predictions.tsv")[1:]
    np.testing.assert_allclose(served["probabilities"], [[float(v) for v in row[2:]]
                                                         for row in rows], atol=2e-5)
    assert served["labels"] == [row[1] for row in rows]
    assert served["long"] == 1  # 24 stories in one text: one answer


def test_max_pooling_rescored_from_the_same_weights(long_run, tmp_path):
    """An evaluation-only run with --window_pooling=max on the trained folder: each document's
    probabilities are the sigmoid of the maximum of its windows' logits, which the mean-pooled
    run's weights give (checked through the served windows of the export)."""
    import shutil

    import tensorflow as tf

    copy = tmp_path / "out"
    shutil.copytree(long_run["out"], copy)
    flags = [f for f in long_run["flags"] if not f.startswith("--output_dir")]
    run_script("run_classifier.py", *flags, f"--output_dir={copy}", "--do_eval",
               "--window_pooling=max")
    rows = read_tsv(copy / "eval_predictions.tsv")[1:]
    mean_rows = read_tsv(long_run["out"] / "eval_predictions.tsv")[1:]
    texts = [json.loads(x)["text"] for x in (long_run["data"] / "dev.jsonl").open()]
    model = tf.saved_model.load(str(long_run["root"] / "export"))
    serving = model.signatures["serve_token_ids"]
    from tasks.classification.features import load_features

    features = load_features(str(long_run["out"] / "dev.tf_record"), 64, regression=False,
                             multi_label_size=90)
    logits = serving(input_word_ids=tf.constant(features["input_ids"]),
                     input_mask=tf.constant(features["input_mask"]),
                     input_type_ids=tf.constant(features["segment_ids"]))["logits"].numpy()
    owner = features["example_index"]
    by_max = np.array([logits[owner == doc].max(0) for doc in range(len(texts))])
    by_mean = np.array([logits[owner == doc].mean(0) for doc in range(len(texts))])
    sigmoid = lambda x: 1 / (1 + np.exp(-x.astype(np.float64)))  # noqa: E731
    np.testing.assert_allclose([[float(v) for v in row[2:]] for row in rows], sigmoid(by_max),
                               atol=2e-6)
    np.testing.assert_allclose([[float(v) for v in row[2:]] for row in mean_rows],
                               sigmoid(by_mean), atol=2e-6)
    assert not np.allclose(by_max, by_mean)


@pytest.mark.parametrize("flag,message", [
    ("--doc_stride=0", "--doc_stride=0: at least 1"),
    ("--window_pooling=max", "--window_pooling and --max_windows_per_document apply to windows: "
                             "add --doc_stride"),
    ("--max_windows_per_document=2", "apply to windows: add --doc_stride"),
])
def test_window_flags_are_checked_in_one_line(long_run, tmp_path, flag, message):
    flags = [f for f in long_run["flags"] if not f.startswith(("--output_dir", "--doc_stride"))]
    result = run_script("run_classifier.py", *flags, f"--output_dir={tmp_path / 'o'}",
                        "--do_train", flag, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert message in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "o").exists()
