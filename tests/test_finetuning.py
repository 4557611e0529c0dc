"""The engine's fine-tuning loop (`engine.finetuning`, `engine.build`, `engine.best_checkpoint`):
resume without the iterator's state, evaluation points, the best weights, prediction order."""
import numpy as np
import pytest
import tensorflow as tf

from bert_tf2.data_gen.datasets import in_memory_dataset
from bert_tf2.engine import finetuning
from bert_tf2.engine.best_checkpoint import BestCheckpoint
from bert_tf2.engine.build import RunSettings, build_trainer
from bert_tf2.engine.distribution import get_strategy
from bert_tf2.engine.results import read_eval_results
from bert_tf2.modeling.config import BertConfig
from bert_tf2.modeling.encoder import BertEncoder
from bert_tf2.modeling.models import BertClassifier
from bert_tf2.tasks.classification.task import ClassificationTask

SEQ, VOCAB = 16, 50


def features(n=70, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, SEQ + 1, n)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
    return {"input_ids": (rng.integers(1, VOCAB, (n, SEQ)) * mask).astype(np.int32),
            "input_mask": mask, "segment_ids": np.zeros((n, SEQ), np.int32),
            "label_ids": rng.integers(0, 3, n).astype(np.int32),
            "is_real_example": np.ones(n, np.int64), "example_index": np.arange(n, dtype=np.int32)}


def build(output_dir, steps=12, evaluate_every=0, strategy=None, compile_optimizer=True, keep=1):
    import keras

    keras.utils.set_random_seed(11)
    config = BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=SEQ)
    settings = RunSettings(output_dir=str(output_dir), learning_rate=1e-3, train_batch_size=8,
                           save_checkpoints_steps=4, steps_per_loop=3,
                           compile_optimizer=compile_optimizer, keep_checkpoint_max=keep)
    every = evaluate_every or 70 / 8  # an epoch of 70 examples
    trainer = build_trainer(lambda: BertClassifier(BertEncoder(config), 3), ClassificationTask(),
                            strategy or get_strategy("one_device"), settings, steps, 2,
                            callback_every_steps=every, save_at_callbacks=True,
                            checkpoint_iterator=False)
    data = features()
    options = {"every": every, "steps_per_epoch": 70 / 8}
    return trainer, options, lambda context: in_memory_dataset(
        data, context.get_per_replica_batch_size(8), True, seed=5, input_context=context)


def weights(model):
    return [v.numpy().copy() for v in model.weights]


class Interrupted(Exception):
    pass


