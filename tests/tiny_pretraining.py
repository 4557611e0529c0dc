"""A tiny pretrainer and its records, for the training loop's tests on both backends
(tests/test_training_loop.py in process on TensorFlow, tests/ramp_training.py on JAX): no
TensorFlow here."""
import numpy as np

from bert_tf2.modeling.config import BertConfig

VOCAB, LENGTH, PREDICTIONS = 60, 16, 3


def records(n=128, seed=0):
    """Static pretraining records with every prediction slot used (equal weights per row)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, (n, LENGTH)).astype(np.int32)
    positions = np.sort(np.stack([rng.choice(np.arange(1, LENGTH), PREDICTIONS, replace=False)
                                  for _ in range(n)]), axis=1).astype(np.int32)
    return {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids),
            "masked_lm_positions": positions,
            "masked_lm_ids": np.take_along_axis(ids, positions, 1),
            "masked_lm_weights": np.ones((n, PREDICTIONS), np.float32),
            "next_sentence_labels": rng.integers(0, 2, (n, 1)).astype(np.int32)}


def config(dropout=0.1):
    return BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=32, max_position_embeddings=32,
                      type_vocab_size=2, hidden_dropout_prob=dropout,
                      attention_probs_dropout_prob=dropout)


def on_a_step_clock(loop):
    """The budget's clock reads one second per step taken; the learning rate of each step is
    kept in `loop.rates`, and with a batch-size ramp each loop's micro-batches in
    `loop.counts`."""
    loop.clock = lambda: float(loop.global_step)
    loop.rates, loop.counts = [], []
    run_steps, set_micro_batches = loop._run_steps, loop._set_micro_batches

    def recorded(batches, count):
        loop.rates += [loop.current_learning_rate()] * count
        return run_steps(batches, count)

    def counted(count):
        loop.counts.append(count)
        set_micro_batches(count)
    loop._run_steps, loop._set_micro_batches = recorded, counted
    return loop
