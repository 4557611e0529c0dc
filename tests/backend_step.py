"""Run by tests/test_backends.py under a chosen KERAS_BACKEND: the MiniLM classifier's outputs, or a
few training steps of it, written to an .npz for the test to compare across backends.

    python tests/backend_step.py encode  MINILM_DIR BATCH.npz OUT.npz
    python tests/backend_step.py train   MINILM_DIR BATCH.npz OUT.npz [--dtype=...]

`train` builds the classifier (dropout off, so both backends compute the same function; the head
from BATCH.npz's `head_*` arrays), the original's optimiser (AdamWeightDecay, warmup 2 of 10
steps, clip at norm 1) and the backend's own trainer (`engine.training.Trainer` on TensorFlow,
`engine.keras_training.KerasTrainer` on JAX), then records the clipped gradients of the first
update and every weight after each of three updates on the same batch.
"""
import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_tf2.process import environment  # noqa: E402

environment.configure()  # before Keras and TensorFlow

import numpy as np  # noqa: E402


def build(minilm_dir):
    from bert_tf2.modeling import checkpoints
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertClassifier

    config = checkpoints.read_config(minilm_dir)
    config = dataclasses.replace(config, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0)
    model = BertClassifier(BertEncoder(config), num_labels=2, dropout_rate=0.0)
    checkpoints.load_checkpoint(model, minilm_dir, allow_new_heads=True)
    return model


def encode(minilm_dir, batch, out):
    import keras

    model = build(minilm_dir)
    encoder = model.encoder
    outputs = encoder({"input_word_ids": batch["input_ids"], "input_mask": batch["input_mask"],
                       "input_type_ids": batch["segment_ids"]}, training=False)
    np.savez(out, **{name: keras.ops.convert_to_numpy(outputs[name])
                     for name in ("sequence_output", "pooled_output")})


def train(minilm_dir, batch, out, dtype="float32"):
    import keras

    from bert_tf2.engine.distribution import get_strategy, set_precision, set_random_seed
    from bert_tf2.engine.trainer_config import TrainerConfig
    from bert_tf2.modeling.optimization import create_optimizer
    from bert_tf2.tasks.classification.task import ClassificationTask

    set_random_seed(1)  # Keras's own would import TensorFlow on JAX too
    set_precision(dtype)
    strategy = get_strategy("one_device")
    task = ClassificationTask()
    task.regression = task.multi_label = False
    with strategy.scope():
        model = build(minilm_dir)
        for variable in model.trainable_variables:  # the same fresh head on both backends
            if variable.path == "classifier/output/output_weights":
                variable.assign(batch["head_weights"])
            elif variable.path == "classifier/output/output_bias":
                variable.assign(batch["head_bias"])
        optimizer = create_optimizer(1e-4, 10, 2)
        if dtype == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    inputs = {name: batch[name] for name in ("input_ids", "input_mask", "segment_ids",
                                             "label_ids")}
    config = TrainerConfig(output_dir=out + ".run", num_train_steps=10)
    results = {}
    if environment.uses_tensorflow():
        import tensorflow as tf

        from bert_tf2.engine.training import Trainer

        trainer = Trainer(model, optimizer, task, strategy, config)
        # Grappler's MatMul+BiasAdd fusion (off under mixed_float16 on a CPU: set_precision).
        results["remapping"] = tf.config.optimizer.get_experimental_options().get("remapping",
                                                                                  True)
        grads, metrics = trainer._grads(inputs)
        # The norm the original clips by (embedding lookups' IndexedSlices counted per row), and
        # the norm of the summed dense gradients, which JAX would give without the lookup tap.
        results["raw_norm"] = float(tf.linalg.global_norm(grads))
        results["dense_norm"] = float(tf.linalg.global_norm(
            [tf.convert_to_tensor(g) for g in grads]))
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        results["grads"] = [np.asarray(g) for g in inner.clipped_dense(grads)]
        iterator = iter(tf.data.Dataset.from_tensors(inputs).repeat())
        for step in range(3):
            totals = trainer._train_loop(iterator, tf.constant(1))
            results[f"loss_{step}"] = totals["loss"][0].numpy()
            results[f"weights_{step}"] = [v.numpy() for v in model.trainable_variables]
    else:
        from bert_tf2.engine.keras_training import KerasTrainer

        trainer = KerasTrainer(model, optimizer, task, strategy, config)
        results["grads"], _ = trainer.gradients(inputs)
        step_fn = trainer._jitted("train", trainer._train_step)
        for step in range(3):
            state, sums = step_fn(trainer._state(), inputs)
            trainer._assign(state)
            results[f"loss_{step}"] = np.asarray(sums["loss"])[0]
            results[f"weights_{step}"] = [keras.ops.convert_to_numpy(v.value)
                                          for v in model.trainable_variables]
    flat = {"paths": np.array([v.path for v in model.trainable_variables]),
            "dtypes": np.array([str(v.dtype) for v in model.trainable_variables])}
    for key, value in results.items():
        if isinstance(value, list):
            for i, array in enumerate(value):
                flat[f"{key}/{i}"] = np.asarray(array, np.float32)
        else:
            flat[key] = np.asarray(value)  # a loss keeps its dtype
    np.savez(out, **flat)


if __name__ == "__main__":
    command, minilm, batch_file, out = sys.argv[1:5]
    options = dict(arg[2:].split("=", 1) for arg in sys.argv[5:])
    arrays = dict(np.load(batch_file))
    if command == "encode":
        encode(minilm, arrays, out)
    else:
        train(minilm, arrays, out, **options)
