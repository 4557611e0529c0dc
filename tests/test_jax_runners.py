"""The runners on JAX, in processes where TensorFlow cannot be imported (as in `make venv-jax`):
every runner trains, evaluates, predicts and writes the files it writes on TensorFlow; a run
killed with SIGKILL anywhere resumes to the uninterrupted run's files byte for byte; two host
devices give one device's losses; what JAX cannot do is refused in one line; and TensorFlow
exports what JAX trained."""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import reference_runs
import warm_python
from conftest import (
    REPO,
    KillChain,
    listing,
    read_results,
    read_tsv,
    run_script,
    wait_until_stopped,
)
from test_run_ner import conll_slice

from bert_tf2.process.fault_points import KILL_VARIABLE

pytestmark = pytest.mark.integration

pytest.importorskip("jax", reason="jax is not installed (make test installs setup.py's jax extra)")


@pytest.fixture(scope="module")
def no_tensorflow(tmp_path_factory):
    """A folder whose `tensorflow` and `tensorflow_text` packages fail to import, as they do where
    they are not installed; first on PYTHONPATH, it reaches every child process too."""
    folder = tmp_path_factory.mktemp("no_tensorflow")
    for name in ("tensorflow", "tensorflow_text"):
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n")
    return folder


def without_tensorflow(no_tensorflow) -> str:
    """PYTHONPATH with the folder that hides TensorFlow first (the rest kept)."""
    return os.pathsep.join(filter(None, [str(no_tensorflow), os.environ.get("PYTHONPATH")]))


def run_jax(no_tensorflow, script, *flags, env=None, check=True):
    """`script` (a runner of this checkout, or `-m module`) on JAX without TensorFlow."""
    command = [sys.executable, *(flags if script == "-m" else [str(REPO / script), *flags])]
    environment = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": without_tensorflow(no_tensorflow),
                   **(env or {})}
    result = warm_python.run(command, cwd=REPO, env=environment, timeout=900)
    if check and result.returncode:
        raise AssertionError(f"{script} failed on JAX:\n{result.stderr[-4000:]}")
    return result


def test_tensorflow_is_not_importable_there(no_tensorflow):
    result = run_jax(no_tensorflow, "-m", "-c", "import tensorflow", check=False)
    assert result.returncode == 1 and "No module named 'tensorflow'" in result.stderr


# Checkpoints are the one deliberate difference in what a run writes (docs/backends.md).
TF_ONLY = {"checkpoint", "best/model.index", "best/model.data-00000-of-00001"}


def _without_checkpoints(names):
    return {n for n in names if n not in TF_ONLY and not n.startswith("model.ckpt-")
            and n != "best/weights.safetensors"}


def assert_same_run(reference, resumed, weights, results, tables):
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


@pytest.fixture(scope="module")
def mrpc(mrpc_small):
    return mrpc_small


def classifier(data, checkpoint, out, *extra):
    """The small MRPC classifier of the kill chains (`reference_runs.classifier`)."""
    return reference_runs.classifier(data, checkpoint, out, None, *extra)


@pytest.fixture(scope="module")
def classifier_runs(mrpc, tiny_checkpoint, no_tensorflow, classifier_reference,
                    tmp_path_factory):
    """The same classifier command on TensorFlow (a copy of the run made once for every file,
    whose export is beside its folder: a refused run here locks the copy) and on JAX (from the
    TF1 checkpoint, read without TensorFlow)."""
    import shutil

    root = tmp_path_factory.mktemp("classifier")
    command = classifier(mrpc, tiny_checkpoint, root / "jax")
    jax_run = run_jax(no_tensorflow, *command)
    shutil.copytree(classifier_reference["out"], root / "tf")
    return {"root": root, "jax": root / "jax", "tf": root / "tf",
            "log": jax_run.stderr, "tf_log": classifier_reference["log"], "command": command,
            "results": read_results(root / "jax" / "eval_results.txt")}


