"""JAX's training beyond one device and one task: two host devices and two processes give one
device's losses; pretraining resumes after a kill and exports the original's TF1 checkpoint;
extract_features writes TensorFlow's lines; NER, SQuAD and SWAG run (make test-all). Every run is
in a process where TensorFlow cannot be imported (the classifier's runs: test_jax_runners.py), but
one: where TensorFlow is installed, a JAX run does not import it."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import reference_runs
import warm_python
from conftest import REPO, assert_same_jax_run, read_results, read_tsv, run_script
from reference_runs import pretraining, run_jax
from test_run_ner import conll_slice

pytestmark = pytest.mark.integration

pytest.importorskip("jax", reason="jax is not installed (make test installs setup.py's jax extra)")


def classifier(data, checkpoint, out, *extra):
    """The small MRPC classifier of the kill chains (`reference_runs.classifier`)."""
    return reference_runs.classifier(data, checkpoint, out, None, *extra)


def test_two_host_devices_give_one_devices_losses(jax_classifier_reference, mrpc_small,
                                                  tiny_checkpoint, no_tensorflow, tmp_path):
    """`--distribution_strategy=mirrored` over two CPU devices (XLA's host platform split in
    two): each batch is split across them, and the losses, dropout included, are those of the
    same command on one device (the JAX run made once for every file)."""
    two = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    mirrored = run_jax(no_tensorflow, *classifier(mrpc_small, tiny_checkpoint, tmp_path / "two",
                                                  "--distribution_strategy=mirrored"), env=two)
    one = jax_classifier_reference["log"]
    assert "on 2 replica(s)" in mirrored.stderr and "on 1 replica(s)" in one

    def losses(log):
        return [float(line.split("| loss ")[1].split()[0]) for line in log.splitlines()
                if "| loss " in line]

    assert len(losses(one)) == 4
    np.testing.assert_allclose(losses(mirrored.stderr), losses(one), rtol=1e-5)
    a = read_results(jax_classifier_reference["out"] / "eval_results.txt")
    b = read_results(tmp_path / "two" / "eval_results.txt")
    assert a.keys() == b.keys()
    for key in a:
        assert abs(a[key] - b[key]) < 1e-5, key


@pytest.fixture(scope="module")
def jax_records(shared_data, tiny_checkpoint, no_tensorflow, tmp_path_factory):
    """conftest's pretraining records, made by the data tool where TensorFlow cannot be
    imported."""
    path = tmp_path_factory.mktemp("records") / "records.tfrecord"
    run_jax(no_tensorflow, "-m", "-m", "bert_tf2.data_gen.pretraining.create_pretraining_data",
            f"--input_file={shared_data}/corpus/wikitext-2/valid.txt", f"--output_file={path}",
            f"--vocab_file={tiny_checkpoint}/vocab.txt", "--max_seq_length=64",
            "--max_predictions_per_seq=10", "--dupe_factor=1")
    return path


@pytest.fixture(scope="module")
def jax_pretraining(jax_records, tiny_checkpoint, no_tensorflow, tmp_path_factory):
    """Pretraining on JAX with dynamic masking, uninterrupted (`straight`), and the chain of the
    same command killed in a training loop, in a checkpoint write and in the TF1 export
    (`resumed`)."""
    from conftest import KillChain

    root = tmp_path_factory.mktemp("jax_pretraining")
    run_jax(no_tensorflow, *pretraining(jax_records, tiny_checkpoint, root / "straight",
                                        "--dynamic_masking"))
    chain = KillChain(lambda command, env: run_jax(no_tensorflow, *command, env=env, check=False),
                      pretraining(jax_records, tiny_checkpoint, root / "resumed",
                                  "--dynamic_masking"),
                      ["train_loop@3", "checkpoint_write@1", "tf1_export@1"])
    return {"straight": root / "straight", "resumed": root / "resumed", "chain": chain}


def test_pretraining_on_jax_exports_the_originals_checkpoint(jax_pretraining):
    straight = jax_pretraining["straight"]
    results = read_results(straight / "eval_results.txt")
    assert {"masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
            "next_sentence_loss", "loss", "global_step"} == set(results)
    assert results["global_step"] == 20
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


@pytest.mark.parametrize("point", ["train_loop@3", "checkpoint_write@1", "tf1_export@1"])
def test_pretraining_on_jax_killed_at(point, jax_pretraining):
    jax_pretraining["chain"].kill_through(point)


def test_pretraining_on_jax_resumes_to_the_uninterrupted_runs_files(jax_pretraining):
    jax_pretraining["chain"].finish()
    assert_same_jax_run(jax_pretraining["straight"], jax_pretraining["resumed"],
                        ["model.ckpt-20.safetensors", "tf1/bert_model.ckpt.index",
                         "tf1/bert_model.ckpt.data-00000-of-00001"], ["eval_results.txt"], [])


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


# A runner's command as a JAX program with TensorFlow installed; then Keras's own seeding against
# `engine.distribution.set_random_seed`'s.
UNTOUCHED = """
import random, runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as e:
    assert not e.code, e.code
print("tensorflow imported:", "tensorflow" in sys.modules)
import keras, numpy as np
from bert_tf2.engine.distribution import set_random_seed

