"""run_pretraining.py end to end on records made from the shared corpus: train, evaluate, export,
survive SIGKILL, continue as phase 2, start from real weights, the budget recipe."""
import json
import os
import signal
import subprocess
import sys
import time

import conftest
import numpy as np
import pytest
import tensorflow as tf
import warm_python

from bert_tf2.modeling import checkpoints
from bert_tf2.modeling.encoder import BertEncoder
from bert_tf2.modeling.models import BertPretrainer

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = {**conftest.TINY, "max_position_embeddings": 512}


def python(*args):
    return warm_python.run([sys.executable, *args], cwd=REPO, timeout=600)


@pytest.fixture(scope="module")
def corpus(shared_data, minilm_dir, tmp_path_factory):
    """Records at sequence lengths 64 and 128 from 300 kB of WikiText-2, and a tiny config."""
    root = tmp_path_factory.mktemp("pretraining")
    text = (shared_data / "corpus" / "wikitext-2" / "valid.txt").read_bytes()[:300_000]
    (root / "wiki.txt").write_bytes(text)
    for length, predictions in ((64, 10), (128, 20)):
        result = python("-m", "bert_tf2.data_gen.pretraining.create_pretraining_data", f"--input_file={root}/wiki.txt",
                        f"--output_file={root}/records-{length}.tfrecord",
                        f"--vocab_file={minilm_dir}/vocab.txt", f"--max_seq_length={length}",
                        f"--max_predictions_per_seq={predictions}", "--dupe_factor=1")
        assert result.returncode == 0, result.stderr
    (root / "bert_config.json").write_text(json.dumps(TINY))
    return root


def pretrain(corpus, output_dir, *extra, length=64, steps=30):
    predictions = 10 if length == 64 else 20
    return ["run_pretraining.py", f"--input_file={corpus}/records-{length}.tfrecord",
            f"--output_dir={output_dir}", f"--bert_config_file={corpus}/bert_config.json",
            f"--max_seq_length={length}", f"--max_predictions_per_seq={predictions}",
            "--train_batch_size=8", "--learning_rate=1e-3", f"--num_train_steps={steps}",
            "--num_warmup_steps=3", "--steps_per_loop=5", "--save_checkpoints_steps=10",
            *extra]


def tf1_tensors(folder):
    reader = tf.train.load_checkpoint(str(folder / "bert_model.ckpt"))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def test_train_evaluate_export(corpus, tmp_path):
    out = tmp_path / "run"
    result = python(*pretrain(corpus, out, "--do_train", "--do_eval", "--max_eval_steps=5"))
    assert result.returncode == 0, result.stderr
    assert "step 30/30" in result.stderr and "examples/s" in result.stderr
    lines = (out / "eval_results.txt").read_text().splitlines()
    keys = [line.split(" = ")[0] for line in lines]
    assert keys == ["global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
                    "next_sentence_accuracy", "next_sentence_loss"]
    values = dict(line.split(" = ") for line in lines)
    assert values["global_step"] == "30"
    assert 0.0 <= float(values["masked_lm_accuracy"]) <= 1.0
    assert np.isfinite(float(values["masked_lm_loss"]))
    # TensorBoard summaries and a TF1 checkpoint the strict loader (and the original) accept.
    assert any(f.startswith("events.") for f in os.listdir(out / "train"))
    model = BertPretrainer(BertEncoder(checkpoints.read_config(out / "tf1")))
    report = checkpoints.load_checkpoint(model, out / "tf1")
    assert len(report.loaded) == 5 + 2 * 16 + 2 + 7 and not report.initialised
    assert tf1_tensors(out / "tf1")["global_step"] == 30


@pytest.mark.slow  # resume after a kill: test_faults.py's chains, byte for byte (test-all)
def test_sigkill_then_restart_ends_at_the_uninterrupted_weights(corpus, tmp_path):
    straight = python(*pretrain(corpus, tmp_path / "straight", "--do_train", steps=40))
    assert straight.returncode == 0, straight.stderr
    killed_dir = tmp_path / "killed"
    process = warm_python.start([sys.executable, *pretrain(corpus, killed_dir, "--do_train",
                                                          steps=40)],
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (killed_dir / "model.ckpt-20.index").exists():
        assert process.poll() is None and time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed_dir / "tf1").exists()  # it really died before the end
    resumed = python(*pretrain(corpus, killed_dir, "--do_train", steps=40))
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stderr
    a, b = tf1_tensors(tmp_path / "straight" / "tf1"), tf1_tensors(killed_dir / "tf1")
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=0, atol=1e-5, err_msg=name)


