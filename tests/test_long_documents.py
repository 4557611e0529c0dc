"""Long documents in classification (`--doc_stride`): the windows by hand, the pooled logits against
a NumPy loop (and the graph's pooling against NumPy's), the SavedModel's in-graph windows against
the runner's on a random sweep, batches of whole documents and the document loss by hand
(`--window_loss=document`), and run_classifier end to end on long Reuters stories, served raw in a
fresh process."""
import json
import random

import numpy as np
import pytest
from conftest import read_results, read_tsv, run_script, serve_texts


def windows(tokens_a, tokens_b, max_seq_length, doc_stride):
    from bert_tf2.tasks.classification.features import document_windows

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
    from bert_tf2.tasks.classification.features import convert_document, convert_example
    from bert_tf2.tasks.classification.reader import InputExample

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
    from bert_tf2.tasks.classification.window_pooling import pool_windows

    rng = np.random.default_rng(1)
    owner = np.array([0, 0, 0, 1, 2, 2, 3, 3, 3, 3])
    logits = rng.normal(size=(10, 4)).astype(np.float32)
    for pooling, reduce in (("mean", np.mean), ("max", np.max)):
        expected = [[reduce([float(logits[r, c]) for r in range(10) if owner[r] == doc])
                     for c in range(4)] for doc in range(4)]
        np.testing.assert_allclose(pool_windows(logits, owner, 4, pooling), expected, rtol=1e-12)
    with pytest.raises(RuntimeError, match="examples without a window"):
        pool_windows(logits, owner, 5, "mean")


