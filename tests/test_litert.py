"""The fast serving path (engine.litert, inference.litert_runtime, the tasks' litert_serving.py): a
runner's export gives a LiteRT file whose answers to raw strings are the SavedModel's (float32:
to round-off; int8: the same labels on a held-out slice), whatever the lengths and batch sizes,
one interpreter resized to each shape (a lone row after idle on one thread); mistakes are one
line. Classifiers here and multiple choice
and embeddings at the end; NER and SQuAD in their runners' tests."""
import json
import subprocess
import sys

import numpy as np
import pytest
import reference_runs
from conftest import REPO, run_script, served

DOCSTRINGS = REPO / "examples" / "docstring_topics"


def read_tsv(path):
    import csv
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


@pytest.fixture(scope="module")
def single_export(tmp_path_factory, tiny_checkpoint):
    """The docstring topics (5 labels, single sentences), a tiny BERT trained a little."""
    out = tmp_path_factory.mktemp("topics")
    run_script("run_classifier.py", "--task_name=generic", f"--data_dir={DOCSTRINGS}",
               "--text_a_column=sentence", "--label_column=label", "--id_column=id",
               f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}", f"--output_dir={out}",
               "--do_train", "--num_train_steps=30", "--learning_rate=2e-3",
               "--max_seq_length=64", f"--export_dir={out / 'serving'}")
    run_script("export_litert.py", f"--saved_model={out / 'serving'}", "--quantization=float32")
    return out / "serving"


@pytest.mark.integration
def test_export_writes_int8_and_its_description(single_export):
    from bert_tf2.inference.litert_layout import read_description

    assert sorted(p.name for p in (single_export / "litert").iterdir()) == [
        "float32.tflite", "int8.tflite", "serving.json"]
    description = json.loads((single_export / "litert" / "serving.json").read_text())
    assert description == {**read_description(str(single_export)),
                           "outputs": description["outputs"]}
    assert description["labels"] == ["files", "math", "network", "text", "time"]
    assert sorted(description["outputs"].values()) == ["label_id", "logits", "probabilities"]
    # int8 dense kernels: a quarter of the float32 file, give or take the float parts.
    int8 = (single_export / "litert" / "int8.tflite").stat().st_size
    assert int8 < 0.4 * (single_export / "litert" / "float32.tflite").stat().st_size


@pytest.mark.integration
def test_float32_file_answers_raw_text_as_the_savedmodel(single_export):
    from bert_tf2.tasks.classification.litert_serving import LiteRTClassifier

    dev = [row[2] for row in read_tsv(DOCSTRINGS / "dev.tsv")[1:]]
    dev += ["", "   ", "Ünïcödé àccents, CJK 中文 and an emoji 🙂 too", "x " * 200]
    expected = served(single_export, text_a=dev)
    fast = LiteRTClassifier.load(str(single_export), "float32")
    for got in (fast(dev), {k: np.concatenate([fast([t])[k] for t in dev]) for k in
                            ("logits", "probabilities", "label_id")}):  # whole and one by one
        np.testing.assert_allclose(got["probabilities"], expected["probabilities"], atol=2e-5)
        np.testing.assert_array_equal(got["label_id"], expected["label_id"])
    labels = fast(dev)["label"]
    assert labels == [label.decode() for label in expected["label"]]
    # The same ids as the runner's conversion, row by row.
    from bert_tf2.data_gen.tokenization import FullTokenizer
    tokenizer = FullTokenizer(single_export / "assets.extra" / "vocab.txt")
    inputs = fast.inputs(dev[:3])
    for row, text in zip(inputs["input_word_ids"], dev[:3]):
        ids = tokenizer.convert_tokens_to_ids(["[CLS]", *tokenizer.tokenize(text)[:62], "[SEP]"])
        assert row[:len(ids)].tolist() == ids and not row[len(ids):].any()


@pytest.mark.integration
def test_int8_file_agrees_with_float32_on_held_out_sentences(single_export):
    from bert_tf2.tasks.classification.litert_serving import LiteRTClassifier

    dev = [row[2] for row in read_tsv(DOCSTRINGS / "dev.tsv")[1:]]
    float32 = LiteRTClassifier.load(str(single_export), "float32")(dev)
    int8 = LiteRTClassifier.load(str(single_export))(dev)  # int8 is the default
    assert int8["label_id"].tolist() == float32["label_id"].tolist()
    assert np.max(np.abs(int8["probabilities"] - float32["probabilities"])) < 0.02
    assert 0 < np.max(np.abs(int8["logits"] - float32["logits"]))  # it is int8


