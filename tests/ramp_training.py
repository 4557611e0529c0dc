"""Run by tests/test_jax_training.py on JAX (no TensorFlow): the batch-size ramp of
`engine.keras_training.KerasTrainer`, as tests/test_training_loop.py checks TensorFlow's.

    python tests/ramp_training.py OUT_DIR

Writes OUT_DIR/weights.npz (each run's weights: `fixed`, `forced`, `straight`, `resumed`) and
OUT_DIR/runs.json (each run's steps, micro-batches per loop, rates, budget record and how many
times each jitted step was compiled):
- `fixed`: 4 micro-batches of 4 accumulated per update (batch 16), plain SGD, 10 steps of a
  10-step budget; `forced`: a ramp held at 4 micro-batches of 4 (the same rows in order);
- `straight`: a ramp to 4 micro-batches at 60% of the budget; `resumed`: the same stopped at
  step 6 and resumed by fresh objects, which skip the micro-batches used.
"""
import dataclasses
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_tf2.process import environment  # noqa: E402

environment.configure()  # before Keras

import numpy as np  # noqa: E402
from tiny_pretraining import PREDICTIONS, config, on_a_step_clock, records  # noqa: E402


def trainer(output_dir, steps, batch, budget, sgd=False, dropout=0.1, save_every=1000):
    import keras

    from bert_tf2.data_gen.numpy_datasets import Batches
    from bert_tf2.engine.distribution import get_strategy
    from bert_tf2.engine.keras_training import KerasTrainer
    from bert_tf2.engine.trainer_config import TrainerConfig
    from bert_tf2.modeling.optimization import create_optimizer
    from bert_tf2.tasks.pretraining.task import PretrainingTask

    keras.backend.clear_session()  # the names a checkpoint was written with, for each model
    keras.utils.set_random_seed(7)
    strategy = get_strategy("one_device")
    task = PretrainingTask(nsp=False, max_predictions_per_seq=PREDICTIONS)
    with strategy.scope():
        model = task.build_model(config(dropout))
        optimizer = keras.optimizers.SGD(0.5) if sgd else create_optimizer(1e-3, 100, 2,
                                                                            on_time=True)
    loop = KerasTrainer(model, optimizer, task, strategy, TrainerConfig(
        str(output_dir), num_train_steps=steps, steps_per_loop=5,
        save_checkpoints_steps=save_every, num_accumulation_steps=4, examples_per_step=16,
        keep_checkpoint_max=5, time_budget=budget))
    data = records()
    order = np.random.default_rng(3).permutation(len(data["input_ids"]))

    def chunks():
        rows = np.tile(order, 1000)
        for start in range(0, len(rows) - batch + 1, batch):
            yield rows[start:start + batch]

    batches = Batches(chunks, lambda rows: {k: v[rows] for k, v in data.items()}, workers=0)
    return on_a_step_clock(loop), lambda context: batches


def main(out):
    import keras

    from bert_tf2.engine import time_budget
    from bert_tf2.engine.time_budget import TimeBudget

    budget = TimeBudget(10.0, 1e-3, 0.75, 0.25, batch_size_ramp=0.6)
    runs, weights = {}, {}

    def train(name, folder, *args, **kwargs):
        loop, data = trainer(os.path.join(out, folder), *args, **kwargs)
        loop.train(data)
        record = os.path.join(out, folder, time_budget.RECORD_FILE)
        with open(record, encoding="utf-8") as f:
            runs[name] = {"step": loop.global_step, "counts": loop.counts, "rates": loop.rates,
                          "ramp": loop.ramp, "record": json.load(f),
                          "compiled": {step: fn._cache_size() for step, fn in loop._steps.items()}}
        for variable in loop.model.weights:
            weights[f"{name}/{variable.path}"] = keras.ops.convert_to_numpy(variable.value)

    sgd = dataclasses.replace(budget, peak_learning_rate=0.5)
    train("fixed", "fixed", 1000, 16, dataclasses.replace(sgd, batch_size_ramp=0.0), sgd=True,
          dropout=0.0)
    original = time_budget.BudgetClock.micro_batches
    time_budget.BudgetClock.micro_batches = lambda clock, most: most
    train("forced", "forced", 1000, 4, sgd, sgd=True, dropout=0.0)
    time_budget.BudgetClock.micro_batches = original
    train("straight", "straight", 1000, 4, budget)
    train("first", "resumed", 6, 4, budget, save_every=3)
    train("resumed", "resumed", 1000, 4, budget)
    np.savez(os.path.join(out, "weights.npz"), **weights)
    with open(os.path.join(out, "runs.json"), "w", encoding="utf-8") as f:
        json.dump(runs, f)


if __name__ == "__main__":
    main(sys.argv[1])
