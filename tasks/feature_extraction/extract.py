"""The extract_features driver: lines of text in, hidden layers or sentence vectors out.

`extract(settings)` resolves the model's files (config and vocabulary given, or beside
`--init_checkpoint`), checks the settings before reading anything, loads the encoder's weights
from a checkpoint in any format the project reads (a fine-tuning or pretraining run's checkpoint
gives its encoder), and then:
- with `output_file`: reads the input in shards of lines (`inference.line_shards`); `ShardExtractor`
  featurises each line as the original (`features`), runs the model on batches of similar length
  within a window of lines (`inference.streaming`), and gives each line's output in input order
  (`output`): the original's JSON lines of `--layers`, or with `pooling` one vector per line
  (JSON lines, or `.npy`); written resumably, the output renamed into place when complete. The
  Beam pipeline (`beam_pipeline`) runs the same `ShardExtractor` on every shard;
- with `doc_stride`, long lines are read whole in windows, each token from the window where it has
  the most context, pooled vectors over all of the line's tokens (`ShardExtractor.windowed`);
- with `export_dir`: a SavedModel that embeds raw strings (`serving`).
"""
from __future__ import annotations

import dataclasses
import logging
import os

from bert_tf2.process import output_lock
from bert_tf2.process.errors import SettingsError

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class ExtractSettings:
    input_file: str | None = None
    output_file: str | None = None
    bert_config_file: str | None = None
    init_checkpoint: str | None = None
    vocab_file: str | None = None
    do_lower_case: bool = True
    layers: tuple = (-1, -2, -3, -4)
    max_seq_length: int = 128
    batch_size: int = 32
    pooling: str | None = None  # None: the original's layers per token; cls or mean: a vector
    normalize: bool = False  # L2-normalise pooled vectors
    export_dir: str | None = None  # an embedding SavedModel (pooling, or mean)
    lines_per_shard: int = 1000  # resume granularity
    window_batches: int = 32  # lines sorted by length together: window_batches * batch_size
    doc_stride: int | None = None  # long lines read whole in windows (None: truncated)
    export_litert: str = "int8"  # the export's LiteRT file (engine.litert): int8, float32, none


def check(settings: ExtractSettings) -> None:
    from bert_tf2.tasks.feature_extraction.model import POOLINGS

    if not (settings.output_file or settings.export_dir):
        raise SettingsError("nothing to do: set --input_file and --output_file, or --export_dir")
    if settings.output_file and not settings.input_file:
        raise SettingsError("--output_file needs --input_file")
    if settings.input_file and not settings.output_file:
        raise SettingsError("--input_file needs --output_file")
    if not settings.init_checkpoint:
        raise SettingsError("--init_checkpoint is required (the weights to extract with)")
    if settings.pooling is not None and settings.pooling not in POOLINGS:
        raise SettingsError(f"--pooling={settings.pooling}: one of {', '.join(POOLINGS)}")
    if settings.output_file and settings.output_file.endswith(".npy") and not settings.pooling:
        raise SettingsError("a .npy --output_file holds pooled vectors: set --pooling=mean or cls")
    output_lock.check_file_output(settings.output_file, "--output_file")
    if settings.input_file and not os.path.isfile(settings.input_file) \
            and "://" not in settings.input_file:
        raise SettingsError(f"--input_file {settings.input_file}: no such file")
    if settings.doc_stride is not None and settings.doc_stride < 1:
        raise SettingsError(f"--doc_stride={settings.doc_stride}: at least 1 (leave it out to "
                            "truncate as the original)")
    for name in ("batch_size", "lines_per_shard", "window_batches"):
        if getattr(settings, name) < 1:
            raise SettingsError(f"--{name}={getattr(settings, name)} must be at least 1")


def load_encoder(settings: ExtractSettings):
    """(encoder with the checkpoint's weights, vocabulary path)."""
    from bert_tf2.engine.build import RunSettings, model_files
    from bert_tf2.modeling import checkpoints
    from bert_tf2.modeling.encoder import BertEncoder

    config, vocab_file = model_files(RunSettings(
        output_dir="", bert_config_file=settings.bert_config_file,
        init_checkpoint=settings.init_checkpoint, vocab_file=settings.vocab_file))
    if settings.max_seq_length > config.max_position_embeddings:
        raise SettingsError(f"--max_seq_length={settings.max_seq_length} exceeds the model's "
                            f"max_position_embeddings={config.max_position_embeddings}")
    if settings.max_seq_length < 3:
        raise SettingsError(f"--max_seq_length={settings.max_seq_length}: [CLS] A [SEP] B [SEP] "
                            f"needs at least 3")
    if not settings.pooling:
        from bert_tf2.tasks.feature_extraction.model import check_layers

        try:
            check_layers(list(settings.layers), config.num_hidden_layers)
        except ValueError as e:
            raise SettingsError(f"--layers={','.join(map(str, settings.layers))}: {e}") from None
    encoder = BertEncoder(config)
    checkpoints.load_initial_weights(encoder, settings.init_checkpoint, allow_new_heads=True)
    return encoder, vocab_file