def test_classifier_on_jax_writes_the_files_tensorflow_writes(classifier_runs):
    jax_out, tf_out = classifier_runs["jax"], classifier_runs["tf"]
    assert _without_checkpoints(listing(jax_out)) == _without_checkpoints(listing(tf_out))
    assert {"model.ckpt-12.safetensors", "best/weights.safetensors"} <= listing(jax_out)
    ours, theirs = read_results(jax_out / "eval_results.txt"), read_results(
        tf_out / "eval_results.txt")
    assert set(ours) == set(theirs) and ours["global_step"] == theirs["global_step"] == 12
    # Four evaluations (steps 3, 6, 9, 12), each recorded once, as on TensorFlow.
    assert classifier_runs["log"].count("***** Eval results *****") == 4
    assert classifier_runs["tf_log"].count("***** Eval results *****") == 4
    assert 0.3 < ours["eval_accuracy"] <= 1.0 and 0.0 < ours["eval_loss"] < 2.0
    tests = read_tsv(jax_out / "test_results.tsv")
    assert len(tests) == 8 and all(abs(sum(map(float, row)) - 1) < 1e-5 for row in tests)
    assert read_tsv(jax_out / "eval_predictions.tsv")[0] == read_tsv(
        tf_out / "eval_predictions.tsv")[0]


JAX_KILLS = ["features@1", "train_loop@1", "checkpoint_write@1", "evaluation@1", "best_swap@1",
             "eval_results@1", "best_swap@2", "evaluation@2", "prediction@1"]


@pytest.fixture(scope="module")
def jax_chain(mrpc, tiny_checkpoint, no_tensorflow, tmp_path_factory):
    """The JAX classifier killed at every point of its run (one kill per test, then the run that
    finishes): its safetensors checkpoints and best/ resume as TensorFlow's do."""
    out = tmp_path_factory.mktemp("jax_chain") / "out"
    chain = KillChain(lambda command, env: run_jax(no_tensorflow, *command, env=env, check=False),
                      classifier(mrpc, tiny_checkpoint, out), JAX_KILLS)
    chain.folder = out
    return chain


@pytest.mark.parametrize("point", JAX_KILLS)
def test_a_jax_run_killed_at(point, jax_chain):
    jax_chain.kill_through(point)


def test_a_killed_jax_run_resumes_to_the_uninterrupted_runs_files(classifier_runs, jax_chain):
    final = jax_chain.finish()
    assert "did not finish before the run was stopped" not in final.stderr
    assert_same_run(classifier_runs["jax"], jax_chain.folder,
                    ["best/weights.safetensors", "model.ckpt-12.safetensors", "run_config.json"],
                    ["eval_results.txt", "best/eval_results.txt"],
                    ["test_results.tsv", "test_predictions.tsv", "eval_predictions.tsv"])


def test_two_host_devices_give_one_devices_losses(classifier_runs, mrpc, tiny_checkpoint,
                                                  no_tensorflow, tmp_path):
    """`--distribution_strategy=mirrored` over two CPU devices (XLA's host platform split in
    two): each batch is split across them, and the losses, dropout included, are those of the
    same command on one device (classifier_runs' JAX run)."""
    two = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    mirrored = run_jax(no_tensorflow, *classifier(mrpc, tiny_checkpoint, tmp_path / "two",
                                                  "--distribution_strategy=mirrored"), env=two)
    one = classifier_runs["log"]
    assert "on 2 replica(s)" in mirrored.stderr and "on 1 replica(s)" in one

    def losses(log):
        return [float(line.split("| loss ")[1].split()[0]) for line in log.splitlines()
                if "| loss " in line]

    assert len(losses(one)) == 4
    np.testing.assert_allclose(losses(mirrored.stderr), losses(one), rtol=1e-5)
    a, b = classifier_runs["results"], read_results(tmp_path / "two" / "eval_results.txt")
    assert a.keys() == b.keys()
    for key in a:
        assert abs(a[key] - b[key]) < 1e-5, key


