"""Text to tensors, shared by every task: both tokenisers, input packing, windows, records and
their cache, the fine-tuning input pipeline, and pretraining-data generation (`pretraining/`).
Knows nothing of tasks; of `modeling` it uses the encoder's input names (and `extend_vocab` its
checkpoint I/O)."""