@pytest.mark.integration
def test_pairs_and_an_empty_second_text_as_the_savedmodel(pair_export):
    from bert_tf2.tasks.classification.litert_serving import LiteRTClassifier

    export, data = pair_export
    rows = read_tsv(data / "dev.tsv")[1:]
    a, b = [r[3] for r in rows], [r[4] for r in rows]
    b[0] = b[1] = ""  # a single-text example, as serve_text makes it
    b[2] = "   "
    expected = served(export, text_a=a, text_b=b)
    got = LiteRTClassifier.load(str(export))(a, b)  # only float32 was written
    np.testing.assert_allclose(got["probabilities"], expected["probabilities"], atol=2e-5)
    assert got["label"] == [label.decode() for label in expected["label"]]


@pytest.mark.integration
def test_one_interpreter_answers_every_shape_as_a_row_alone(pair_export):
    from bert_tf2.tasks.classification.litert_serving import LiteRTClassifier

    export, _ = pair_export
    fast = LiteRTClassifier.load(str(export), group_rows=4)
    fast.model.warm_up((1, 2, 4))
    interpreter = fast.model.interpreter
    for length in range(1, 49):  # every length, as one row and as a batch of three
        ids = np.full((1, length), 1000, np.int32)
        one = fast.model(ids, np.ones_like(ids), np.zeros_like(ids))["logits"]
        three = fast.model(np.repeat(ids, 3, 0), np.ones((3, length), np.int32),
                           np.zeros((3, length), np.int32))["logits"]
        np.testing.assert_allclose(three, np.repeat(one, 3, 0), atol=1e-5)
    resizes = interpreter.resizes
    fast.model(ids, np.ones_like(ids), np.zeros_like(ids))  # the shape of the call before
    fast.model(ids, np.ones_like(ids), np.zeros_like(ids))
    assert interpreter.resizes == resizes + 1  # resized once, then run as it is
    assert fast.model(ids[:0], ids[:0], ids[:0])["logits"].shape == (0, 2)
    big = fast.model(np.full((70, 20), 1000, np.int32), np.ones((70, 20), np.int32),
                     np.zeros((70, 20), np.int32))["logits"]  # cut into groups of 4
    assert big.shape == (70, 2)
    np.testing.assert_allclose(big, np.repeat(big[:1], 70, 0), atol=1e-5)
    # A batch of mixed lengths is sorted into groups of similar rows and put back in order.
    lengths = np.random.default_rng(0).integers(2, 49, 23)
    mask = (np.arange(48)[None, :] < lengths[:, None]).astype(np.int32)
    ids = np.where(mask == 1, 1000 + np.arange(48)[None, :], 0).astype(np.int32)
    batch = fast.model(ids, mask, np.zeros_like(ids))["logits"]
    for row in range(23):
        one = fast.model(ids[row:row + 1, :lengths[row]], mask[row:row + 1, :lengths[row]],
                         np.zeros((1, lengths[row]), np.int32))["logits"]
        np.testing.assert_allclose(batch[row], one[0], atol=1e-5)
    assert fast.model.interpreter is interpreter


def _partitions(count):
    """Every way of cutting `count` rows into runs of neighbours, as the end of each run."""
    import itertools

    for cuts in itertools.product((False, True), repeat=count - 1):
        yield [i + 1 for i, cut in enumerate(cuts) if cut] + [count]


def test_cut_points_find_the_least_cost_groups_of_every_partition():
    from bert_tf2.inference.litert_runtime import GroupCost, cut_points

    rng = np.random.default_rng(3)
    for trial in range(200):
        count = int(rng.integers(1, 9))
        lengths = sorted(int(n) for n in rng.integers(1, 129, count))
        cost = GroupCost(float(rng.uniform(0, 40)), float(rng.uniform(64, 2000)))
        max_tokens = int(rng.choice([128, 256, 1024]))

        def total(ends):
            starts = [0, *ends[:-1]]
            if any(end - start > 1 and (end - start) * lengths[end - 1] > max_tokens
                   for start, end in zip(starts, ends)):
                return float("inf")
            return sum(cost(end - start, lengths[end - 1]) for start, end in zip(starts, ends))

        ends = cut_points(lengths, cost, max_tokens)
        assert ends[-1] == count and ends == sorted(set(ends))
        assert total(ends) == pytest.approx(min(map(total, _partitions(count))), rel=1e-12)
    # Rows of one length run together up to the cap; a wide spread is cut.
    assert cut_points([20] * 16, GroupCost(), 1024) == [16]
    assert cut_points([20] * 16, GroupCost(), 160) == [8, 16]
    assert cut_points([10] * 8 + [120] * 2, GroupCost(), 1024) == [8, 10]
    assert cut_points([], GroupCost(), 1024) == []