def test_tensorflow_exports_what_jax_trained(classifier_runs, mrpc, tmp_path):
    """The same command on TensorFlow, without --do_train and with --export_dir, exports the
    JAX run's best weights (best/weights.safetensors): the SavedModel answers the test pairs'
    raw text with JAX's probabilities."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the export's tokenizer ops)

    out = classifier_runs["jax"]
    command = [flag for flag in classifier_runs["command"] if flag != "--do_train"]
    export = tmp_path / "export"
    result = run_script(*command, f"--export_dir={export}")
    assert "restored the best weights" in result.stderr
    pairs = [(row[3], row[4]) for row in read_tsv(mrpc / "test.tsv")[1:]]
    served = tf.saved_model.load(str(export)).signatures["serve_text"](
        text_a=tf.constant([a for a, _ in pairs]), text_b=tf.constant([b for _, b in pairs]))
    jax_rows = read_tsv(out / "test_predictions.tsv")[1:]
    assert len(jax_rows) == len(pairs) == 8
    np.testing.assert_allclose(served["probabilities"].numpy(),
                               [[float(row[2]), float(row[3])] for row in jax_rows], atol=2e-5)
    assert [x.decode() for x in served["label"].numpy()] == [row[1] for row in jax_rows]


def snapshot(folder):
    """Every file's size and modification time: what a refused run must leave as it was."""
    return {path: (path.stat().st_size, path.stat().st_mtime_ns)
            for path in folder.rglob("*") if path.is_file()}


def test_a_run_folder_remembers_its_backend(classifier_runs, no_tensorflow):
    """The same training command on the other backend is refused in one line naming the backend
    that trained the folder, in both directions, and touches nothing in it."""
    jax_out, tf_out = classifier_runs["jax"], classifier_runs["tf"]
    assert json.loads((jax_out / "run_config.json").read_text())["backend"] == "jax"
    assert json.loads((tf_out / "run_config.json").read_text())["backend"] == "tensorflow"
    for out, other, run in ((jax_out, "tensorflow", lambda c: run_script(*c, check=False)),
                            (tf_out, "jax", lambda c: run_jax(no_tensorflow, *c, check=False))):
        trained_on = "jax" if other == "tensorflow" else "tensorflow"
        command = [flag if not flag.startswith("--output_dir=") else f"--output_dir={out}"
                   for flag in classifier_runs["command"]]
        before = snapshot(out)
        result = run(command)
        assert result.returncode == 2, result.stderr[-2000:]
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            f"run_classifier.py: error: {out} holds a run trained on KERAS_BACKEND={trained_on}"
        ), lines
        assert f"run the same command with KERAS_BACKEND={trained_on}" in lines[0]
        assert snapshot(out) == before


def test_what_jax_cannot_do_is_refused_in_one_line(mrpc, tiny_checkpoint, no_tensorflow,
                                                   tmp_path):
    export = run_jax(no_tensorflow, *classifier(mrpc, tiny_checkpoint, tmp_path / "a",
                                                f"--export_dir={tmp_path / 'export'}"),
                     check=False)
    assert export.returncode == 2
    line = export.stderr.strip().splitlines()[-1]
    assert line.startswith("run_classifier.py: error: --export_dir writes a TensorFlow "
                           "SavedModel: not on KERAS_BACKEND=jax")
    assert "--do_train left out" in line and len(export.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "a").exists() and not (tmp_path / "export").exists()
    packed = run_jax(no_tensorflow, *classifier(mrpc, tiny_checkpoint, tmp_path / "b",
                                                "--pack_examples"), check=False)
    assert packed.returncode == 2 and "--pack_examples runs on TensorFlow only" in packed.stderr
    torch = run_jax(no_tensorflow, *classifier(mrpc, tiny_checkpoint, tmp_path / "c"),
                    env={"KERAS_BACKEND": "torch"}, check=False)
    assert torch.returncode == 2
    assert torch.stderr.strip().splitlines() == [
        "run_classifier.py: error: the runners train and predict on the tensorflow and jax "
        "backends, not torch (KERAS_BACKEND); the encoder runs on torch (docs/backends.md)"]