def draws():
    return (random.random(), float(np.random.rand()),
            keras.ops.convert_to_numpy(keras.random.uniform((3,))).tolist())

set_random_seed(5)
ours = draws()
print("tensorflow imported:", "tensorflow" in sys.modules)
keras.utils.set_random_seed(5)
print("tensorflow imported:", "tensorflow" in sys.modules, "draws equal:", ours == draws())
"""


def test_a_jax_run_leaves_an_installed_tensorflow_unimported(mrpc_small, tiny_checkpoint,
                                                             tmp_path):
    """Keras's `set_random_seed` and tensorboard's event writer import TensorFlow wherever it is
    installed; a JAX run, which needs it for nothing, seeds and writes its summaries without it
    (2.1 s less of a tiny classifier run, engine/event_files.py), with Keras's own seeds."""
    out = tmp_path / "out"
    result = warm_python.run([sys.executable, "-c", UNTOUCHED,
                              *classifier(mrpc_small, tiny_checkpoint, out, "--do_predict=false",
                                          "--num_train_epochs=1")],
                             cwd=REPO, env={**os.environ, "KERAS_BACKEND": "jax"}, timeout=900,
                             warm=True)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.splitlines()[-3:] == [
        "tensorflow imported: False", "tensorflow imported: False",
        "tensorflow imported: True draws equal: True"], result.stdout[-2000:]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for kind, tag in (("train", "loss"), ("eval", "eval_loss")):
        accumulator = EventAccumulator(str(out / kind))
        accumulator.Reload()
        assert [e.step for e in accumulator.Scalars(tag)] == [3, 6], kind


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


def test_two_processes_train_as_one_process(mrpc_small, tiny_checkpoint, no_tensorflow,
                                            tmp_path):
    """`--distribution_strategy=multi_worker_mirrored` on JAX: two processes on loopback, found
    through TF_CONFIG as on TensorFlow (`jax.distributed`), each reading its share of every
    batch, train, evaluate and predict as one process at the same global batch; the chief alone
    writes the outputs, the other its scratch folder; each writes its share of every checkpoint,
    which then holds what one process's does."""
    from conftest import free_ports

    flags = ["--bucket_by_length=false"]  # several processes read untrimmed, unbucketed rows
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        config = json.dumps({"cluster": {"worker": workers},
                             "task": {"type": "worker", "index": index}})
        processes.append(warm_python.start(
            [sys.executable, str(REPO / "run_classifier.py"),
             *classifier(mrpc_small, tiny_checkpoint, tmp_path / "two", *flags,
                         "--distribution_strategy=multi_worker_mirrored")[1:]],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env={**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": reference_runs.without_tensorflow(no_tensorflow),
                 "TF_CONFIG": config}))
    one = run_jax(no_tensorflow, *classifier(mrpc_small, tiny_checkpoint, tmp_path / "one", *flags))
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


def test_a_batch_size_ramp_on_jax_as_on_tensorflow(no_tensorflow, tmp_path):
    """tests/test_training_loop.py's two checks of the ramp, on JAX: held at 4 micro-batches it
    equals accumulating 4 (plain SGD, the same rows), it grows to 4 at 60% of the budget, and a
    run stopped at step 6 resumes past the 12 micro-batches used to the uninterrupted weights."""
    result = run_jax(no_tensorflow, "tests/ramp_training.py", tmp_path, warm=True)
    assert "donated buffers were not usable" not in result.stderr  # JAX's warning, on stderr
    runs = json.loads((tmp_path / "runs.json").read_text())
    weights = np.load(tmp_path / "weights.npz")

    def of(run):
        return {k.split("/", 1)[1]: weights[k] for k in weights.files if k.startswith(run + "/")}

    assert not runs["fixed"]["ramp"] and runs["forced"]["ramp"]
    # Each step function compiled once a run: the variables' first values (not committed to a
    # device) and the steps' outputs (committed) once compiled it twice.
    assert runs["fixed"]["compiled"] == {"train": 1}
    for run in ("forced", "straight", "first", "resumed"):
        assert runs[run]["compiled"] == {"micro": 1, "add": 1, "ramped": 1}, run
    assert runs["fixed"]["step"] == runs["forced"]["step"] == 10
    np.testing.assert_allclose(runs["forced"]["rates"], runs["fixed"]["rates"], rtol=1e-6)
    fixed, forced = of("fixed"), of("forced")
    assert fixed.keys() == forced.keys() and len(fixed) > 10
    for name, value in fixed.items():
        np.testing.assert_allclose(forced[name], value, rtol=0, atol=5e-7, err_msg=name)
    assert runs["forced"]["record"] == {"10": {"seconds": 10.0, "micro_batches": 40}}
    assert runs["straight"]["counts"] == [1, 1, 2, 2, 3, 3, 4, 4, 4, 4]
    assert runs["straight"]["record"] == {"10": {"seconds": 10.0, "micro_batches": 28}}
    assert runs["first"]["counts"] + runs["resumed"]["counts"] == runs["straight"]["counts"]
    assert runs["first"]["record"]["6"] == {"seconds": 6.0, "micro_batches": 12}
    straight, resumed = of("straight"), of("resumed")
    for name, value in straight.items():
        np.testing.assert_allclose(resumed[name], value, rtol=0, atol=1e-6, err_msg=name)
