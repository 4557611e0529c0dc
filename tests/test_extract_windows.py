"""extract_features.py --doc_stride: long lines read whole. The windows and the window each token is
read from, by hand; then the tool's values against an independent float64 NumPy BERT
(`tests/reference_bert.py`) run on each token's max-context window, one JSON entry per token of
the whole line, short lines unchanged, and pooled vectors over every token of the line."""
import json

import numpy as np
import pytest
import tensorflow as tf
from conftest import run_script, serve_texts
from reference_bert import ReferenceBert

from bert_tf2.data_gen.windows import fixed_stride_spans, max_context_windows


def test_windows_and_where_each_token_is_read_by_hand(tokenizer):
    from bert_tf2.tasks.feature_extraction.features import featurize, featurize_windows
    from bert_tf2.tasks.feature_extraction.reader import Line

    inverse = {i: token for token, i in tokenizer.vocab.items()}

    def rows(windows):
        return [[inverse[i] for i in w.input_ids] for w in windows]

    # Ten one-piece words, rows of 8 (6 tokens), stride 3: windows a-f, d-i, g-j. A token is
    # read where min(left, right) is largest: a b c d from the first (d: 3 left, 2 right there,
    # 0 left in the second), e from the first (1 either side in both: a tie goes to the first),
    # f g h from the second, i j from the third; [CLS] and [SEP] from the first.
    single = featurize_windows(Line(0, "a b c d e f g h i j", None), tokenizer, 8, 3)
    assert rows(single) == [["[CLS]", *"abcdef", "[SEP]"], ["[CLS]", *"defghi", "[SEP]"],
                            ["[CLS]", *"ghij", "[SEP]"]]
    assert single[0].tokens == ["[CLS]", *"abcdefghij", "[SEP]"]
    assert single[0].read_from == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (1, 3),
                                   (1, 4), (1, 5), (2, 3), (2, 4), (0, 7)]
    # A pair: windows over the longer text, here B, with A whole before it in each row.
    pair = featurize_windows(Line(1, "x y", "a b c d e f g h i j"), tokenizer, 8, 3)
    assert rows(pair) == [["[CLS]", "x", "y", "[SEP]", *"abc", "[SEP]"],
                          ["[CLS]", "x", "y", "[SEP]", *"def", "[SEP]"],
                          ["[CLS]", "x", "y", "[SEP]", *"ghi", "[SEP]"],
                          ["[CLS]", "x", "y", "[SEP]", "j", "[SEP]"]]
    for windows in (single, pair):  # every token of the line is found where it is read from
        table = rows(windows)
        assert [table[w][p] for w, p in windows[0].read_from] == windows[0].tokens
    # The same against the shared max-context rule.
    spans = fixed_stride_spans(10, 6, 3)
    assert [w for w, _ in single[0].read_from[1:-1]] == max_context_windows(spans,
                                                                            range(10)).tolist()
    # A line that fits is the original's one row.
    short = Line(2, "a b c", "d e")
    (window,) = featurize_windows(short, tokenizer, 8, 3)
    original = featurize(short, tokenizer, 8)
    assert (window.input_ids, window.tokens) == (original.input_ids, original.tokens)


@pytest.fixture(scope="module")
def windowed(tmp_path_factory, shared_data, tiny_checkpoint):
    root = tmp_path_factory.mktemp("windows")
    story = json.loads((shared_data / "reuters21578" / "test.jsonl").open().readline())["text"]
    story = " ".join(story.split())
    lines = [story, "", "A short line.", f"{story[:300]} ||| {story}"]
    (root / "input.txt").write_text("\n".join(lines), encoding="utf-8")
    common = [f"--input_file={root / 'input.txt'}",
              f"--init_checkpoint={tiny_checkpoint}/bert_model.ckpt", "--max_seq_length=32",
              "--batch_size=4"]
    run_script("extract_features.py", *common, f"--output_file={root / 'w.jsonl'}",
               "--doc_stride=12", "--layers=-1,0")
    run_script("extract_features.py", *common, f"--output_file={root / 't.jsonl'}",
               "--layers=-1,0")
    run_script("extract_features.py", *common, f"--output_file={root / 'mean.npy'}",
               "--doc_stride=12", "--pooling=mean")
    return {"root": root, "lines": lines,
            "windowed": (root / "w.jsonl").read_text().splitlines(),
            "truncated": (root / "t.jsonl").read_text().splitlines(),
            "mean": np.load(root / "mean.npy")}