def test_graph_pooling_equals_numpy_pooling():
    from bert_tf2.tasks.classification.window_pooling import pool_window_logits, pool_windows

    rng = np.random.default_rng(2)
    owner = np.repeat(np.arange(6), [1, 4, 2, 1, 7, 3])
    logits = rng.normal(size=(len(owner), 5)).astype(np.float32)
    for pooling in ("mean", "max"):
        np.testing.assert_allclose(
            np.asarray(pool_window_logits(logits, owner.astype(np.int32), pooling)),
            pool_windows(logits, owner, 6, pooling), rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------ the document loss
def whole_document_features():
    """12 rows of 6 documents (1, 2 or 4 windows each); each row's first id is its row number."""
    owner = np.array([0, 0, 0, 1, 2, 2, 3, 4, 4, 4, 4, 5], np.int64)
    rows = len(owner)
    return {"input_ids": np.arange(rows * 4, dtype=np.int32).reshape(rows, 4) // 4,
            "input_mask": np.ones((rows, 4), np.int32),
            "segment_ids": np.zeros((rows, 4), np.int32),
            "label_ids": (owner * 10).astype(np.int32), "example_index": owner,
            "is_real_example": np.ones(rows, np.int32)}


def batches(dataset, count):
    return [{name: value.numpy() for name, value in batch.items()}
            for batch in dataset.take(count)]


def test_training_batches_hold_whole_documents():
    from bert_tf2.data_gen.datasets import Batching, in_memory_dataset

    features = whole_document_features()
    owner = features["example_index"]
    made = lambda seed, context=None: in_memory_dataset(  # noqa: E731
        features, 2, True, seed=seed, input_context=context, whole_examples=True,
        batching=Batching(trim=False))
    first = batches(made(3), 9)  # three epochs of 3 batches
    for epoch in range(3):
        seen = []
        for batch in first[3 * epoch: 3 * epoch + 3]:
            rows = batch["input_ids"][:, 0]
            documents = batch["example_index"]
            # Every row of each of its 2 documents, in row order, slot = the document's place.
            assert len(set(documents)) == 2
            for slot, document in enumerate(dict.fromkeys(documents)):
                assert rows[batch["example_slot"] == slot].tolist() == np.flatnonzero(
                    owner == document).tolist()
            assert batch["example_slot"].tolist() == sorted(batch["example_slot"].tolist())
            assert (batch["label_ids"] == documents * 10).all()
            seen += list(dict.fromkeys(documents))
        assert sorted(seen) == list(range(6))  # each document once per epoch
    orders = [[list(dict.fromkeys(b["example_index"])) for b in first[e * 3: e * 3 + 3]]
              for e in range(3)]
    assert orders[0] != orders[1] or orders[1] != orders[2]  # a fresh permutation each epoch
    again = batches(made(3), 9)
    assert all((a["input_ids"] == b["input_ids"]).all() for a, b in zip(first, again))
    # A resumed run rebuilds the pipeline and skips the batches it used: the same stream.
    resumed = batches(made(3).skip(4), 5)
    assert all((a["input_ids"] == b["input_ids"]).all() for a, b in zip(first[4:], resumed))
    other = batches(made(4), 3)
    assert any(a["input_ids"].shape != b["input_ids"].shape or (a["input_ids"] != b[
        "input_ids"]).any() for a, b in zip(first, other))


def test_whole_documents_need_consecutive_rows_and_a_full_batch():
    from bert_tf2.data_gen.datasets import Batching, in_memory_dataset
    from bert_tf2.data_gen.errors import DataError

    features = whole_document_features()
    with pytest.raises(DataError, match="6 training examples are fewer than one batch of 8"):
        in_memory_dataset(features, 8, True, whole_examples=True, batching=Batching(trim=False))
    shuffled = dict(features, example_index=features["example_index"][::-1].copy())
    with pytest.raises(ValueError, match="consecutive"):
        in_memory_dataset(shuffled, 2, True, whole_examples=True, batching=Batching(trim=False))


class RowLogits:
    """A stand-in model: row r's logits are `table[first input id of r]`."""

    def __init__(self, table):
        self.table = np.asarray(table, np.float32)

    def __call__(self, inputs, training=False):
        from keras import ops

        return {"logits": ops.take(self.table, inputs["input_word_ids"][:, 0], axis=0)}


def document_task(pooling, multi_label):
    from bert_tf2.tasks.classification.task import ClassificationTask

    task = ClassificationTask("multilabel" if multi_label else "mrpc", "unused", doc_stride=8,
                              window_pooling=pooling, window_loss="document")
    task.multi_label = multi_label
    return task


@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_document_loss_by_hand_multi_label(pooling):
    """Rows 0-3 are document A's windows (labels 1, 0, 1), rows 4-5 document B's (0, 1, 0): the
    loss is the mean binary cross-entropy of the two pooled rows, worked out here by hand."""
    table = np.array([[2.0, -1.0, 0.5], [-3.0, 0.0, 1.5], [1.0, 1.0, -2.0], [0.0, -4.0, 3.0],
                      [-1.0, 2.5, 0.0], [-2.0, 0.5, -1.0]])
    batch = {"input_ids": np.arange(6, dtype=np.int32)[:, None].repeat(4, 1),
             "input_mask": np.ones((6, 4), np.int32), "segment_ids": np.zeros((6, 4), np.int32),
             "label_ids": np.array([[1, 0, 1]] * 4 + [[0, 1, 0]] * 2, np.int32),
             "example_slot": np.array([0, 0, 0, 0, 1, 1], np.int32)}
    if pooling == "mean":
        a = [(2.0 - 3.0 + 1.0 + 0.0) / 4, (-1.0 + 0.0 + 1.0 - 4.0) / 4, (0.5 + 1.5 - 2.0 + 3.0) / 4]
        b = [(-1.0 - 2.0) / 2, (2.5 + 0.5) / 2, (0.0 - 1.0) / 2]
    else:
        a, b = [2.0, 1.0, 3.0], [-1.0, 2.5, 0.0]
    bce = lambda x, z: np.log(1 + np.exp(-x)) if z else np.log(1 + np.exp(x))  # noqa: E731
    expected = np.mean([bce(x, z) for x, z in zip(a + b, [1, 0, 1, 0, 1, 0])])
    loss, metrics = document_task(pooling, True).loss_and_metrics(RowLogits(table), batch, True)
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    hits, documents = (float(v) for v in metrics["subset_accuracy"])
    # mean: A (0.0, -1.0, 0.75) -> {c}, not {a, c}; B (-1.5, 1.5, -0.5) -> {b}: one right of two.
    # max: A (2, 1, 3) -> {a, b, c}; B (-1, 2.5, 0) -> {b}: one right.
    assert (hits, documents) == (1.0, 2.0)


def test_document_loss_by_hand_single_label():
    table = np.array([[1.0, 0.0], [0.0, 3.0], [2.0, -2.0]])
    batch = {"input_ids": np.array([[0], [1], [2]], np.int32), "input_mask": np.ones((3, 1),
                                                                                   np.int32),
             "segment_ids": np.zeros((3, 1), np.int32), "label_ids": np.array([1, 1, 0], np.int32),
             "example_slot": np.array([0, 0, 1], np.int32)}
    pooled = [[0.5, 1.5], [2.0, -2.0]]  # mean of rows 0-1; row 2
    expected = np.mean([np.log(np.exp(0.5) + np.exp(1.5)) - 1.5,
                        np.log(np.exp(2.0) + np.exp(-2.0)) - 2.0])
    loss, metrics = document_task("mean", False).loss_and_metrics(RowLogits(table), batch, True)
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert [float(v) for v in metrics["accuracy"]] == [2.0, 2.0]
    assert np.argmax(pooled, -1).tolist() == [1, 0]


def test_served_windows_are_the_runner_s(vocab_file, tokenizer):
    """A sweep of single texts and pairs (empty, short, long on either side) at several row
    lengths and strides: the graph's rows equal `convert_document`'s, in order."""
    import tensorflow as tf

    from bert_tf2.tasks.classification.features import convert_document
    from bert_tf2.tasks.classification.reader import InputExample
    from bert_tf2.tasks.classification.serving import ClassifierServing

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
                     f"--export_dir={root / 'export'}", "--export_litert=none")
    return {"root": root, "data": data, "out": out, "flags": flags, "log": run.stderr}



