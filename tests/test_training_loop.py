"""The shared training loop: accumulation, exact resume, non-finite stop, exact metrics, a time
budget."""
import dataclasses
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from tiny_pretraining import PREDICTIONS, config, on_a_step_clock, records

from bert_tf2.engine import time_budget
from bert_tf2.engine.distribution import get_strategy
from bert_tf2.engine.time_budget import TimeBudget
from bert_tf2.engine.training import NonFiniteLossError, Trainer, TrainerConfig
from bert_tf2.modeling.checkpoint_names import tf1_variable_map
from bert_tf2.modeling.encoder import BertEncoder
from bert_tf2.modeling.models import BertPretrainer
from bert_tf2.modeling.optimization import create_optimizer
from bert_tf2.process.errors import SettingsError
from bert_tf2.tasks.pretraining.task import PretrainingTask, pretrainer_inputs


def trainer(output_dir, steps, batch, accumulation=1, dropout=0.1, lr=1e-3, warmup=2,
            save_every=5, steps_per_loop=5, seed=7, sgd=False, jit=False, budget=None,
            task=None, checkpoint_iterator=True):
    keras.utils.set_random_seed(seed)
    strategy = get_strategy("one_device")
    with strategy.scope():
        model = (task.build_model(config(dropout)) if task
                 else BertPretrainer(BertEncoder(config(dropout))))
        optimizer = (keras.optimizers.SGD(lr) if sgd
                     else create_optimizer(lr, 100, warmup, on_time=budget is not None))
    loop = Trainer(model, optimizer, task or PretrainingTask(), strategy, TrainerConfig(
        str(output_dir), num_train_steps=steps, steps_per_loop=steps_per_loop,
        save_checkpoints_steps=save_every, num_accumulation_steps=accumulation,
        jit_compile=jit, examples_per_step=batch, keep_checkpoint_max=5, time_budget=budget,
        checkpoint_iterator=checkpoint_iterator))
    data = records()

    def dataset_fn(context):
        return (tf.data.Dataset.from_tensor_slices(data).repeat().shuffle(50, seed=3)
                .batch(batch, drop_remainder=True))
    return loop, dataset_fn


class UnreachedHeads(PretrainingTask):
    """The masked LM's loss on a pretrainer whose pooler and NSP head stay trainable (`--no_nsp`
    freezes them): weights without a gradient."""

    def build_model(self, config):
        return BertPretrainer(BertEncoder(config))


def weights(model):
    return {n: v.numpy() for n, v in tf1_variable_map(model).items()}


@pytest.mark.integration
@pytest.mark.parametrize("sgd,atol", [
    # Plain SGD turns equal gradients into equal updates: this is the exact check.
    (True, 5e-7),
    # Adam without bias correction divides by sqrt(v) + 1e-6, which magnifies float round-off
    # of near-zero gradients (the tied output embeddings of unseen tokens): a looser check.
    (False, 5e-4),
])
def test_accumulating_k_batches_equals_one_batch_k_times_larger(tmp_path, sgd, atol):
    big, big_data = trainer(tmp_path / "big", steps=3, batch=16, dropout=0.0, steps_per_loop=1,
                            sgd=sgd, lr=0.5 if sgd else 1e-3)
    small, _ = trainer(tmp_path / "small", steps=3, batch=16, accumulation=4, dropout=0.0,
                       steps_per_loop=1, sgd=sgd, lr=0.5 if sgd else 1e-3)
    big.train(big_data)
    small.train(big_data)  # the same elements, each split into 4 micro-batches of 4
    assert big.global_step == small.global_step == 3
    for name, value in weights(big.model).items():
        np.testing.assert_allclose(weights(small.model)[name], value, rtol=0, atol=atol,
                                   err_msg=name)
    # And it really trained: the weights moved from their initial values.
    fresh, _ = trainer(tmp_path / "fresh", steps=1, batch=16, dropout=0.0)
    moved = max(np.max(np.abs(v - weights(fresh.model)[n]))
                for n, v in weights(big.model).items())
    assert moved > 1e-3


@pytest.mark.integration
@pytest.mark.slow  # resume after a kill: test_faults.py's chains, byte for byte (test-all)
def test_interrupted_and_resumed_run_ends_at_the_same_weights(tmp_path):
    straight, data = trainer(tmp_path / "straight", steps=20, batch=8)
    straight.train(data)
    first, data = trainer(tmp_path / "resumed", steps=10, batch=8)
    first.train(data)  # stops at step 10, as a killed run's last checkpoint would
    second, data = trainer(tmp_path / "resumed", steps=20, batch=8, seed=99)
    second.train(data)  # fresh objects, another seed: all state must come from the checkpoint
    assert second.global_step == 20
    for name, value in weights(straight.model).items():
        np.testing.assert_allclose(weights(second.model)[name], value, rtol=0, atol=1e-6,
                                   err_msg=name)
    assert sorted(f for f in os.listdir(tmp_path / "resumed") if f.endswith(".index")) == [
        "model.ckpt-10.index", "model.ckpt-15.index", "model.ckpt-20.index",
        "model.ckpt-5.index"]