def extract(settings: ExtractSettings) -> None:
    """Run the extraction `settings` describe (see the module docstring), holding its outputs
    against other processes (`process.output_lock`)."""
    check(settings)
    if settings.output_file and "://" in settings.output_file:
        raise SettingsError(f"--output_file={settings.output_file}: extract_features writes a "
                            f"local file; the Beam pipeline (bert_tf2.tasks.feature_extraction."
                            f"beam_pipeline) writes to gs:// and other file systems")
    with output_lock.holding({settings.output_file: "--output_file",
                              settings.export_dir: "--export_dir"}):
        _extract(settings)


def _extract(settings: ExtractSettings) -> None:
    from bert_tf2.data_gen.tokenization import FullTokenizer, special_token_ids

    encoder, vocab_file = load_encoder(settings)
    tokenizer = FullTokenizer(vocab_file, do_lower_case=settings.do_lower_case)
    # [UNK] too: the first character the vocabulary lacks would fail without it.
    special_token_ids(tokenizer.vocab, ("[CLS]", "[SEP]", "[UNK]"), source=vocab_file)
    if settings.output_file:
        run(settings, encoder, tokenizer, vocab_file)
    if settings.export_dir:
        from bert_tf2.engine import export
        from bert_tf2.tasks.feature_extraction.serving import EmbeddingServing

        export.save(EmbeddingServing(encoder, vocab_file, settings.do_lower_case,
                                     settings.max_seq_length, settings.pooling or "mean",
                                     settings.normalize, doc_stride=settings.doc_stride),
                    settings.export_dir, {"vocab.txt": vocab_file},
                    litert=settings.export_litert)


def fingerprint(settings: ExtractSettings, vocab_file: str) -> dict:
    """What decides the output: a resumed run must have the same."""
    stat = os.stat(settings.input_file) if os.path.isfile(settings.input_file) else None
    return {"input_file": os.path.abspath(settings.input_file),
            "input_size": stat.st_size if stat else None,
            "input_mtime_ns": stat.st_mtime_ns if stat else None,
            **{name: getattr(settings, name) for name in (
                "init_checkpoint", "bert_config_file", "do_lower_case", "max_seq_length",
                "pooling", "normalize", "lines_per_shard", "doc_stride")},
            "layers": list(settings.layers), "vocab_file": os.path.abspath(vocab_file)}