def test_group_cost_is_timed_from_three_shapes(monkeypatch):
    import bert_tf2.inference.litert_runtime as runtime

    class Clock:  # each run advances it by the true cost, in microseconds per token
        now = 0.0

        @classmethod
        def perf_counter(cls):
            return cls.now

    truth = runtime.GroupCost(overhead=17.0, attention_length=500.0)

    def run(rows, length):
        Clock.now += 3e-6 * truth(rows, length)

    monkeypatch.setattr(runtime, "time", Clock)
    timed = runtime.GroupCost.timed(run, 8, 128)
    assert timed.overhead == pytest.approx(17.0) and timed.attention_length == pytest.approx(500)
    flat = runtime.GroupCost.timed(lambda rows, length: run(rows, 1), 8, 128)  # no growth
    assert (flat.overhead, flat.attention_length) == (12.0, 640.0)  # the defaults
    lengths = []
    short = runtime.GroupCost.timed(lambda rows, length: lengths.append(length), 8, 6)
    assert (short.overhead, short.attention_length) == (12.0, 640.0) and lengths == []


@pytest.mark.integration
def test_a_row_that_finds_the_process_idle_runs_on_one_thread(pair_export):
    import time

    from bert_tf2.inference.litert_runtime import IDLE_SECONDS
    from bert_tf2.tasks.classification.litert_serving import LiteRTClassifier

    export, data = pair_export
    rows = read_tsv(data / "dev.tsv")[1:]
    fast = LiteRTClassifier.load(str(export), threads=2)
    fast.warm_up()
    single, shared = fast.model.single_thread, fast.model.interpreter
    answers = []
    for row in rows[:6]:
        time.sleep(2 * IDLE_SECONDS)
        before = single.calls, shared.calls
        answers.append(fast([row[3]], [row[4]])["probabilities"])
        assert (single.calls - before[0], shared.calls - before[1]) == (1, 0)
    before = single.calls, shared.calls
    back_to_back = [fast([row[3]], [row[4]])["probabilities"] for row in rows[:6]]
    assert single.calls - before[0] <= 1 and shared.calls - before[1] >= 5
    np.testing.assert_allclose(np.concatenate(back_to_back), np.concatenate(answers), atol=1e-6)
    assert LiteRTClassifier.load(str(export), threads=1).model.single_thread is None


@pytest.mark.integration
def test_mistakes_are_one_line(pair_export, single_export, tmp_path):
    from bert_tf2.inference.litert_layout import LiteRTError
    from bert_tf2.tasks.classification.litert_serving import LiteRTClassifier

    export, _ = pair_export
    with pytest.raises(LiteRTError, match="not an export"):
        LiteRTClassifier.load(str(single_export.parent), "float32")
    with pytest.raises(LiteRTError, match="no litert/int8.tflite"):  # only float32 was written
        LiteRTClassifier.load(str(export), "int8")
    fast = LiteRTClassifier.load(str(export))
    with pytest.raises(LiteRTError, match="takes pairs"):
        fast(["one"])
    with pytest.raises(LiteRTError, match="2 text_a but 1 text_b"):
        fast(["one", "two"], ["three"])
    cases = [
        (["--saved_model=" + str(tmp_path)], "not a SavedModel (no saved_model.pb)"),
        ([], "--saved_model is required"),
        (["--saved_model=" + str(export), "--quantization=int4"], "value should be one of"),
    ]
    for flags, message in cases:
        result = run_script("export_litert.py", *flags, check=False)
        assert result.returncode != 0
        last = result.stderr.strip().splitlines()[-1]
        assert message in last and "Traceback" not in result.stderr, result.stderr[-2000:]


@pytest.mark.integration
def test_an_export_from_before_the_description_is_refused(pair_export, tmp_path):
    import shutil

    export, _ = pair_export
    old = tmp_path / "old"
    shutil.copytree(export, old)
    (old / "assets.extra" / "serving.json").unlink()
    result = run_script("export_litert.py", f"--saved_model={old}", check=False)
    assert "export it again with the runner's --export_dir" in result.stderr.splitlines()[-1]