@pytest.fixture(scope="module")
def pretraining_records(shared_data, tiny_checkpoint, no_tensorflow, tmp_path_factory):
    path = tmp_path_factory.mktemp("records") / "records.tfrecord"
    run_jax(no_tensorflow, "-m", "-m", "bert_tf2.data_gen.pretraining.create_pretraining_data",
            f"--input_file={shared_data}/corpus/wikitext-2/valid.txt", f"--output_file={path}",
            f"--vocab_file={tiny_checkpoint}/vocab.txt", "--max_seq_length=64",
            "--max_predictions_per_seq=10", "--dupe_factor=1")
    return path


def pretraining(records, checkpoint, out, *extra):
    return ["run_pretraining.py", f"--input_file={records}", f"--output_dir={out}",
            f"--bert_config_file={checkpoint}/bert_config.json", "--max_seq_length=64",
            "--max_predictions_per_seq=10", "--train_batch_size=8", "--learning_rate=1e-3",
            "--num_train_steps=20", "--num_warmup_steps=3", "--steps_per_loop=5",
            "--save_checkpoints_steps=10", "--do_train", "--do_eval", "--max_eval_steps=5",
            f"--vocab_file={checkpoint}/vocab.txt", *extra]


def test_pretraining_on_jax_resumes_and_exports_the_originals_checkpoint(
        pretraining_records, tiny_checkpoint, no_tensorflow, tmp_path):
    straight = tmp_path / "straight"
    run_jax(no_tensorflow, *pretraining(pretraining_records, tiny_checkpoint, straight,
                                        "--dynamic_masking"))
    results = read_results(straight / "eval_results.txt")
    assert {"masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
            "next_sentence_loss", "loss", "global_step"} == set(results)
    assert results["global_step"] == 20
    resumed = tmp_path / "resumed"
    command = pretraining(pretraining_records, tiny_checkpoint, resumed, "--dynamic_masking")
    for point in ("train_loop@3", "checkpoint_write@1", "tf1_export@1"):
        killed = run_jax(no_tensorflow, *command, env={KILL_VARIABLE: point}, check=False)
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr[-2000:])
    run_jax(no_tensorflow, *command)
    assert_same_run(straight, resumed, ["model.ckpt-20.safetensors", "tf1/bert_model.ckpt.index",
                                        "tf1/bert_model.ckpt.data-00000-of-00001"],
                    ["eval_results.txt"], [])
    # The export is Google's TF1 format, read by TensorFlow as the original reads it.
    import tensorflow as tf
    from safetensors.numpy import load_file

    reader = tf.train.load_checkpoint(str(straight / "tf1" / "bert_model.ckpt"))
    assert int(reader.get_tensor("global_step")) == 20
    state = load_file(str(straight / "model.ckpt-20.safetensors"))
    word = next(v for k, v in state.items() if k.endswith("embeddings/word_embeddings")
                and k.startswith("model/"))
    np.testing.assert_array_equal(reader.get_tensor("bert/embeddings/word_embeddings"), word)
    assert {"bert_config.json", "vocab.txt"} <= set(os.listdir(straight / "tf1"))