class ShardExtractor:
    """One shard of lines -> its output items in order: JSON lines, or vectors for `.npy`.

    Picklable (it holds the settings): a Beam worker builds the model on its first shard, once.
    The local run and the Beam pipeline both use it, so a shard is batched, and computed,
    identically in both."""

    def __init__(self, settings: ExtractSettings, as_vectors: bool = False):
        self.settings = settings
        self.as_vectors = as_vectors
        self.model = None

    def build(self, encoder=None, tokenizer=None) -> None:
        from bert_tf2.data_gen.tokenization import FullTokenizer
        from bert_tf2.process import environment
        from bert_tf2.tasks.feature_extraction.model import extraction_model

        s = self.settings
        if encoder is None:
            encoder, vocab_file = load_encoder(s)
            tokenizer = FullTokenizer(vocab_file, do_lower_case=s.do_lower_case)
        self.tokenizer = tokenizer
        self.hidden_size = encoder.config.hidden_size
        if s.doc_stride and s.pooling:  # pooled over the whole line, once its tokens are read
            model = extraction_model(encoder, [-1])
        else:
            model = extraction_model(encoder, list(s.layers), s.pooling, s.normalize)
        if environment.uses_tensorflow():
            import tensorflow as tf

            from bert_tf2.engine.export import token_id_spec

            # One trace for every batch shape: the batcher pads each batch to its own longest row.
            traced = tf.function(lambda inputs: model(inputs, training=False),
                                 input_signature=[token_id_spec()], autograph=False)
            self.predict = lambda batch: {name: value.numpy()
                                          for name, value in traced(batch).items()}
        elif environment.backend() == "jax":  # compiled once per padded shape
            from bert_tf2.engine.keras_training import compiled_predictor

            self.predict = compiled_predictor(model, self.settings.batch_size,
                                              encoder.config.max_position_embeddings)
        else:  # PyTorch: eager
            import keras

            self.predict = lambda batch: {
                name: keras.ops.convert_to_numpy(value)
                for name, value in model(batch, training=False).items()}
        self.model = model

    def window(self) -> int:
        """Lines sorted by length together (fewer when whole layers are kept per token)."""
        s = self.settings
        return s.batch_size * (s.window_batches if s.pooling else max(1, s.window_batches // 4))

    def _run_batch(self, batch) -> dict:
        return self.predict(batch)

    def __call__(self, shard):
        from bert_tf2.inference.streaming import predict_in_order
        from bert_tf2.tasks.feature_extraction.features import featurize
        from bert_tf2.tasks.feature_extraction.output import embedding_line, json_line
        from bert_tf2.tasks.feature_extraction.reader import shard_lines

        if self.model is None:
            self.build()
        s = self.settings
        if s.doc_stride:
            yield from self.windowed(shard_lines(shard))
            return
        features = (featurize(line, self.tokenizer, s.max_seq_length)
                    for line in shard_lines(shard))

        for feature, outputs in predict_in_order(features, _inputs, self._run_batch, s.batch_size,
                                                 self.window()):
            index = feature.line.index
            if s.pooling:
                vector = outputs["embedding"]
                yield vector if self.as_vectors else embedding_line(index, vector)
            else:
                yield json_line(index, feature.tokens, list(s.layers), outputs)

    def windowed(self, lines):
        """Output items of lines read in windows: each token's layers from its max-context window
        (`features.featurize_windows`); pooled vectors over every token of the line."""
        import itertools

        import numpy as np

        from bert_tf2.inference.streaming import predict_in_order
        from bert_tf2.tasks.feature_extraction.features import featurize_windows
        from bert_tf2.tasks.feature_extraction.model import pool
        from bert_tf2.tasks.feature_extraction.output import embedding_line, json_line

        s = self.settings
        windows = (window for line in lines for window in featurize_windows(
            line, self.tokenizer, s.max_seq_length, s.doc_stride))

        results = predict_in_order(windows, _inputs, self._run_batch, s.batch_size,
                                   self.window())
        for _, group in itertools.groupby(results, key=lambda item: item[0].line.index):
            group = list(group)
            first = group[0][0]
            names = list(group[0][1])
            outputs = {name: np.stack([group[w][1][name][p] for w, p in first.read_from])
                       for name in names}
            if s.pooling:
                tokens = outputs["layer_output_0"][None]
                vector = np.asarray(pool(tokens, np.ones(tokens.shape[:2], np.int32), s.pooling,
                                         s.normalize))[0]
                yield vector if self.as_vectors else embedding_line(first.line.index, vector)
            else:
                yield json_line(first.line.index, first.tokens, list(s.layers), outputs)


def _inputs(feature) -> dict:
    return {"input_word_ids": feature.input_ids, "input_mask": [1] * len(feature.input_ids),
            "input_type_ids": feature.input_type_ids}


def run(settings: ExtractSettings, encoder, tokenizer, vocab_file: str) -> None:
    """The local run: shard after shard of the one input file, resumable."""
    from bert_tf2.inference.line_shards import count_lines, file_shards
    from bert_tf2.inference.streaming import Progress
    from bert_tf2.process.errors import user_error_status
    from bert_tf2.tasks.feature_extraction.output import ShardedOutput

    out = ShardedOutput(settings.output_file, settings.lines_per_shard,
                        fingerprint(settings, vocab_file))
    try:
        extractor = ShardExtractor(settings, as_vectors=out.npy)
        extractor.build(encoder, tokenizer)
        progress = Progress(count_lines(settings.input_file), out.done)
        for shard in file_shards(settings.input_file, 0, settings.lines_per_shard,
                                 skip_shards=out.shards):
            for item in extractor(shard):
                out.write(item)
                progress.update()
    except BaseException as error:
        if user_error_status(error) is not None:
            out.discard_new()  # bad input: nothing of this run is worth resuming from
        else:
            out.discard_partial()  # interrupted, say: the complete parts are resumed from
        raise
    rows = out.finish(width=extractor.hidden_size)
    progress.log()
    logger.info("wrote %d lines to %s", rows, settings.output_file)
