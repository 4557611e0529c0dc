"""extract_features.py against the original: the same tokens (Google's own `read_examples` and
`convert_examples_to_features` from bert-tensorflow 1.0.4, run in a subprocess) and the same
values (an independent float64 NumPy BERT from SPEC.md, `tests/reference_bert.py`, on the
original's padded inputs), for the original README's command; then sentence embeddings, the
embedding SavedModel in a fresh process, resuming after a kill, and bad input.
"""
import csv
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
import warm_python
from conftest import REPO, run_script, tensorflow_only
from reference_bert import ReferenceBert

pytestmark = pytest.mark.integration

ORACLE = r"""
import json, sys, types
for name in ("bert.modeling", "bert.optimization"):  # their TF1 graph code is never used here
    sys.modules[name] = types.ModuleType(name)
from bert import extract_features, tokenization
args = json.loads(sys.argv[1])
extract_features.FLAGS(["oracle"])  # the tokenizer reads --preserve_unused_tokens (False)
tokenizer = tokenization.FullTokenizer(args["vocab"], do_lower_case=True)
examples = extract_features.read_examples(args["input"])
features = extract_features.convert_examples_to_features(examples, args["max_seq_length"],
                                                         tokenizer)
print(json.dumps([[f.unique_id, f.tokens, f.input_ids, f.input_mask, f.input_type_ids]
                  for f in features]))
"""


def stsb_rows(shared_data):
    with open(shared_data / "glue" / "STS-B" / "dev.tsv", encoding="utf-8-sig") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]


def write_input(path, shared_data):
    """Real STS-B pairs as `A ||| B`, single sentences, an empty line, a line far longer than
    max_seq_length, accents, CJK and a control character; no newline at the end."""
    rows = stsb_rows(shared_data)
    lines = [f"{r[7]} ||| {r[8]}" for r in rows[:12]] + [r[7] for r in rows[12:20]]
    lines += ["", "  padded with spaces  ", " ".join(r[8] for r in rows[20:40]),
              "Café naïve 中文 résumé\u0007 end", "A |||", "||| B only"]
    path.write_text("\n".join(lines), encoding="utf-8")
    return lines


def tf1_weights(folder):
    reader = tf.train.load_checkpoint(str(folder / "bert_model.ckpt"))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


@pytest.fixture(scope="module")
def extracted(tmp_path_factory, shared_data, tiny_checkpoint):
    root = tmp_path_factory.mktemp("extract")
    lines = write_input(root / "input.txt", shared_data)
    base = tiny_checkpoint
    # The original README's command, unchanged but for paths and sizes (the tiny model has 2
    # layers and 128 positions).
    run = run_script("extract_features.py", f"--input_file={root / 'input.txt'}",
                     f"--output_file={root / 'output.jsonl'}", f"--vocab_file={base}/vocab.txt",
                     f"--bert_config_file={base}/bert_config.json",
                     f"--init_checkpoint={base}/bert_model.ckpt", "--layers=-1,-2,0",
                     "--max_seq_length=32", "--batch_size=8")
    return {"root": root, "lines": lines, "log": run.stderr,
            "output": (root / "output.jsonl").read_text(encoding="utf-8").splitlines()}


@pytest.mark.skipif(importlib.util.find_spec("bert") is None,
                    reason="the oracle bert-tensorflow==1.0.4 (Google's original scripts) is not "
                           "installed: pip install --no-deps bert-tensorflow==1.0.4")