def reference_values(tiny_checkpoint, tokenizer, line):
    """Each token's layers (-1 and 0) from the NumPy BERT run on its max-context window."""
    from bert_tf2.tasks.feature_extraction.features import featurize_windows
    from bert_tf2.tasks.feature_extraction.reader import parse

    windows = featurize_windows(parse(0, line), tokenizer, 32, 12)
    reader = tf.train.load_checkpoint(str(tiny_checkpoint / "bert_model.ckpt"))
    weights = {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}
    bert = ReferenceBert(weights, num_layers=2, num_heads=2)
    width = max(len(w.input_ids) for w in windows)
    ids = np.array([w.input_ids + [0] * (width - len(w.input_ids)) for w in windows])
    types = np.array([w.input_type_ids + [0] * (width - len(w.input_ids)) for w in windows])
    mask = (np.arange(width)[None] < np.array([len(w.input_ids) for w in windows])[:, None])
    layers = bert.encode(ids, mask.astype(np.int64), types)["encoder_outputs"]
    return windows[0].tokens, {layer: np.array([layers[layer][w, p]
                                                for w, p in windows[0].read_from])
                               for layer in (-1, 0)}


@pytest.mark.integration
def test_every_token_of_a_long_line_from_its_max_context_window(windowed, tiny_checkpoint,
                                                                 tokenizer):
    for index in (0, 3):
        line = json.loads(windowed["windowed"][index])
        tokens, expected = reference_values(tiny_checkpoint, tokenizer, windowed["lines"][index])
        assert [f["token"] for f in line["features"]] == tokens
        for layer in (-1, 0):
            values = np.array([[entry["values"] for entry in f["layers"]
                                if entry["index"] == layer][0] for f in line["features"]])
            np.testing.assert_allclose(values, expected[layer], atol=1e-5 + 5e-7)
    story = json.loads(windowed["windowed"][0])["features"]
    # The whole story, where truncation keeps 32 tokens.
    assert len(story) == len(tokenizer.tokenize(windowed["lines"][0])) + 2 > 200
    assert len(json.loads(windowed["truncated"][0])["features"]) == 32
    # The pair: the story (B, the longer) is cut into windows; A's first (32 - 3) // 2 = 14
    # tokens are kept in every row, as classification keeps them.
    pair = [f["token"] for f in json.loads(windowed["windowed"][3])["features"]]
    a = tokenizer.tokenize(windowed["lines"][3].split(" ||| ")[0])
    assert pair[:16] == ["[CLS]", *a[:14], "[SEP]"] and pair[-1] == "[SEP]"
    assert len(pair) == 14 + len(tokenizer.tokenize(windowed["lines"][0])) + 3


@pytest.mark.integration
def test_short_lines_are_unchanged_and_vectors_pool_every_token(windowed):
    for index in (1, 2):  # lines that fit in one row: byte for byte the original's output
        assert windowed["windowed"][index] == windowed["truncated"][index]
    mean = windowed["mean"]
    assert mean.shape == (4, 32)
    for index in range(4):
        features = json.loads(windowed["windowed"][index])["features"]
        last = np.array([f["layers"][0]["values"] for f in features])  # layer -1
        np.testing.assert_allclose(mean[index], last.mean(0), atol=2e-6)


@pytest.mark.integration
def test_doc_stride_is_checked(tiny_checkpoint, tmp_path):
    (tmp_path / "in.txt").write_text("a line\n")
    result = run_script("extract_features.py", f"--input_file={tmp_path / 'in.txt'}",
                        f"--output_file={tmp_path / 'o.jsonl'}", "--doc_stride=0",
                        f"--init_checkpoint={tiny_checkpoint}/bert_model.ckpt", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith(
        "--doc_stride=0: at least 1 (leave it out to truncate as the original)")
    assert not (tmp_path / "o.jsonl").exists()


SERVE = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401
model = tf.saved_model.load(sys.argv[1])
out = model.signatures["serve_text"](text_a=tf.constant(json.load(open(sys.argv[2]))))
print(json.dumps({"embedding": out["embedding"].numpy().tolist(),
                  "modules": sorted(m for m in ("modeling", "data_gen") if m in sys.modules)}))
"""


@pytest.mark.integration
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_embedding_saved_model_reads_long_strings_as_the_tool(windowed, tiny_checkpoint,
                                                             tmp_path, pooling):
    texts = [line for line in windowed["lines"] if " ||| " not in line]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    run_script("extract_features.py", f"--input_file={tmp_path / 'in.txt'}",
               f"--output_file={tmp_path / 'v.npy'}", f"--export_dir={tmp_path / 'export'}",
               "--export_litert=none", f"--init_checkpoint={tiny_checkpoint}/bert_model.ckpt",
               "--max_seq_length=32", "--doc_stride=12", f"--pooling={pooling}", "--normalize")
    served = serve_texts(SERVE, str(tmp_path / "export"), texts, tmp_path)
    assert served["modules"] == []
    vectors = np.load(tmp_path / "v.npy")
    np.testing.assert_allclose(served["embedding"], vectors, atol=2e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    if pooling == "mean":  # the normalised mean of every token, as the JSON lines give them
        features = json.loads(windowed["windowed"][0])["features"]
        mean = np.array([f["layers"][0]["values"] for f in features]).mean(0)
        np.testing.assert_allclose(vectors[0], mean / np.linalg.norm(mean), atol=1e-5)
