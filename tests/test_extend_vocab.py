"""bert_tf2.data_gen.extend_vocab: domain words into the [unused] slots, by hand on a small vocabulary, then
on the real MiniLM vocabulary and the Reuters training text, and its refusals in one line."""
import collections
import json

import numpy as np
import pytest
from conftest import run_script

from bert_tf2.data_gen import extend_vocab, tokenization
from bert_tf2.process.errors import SettingsError

SMALL = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused2]",
         "a", "b", "c", "d", "t", "o", "n", "s", "##a", "##b", "##c", "##d", "##t", "##o", "##n",
         "##s", "ton", "##nes", "cab"]


def test_choice_and_slots_by_hand():
    wordpiece = tokenization.WordpieceTokenizer({t: i for i, t in enumerate(SMALL)})
    # tonnes: ton ##nes (2 pieces, 1 saved) x 10 = 10; abcd: a ##b ##c ##d (3 saved) x 3 = 9;
    # cabs: cab ##s (1 saved) x 9 = 9, more frequent than abcd: before it on the tie; dots: 3
    # saved x 1, under --min_frequency 2; cab: already one piece.
    counts = collections.Counter({"tonnes": 10, "abcd": 3, "cabs": 9, "dots": 1, "cab": 50})
    assert extend_vocab.choose_words(counts, wordpiece, 10) == ["tonnes", "cabs", "abcd"]
    assert extend_vocab.choose_words(counts, wordpiece, 2) == ["tonnes", "cabs"]
    extension = extend_vocab.extend(SMALL, counts, ["tonnes", "cabs", "abcd"])
    # The [unused] slots in id order: 1, 2, 7; every other line unchanged, the size too.
    assert extension.tokens[1] == "tonnes" and extension.tokens[2] == "cabs"
    assert extension.tokens[7] == "abcd"
    assert [t for i, t in enumerate(extension.tokens) if i not in (1, 2, 7)] == \
        [t for i, t in enumerate(SMALL) if i not in (1, 2, 7)]
    assert extension.added == [(1, "tonnes", ["ton", "##nes"]), (2, "cabs", ["cab", "##s"]),
                               (7, "abcd", ["a", "##b", "##c", "##d"])]
    # Pieces per word: before (10*2 + 3*4 + 9*2 + 1*4 + 50*1) / 73 = 104 / 73; after, the three
    # words are one piece each: (10 + 3 + 9 + 4 + 50) / 73 = 76 / 73.
    assert extension.pieces_before == pytest.approx(104 / 73)
    assert extension.pieces_after == pytest.approx(76 / 73)
    with pytest.raises(SettingsError, match="4 words but the vocabulary has 3 \\[unused\\]"):
        extend_vocab.extend(SMALL, counts, ["tonnes", "cabs", "abcd", "dots"])


def test_given_words_and_casing_are_checked():
    with pytest.raises(SettingsError, match=r"words.txt:2: 'u\.s' is not one word"):
        extend_vocab.check_words(["tonnes", "u.s"], SMALL, True, "words.txt")
    with pytest.raises(SettingsError, match=r"words.txt:1: 'cab' is already in the vocabulary"):
        extend_vocab.check_words(["cab"], SMALL, True, "words.txt")
    with pytest.raises(SettingsError, match=r"'ab' is listed more than once"):
        extend_vocab.check_words(["ab", "ab"], SMALL, True, "words.txt")
    extend_vocab.check_casing(SMALL + ["ℝ"], True, "v")  # no lower case of its own: uncased
    with pytest.raises(SettingsError, match="upper-case entries .* add --nodo_lower_case"):
        extend_vocab.check_casing(SMALL + ["Paris"], True, "v")
    with pytest.raises(SettingsError, match="no upper-case entry .* use --do_lower_case"):
        extend_vocab.check_casing(SMALL, False, "v")