@pytest.mark.slow  # repeats the JAX runs of the classifier, pretraining and
# extract_features on other tasks (make test-all)
def test_ner_squad_and_multiple_choice_run_on_jax(shared_data, tiny_checkpoint, no_tensorflow,
                                                  tmp_path):
    conll = conll_slice(shared_data, tmp_path / "conll", {"train.txt": 2500, "valid.txt": 700})
    ner = run_jax(no_tensorflow, "run_ner.py", f"--data_dir={conll}",
                  f"--output_dir={tmp_path / 'ner'}",
                  f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}",
                  "--max_seq_length=32", "--doc_stride=16", "--train_batch_size=16",
                  "--num_train_epochs=1", "--learning_rate=2e-3", "--do_train", "--do_eval",
                  "--do_predict", "--predict_file=" + str(conll / "valid.txt"))
    assert "eval_f1" in read_results(tmp_path / "ner" / "eval_results.txt")
    predicted = (tmp_path / "ner" / "test_predictions.txt").read_text(encoding="utf-8")
    words = [line for line in (conll / "valid.txt").read_text().splitlines()
             if line.strip() and not line.startswith("-DOCSTART-")]
    assert len([line for line in predicted.splitlines() if line.strip()]) == len(words)
    del ner
    squad = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text())
    small = {"version": "1.1", "data": [{"title": squad["data"][0]["title"],
                                         "paragraphs": squad["data"][0]["paragraphs"][:4]}]}
    (tmp_path / "squad.json").write_text(json.dumps(small))
    run_jax(no_tensorflow, "run_squad.py", f"--train_file={tmp_path / 'squad.json'}",
            f"--predict_file={tmp_path / 'squad.json'}", f"--output_dir={tmp_path / 'squad'}",
            f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}", "--max_seq_length=96",
            "--doc_stride=48", "--train_batch_size=8", "--num_train_epochs=1", "--do_train",
            "--do_predict")
    predictions = json.loads((tmp_path / "squad" / "predictions.json").read_text())
    questions = [qa["id"] for p in small["data"][0]["paragraphs"] for qa in p["qas"]]
    assert sorted(predictions) == sorted(questions)
    assert (tmp_path / "squad" / "nbest_predictions.json").is_file()
    swag = shared_data / "swag_sample" / "val_first91.csv"
    run_jax(no_tensorflow, "run_multiple_choice.py", "--task_name=swag", f"--train_file={swag}",
            f"--eval_file={swag}", f"--predict_file={swag}", f"--output_dir={tmp_path / 'mc'}",
            f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}", "--max_seq_length=48",
            "--train_batch_size=8", "--num_train_epochs=1", "--do_train", "--do_eval",
            "--do_predict")
    assert "eval_accuracy" in read_results(tmp_path / "mc" / "eval_results.txt")
    assert len(read_tsv(tmp_path / "mc" / "test_results.tsv")) == 91


# PyTorch in make test-all: the same runner on another backend (the encoder on PyTorch is held to
# TensorFlow's in test_backends.py)
@pytest.mark.parametrize("backend", ["jax", pytest.param("torch", marks=pytest.mark.slow)])
def test_extract_features_on_jax_and_pytorch_writes_tensorflows_lines(
        backend, shared_data, minilm_dir, no_tensorflow, tmp_path):
    if backend == "torch":
        pytest.importorskip("torch", reason="torch is not installed (make test installs it)")
    rows = (shared_data / "glue" / "STS-B" / "dev.tsv").read_text(encoding="utf-8").split("\n")
    (tmp_path / "lines.txt").write_text("\n".join(row.split("\t")[7] for row in rows[1:41]) + "\n")
    flags = [f"--input_file={tmp_path / 'lines.txt'}", f"--init_checkpoint={minilm_dir}",
             "--layers=-1,-2", "--max_seq_length=64", "--batch_size=8"]
    run_jax(no_tensorflow, "extract_features.py", *flags,
            f"--output_file={tmp_path / 'ours.jsonl'}", env={"KERAS_BACKEND": backend})
    run_script("extract_features.py", *flags, f"--output_file={tmp_path / 'tf.jsonl'}")
    ours = [json.loads(line) for line in (tmp_path / "ours.jsonl").read_text().splitlines()]
    theirs = [json.loads(line) for line in (tmp_path / "tf.jsonl").read_text().splitlines()]
    assert len(ours) == len(theirs) == 40
    worst = 0.0
    for a, b in zip(ours, theirs):
        assert a["linex_index"] == b["linex_index"]
        assert [f["token"] for f in a["features"]] == [f["token"] for f in b["features"]]
        for fa, fb in zip(a["features"], b["features"]):
            for la, lb in zip(fa["layers"], fb["layers"]):
                assert la["index"] == lb["index"]
                worst = max(worst, np.abs(np.array(la["values"]) - np.array(lb["values"])).max())
    assert worst <= 2e-5  # values are written with 6 decimals, as the original's