def test_phase_two_at_longer_sequences_continues_from_phase_one(corpus, tmp_path):
    phase1 = python(*pretrain(corpus, tmp_path / "p1", "--do_train", steps=10))
    assert phase1.returncode == 0, phase1.stderr
    phase2 = python(*pretrain(corpus, tmp_path / "p2", "--do_eval", "--max_eval_steps=3",
                              f"--init_checkpoint={tmp_path / 'p1'}", length=128))
    assert phase2.returncode == 0, phase2.stderr
    assert "restored the model weights from training checkpoint" in phase2.stderr
    # Phase 2 evaluated exactly the phase-1 weights (no training step was taken).
    p1 = tf1_tensors(tmp_path / "p1" / "tf1")
    model = BertPretrainer(BertEncoder(checkpoints.read_config(tmp_path / "p1" / "tf1")))
    checkpoints.load_initial_weights(model, tmp_path / "p1")
    for name, variable in checkpoints.names.tf1_variable_map(model).items():
        np.testing.assert_array_equal(variable.numpy(), p1[name])


def test_start_from_real_hugging_face_weights_with_dynamic_masking(corpus, minilm_dir, tmp_path):
    config = tmp_path / "bert_config.json"
    checkpoints.read_config(minilm_dir).to_json_file(config)
    out = tmp_path / "run"
    result = python("run_pretraining.py", f"--input_file={corpus}/records-64.tfrecord",
                    f"--output_dir={out}", f"--bert_config_file={config}", "--do_train",
                    f"--init_checkpoint={minilm_dir}", "--dynamic_masking",
                    f"--vocab_file={minilm_dir}/vocab.txt", "--max_seq_length=64",
                    "--max_predictions_per_seq=10", "--train_batch_size=4",
                    "--num_train_steps=2", "--num_warmup_steps=0", "--steps_per_loop=1")
    assert result.returncode == 0, result.stderr
    assert "left initialised (allowed): cls/predictions/transform/dense/kernel" in result.stderr
    assert (out / "tf1" / "vocab.txt").exists()


def test_budget_recipe_on_packed_records_ramps_its_batch_and_stops_on_time(corpus, minilm_dir,
                                                                          tmp_path):
    vocab = f"--vocab_file={minilm_dir}/vocab.txt"
    result = python("-m", "bert_tf2.data_gen.pretraining.create_pretraining_data",
                    f"--input_file={corpus}/wiki.txt", f"--output_file={tmp_path}/packed.tfrecord",
                    vocab, "--pack_sentences", "--max_seq_length=64",
                    "--max_predictions_per_seq=20", "--masked_lm_prob=0.3", "--dupe_factor=1")
    assert result.returncode == 0, result.stderr
    out = tmp_path / "run"
    # 12 s: the first step's compile (1 s alone in bfloat16 on 2 Xeon cores since 7de8fd0 traced
    # the ramped update once; over 9 s before, beside another test) leaves loops to ramp in.
    result = python("run_pretraining.py", "--recipe=budget", "--train_budget_minutes=0.2",
                    f"--input_file={tmp_path}/packed.tfrecord", f"--output_dir={out}",
                    f"--bert_config_file={corpus}/bert_config.json", vocab,
                    "--max_seq_length=64", "--max_predictions_per_seq=20",
                    "--train_batch_size=8", "--num_accumulation_steps=2", "--batch_size_ramp=0.6",
                    "--save_checkpoints_steps=100000", "--do_train", "--do_eval",
                    "--max_eval_steps=2")
    assert result.returncode == 0, result.stderr
    assert ("--recipe=budget sets --no_nsp=True --dynamic_masking=True --masked_lm_prob=0.3 "
            "--hidden_dropout_prob=0.0 --attention_probs_dropout_prob=0.0 "
            "--warmup_proportion=0.75 --warmup_start_fraction=0.25 --learning_rate=0.0003"
            ) in result.stderr
    # bfloat16 where this machine computes in it (a CPU with AMX, ...), float32 elsewhere
    from bert_tf2.engine.distribution import bfloat16_in_hardware

    assert ("--learning_rate=0.0003 --dtype=mixed_bfloat16" in result.stderr) is (
        bfloat16_in_hardware())
    first = next(line for line in result.stderr.splitlines() if "step 1/100000 | loss" in line)
    assert float(first.split("| lr ")[1].split()[0]) == pytest.approx(7.5e-5, rel=0.01)
    # One micro-batch of 4 rows per update at first, two (the batch of 8) from 60% of the budget.
    batches = [int(line.split("| batch ")[1].split()[0]) for line in result.stderr.splitlines()
               if "| batch " in line]
    assert batches[0] == 4 and batches[-1] == 8 and batches == sorted(batches)
    results = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text().split(
        "\n") if line)
    assert set(results) == {"global_step", "loss", "masked_lm_accuracy", "masked_lm_loss"}
    steps = int(results["global_step"])
    spent = json.loads((out / "time_budget.json").read_text())
    assert list(spent) == [str(steps)] and 12.0 <= spent[str(steps)]["seconds"] < 21.0  # one 12 s
    used = spent[str(steps)]["micro_batches"]
    assert steps < used < 2 * steps
    assert "budget 100.0% spent" in result.stderr
    # The export keeps bert_config.json's dropout (0.1), which fine-tuning wants.
    assert checkpoints.read_config(out / "tf1").hidden_dropout_prob == 0.1
    assert tf1_tensors(out / "tf1")["global_step"] == steps