@pytest.mark.integration
def test_a_cut_litert_file_is_one_line_naming_the_command_that_remakes_it(single_export,
                                                                           tmp_path):
    """A LiteRT file cut in half (a copy interrupted, a full disk) fails the flatbuffer check:
    every way in (the runtime's load, batch_predict, the example's --fast) says so in one line
    naming the file and the export_litert.py command, not with a traceback."""
    import shutil

    from bert_tf2.inference.litert_layout import LiteRTError
    from bert_tf2.tasks.classification.litert_serving import LiteRTClassifier

    export = tmp_path / "serving"
    shutil.copytree(single_export, export)
    whole = (export / "litert" / "float32.tflite").read_bytes()
    for name in ("float32.tflite", "int8.tflite"):
        (export / "litert" / name).write_bytes(whole[:len(whole) // 2])
    with pytest.raises(LiteRTError) as refused:
        LiteRTClassifier.load(str(export), "float32")
    message = str(refused.value)
    assert message.startswith(f"{export / 'litert' / 'float32.tflite'}: not a readable LiteRT "
                              f"file (") and "\n" not in message
    assert message.endswith(f"make it again with `python export_litert.py --saved_model="
                            f"{export} --quantization=float32`")
    texts = tmp_path / "texts.tsv"
    texts.write_text("Return the square root of x.\n", encoding="utf-8")
    commands = [
        [sys.executable, str(REPO / "batch_predict.py"), f"--saved_model={export}",
         f"--input_file={texts}", "--columns=text_a", f"--output_file={tmp_path / 'o.jsonl'}",
         "--litert=float32"],
        [sys.executable, str(REPO / "examples" / "classify_text.py"), "--fast", str(export),
         "Return the square root of x."],
    ]
    for command in commands:
        result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
        last = result.stderr.strip().splitlines()[-1]
        assert "not a readable LiteRT file" in last and "export_litert.py --saved_model=" in last
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.integration
def test_fast_path_runs_without_tensorflow(single_export):
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from bert_tf2.tasks.classification.litert_serving import LiteRTClassifier\n"
            "out = LiteRTClassifier.load(%r)(['Return the square root of x.'])\n"
            "print(out['label'][0], 'tensorflow' in sys.modules)") % (str(REPO),
                                                                       str(single_export))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    label, tensorflow_loaded = result.stdout.split()
    assert label in ("files", "math", "network", "text", "time") and tensorflow_loaded == "False"


@pytest.mark.integration
def test_batch_predict_on_the_litert_file_writes_the_savedmodels_lines(pair_export, tmp_path):
    export, data = pair_export
    rows = read_tsv(data / "dev.tsv")[1:]
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{r[3]}\t{r[4]}\n" for r in rows), encoding="utf-8")
    outputs = {}
    for litert in ("none", "float32"):
        out = tmp_path / f"{litert}.jsonl"
        run_script("batch_predict.py", f"--saved_model={export}", f"--input_file={pairs}",
                   "--columns=text_a,text_b", f"--output_file={out}", "--batch_size=16",
                   f"--litert={litert}")
        outputs[litert] = [json.loads(line) for line in out.read_text().splitlines()]
    saved, fast = outputs["none"], outputs["float32"]
    assert [line["index"] for line in fast] == list(range(len(rows)))  # input order
    assert sorted(fast[0]) == sorted(saved[0]) == [
        "index", "label", "label_id", "logits", "probabilities"]
    for a, b in zip(saved, fast, strict=True):
        assert (a["index"], a["label"], a["label_id"]) == (b["index"], b["label"], b["label_id"])
        np.testing.assert_allclose(a["probabilities"], b["probabilities"], atol=2e-5)
    result = run_script("batch_predict.py", f"--saved_model={export}", f"--input_file={pairs}",
                        "--columns=text_a", f"--output_file={tmp_path / 'x.jsonl'}",
                        "--litert=float32", check=False)
    assert result.returncode != 0
    assert "--columns=text_a: the signature takes text_a, text_b" in \
        result.stderr.strip().splitlines()[-1]


@pytest.mark.integration
@pytest.mark.parametrize("kind", [pytest.param("regression", marks=pytest.mark.slow),
                                  "multi_label"])  # regression in make test-all
def test_regression_and_multi_label_outputs_as_the_savedmodel(kind, minilm_dir, tmp_path):
    """The other heads a classifier export has, on a tiny random BERT: STS-B-like scores, and
    multi-label probabilities, 0/1 per label at the export's thresholds, and the label names."""
    import keras
    from conftest import TINY

    from bert_tf2.engine import export
    from bert_tf2.modeling.config import BertConfig
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertClassifier
    from bert_tf2.tasks.classification.litert_serving import LiteRTClassifier
    from bert_tf2.tasks.classification.serving import ClassifierServing

    keras.utils.set_random_seed(7)
    vocab = str(minilm_dir / "vocab.txt")
    if kind == "regression":
        module = ClassifierServing(BertClassifier(BertEncoder(BertConfig.from_dict(TINY)), 1),
                                   vocab, True, 32, [], pair=True)
    else:
        module = ClassifierServing(BertClassifier(BertEncoder(BertConfig.from_dict(TINY)), 3),
                                   vocab, True, 32, ["corn", "grain", "wheat"], pair=False,
                                   thresholds=[0.5, 0.49, 0.51])
    export.save(module, str(tmp_path / "serving"), {"vocab.txt": vocab}, litert="float32")
    texts = ["Wheat and corn exports rose.", "", "A much longer sentence " * 9, "grain"]
    inputs = {"text_a": texts} if kind == "multi_label" else {"text_a": texts,
                                                              "text_b": texts[::-1]}
    expected = served(tmp_path / "serving", **inputs)
    got = LiteRTClassifier.load(str(tmp_path / "serving"))(*inputs.values())
    assert sorted(got) == sorted(expected)
    for name, value in got.items():
        if np.asarray(value).dtype.kind == "f":
            np.testing.assert_allclose(value, expected[name], atol=2e-5)
        elif name == "labels":
            assert value == [label.decode() for label in expected[name]]
        else:
            np.testing.assert_array_equal(value, expected[name])


class _Unconvertible:
    """A serving module whose serve_token_ids needs ops TFLite lacks (string formatting)."""

    def __new__(cls):
        import tensorflow as tf

        from bert_tf2.engine.export import token_id_spec

        class Module(tf.Module):
            litert = False

            def description(self):
                return {"task": "classification", "do_lower_case": True, "max_seq_length": 16,
                        "pair": False, "labels": ["a", "b"], "thresholds": None,
                        "doc_stride": None, "pooling": "mean"}

            def signatures(self):
                def logits(inputs):
                    text = tf.strings.as_string(inputs["input_word_ids"])
                    return {"logits": tf.cast(tf.strings.length(text), tf.float32)}

                fn = tf.function(logits, input_signature=[token_id_spec()])
                return {"serve_token_ids": fn.get_concrete_function()}

        return Module()


@pytest.mark.integration
def test_an_export_that_cannot_be_converted_is_one_line(minilm_dir, tmp_path):
    from bert_tf2.engine import export

    export.save(_Unconvertible(), str(tmp_path / "serving"),
                {"vocab.txt": str(minilm_dir / "vocab.txt")})
    result = run_script("export_litert.py", f"--saved_model={tmp_path / 'serving'}", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "serve_token_ids cannot be converted to LiteRT" in last, result.stderr[-2000:]
    assert not (tmp_path / "serving" / "litert" / "int8.tflite").exists()


random_export = reference_runs.make_random_export


@pytest.mark.slow  # repeats the pairs and embedding cases on another task (make test-all)
def test_multiple_choice_fast_path_as_the_savedmodel(shared_data, minilm_dir, tmp_path):
    """Real SWAG rows, ragged: a question or none, a choice "" and fewer choices than the model
    scores. float32 gives serve_text's probabilities; int8 its clear choices; batch_predict
    --litert writes the SavedModel's lines."""
    from bert_tf2.engine import litert
    from bert_tf2.inference.litert_layout import LiteRTError
    from bert_tf2.modeling.models import BertMultipleChoice
    from bert_tf2.tasks.multiple_choice.litert_serving import LiteRTChooser
    from bert_tf2.tasks.multiple_choice.reader import read_examples
    from bert_tf2.tasks.multiple_choice.serving import MultipleChoiceServing

    def module(encoder, vocab):
        model = BertMultipleChoice(encoder, 4)
        for weight in model.head.weights:  # with wider weights, the choices' scores differ
            weight.assign(weight * 10)
        return MultipleChoiceServing(model, vocab, True, 48, 4)

    export = random_export(module, minilm_dir, tmp_path / "serving", initializer_range=0.2)
    litert.write(str(export), "int8")
    examples = read_examples(str(shared_data / "swag_sample" / "val_first91.csv"), "swag")
    context = [e.context for e in examples]
    question = [e.question if i % 3 else "  " for i, e in enumerate(examples)]
    choices = [list(e.choices)[:2 + i % 3] for i, e in enumerate(examples)]
    choices[1][1] = ""
    width = max(map(len, choices))
    expected = served(export, context=context, question=question,
                      choices=[c + [""] * (width - len(c)) for c in choices])
    fast = LiteRTChooser.load(str(export), "float32")
    got = fast(context, question, choices)
    np.testing.assert_allclose(got["probabilities"], expected["probabilities"], atol=2e-5)
    assert got["probabilities"][1, 1] == 0 and not got["probabilities"][0, 2:].any()
    # A random encoder scores some contexts' choices alike: compare where they differ.
    top = np.sort(expected["logits"], axis=1)
    clear = top[:, -1] - top[:, -2] > 0.1
    assert clear.sum() >= 30, clear.sum()
    assert got["choice"][clear].tolist() == expected["choice"][clear].tolist()
    # int8 on these widened random weights (logits' spread 1.5): errors up to 0.2 measured;
    # every choice ahead by more than 0.3 kept, and most of the rest.
    int8 = LiteRTChooser.load(str(export))(context, question, choices)
    assert 0 < np.max(np.abs(int8["logits"] - got["logits"])) < 0.25
    sure = top[:, -1] - top[:, -2] > 0.3
    assert int8["choice"][sure].tolist() == expected["choice"][sure].tolist()
    assert np.mean(int8["choice"] == expected["choice"]) > 0.75
    with pytest.raises(LiteRTError, match="5 choices, more than the 4 the model scores"):
        fast(["c"], ["q"], [["a"] * 5])
    with pytest.raises(LiteRTError,
                       match=r"inputs shaped \[1, 16\]; the model takes \[batch, 4, length\]"):
        fast.model(*[np.ones((1, 16), np.int32)] * 3)
    lines = tmp_path / "requests.jsonl"
    lines.write_text("".join(json.dumps({"context": c, "question": q, "choices": ch}) + "\n"
                             for c, q, ch in zip(context[:40], question, choices)))
    outputs = {}
    for litert_flag in ("none", "float32"):
        out = tmp_path / f"{litert_flag}.jsonl"
        run_script("batch_predict.py", f"--saved_model={export}", f"--input_file={lines}",
                   f"--output_file={out}", f"--litert={litert_flag}")
        outputs[litert_flag] = [json.loads(line) for line in out.read_text().splitlines()]
    for saved, fast_line in zip(outputs["none"], outputs["float32"], strict=True):
        assert (saved["index"], saved["choice"]) == (fast_line["index"], fast_line["choice"])
        np.testing.assert_allclose(saved["probabilities"], fast_line["probabilities"],
                                   atol=2e-5)


@pytest.mark.integration
def test_embedding_fast_path_as_the_savedmodel(minilm_dir, embedding_export, tmp_path):
    """Mean-pooled normalised and [CLS] vectors, short, empty and over-long texts: float32 gives
    serve_text's vectors; int8 vectors point the same way (cosine > 0.99)."""
    from bert_tf2.engine import litert
    from bert_tf2.tasks.feature_extraction.litert_serving import LiteRTEmbedder
    from bert_tf2.tasks.feature_extraction.serving import EmbeddingServing

    texts = [row[2] for row in read_tsv(DOCSTRINGS / "dev.tsv")[1:]]
    texts += ["", "Ünïcödé àccents, CJK 中文 and an emoji 🙂 too", "x " * 200]
    for pooling, normalize in (("mean", True), ("cls", False)):
        if pooling == "mean":  # made once for this test and test_model_server's
            export = embedding_export
        else:
            export = random_export(lambda encoder, vocab: EmbeddingServing(
                encoder, vocab, True, 32, pooling, normalize), minilm_dir, tmp_path / pooling)
            litert.write(str(export), "int8")
        expected = served(export, text_a=texts)["embedding"]
        got = LiteRTEmbedder.load(str(export), "float32")(texts)["embedding"]
        np.testing.assert_allclose(got, expected, atol=2e-5)
        one_by_one = LiteRTEmbedder.load(str(export), "float32")
        np.testing.assert_allclose(np.concatenate([one_by_one([t])["embedding"] for t in texts]),
                                   expected, atol=2e-5)
        int8 = LiteRTEmbedder.load(str(export))(texts)["embedding"]
        cosine = np.sum(int8 * got, 1) / np.linalg.norm(int8, axis=1) / np.linalg.norm(got, axis=1)
        assert cosine.min() > 0.99 and np.max(np.abs(int8 - got)) > 0