def test_sigterm_on_jax_is_one_line_and_the_rerun_ends_as_the_uninterrupted_run(
        classifier_runs, mrpc, tiny_checkpoint, no_tensorflow, tmp_path):
    from bert_tf2.process.fault_points import STOP_VARIABLE

    out = tmp_path / "out"
    command = [sys.executable, *[str(REPO / part) if part.endswith(".py") else part
                                 for part in classifier(mrpc, tiny_checkpoint, out)]]
    process = warm_python.start(command, cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE,
                                env={**os.environ, "KERAS_BACKEND": "jax",
                                     "PYTHONPATH": without_tensorflow(no_tensorflow),
                                     STOP_VARIABLE: "train_loop@2"})
    wait_until_stopped(process)
    os.kill(process.pid, signal.SIGTERM)
    os.kill(process.pid, signal.SIGCONT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 143, stderr[-3000:]
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"run_classifier.py: interrupted by SIGTERM at training step 6 of 12; nothing "
        f"half-written is left; the same command resumes from {out}/model.ckpt-3.safetensors "
        f"(step 3)")
    run_jax(no_tensorflow, *classifier(mrpc, tiny_checkpoint, out))
    assert_same_run(classifier_runs["jax"], out,
                    ["best/weights.safetensors", "model.ckpt-12.safetensors"],
                    ["eval_results.txt", "best/eval_results.txt"],
                    ["test_results.tsv", "eval_predictions.tsv"])


def test_two_processes_train_as_one_process(mrpc, tiny_checkpoint, no_tensorflow, tmp_path):
    """`--distribution_strategy=multi_worker_mirrored` on JAX: two processes on loopback, found
    through TF_CONFIG as on TensorFlow (`jax.distributed`), each reading its share of every
    batch, train, evaluate and predict as one process at the same global batch; the chief alone
    writes the outputs, the other its scratch folder; each writes its share of every checkpoint,
    which then holds what one process's does."""
    from test_multi_worker import free_ports

    flags = ["--bucket_by_length=false"]  # several processes read untrimmed, unbucketed rows
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        config = json.dumps({"cluster": {"worker": workers},
                             "task": {"type": "worker", "index": index}})
        processes.append(warm_python.start(
            [sys.executable, str(REPO / "run_classifier.py"),
             *classifier(mrpc, tiny_checkpoint, tmp_path / "two", *flags,
                         "--distribution_strategy=multi_worker_mirrored")[1:]],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env={**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": without_tensorflow(no_tensorflow),
                 "TF_CONFIG": config}))
    one = run_jax(no_tensorflow, *classifier(mrpc, tiny_checkpoint, tmp_path / "one", *flags))
    logs = []
    for process in processes:
        _, stderr = process.communicate(timeout=900)
        assert process.returncode == 0, stderr[-3000:]
        logs.append(stderr)
    assert all("on 2 replica(s)" in log for log in logs)

    def losses(log):
        return [float(line.split("| loss ")[1].split()[0]) for line in log.splitlines()
                if "| loss " in line]

    assert losses(logs[0]) == losses(logs[1]) == losses(one.stderr) and len(losses(one.stderr)) == 4
    a, b = read_results(tmp_path / "two" / "eval_results.txt"), read_results(
        tmp_path / "one" / "eval_results.txt")
    assert a.keys() == b.keys() and all(abs(a[k] - b[k]) < 1e-6 for k in a)
    np.testing.assert_allclose(np.loadtxt(tmp_path / "two" / "test_results.tsv"),
                               np.loadtxt(tmp_path / "one" / "test_results.tsv"), atol=1e-6)
    assert (tmp_path / "two" / "model.ckpt-12.safetensors").is_file()
    for index, log in enumerate(logs):
        assert f"process {index} wrote its share of {tmp_path / 'two'}/model.ckpt-12" in log
    from safetensors.numpy import load_file

    two = load_file(tmp_path / "two" / "model.ckpt-12.safetensors")
    one_state = load_file(tmp_path / "one" / "model.ckpt-12.safetensors")
    assert two.keys() == one_state.keys()
    for key in two:
        np.testing.assert_allclose(two[key], one_state[key], atol=1e-5, err_msg=key)
    assert not list((tmp_path / "two").glob("*_temp"))
    assert not list((tmp_path / "two" / "worker_1_scratch").glob("model.ckpt-*"))
    assert not (tmp_path / "two" / "worker_1_scratch" / "eval_results.txt").exists()
