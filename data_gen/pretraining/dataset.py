"""The tf.data input of pretraining: TFRecord files -> batches of int32 features, as the original.

The original `run_pretraining.py` input function, for training: the file list repeated and
shuffled, records interleaved from up to `num_cpu_threads` files at a time, a shuffle buffer of 100
records; for evaluation the files in order, once. Records are parsed with the schema of
`schema` and int64 features cast to int32 (`masked_lm_weights` stays float32);
batches drop the remainder. Here records are batched first and parsed a batch at a time (the same
values, faster). Without tf.data's autotuning model, as every input pipeline here
(`data_gen.datasets.without_autotune_model`).
"""
import tensorflow as tf

from bert_tf2.data_gen.datasets import without_autotune_model
from bert_tf2.data_gen.pretraining import schema
from bert_tf2.data_gen.pretraining.schema import SHUFFLE_BUFFER_RECORDS


def pretraining_dataset(input_files, batch_size: int, max_seq_length: int,
                        max_predictions_per_seq: int, is_training: bool,
                        num_cpu_threads: int = 4, seed: int = None,
                        input_context: tf.distribute.InputContext = None) -> tf.data.Dataset:
    """Batches of the seven features (dict of tensors) from `input_files` (a list of paths)."""
    input_files = list(input_files)
    if not input_files:
        raise ValueError("pretraining_dataset: no input files")
    files = tf.data.Dataset.from_tensor_slices(tf.constant(input_files))
    pipelines = input_context.num_input_pipelines if input_context else 1
    # Several input pipelines (workers) split the files; with fewer files than pipelines they
    # split the records instead (each reads everything, in the same seeded order, and keeps its
    # share), so that no worker is left without data.
    shard_records = 1 < pipelines and len(input_files) < pipelines
    if 1 < pipelines and not shard_records:
        files = files.shard(pipelines, input_context.input_pipeline_id)
    if is_training:
        files = files.repeat().shuffle(len(input_files), seed=seed)
        records = files.interleave(
            tf.data.TFRecordDataset, cycle_length=min(num_cpu_threads, len(input_files)),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=seed is not None)
        records = records.shuffle(SHUFFLE_BUFFER_RECORDS, seed=seed)
    else:
        records = tf.data.TFRecordDataset(files)
    if shard_records:
        records = records.shard(pipelines, input_context.input_pipeline_id)
    spec = schema.feature_spec(max_seq_length, max_predictions_per_seq)
    return without_autotune_model(
        records.batch(batch_size, drop_remainder=True)
        .map(lambda batch: _to_int32(tf.io.parse_example(batch, spec)),
             num_parallel_calls=num_cpu_threads)
        .prefetch(tf.data.AUTOTUNE))


def load_records(input_files, max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """Every record of `input_files`, in file order, as NumPy arrays (for inspection and checks)."""
    from bert_tf2.data_gen.records import read_records

    return read_records(list(input_files),
                        schema.fixed_spec(max_seq_length, max_predictions_per_seq))


def _to_int32(features: dict) -> dict:
    """tf.Example holds int64 only; the model (and TPUs, in the original) want int32."""
    return {name: tf.cast(value, tf.int32) if value.dtype == tf.int64 else value
            for name, value in features.items()}