@pytest.fixture(scope="module")
def reuters_text(tmp_path_factory, shared_data):
    path = tmp_path_factory.mktemp("domain") / "train.txt"
    with open(path, "w", encoding="utf-8") as out:
        for line in (shared_data / "reuters21578" / "train.jsonl").open(encoding="utf-8"):
            out.write(json.loads(line)["text"].replace("\n", " ") + "\n")
    return path


@pytest.mark.integration
def test_json_lines_count_the_same_words_as_their_text(reuters_text, shared_data, vocab_file,
                                                       tmp_path):
    """--input_format=jsonl reads each line's "text": the same words as the text written out."""
    from bert_tf2.data_gen.learn_vocab import count_words

    stories = shared_data / "reuters21578" / "train.jsonl"
    as_text = count_words([str(reuters_text)], True)
    assert count_words([str(stories)], True, input_format="jsonl") == as_text
    assert sum(as_text.values()) > 500_000
    first = tmp_path / "first.jsonl"
    with stories.open(encoding="utf-8") as lines:
        first.write_text("".join(next(lines) for _ in range(200)), encoding="utf-8")
    run_script("-m", "bert_tf2.data_gen.extend_vocab", f"--input_file={first}", "--input_format=jsonl",
               f"--vocab_file={vocab_file}", f"--output_file={tmp_path / 'vocab.txt'}",
               "--num_words=3")
    added = [t for t, o in zip(tokenization.load_vocab_tokens(tmp_path / "vocab.txt"),
                               tokenization.load_vocab_tokens(vocab_file)) if t != o]
    assert added == ["mln", "dlrs", "pct"]  # no JSON syntax among the words counted


@pytest.mark.integration
def test_reuters_words_into_minilm_s_unused_slots(reuters_text, vocab_file, tmp_path):
    output = tmp_path / "vocab.txt"
    result = run_script("-m", "bert_tf2.data_gen.extend_vocab", f"--input_file={reuters_text}",
                        f"--vocab_file={vocab_file}", f"--output_file={output}",
                        "--num_words=300")
    old = tokenization.load_vocab_tokens(vocab_file)
    new = tokenization.load_vocab_tokens(output)
    assert len(new) == len(old) == 30522
    slots = extend_vocab.unused_ids(old)
    changed = [i for i in range(len(old)) if old[i] != new[i]]
    assert changed == slots[:300]  # only [unused] entries, the first 300 in id order
    added = [new[i] for i in changed]
    assert added[:6] == ["mln", "dlrs", "pct", "cts", "shr", "reuter"]
    # Pieces per word over the whole text, counted here line by line with each vocabulary.
    ratios = []
    for vocab in (vocab_file, output):
        tokenizer = tokenization.FullTokenizer(str(vocab), do_lower_case=True)
        words = pieces = 0
        for line in reuters_text.open(encoding="utf-8"):
            for word in tokenizer.basic_tokenizer.tokenize(line):
                words += 1
                pieces += len(tokenizer.wordpiece_tokenizer.tokenize_word(word))
        ratios.append(pieces / words)
    assert ratios[1] < ratios[0] - 0.05
    assert f"WordPieces per word on the corpus {ratios[0]:.4f} -> {ratios[1]:.4f}" in \
        result.stderr
    # Every added word is now one piece.
    tokenizer = tokenization.FullTokenizer(str(output), do_lower_case=True)
    assert all(tokenizer.tokenize(word) == [word] for word in added)


