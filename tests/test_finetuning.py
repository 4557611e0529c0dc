"""The shared fine-tuning loop: resume without checkpointing the iterator, evaluation points, best."""
import numpy as np
import pytest
import tensorflow as tf

from data_gen.classifier_features import classifier_dataset
from modeling import finetuning
from modeling.classification_task import ClassificationTask
from modeling.config import BertConfig
from modeling.distribution import get_strategy
from modeling.encoder import BertEncoder
from modeling.models import BertClassifier

SEQ, VOCAB = 16, 50


def features(n=70, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, SEQ + 1, n)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
    return {"input_ids": (rng.integers(1, VOCAB, (n, SEQ)) * mask).astype(np.int32),
            "input_mask": mask, "segment_ids": np.zeros((n, SEQ), np.int32),
            "label_ids": rng.integers(0, 3, n).astype(np.int32),
            "is_real_example": np.ones(n, np.int64), "example_index": np.arange(n, dtype=np.int32)}


def build(output_dir, steps=12, evaluate_every=0):
    import keras

    keras.utils.set_random_seed(11)
    config = BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=SEQ)
    options = finetuning.FinetuneOptions(
        output_dir=str(output_dir), learning_rate=1e-3, num_train_steps=steps,
        num_warmup_steps=2, train_batch_size=8, steps_per_epoch=70 / 8,
        eval_every_steps=evaluate_every, save_checkpoints_steps=4, steps_per_loop=3)
    trainer = finetuning.build_trainer(lambda: BertClassifier(BertEncoder(config), 3),
                                       ClassificationTask(), get_strategy("one_device"), options)
    data = features()
    return trainer, options, lambda context: classifier_dataset(data, 8, True, seed=5)


def weights(model):
    return [v.numpy().copy() for v in model.weights]


class Interrupted(Exception):
    pass


def test_interrupted_run_resumes_to_the_same_weights(tmp_path):
    trainer, options, dataset_fn = build(tmp_path / "straight")
    finetuning.train_and_evaluate(trainer, dataset_fn, None, options)
    straight = weights(trainer.model)

    trainer, options, dataset_fn = build(tmp_path / "resumed")

    def crash(step, metrics):
        if step > 4:  # after the checkpoint at step 4 and more updates
            raise Interrupted
    with pytest.raises(Interrupted):
        trainer.train(dataset_fn, crash)
    assert trainer.global_step == 7  # loops end at 3, 4 (checkpoint), 7
    trainer, options, dataset_fn = build(tmp_path / "resumed")  # a new process, in effect
    finetuning.train_and_evaluate(trainer, dataset_fn, None, options)
    assert trainer.global_step == 12
    for a, b in zip(straight, weights(trainer.model)):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_evaluates_at_each_epoch_end_and_keeps_the_best(tmp_path):
    trainer, options, dataset_fn = build(tmp_path, steps=20)
    scores = iter([0.5, 0.8, 0.6])  # 8.75 steps an epoch: ends at steps 9 and 18; the run at 20
    seen = []

    def evaluate():
        seen.append(trainer.global_step)
        return {"eval_main": next(scores)}
    last = finetuning.train_and_evaluate(trainer, dataset_fn, evaluate, options, "eval_main")
    assert seen == [9, 18, 20]
    assert last == {"eval_main": 0.6, "global_step": 20}
    assert finetuning.read_eval_results(str(tmp_path / "eval_results.txt")) == last
    best = finetuning.BestCheckpoint(str(tmp_path), "eval_main")
    assert best.score == 0.8 and best.results["global_step"] == 18
    # The kept weights are step 18's: restoring them changes the step-20 model's outputs.
    batch = next(iter(classifier_dataset(features(), 8, False)))
    inputs = {"input_word_ids": batch["input_ids"], "input_mask": batch["input_mask"],
              "input_type_ids": batch["segment_ids"]}
    at_20 = trainer.model(inputs)["logits"].numpy()
    assert best.restore(trainer.model)
    assert not np.allclose(at_20, trainer.model(inputs)["logits"].numpy(), atol=1e-4)
    # A worse score is not kept; a better one replaces the copy.
    assert not best.offer(trainer.model, {"eval_main": 0.7, "global_step": 21})
    assert best.offer(trainer.model, {"eval_main": 0.9, "global_step": 22})
    assert finetuning.BestCheckpoint(str(tmp_path), "eval_main").score == 0.9


def test_evaluation_every_n_steps(tmp_path):
    trainer, options, dataset_fn = build(tmp_path, steps=10, evaluate_every=4)
    seen = []
    finetuning.train_and_evaluate(trainer, dataset_fn,
                                  lambda: seen.append(trainer.global_step) or {"eval_main": 0.0},
                                  options, "eval_main")
    assert seen == [4, 8, 10]


def test_predict_returns_every_example_in_order(tmp_path):
    trainer, _, _ = build(tmp_path)
    data = features(n=21)
    outputs = trainer.predict(lambda context: classifier_dataset(data, 8, False))
    np.testing.assert_array_equal(outputs["example_index"], np.arange(21))
    inputs = {"input_word_ids": tf.constant(data["input_ids"]),
              "input_mask": tf.constant(data["input_mask"]),
              "input_type_ids": tf.constant(data["segment_ids"])}
    np.testing.assert_allclose(outputs["logits"], trainer.model(inputs)["logits"].numpy(),
                               atol=1e-5)