@pytest.mark.integration
def test_a_time_budget_sets_each_steps_rate_and_a_resumed_run_keeps_to_it(tmp_path):
    budget = TimeBudget(10.0, 1e-3, warmup_proportion=0.75, warmup_start_fraction=0.25)
    no_nsp = PretrainingTask(nsp=False, max_predictions_per_seq=PREDICTIONS)
    straight, data = trainer(tmp_path / "straight", steps=1000, batch=8, budget=budget,
                             save_every=1000, task=no_nsp)
    on_a_step_clock(straight).train(data)
    # Spent at step 10; a loop is 1% of the budget (under one step here), so one step each.
    assert straight.global_step == 10
    cramming = [min(0.25 + s / 10, 4 - 4 * s / 10) * 1e-3 for s in range(10)]
    np.testing.assert_allclose(straight.rates, cramming, rtol=1e-6)
    assert json.loads((tmp_path / "straight" / time_budget.RECORD_FILE).read_text()) == {
        "10": 10.0}
    # Stopped at step 6 (as a killed run's last checkpoint), then resumed by fresh objects.
    first, data = trainer(tmp_path / "resumed", steps=6, batch=8, budget=budget, save_every=3,
                          task=no_nsp)
    on_a_step_clock(first).train(data)
    second, data = trainer(tmp_path / "resumed", steps=1000, batch=8, budget=budget,
                           save_every=1000, seed=99, task=no_nsp)
    on_a_step_clock(second).train(data)
    assert second.global_step == 10
    np.testing.assert_allclose(first.rates + second.rates, cramming, rtol=1e-6)
    for name, value in weights(straight.model).items():
        np.testing.assert_allclose(weights(second.model)[name], value, rtol=0, atol=1e-6,
                                   err_msg=name)
    # Without NSP, the pooler and the NSP head keep their initial weights exactly (nothing
    # trains them, and weight decay leaves them too), and the metrics are the masked LM's.
    fresh, _ = trainer(tmp_path / "fresh", steps=1, batch=8, task=no_nsp)
    for name in ("cls/seq_relationship/output_weights", "bert/pooler/dense/kernel"):
        np.testing.assert_array_equal(weights(straight.model)[name], weights(fresh.model)[name])
    assert weights(straight.model)["bert/embeddings/word_embeddings"] != pytest.approx(
        weights(fresh.model)["bert/embeddings/word_embeddings"], abs=1e-4)
    assert set(straight.evaluate(data, max_steps=2)) == {"loss", "masked_lm_accuracy",
                                                          "masked_lm_loss"}
    # A folder trained without a budget is refused by a run with one, naming the record.
    plain, data = trainer(tmp_path / "plain", steps=2, batch=8, task=no_nsp)
    plain.train(data)
    later, data = trainer(tmp_path / "plain", steps=1000, batch=8, budget=budget, task=no_nsp)
    with pytest.raises(SettingsError, match=r"time_budget.json: no time spent recorded for "
                                            r"the checkpoint of step 2"):
        later.train(data)