@pytest.mark.integration
def test_refusals_are_one_line_and_write_nothing(reuters_text, vocab_file, tmp_path):
    full = tmp_path / "full.txt"
    full.write_text("".join(t + "\n" for t in tokenization.load_vocab_tokens(vocab_file)
                            if not t.startswith("[unused")))
    (tmp_path / "words.txt").write_text("bundesbank\nu.s.\n")
    cases = [
        ([f"--vocab_file={full}"], f"{full} has no [unused] entries left"),
        ([f"--vocab_file={vocab_file}", "--nodo_lower_case"], "no upper-case entry"),
        ([f"--vocab_file={vocab_file}", f"--words_file={tmp_path / 'words.txt'}"],
         "words.txt:2: 'u.s.' is not one word"),
    ]
    for flags, message in cases:
        result = run_script("-m", "bert_tf2.data_gen.extend_vocab", f"--input_file={reuters_text}",
                            f"--output_file={tmp_path / 'out.txt'}", *flags, check=False)
        last = result.stderr.strip().splitlines()[-1]
        assert result.returncode != 0 and "Traceback" not in result.stderr
        assert last.startswith("extend_vocab.py: error: ") and message in last, last
        assert not (tmp_path / "out.txt").exists()


def tensors(path):
    """Every tensor of a checkpoint (TF1 prefix or folder, or Hugging Face folder), by TF1 name."""
    from bert_tf2.modeling import checkpoints

    source = checkpoints.source_for(str(path))
    return {name: source.read(name) for name in source.shapes}


def check_rows(before, after, added, old_tokens):
    """Only the new rows changed, each the float32 mean of its old pieces' rows."""
    ids = {token: i for i, token in enumerate(old_tokens)}
    slots = [slot for slot, _, _ in added]
    assert sorted(before) == sorted(after)
    for name in before:
        if name in ("bert/embeddings/word_embeddings", "cls/predictions/output_bias"):
            keep = np.setdiff1d(np.arange(len(before[name])), slots)
            assert np.array_equal(after[name][keep], before[name][keep])  # bit-identical
            for slot, _, pieces in added:
                expected = before[name][[ids[p] for p in pieces]].mean(axis=0)
                np.testing.assert_array_equal(after[name][slot], expected)
        else:
            assert np.array_equal(after[name], before[name]), name


@pytest.fixture(scope="module")
def words_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("words") / "words.txt"
    path.write_text("bundesbank\nsoybean\nmln\nqtly\n")
    return path


@pytest.fixture(scope="module")
def adapted_minilm(tmp_path_factory, minilm_dir, reuters_text, words_file):
    """MiniLM's weights with the words file's 4 words in its vocabulary (`extend_vocab`), made once
    for the tests below that read them: (the folder, the tool's stderr)."""
    out = tmp_path_factory.mktemp("adapted") / "adapted"
    result = run_script("-m", "bert_tf2.data_gen.extend_vocab", f"--input_file={reuters_text}",
                        f"--vocab_file={minilm_dir / 'vocab.txt'}",
                        f"--output_file={out / 'vocab.txt'}", f"--words_file={words_file}",
                        f"--init_checkpoint={minilm_dir}")
    return out, result.stderr


@pytest.mark.integration
def test_a_tf1_pretraining_checkpoint_gets_mean_rows(tmp_path, minilm_dir, reuters_text,
                                                     words_file):
    import keras
    from conftest import TINY

    from bert_tf2.modeling import checkpoints
    from bert_tf2.modeling.config import BertConfig
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertPretrainer

    base = tmp_path / "base"
    base.mkdir()
    keras.utils.set_random_seed(4)
    config = BertConfig.from_dict(TINY)
    model = BertPretrainer(BertEncoder(config))
    model.masked_lm.output_bias.assign(np.random.default_rng(0).normal(size=config.vocab_size)
                                       .astype(np.float32))  # distinct biases, not zeros
    checkpoints.save_tf1_checkpoint(model, str(base / "bert_model.ckpt"))
    config.to_json_file(str(base / "bert_config.json"))
    checkpoints.copy_vocab(str(minilm_dir / "vocab.txt"), str(base))
    out = tmp_path / "adapted"
    run_script("-m", "bert_tf2.data_gen.extend_vocab", f"--input_file={reuters_text}",
               f"--vocab_file={base / 'vocab.txt'}", f"--output_file={out / 'vocab.txt'}",
               f"--words_file={words_file}", f"--init_checkpoint={base / 'bert_model.ckpt'}")
    old = tokenization.load_vocab_tokens(base / "vocab.txt")
    slots = extend_vocab.unused_ids(old)[:4]
    added = extend_vocab.extend(old, collections.Counter(), ["bundesbank", "soybean", "mln",
                                                             "qtly"]).added
    assert [slot for slot, _, _ in added] == slots
    assert added[1][2] == ["soy", "##be", "##an"]
    assert sorted(p.name for p in out.iterdir()) == [
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "vocab.txt"]
    check_rows(tensors(base / "bert_model.ckpt"), tensors(out / "bert_model.ckpt"), added, old)