@pytest.mark.integration
@pytest.mark.slow  # resume after a kill: test_faults.py's chains, byte for byte (test-all)
def test_interrupted_run_resumes_to_the_same_weights(tmp_path):
    trainer, options, dataset_fn = build(tmp_path / "straight")
    finetuning.train_and_evaluate(trainer, dataset_fn, None, **options)
    straight = weights(trainer.model)

    trainer, options, dataset_fn = build(tmp_path / "resumed")

    def crash(step, metrics):
        if step > 4:  # after the checkpoint at step 4 and more updates
            raise Interrupted
    with pytest.raises(Interrupted):
        trainer.train(dataset_fn, crash)
    assert trainer.global_step == 7  # loops end at 3, 4 (checkpoint), 7
    trainer, options, dataset_fn = build(tmp_path / "resumed")  # a new process, in effect
    finetuning.train_and_evaluate(trainer, dataset_fn, None, **options)
    assert trainer.global_step == 12
    for a, b in zip(straight, weights(trainer.model)):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_the_update_is_compiled_unasked_only_where_it_pays_for_its_compile(tmp_path):
    """`--compile_optimizer` unset: compiled from 5e8 weights x steps (MiniLM from 23 steps,
    BERT-Base from 5), not for a tiny model's short run; set, it is obeyed either way."""
    from bert_tf2.engine.training import update_pays_for_its_compile

    def weights(count):
        return [np.zeros((count // 2,)), np.zeros((count // 2,))]

    assert not update_pays_for_its_compile(weights(22_700_000), 22)
    assert update_pays_for_its_compile(weights(22_700_000), 23)
    assert update_pays_for_its_compile(weights(110_000_000), 5)
    tiny, _, _ = build(tmp_path / "unset", compile_optimizer=None)
    assert tiny._apply == tiny._apply_gradients
    forced, _, _ = build(tmp_path / "forced", compile_optimizer=True)
    assert forced._apply != forced._apply_gradients


@pytest.mark.integration
def test_the_compiled_update_trains_to_the_plain_updates_weights(tmp_path):
    """`--compile_optimizer` changes speed, not results: 12 steps with the update XLA-compiled
    end at the weights of the plain Keras update, clip and decay included."""
    compiled, options, dataset_fn = build(tmp_path / "compiled")
    assert compiled._apply != compiled._apply_gradients
    finetuning.train_and_evaluate(compiled, dataset_fn, None, **options)
    plain, options, dataset_fn = build(tmp_path / "plain", compile_optimizer=False)
    assert plain._apply == plain._apply_gradients
    initial = [v.numpy().copy() for v in plain.model.trainable_variables]
    finetuning.train_and_evaluate(plain, dataset_fn, None, **options)
    for a, b in zip(weights(compiled.model), weights(plain.model)):
        np.testing.assert_allclose(a, b, atol=2e-6)
    # Not a no-op: every weight moved, but the key biases, whose gradient is zero (softmax does
    # not change when a query's scores all shift by the same amount).
    for variable, start in zip(plain.model.trainable_variables, initial):
        if not variable.path.endswith("key/bias"):
            assert np.abs(variable.numpy() - start).max() > 1e-5, variable.path


@pytest.mark.integration
def test_evaluates_at_each_epoch_end_and_keeps_the_best(tmp_path):
    trainer, options, dataset_fn = build(tmp_path, steps=20)
    scores = iter([0.5, 0.8, 0.6])  # 8.75 steps an epoch: ends at steps 9 and 18; the run at 20
    seen = []

    def evaluate():
        seen.append(trainer.global_step)
        return {"eval_main": next(scores)}
    last = finetuning.train_and_evaluate(trainer, dataset_fn, evaluate, **options,
                                         best_metric="eval_main")
    assert seen == [9, 18, 20]
    assert last == {"eval_main": 0.6, "global_step": 20}
    assert read_eval_results(str(tmp_path / "eval_results.txt")) == last
    best = BestCheckpoint(str(tmp_path), "eval_main")
    assert best.score == 0.8 and best.results["global_step"] == 18
    # The kept weights are step 18's: restoring them changes the step-20 model's outputs.
    batch = next(iter(in_memory_dataset(features(), 8, False)))
    inputs = {"input_word_ids": batch["input_ids"], "input_mask": batch["input_mask"],
              "input_type_ids": batch["segment_ids"]}
    at_20 = trainer.model(inputs)["logits"].numpy()
    assert best.restore(trainer.model)
    assert not np.allclose(at_20, trainer.model(inputs)["logits"].numpy(), atol=1e-4)
    # A worse score is not kept; a better one replaces the copy.
    assert not best.offer(trainer.write_weights, {"eval_main": 0.7, "global_step": 21})
    assert best.offer(trainer.write_weights, {"eval_main": 0.9, "global_step": 22})
    assert BestCheckpoint(str(tmp_path), "eval_main").score == 0.9
    # A run killed between the two renames of the next copy left best/ as best.old<pid>:
    # the next run finds the 0.9 copy again and restores its weights.
    (tmp_path / "best").rename(tmp_path / "best.old99999")
    recovered = BestCheckpoint(str(tmp_path), "eval_main")
    assert recovered.score == 0.9 and recovered.restore(trainer.model)


@pytest.mark.integration
def test_evaluation_every_n_steps(tmp_path):
    trainer, options, dataset_fn = build(tmp_path, steps=10, evaluate_every=4)
    seen = []
    finetuning.train_and_evaluate(trainer, dataset_fn,
                                  lambda: seen.append(trainer.global_step) or {"eval_main": 0.0},
                                  **options, best_metric="eval_main")
    assert seen == [4, 8, 10]


def test_predict_returns_every_example_in_order(tmp_path):
    trainer, _, _ = build(tmp_path)
    data = features(n=21)
    outputs = trainer.predict(lambda context: in_memory_dataset(data, 8, False))
    np.testing.assert_array_equal(outputs["example_index"], np.arange(21))
    inputs = {"input_word_ids": tf.constant(data["input_ids"]),
              "input_mask": tf.constant(data["input_mask"]),
              "input_type_ids": tf.constant(data["segment_ids"])}
    np.testing.assert_allclose(outputs["logits"], trainer.model(inputs)["logits"].numpy(),
                               atol=1e-5)


MIRRORED = r"""
import sys
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, sys.argv[1] + "/tests")
import test_finetuning as t
from bert_tf2.engine import finetuning
from bert_tf2.data_gen.datasets import in_memory_dataset

out, part = sys.argv[2], sys.argv[3]
mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
trainer, options, dataset_fn = t.build(out + "/straight", strategy=mirrored, keep=5)
assert trainer.strategy.num_replicas_in_sync == 2
if part == "predict":
    # 21 examples at 4 per replica: the last global batch is padded; nothing is lost or repeated.
    data = t.features(n=21)
    outputs = trainer.predict(lambda context: in_memory_dataset(data, 4, False,
                                                                input_context=context))
    real = outputs["example_index"] >= 0
    assert sorted(outputs["example_index"][real].tolist()) == list(range(21)), outputs["example_index"]
    single = trainer.model({"input_word_ids": data["input_ids"], "input_mask": data["input_mask"],
                            "input_type_ids": data["segment_ids"]})["logits"].numpy()
    order = np.argsort(outputs["example_index"][real])
    np.testing.assert_allclose(outputs["logits"][real][order], single, atol=1e-5)
    # The driver's prediction pass gives every row back once, in row order.
    from bert_tf2.engine.task import Split
    from bert_tf2.tasks.classification.task import ClassificationTask
    from bert_tf2.data_gen.datasets import Batching
    rows = finetuning.predict(trainer, ClassificationTask(), Split("dev", [], features=data), 4, 0,
                              Batching())
    np.testing.assert_array_equal(rows["example_index"], np.arange(21))
    np.testing.assert_allclose(rows["logits"], single, atol=1e-5)
else:
    finetuning.train_and_evaluate(trainer, dataset_fn, None, **options)
    straight = [v.numpy() for v in trainer.model.weights]
    # The run as a crash after step 4 leaves it: the uninterrupted run's checkpoint of step 4
    # alone (the same seeds write the same one; the updates after it died with the process).
    import os, shutil
    os.makedirs(out + "/resumed")
    for name in os.listdir(out + "/straight"):
        if name.startswith("model.ckpt-4."):
            shutil.copy(os.path.join(out, "straight", name), out + "/resumed")
    with open(out + "/resumed/checkpoint", "w") as f:
        f.write('model_checkpoint_path: "model.ckpt-4"\n')
    import logging
    resumed = []
    class Seen(logging.Handler):
        def emit(self, record):
            resumed.append(record.getMessage())
    logging.getLogger("bert_tf2.engine.training_loop").addHandler(Seen())
    logging.getLogger("bert_tf2.engine.training_loop").setLevel(logging.INFO)
    trainer, options, dataset_fn = t.build(out + "/resumed", strategy=mirrored)
    finetuning.train_and_evaluate(trainer, dataset_fn, None, **options)
    assert f"resumed from {out}/resumed/model.ckpt-4 at step 4" in resumed, resumed
    for a, b in zip(straight, [v.numpy() for v in trainer.model.weights]):
        np.testing.assert_allclose(a, b, atol=1e-5)
print("MIRRORED OK")
"""


def mirrored(tmp_path, part):
    import sys

    import warm_python
    from conftest import REPO

    result = warm_python.run([sys.executable, "-c", MIRRORED, str(REPO), str(tmp_path), part],
                             cwd=REPO, warm=True)
    assert "MIRRORED OK" in result.stdout, result.stderr[-3000:]


@pytest.mark.integration
def test_two_replicas_predict_every_example(tmp_path):
    """MirroredStrategy on two logical CPUs: padded evaluation batches give every example once,
    in order, with one replica's logits."""
    mirrored(tmp_path, "predict")


@pytest.mark.integration
def test_two_replicas_resume_in_step(tmp_path):
    """A resumed run on two replicas skips two dataset elements per update (one per replica)
    and ends at the uninterrupted weights."""
    mirrored(tmp_path, "resume")


def test_fine_tuning_starts_from_a_pretraining_runs_checkpoint(tmp_path):
    """--init_checkpoint=<a run_pretraining output_dir>: the encoder is taken, the head is new."""
    import keras

    from bert_tf2.modeling import checkpoints
    from bert_tf2.modeling.models import BertPretrainer

    keras.utils.set_random_seed(1)
    config = BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=SEQ)
    pretrainer = BertPretrainer(BertEncoder(config))
    optimizer = keras.optimizers.Adam()
    optimizer.build(pretrainer.trainable_variables)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=pretrainer, optimizer=optimizer),
                               str(tmp_path), 1, checkpoint_name="ckpt").save(checkpoint_number=7)
    classifier = BertClassifier(BertEncoder(config), 3)
    report = checkpoints.load_initial_weights(classifier, tmp_path, allow_new_heads=True)
    for a, b in zip(pretrainer.encoder.weights, classifier.encoder.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert sorted(report.initialised) == sorted(v.path for v in classifier.head.weights)
    with pytest.raises(checkpoints.CheckpointError, match="different model"):
        checkpoints.load_initial_weights(BertClassifier(BertEncoder(config), 3), tmp_path)