@pytest.mark.integration
@pytest.mark.filterwarnings("ignore:Gradients do not exist")  # Keras's, on the unreached heads
def test_a_ramped_update_of_k_micro_batches_equals_accumulating_k(tmp_path, monkeypatch):
    """A batch-size ramp's update reads k micro-batches from the input and applies their mean
    gradient: held at k = 4, the run equals a run accumulating 4 micro-batches of a batch 4 times
    larger (the same rows in the same order), step for step (plain SGD: equal updates). The
    masked LM's loss alone does not reach the pooler and the NSP head, trainable here: their
    gradient is None (as a SQuAD or NER model's pooler's), and both runs leave them as they
    were."""
    budget = TimeBudget(10.0, 0.5, batch_size_ramp=0.6)
    no_nsp = UnreachedHeads(nsp=False, max_predictions_per_seq=PREDICTIONS)
    fixed, data = trainer(tmp_path / "fixed", steps=1000, batch=16, accumulation=4, dropout=0.0,
                          sgd=True, save_every=1000, budget=dataclasses.replace(
                              budget, batch_size_ramp=0.0), task=no_nsp)
    assert not fixed.ramp
    initial = weights(fixed.model)
    on_a_step_clock(fixed).train(data)
    monkeypatch.setattr(time_budget.BudgetClock, "micro_batches", lambda clock, most: most)
    ramped, micro = trainer(tmp_path / "ramped", steps=1000, batch=4, accumulation=4,
                            dropout=0.0, sgd=True, save_every=1000, budget=budget, task=no_nsp)
    assert ramped.ramp
    on_a_step_clock(ramped).train(micro)
    assert ramped.global_step == fixed.global_step == 10
    np.testing.assert_allclose(ramped.rates, fixed.rates, rtol=1e-6)
    for name, value in weights(fixed.model).items():
        np.testing.assert_allclose(weights(ramped.model)[name], value, rtol=0, atol=5e-7,
                                   err_msg=name)
    assert json.loads((tmp_path / "ramped" / time_budget.RECORD_FILE).read_text()) == {
        "10": {"seconds": 10.0, "micro_batches": 40}}
    for name in ("cls/seq_relationship/output_weights", "bert/pooler/dense/kernel"):
        np.testing.assert_array_equal(weights(ramped.model)[name], initial[name])
    assert weights(ramped.model)["bert/embeddings/word_embeddings"] != pytest.approx(
        initial["bert/embeddings/word_embeddings"], abs=1e-4)


@pytest.mark.integration
def test_a_batch_size_ramp_grows_with_the_budget_and_resumes_past_its_micro_batches(tmp_path):
    """At 60% of a 10-step budget the updates reach 4 micro-batches, from 1: k = 1 + floor(3 x
    share / 0.6), set before each loop (one step each here). A run stopped at step 6 and
    resumed by fresh objects that rebuild the input (no iterator in the checkpoint) skips the 12
    micro-batches used, and ends at the uninterrupted run's weights."""
    budget = TimeBudget(10.0, 1e-3, 0.75, 0.25, batch_size_ramp=0.6)
    task = PretrainingTask(nsp=False, max_predictions_per_seq=PREDICTIONS)

    def run(folder, steps, save_every):
        loop, micro = trainer(tmp_path / folder, steps=steps, batch=4, accumulation=4,
                              budget=budget, save_every=save_every, task=task,
                              checkpoint_iterator=False)
        on_a_step_clock(loop)
        loop.train(micro)
        return loop

    straight = run("straight", 1000, 1000)
    assert straight.counts == [1, 1, 2, 2, 3, 3, 4, 4, 4, 4]
    assert json.loads((tmp_path / "straight" / time_budget.RECORD_FILE).read_text()) == {
        "10": {"seconds": 10.0, "micro_batches": 28}}
    first = run("resumed", 6, 3)
    second = run("resumed", 1000, 1000)  # the seed of the input's order stays the run's
    assert first.counts + second.counts == straight.counts
    assert time_budget.read_micro_batches(str(tmp_path / "resumed"), 6) == 12
    for name, value in weights(straight.model).items():
        np.testing.assert_allclose(weights(second.model)[name], value, rtol=0, atol=1e-6,
                                   err_msg=name)


@pytest.mark.integration
def test_resume_from_an_earlier_versions_names_and_remove_a_partial_checkpoint(tmp_path, caplog):
    """A run killed in a checkpoint write leaves `model.ckpt-N_temp/`; the next run removes it
    (and says so) and resumes from the last whole checkpoint, here named `ckpt-10` as earlier
    versions named them, to the uninterrupted run's weights."""
    import logging
    import shutil

    from bert_tf2.modeling.checkpoints import resolve_tf1_prefix

    straight, data = trainer(tmp_path / "straight", steps=20, batch=8)
    straight.train(data)
    # What a run killed after step 10 leaves: the uninterrupted run's checkpoint of step 10 (the
    # same seeds write the same one), under an earlier version's name.
    run = tmp_path / "resumed"
    run.mkdir()
    for path in (tmp_path / "straight").glob("model.ckpt-10.*"):
        shutil.copy(path, run / path.name.replace("model.ckpt-", "ckpt-"))
    (run / "checkpoint").write_text('model_checkpoint_path: "ckpt-10"\n'
                                    'all_model_checkpoint_paths: "ckpt-10"\n')
    assert resolve_tf1_prefix(run / "model.ckpt-10") == str(run / "ckpt-10")  # users' name
    partial = run / "model.ckpt-15_temp"
    partial.mkdir()
    shutil.copy(run / "ckpt-10.index", partial / "part-00000-of-00001.index")
    second, data = trainer(run, steps=20, batch=8, seed=99)
    with caplog.at_level(logging.INFO, logger="bert_tf2.engine.training_loop"):
        second.train(data)
    assert not partial.exists()
    assert f"removed {partial}, a partial checkpoint left by an interrupted run" in caplog.text
    assert f"resumed from {run / 'ckpt-10'} at step 10" in caplog.text
    for name, value in weights(straight.model).items():
        np.testing.assert_allclose(weights(second.model)[name], value, rtol=0, atol=1e-6,
                                   err_msg=name)


