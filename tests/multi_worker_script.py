"""One process of the multi-worker test: trains the tiny pretrainer of test_training_loop on the
same global batches whatever the number of workers, then writes its final loss and weights.

    python tests/multi_worker_script.py single|multi OUTPUT_DIR RESULT.npz
(`multi` reads TF_CONFIG.)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_tf2.process import environment  # noqa: E402

environment.configure()  # before Keras and TensorFlow

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from test_training_loop import config, records  # noqa: E402

from bert_tf2.engine.distribution import get_strategy  # noqa: E402
from bert_tf2.engine.training import Trainer, TrainerConfig  # noqa: E402
from bert_tf2.modeling.checkpoint_names import tf1_variable_map  # noqa: E402
from bert_tf2.modeling.encoder import BertEncoder  # noqa: E402
from bert_tf2.modeling.models import BertPretrainer  # noqa: E402
from bert_tf2.modeling.optimization import create_optimizer  # noqa: E402
from bert_tf2.tasks.pretraining.task import PretrainingTask  # noqa: E402

GLOBAL_BATCH, STEPS = 16, 6


def main(mode, output_dir, result_path):
    strategy = get_strategy("multi_worker_mirrored" if mode == "multi" else "one_device")
    keras.utils.set_random_seed(11)
    with strategy.scope():
        model = BertPretrainer(BertEncoder(config(dropout=0.0)))
        optimizer = create_optimizer(1e-3, 100, 2)
    data = records(n=256)

    def dataset_fn(context):
        """Every pipeline sees the same global batches and keeps its own rows of each."""
        batches = tf.data.Dataset.from_tensor_slices(data).batch(GLOBAL_BATCH, drop_remainder=True)
        per_pipeline = GLOBAL_BATCH // context.num_input_pipelines
        start = context.input_pipeline_id * per_pipeline
        return batches.map(lambda b: {k: v[start:start + per_pipeline] for k, v in b.items()})

    trainer = Trainer(model, optimizer, PretrainingTask(), strategy, TrainerConfig(
        output_dir, num_train_steps=STEPS, steps_per_loop=3, save_checkpoints_steps=3,
        keep_checkpoint_max=5))
    metrics = trainer.train(dataset_fn)
    np.savez(result_path, loss=metrics["loss"], replicas=strategy.num_replicas_in_sync,
             chief=trainer.is_chief,
             **{n.replace("/", "."): v.numpy() for n, v in tf1_variable_map(model).items()})


if __name__ == "__main__":
    main(*sys.argv[1:4])