def test_json_lines_equal_the_originals(extracted, tiny_checkpoint):
    args = {"vocab": str(tiny_checkpoint / "vocab.txt"), "max_seq_length": 32,
            "input": str(extracted["root"] / "input.txt")}
    oracle = warm_python.run([sys.executable, "-c", ORACLE, json.dumps(args)], warm=True,
                            text=True, cwd=REPO)
    assert oracle.returncode == 0, oracle.stderr[-3000:]
    features = json.loads(oracle.stdout.strip().splitlines()[-1])
    output = extracted["output"]
    assert len(features) == len(output) == len(extracted["lines"])
    ids = np.array([f[2] for f in features])
    mask = np.array([f[3] for f in features])
    types = np.array([f[4] for f in features])
    reference = ReferenceBert(tf1_weights(tiny_checkpoint), num_layers=2, num_heads=2)
    layers = reference.encode(ids, mask, types)["encoder_outputs"]
    worst = 0.0
    for (unique_id, tokens, *_), text in zip(features, output):
        line = json.loads(text)
        # The original's layout, key order and json.dumps defaults, byte for byte.
        assert text == json.dumps(line)
        assert list(line) == ["linex_index", "features"] and line["linex_index"] == unique_id
        assert [f["token"] for f in line["features"]] == tokens
        for i, feature in enumerate(line["features"]):
            assert list(feature) == ["token", "layers"]
            assert [layer["index"] for layer in feature["layers"]] == [-1, -2, 0]
            for layer in feature["layers"]:
                expected = layers[layer["index"]][unique_id, i]
                values = np.array(layer["values"])
                assert values.tolist() == [round(v, 6) for v in values.tolist()]
                worst = max(worst, float(np.max(np.abs(values - expected))))
    assert worst < 1e-5 + 5e-7, worst  # float32 against float64, plus the 6-decimal rounding
    # The empty line is [CLS] [SEP]; the long line was truncated to max_seq_length.
    by_index = [json.loads(text) for text in output]
    assert [f["token"] for f in by_index[20]["features"]] == ["[CLS]", "[SEP]"]
    assert len(by_index[22]["features"]) == 32


def test_embeddings_pool_the_last_layer(extracted, tiny_checkpoint, tmp_path):
    base = tiny_checkpoint
    common = [f"--input_file={extracted['root'] / 'input.txt'}",
              f"--init_checkpoint={base}/bert_model.ckpt", "--max_seq_length=32",
              "--batch_size=5"]
    run_script("extract_features.py", *common, f"--output_file={tmp_path / 'mean.npy'}",
               "--pooling=mean")
    run_script("extract_features.py", *common, f"--output_file={tmp_path / 'unit.jsonl'}",
               "--pooling=mean", "--normalize")
    run_script("extract_features.py", *common, f"--output_file={tmp_path / 'cls.npy'}",
               "--pooling=cls")
    mean, cls = np.load(tmp_path / "mean.npy"), np.load(tmp_path / "cls.npy")
    lines = [json.loads(t) for t in (tmp_path / "unit.jsonl").read_text().splitlines()]
    assert mean.shape == cls.shape == (len(extracted["lines"]), 32) and mean.dtype == np.float32
    assert [line["linex_index"] for line in lines] == list(range(len(extracted["lines"])))
    unit = np.array([line["embedding"] for line in lines])
    np.testing.assert_allclose(unit, mean / np.linalg.norm(mean, axis=1, keepdims=True),
                               atol=1e-7)
    for row, text in enumerate(extracted["output"]):  # the layer -1 values of the JSON lines
        last = np.array([f["layers"][0]["values"] for f in json.loads(text)["features"]])
        np.testing.assert_allclose(mean[row], last.mean(axis=0), atol=1e-6)
        np.testing.assert_allclose(cls[row], last[0], atol=1e-6)


@pytest.mark.slow  # an accuracy run
def test_zero_shot_sts_b_with_minilm(shared_data, minilm_dir, tmp_path):
    """Mean-pooled, normalised all-MiniLM-L6-v2 vectors: cosine against the gold scores of the
    1,500 STS-B dev pairs. Correct pooling and masking land near the published figures. The
    export's int8 LiteRT file (its fast path) loses under half a point of that."""
    from bert_tf2.tasks.classification.metrics import pearson, spearman
    from bert_tf2.tasks.feature_extraction.litert_serving import LiteRTEmbedder

    rows = stsb_rows(shared_data)
    (tmp_path / "sentences.txt").write_text(
        "".join(f"{r[7]}\n{r[8]}\n" for r in rows), encoding="utf-8")
    run_script("extract_features.py", f"--input_file={tmp_path / 'sentences.txt'}",
               f"--output_file={tmp_path / 'vectors.npy'}", f"--init_checkpoint={minilm_dir}",
               "--pooling=mean", "--normalize", "--batch_size=64",
               f"--export_dir={tmp_path / 'export'}")
    vectors = np.load(tmp_path / "vectors.npy")
    cosine = np.sum(vectors[0::2] * vectors[1::2], axis=1)
    gold = np.array([float(r[-1]) for r in rows])
    assert spearman(gold, cosine) == pytest.approx(0.8672, abs=2e-3)
    assert pearson(gold, cosine) == pytest.approx(0.8696, abs=2e-3)
    int8 = LiteRTEmbedder.load(str(tmp_path / "export"))(
        [text for r in rows for text in (r[7], r[8])])["embedding"]
    int8_cosine = np.sum(int8[0::2] * int8[1::2], axis=1)
    assert spearman(gold, int8_cosine) > spearman(gold, cosine) - 0.005
    assert np.sum(int8 * vectors, axis=1).min() > 0.98  # each vector where float32 puts it