@pytest.mark.integration
def test_hugging_face_weights_get_mean_rows_and_round_trip(tmp_path, minilm_dir,
                                                           adapted_minilm):
    from bert_tf2.modeling import convert

    out, stderr = adapted_minilm
    assert "wrote the model with 4 new rows" in stderr
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors",
                                                     "vocab.txt"]
    old = tokenization.load_vocab_tokens(minilm_dir / "vocab.txt")
    added = extend_vocab.extend(old, collections.Counter(), ["bundesbank", "soybean", "mln",
                                                             "qtly"]).added
    before, after = tensors(minilm_dir), tensors(out)
    check_rows(before, after, added, old)
    # Through TF1 and back to safetensors: the same tensors, bit for bit.
    convert.convert(str(out), "hf", str(tmp_path / "tf1"), "tf1")
    convert.convert(str(tmp_path / "tf1"), "tf1", str(tmp_path / "hf"), "hf")
    for folder in (tmp_path / "tf1", tmp_path / "hf"):
        again = tensors(folder)
        assert all(np.array_equal(again[name], after[name]) for name in after)
    assert (tmp_path / "hf" / "vocab.txt").read_text() == (out / "vocab.txt").read_text()


@pytest.mark.integration
def test_continued_pretraining_from_the_adapted_sentence_encoder(tmp_path, minilm_dir,
                                                                 adapted_minilm, shared_data):
    """MiniLM has no masked-LM head: run_pretraining starts one fresh, says so, and finds the
    config beside --init_checkpoint; records made with the new vocabulary hold the new ids."""
    from bert_tf2.data_gen.records import read_records

    adapted, _ = adapted_minilm
    stories = tmp_path / "stories.jsonl"  # the first 60 Reuters stories, as the docs' command
    with (shared_data / "reuters21578" / "train.jsonl").open(encoding="utf-8") as lines:
        stories.write_text("".join(next(lines) for _ in range(60)), encoding="utf-8")
    run_script("-m", "bert_tf2.data_gen.pretraining.create_pretraining_data", f"--input_file={stories}",
               "--input_format=jsonl",
               f"--output_file={tmp_path / 'r.tfrecord'}", f"--vocab_file={adapted / 'vocab.txt'}",
               "--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=1")
    import tensorflow as tf

    spec = {"input_ids": tf.io.FixedLenFeature([64], tf.int64)}
    ids = read_records(str(tmp_path / "r.tfrecord"), spec)["input_ids"]
    new_ids = set(extend_vocab.unused_ids(tokenization.load_vocab_tokens(minilm_dir /
                                                                         "vocab.txt"))[:4])
    assert new_ids & set(ids.ravel().tolist())  # "mln", "bundesbank"... appear as one id
    result = run_script("run_pretraining.py", f"--input_file={tmp_path / 'r.tfrecord'}",
                        f"--output_dir={tmp_path / 'out'}", f"--init_checkpoint={adapted}",
                        "--do_train", "--train_batch_size=4", "--max_seq_length=64",
                        "--max_predictions_per_seq=10", "--num_train_steps=2",
                        "--num_warmup_steps=1")
    assert "left initialised (allowed): cls/predictions/transform/dense/kernel" in result.stderr
    assert (tmp_path / "out" / "model.ckpt-2.index").is_file()