@pytest.mark.integration
def test_non_finite_loss_stops_without_saving(tmp_path):
    loop, data = trainer(tmp_path, steps=10, batch=8, lr=1e20, warmup=0, save_every=1,
                         steps_per_loop=1)
    with pytest.raises(NonFiniteLossError) as err:
        loop.train(data)
    saved = sorted(f for f in os.listdir(tmp_path) if f.endswith(".index"))
    last_good = saved[-1][:-len(".index")]
    assert f"(last good checkpoint: {tmp_path / last_good})" in str(err.value)
    assert "Lower --learning_rate or check the data" in str(err.value)
    # The step that produced the non-finite loss was not saved.
    bad_step = int(str(err.value).split("ending at step ")[1].split(";")[0])
    assert int(last_good.split("-")[1]) == bad_step - 1


def test_evaluation_metrics_are_exact_ratios(tmp_path):
    loop, _ = trainer(tmp_path, steps=1, batch=8)
    data = records(n=20, seed=5)
    data["masked_lm_weights"][:, 2] = 0.0  # unused slots must not count
    results = loop.evaluate(lambda context: tf.data.Dataset.from_tensor_slices(data).batch(6))
    out = {k: v.numpy() for k, v in loop.model(pretrainer_inputs(data)).items()}
    mlm_pred = np.argmax(out["mlm_logits"], -1)
    w = data["masked_lm_weights"]
    assert results["masked_lm_accuracy"] == pytest.approx(
        np.sum((mlm_pred == data["masked_lm_ids"]) * w) / np.sum(w), abs=1e-6)
    log_probs = out["mlm_logits"] - np.log(np.sum(np.exp(out["mlm_logits"]), -1, keepdims=True))
    nll = -np.take_along_axis(log_probs, data["masked_lm_ids"][..., None], -1)[..., 0]
    assert results["masked_lm_loss"] == pytest.approx(np.sum(nll * w) / np.sum(w), rel=1e-5)
    nsp_pred = np.argmax(out["nsp_logits"], -1)
    assert results["next_sentence_accuracy"] == pytest.approx(
        np.mean(nsp_pred == data["next_sentence_labels"][:, 0]), abs=1e-6)


@pytest.mark.integration
def test_jit_compile_gives_the_same_training(tmp_path):
    plain, data = trainer(tmp_path / "plain", steps=3, batch=8, dropout=0.0, steps_per_loop=3,
                          sgd=True, lr=0.5)
    plain.train(data)
    jit, data = trainer(tmp_path / "jit", steps=3, batch=8, dropout=0.0, steps_per_loop=3,
                        sgd=True, lr=0.5, jit=True)
    jit.train(data)
    for name, value in weights(plain.model).items():
        np.testing.assert_allclose(weights(jit.model)[name], value, rtol=0, atol=1e-5,
                                   err_msg=name)


@pytest.mark.integration
def test_mixed_float16_trains_with_loss_scaling(tmp_path):
    keras.config.set_dtype_policy("mixed_float16")
    try:
        keras.utils.set_random_seed(7)
        strategy = get_strategy("one_device")
        with strategy.scope():
            model = BertPretrainer(BertEncoder(config(0.0)))
            optimizer = keras.optimizers.LossScaleOptimizer(create_optimizer(1e-3, 100, 2))
        loop = Trainer(model, optimizer, PretrainingTask(), strategy, TrainerConfig(
            str(tmp_path), num_train_steps=30, steps_per_loop=10, save_checkpoints_steps=30))
        data = records()
        losses = []
        loop.train(lambda context: tf.data.Dataset.from_tensor_slices(data).repeat()
                   .batch(16, drop_remainder=True),
                   on_loop_end=lambda step, metrics: losses.append(metrics["loss"]))
    finally:
        keras.config.set_dtype_policy("float32")
    assert {v.dtype for v in model.trainable_variables} == {"float32"}
    assert model(pretrainer_inputs({k: v[:2] for k, v in records().items()}))["mlm_logits"].dtype \
        == "float16"
    assert all(np.isfinite(losses)) and losses[-1] < losses[0] - 0.2, losses