EXPORT_CHECK = r"""
import json, sys
import tensorflow as tf, tensorflow_text  # noqa: F401  (the only imports a user needs)
model = tf.saved_model.load(sys.argv[1])
texts = json.loads(sys.argv[2])
out = model.signatures["serving_default"](text_a=tf.constant(texts))
print(json.dumps(out["embedding"].numpy().tolist()))
"""


def test_embedding_saved_model_serves_raw_strings(extracted, minilm_dir, tmp_path):
    sentences = [line for line in extracted["lines"][12:20]] + ["Café naïve 中文"]
    (tmp_path / "input.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    run_script("extract_features.py", f"--input_file={tmp_path / 'input.txt'}",
               f"--output_file={tmp_path / 'vectors.npy'}", f"--init_checkpoint={minilm_dir}",
               "--pooling=mean", "--normalize", f"--export_dir={tmp_path / 'export'}",
               "--export_litert=none")
    served = tensorflow_only([sys.executable, "-c", EXPORT_CHECK, tmp_path / "export",
                              json.dumps(sentences)], cwd=tmp_path)
    assert served.returncode == 0, served.stderr[-3000:]
    vectors = np.array(json.loads(served.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(vectors, np.load(tmp_path / "vectors.npy"), atol=1e-5)


@pytest.mark.slow  # resume after a kill: test_faults.py's chains, byte for byte (test-all)
def test_a_killed_run_resumes_after_its_last_shard(shared_data, tiny_checkpoint, tmp_path):
    rows = stsb_rows(shared_data)
    (tmp_path / "input.txt").write_text("".join(f"{r[7]} ||| {r[8]}\n" for r in rows[:600]),
                                        encoding="utf-8")
    flags = [f"--input_file={tmp_path / 'input.txt'}", f"--init_checkpoint={tiny_checkpoint}"
             "/bert_model.ckpt", "--max_seq_length=64", "--batch_size=4", "--layers=-1",
             "--lines_per_shard=50"]
    run_script("extract_features.py", *flags, f"--output_file={tmp_path / 'straight.jsonl'}")
    output = tmp_path / "resumed.jsonl"
    parts = tmp_path / ".resumed.jsonl.parts"
    process = warm_python.start([sys.executable, str(REPO / "extract_features.py"), *flags,
                                 f"--output_file={output}"], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if parts.is_dir() and len([p for p in os.listdir(parts) if p.endswith(".jsonl")]) >= 2:
            break
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not output.exists()
    done = len([p for p in os.listdir(parts) if p.endswith(".jsonl")])
    second = run_script("extract_features.py", *flags, f"--output_file={output}")
    assert f"resuming: {done * 50} lines already written in {done} shards" in second.stderr
    assert output.read_bytes() == (tmp_path / "straight.jsonl").read_bytes()
    assert not parts.exists()


@pytest.mark.parametrize("change,status,message", [
    ({"line": b"caf\xe9"}, 1, r"input\.txt:3: not UTF-8 text \(byte 0xe9 at column 4\)"),
    ({"flag": "--layers=-1,5"}, 2, r"--layers=-1,5: layer 5 is outside the model's 2 layers "
                                   r"\(indexes -2\.\.1\)"),
    ({"flag": "--layers=last"}, 2, r"--layers=last: comma-separated integers"),
    ({"flag": "--max_seq_length=512"}, 2, r"max_position_embeddings=128"),
])
def test_bad_input_is_one_line(tiny_checkpoint, tmp_path, change, status, message):
    import re

    lines = [b"First line.", b"Second line.", change.get("line", b"Third line."), b"Last."]
    (tmp_path / "input.txt").write_bytes(b"\n".join(lines) + b"\n")
    result = run_script("extract_features.py", f"--input_file={tmp_path / 'input.txt'}",
                        f"--output_file={tmp_path / 'out.jsonl'}",
                        f"--init_checkpoint={tiny_checkpoint}/bert_model.ckpt", "--layers=-1",
                        *([change["flag"]] if "flag" in change else []), check=False)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == status, result.stderr[-2000:]
    assert last.startswith("extract_features.py: error: ") and re.search(message, last), last
    assert not (tmp_path / "out.jsonl").exists()