@pytest.mark.parametrize("flags,message", [
    (["--input_file=/nonexistent/*.tfrecord"], "--input_file: no file matches"),
    (["--dynamic_masking"], "--dynamic_masking needs --vocab_file"),
    (["--num_accumulation_steps=3"], "is not a multiple of --num_accumulation_steps=3"),
    (["--recipe=budget"], "--recipe=budget needs --train_budget_minutes"),
    (["--warmup_proportion=0.5"], "--warmup_proportion shapes the schedule of "
                                  "--train_budget_minutes; without a budget, set "
                                  "--num_warmup_steps"),
    (["--batch_size_ramp=0.6"], "--batch_size_ramp shapes the schedule of "
                                "--train_budget_minutes; without a budget, the batch is "
                                "--train_batch_size throughout"),
    (["--train_budget_minutes=1", "--batch_size_ramp=0.6"],
     "--batch_size_ramp=0.6 grows each update from one micro-batch to --num_accumulation_steps "
     "of them: set --num_accumulation_steps above 1"),
    (["--dynamic_masking", "--masked_lm_prob=0.3"],
     "--masked_lm_prob=0.3 masks up to 19 of 64 tokens, but the records hold "
     "--max_predictions_per_seq=10: make the records with --max_predictions_per_seq=19 or more"),
])
def test_bad_flags_are_clear(corpus, tmp_path, flags, message):
    result = python(*pretrain(corpus, tmp_path / "run", "--do_train"), *flags)
    assert result.returncode != 0
    assert message in result.stderr


AMX = {"avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}  # Intel from Sapphire Rapids on


@pytest.mark.parametrize("flags, onednn, bfloat16", [
    (AMX, None, True),
    (AMX, "0", False),  # TensorFlow's own kernels, without oneDNN's AMX code
    ({"avx512f", "avx512_bf16", "avx512_vnni"}, None, False),  # AMD Zen 4/5: no AMX
    (set(), None, False),  # flags unreadable
])
def test_the_budget_recipe_computes_in_bfloat16_on_a_cpu_with_amx(monkeypatch, flags, onednn,
                                                                   bfloat16):
    """On TensorFlow with no GPU or TPU, the recipe's bfloat16 follows the CPU's AMX, whose
    bfloat16 gave 1.26x the updates in 3 minutes and a better model (docs/pretraining.md)."""
    import tensorflow as tf

    from bert_tf2.engine import distribution

    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [])
    monkeypatch.setattr(distribution, "cpu_flags", lambda: frozenset(flags))
    if onednn is None:
        monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    else:
        monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", onednn)
    assert distribution.bfloat16_in_hardware() is bfloat16


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    from bert_tf2.engine.distribution import cpu_flags

    (tmp_path / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Some CPU\n"
                                      "flags\t\t: fpu avx2 amx_bf16 amx_tile\n\nprocessor\t: 1\n"
                                      "flags\t\t: fpu avx2 amx_bf16 amx_tile\n")
    assert cpu_flags(str(tmp_path / "cpuinfo")) == {"fpu", "avx2", "amx_bf16", "amx_tile"}
    assert cpu_flags(str(tmp_path / "absent")) == frozenset()