@pytest.mark.integration
def test_runner_trains_on_windows_and_answers_once_per_document(long_run, tokenizer):
    from bert_tf2.data_gen.windows import fixed_stride_spans
    from bert_tf2.tasks.classification.features import load_features

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


@pytest.mark.integration
def test_document_loss_trains_on_whole_documents_end_to_end(long_run, tmp_path):
    """--window_loss=document: an epoch is 160 documents in batches of 16 (10 steps, each all the
    windows of its 16 documents), and every file is still one line per document."""
    out = tmp_path / "out"
    flags = [f for f in long_run["flags"] if not f.startswith("--output_dir")]
    run = run_script("run_classifier.py", *flags, f"--output_dir={out}", "--do_train",
                     "--do_eval", "--window_loss=document", "--window_pooling=max")
    assert "160 training examples in" in run.stderr and "10 steps" in run.stderr
    assert "step 10/10" in run.stderr
    assert len(read_tsv(out / "eval_predictions.tsv")) == 41
    ours = read_results(out / "eval_results.txt")
    assert ours["eval_main"] == ours["eval_micro_f1"]
    identity = json.loads((out / "run_config.json").read_text())["identity"]
    assert (identity["window_loss"], identity["window_pooling"]) == ("document", "max")
    # Trained for max pooling: predicting with the mean, or as window-trained, is one line.
    for wrong, message in ((["--window_loss=document", "--window_pooling=mean"],
                            "window_pooling was 'max', now 'mean'"),
                           ([], "window_loss was 'document', now 'window'")):
        refused = run_script("run_classifier.py", *flags, f"--output_dir={out}", "--do_predict",
                             *wrong, check=False)
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
        assert message in refused.stderr.strip().splitlines()[-1]


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


@pytest.mark.integration
def test_saved_model_windows_raw_documents_as_the_runner(long_run, tmp_path):
    texts = [json.loads(x)["text"] for x in (long_run["data"] / "test.jsonl").open()]
    served = serve_texts(SERVE, str(long_run["root"] / "export"), texts, tmp_path)
    assert served["modules"] == []
    rows = read_tsv(long_run["out"] / "test_predictions.tsv")[1:]
    np.testing.assert_allclose(served["probabilities"], [[float(v) for v in row[2:]]
                                                         for row in rows], atol=2e-5)
    assert served["labels"] == [row[1] for row in rows]
    assert served["long"] == 1  # 24 stories in one text: one answer


@pytest.mark.integration
def test_max_pooling_rescored_from_the_same_weights(long_run, tmp_path):
    """An evaluation-only run with --window_pooling=max on the trained folder: each document's
    probabilities are the sigmoid of the maximum of its windows' logits, which the mean-pooled
    run's weights give (checked through the served windows of the export)."""
    import shutil

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the export's tokenizer ops, when run on its own)

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
    from bert_tf2.tasks.classification.features import load_features

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


@pytest.mark.integration
@pytest.mark.parametrize("flag,message", [
    ("--doc_stride=0", "--doc_stride=0: at least 1"),
    ("--doc_stride=2 --max_seq_length=3", "--max_seq_length=3 with --doc_stride: at least 4"),
    ("--window_pooling=max", "--window_pooling and --max_windows_per_document apply to windows: "
                             "add --doc_stride"),
    ("--max_windows_per_document=2", "apply to windows: add --doc_stride"),
    ("--window_loss=document", "--window_loss=document applies to windows: add --doc_stride"),
    ("--doc_stride=32 --window_loss=document --pack_examples",
     "--window_loss=document cannot be combined with --pack_examples"),
    ("--doc_stride=32 --window_loss=document --num_accumulation_steps=2",
     "or --num_accumulation_steps"),
])
def test_window_flags_are_checked_in_one_line(long_run, tmp_path, flag, message):
    flags = [f for f in long_run["flags"] if not f.startswith(("--output_dir", "--doc_stride"))]
    result = run_script("run_classifier.py", *flags, f"--output_dir={tmp_path / 'o'}",
                        "--do_train", *flag.split(), check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert message in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "o").exists()
