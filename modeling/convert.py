"""Convert BERT checkpoints between Google TF1, Hugging Face and Keras formats.

    python -m bert_tf2.modeling.convert --from tf1 --input uncased_L-12_H-768_A-12 --to hf --output out/

The model is rebuilt from the source's config with whatever heads the source holds (pretraining,
classifier or SQuAD), every variable is carried over strictly, and `vocab.txt` comes along.
Folders written: tf1 -> bert_config.json + bert_model.ckpt.*; hf -> config.json +
model.safetensors; keras -> model.keras; keras_hub -> a KerasHub preset folder
(`modeling.keras_hub_preset`: config.json, model.weights.h5, tokenizer.json, assets/tokenizer/,
and for a classifier task.json and task.weights.h5).
"""
from __future__ import annotations

import logging
import os

from absl import app, flags

from bert_tf2.process import atomic_files, output_lock
from bert_tf2.process.errors import as_user_error, configure_process, run_main

# Keras and the modules that load it are imported where they are used: `python -m
# bert_tf2.modeling.convert` imports this module before `run_main` sets up the process
# (process.environment), and TensorFlow must load after that.

FLAGS = flags.FLAGS


def model_for_source(source, config):
    """An encoder with the heads the checkpoint holds (`source`, a `checkpoints.TensorSource`),
    so that nothing in it is dropped."""
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertClassifier, BertPretrainer, BertSpanLabeler

    encoder = BertEncoder(config)
    shapes = source.shapes
    if "cls/predictions/output_bias" in shapes:
        return BertPretrainer(encoder)
    if "cls/squad/output_weights" in shapes:
        return BertSpanLabeler(encoder)
    if "output_weights" in shapes:
        return BertClassifier(encoder, num_labels=shapes["output_weights"][0])
    return encoder


def load_any(path: str, fmt: str, bert_config_file: str | None = None):
    """The model stored at `path`, rebuilt with its heads and restored strictly."""
    from bert_tf2.modeling import checkpoints
    from bert_tf2.modeling.config import BertConfig

    if fmt == "keras":
        import keras

        from bert_tf2.modeling import models  # noqa: F401  (registers the classes it rebuilds)
        return keras.models.load_model(
            checkpoints.resolve_file(path, checkpoints.KERAS_FILE, "Keras model file"))
    if bert_config_file:
        config = BertConfig.from_json_file(bert_config_file)
    else:
        config = checkpoints.read_config(path, fmt)
    source = checkpoints.source_for(path, fmt)
    model = model_for_source(source, config)
    # A masked-LM checkpoint without next-sentence weights (Hugging Face BertForMaskedLM) keeps an
    # initialised NSP head, listed in the log.
    checkpoints.restore(model, source, allow_missing=["cls/seq_relationship/*"])
    return model


def save_any(model, output: str, fmt: str, global_step: int = 0, config=None) -> list[str]:
    """Write `model` in `fmt` into the folder `output`; returns the files written. `config`: the
    TF1 export's bert_config.json, if not the model's (a run that trained with other dropout
    writes the file's own)."""
    from bert_tf2.modeling import checkpoints

    os.makedirs(output, exist_ok=True)
    if fmt == "tf1":
        (config or model.config).to_json_file(os.path.join(output, checkpoints.TF1_CONFIG))
        checkpoints.save_tf1_checkpoint(model, os.path.join(output, checkpoints.TF1_PREFIX),
                                        global_step)
        files = [checkpoints.TF1_CONFIG, checkpoints.TF1_PREFIX + ".index",
                 checkpoints.TF1_PREFIX + ".data-00000-of-00001"]
    elif fmt == "hf":
        checkpoints.save_hf_checkpoint(model, output)
        files = [checkpoints.HF_CONFIG, checkpoints.HF_WEIGHTS]
    else:
        with atomic_files.atomic_path(os.path.join(output, checkpoints.KERAS_FILE),
                                      suffix=".keras") as tmp:
            model.save(tmp)
        files = [checkpoints.KERAS_FILE]
    return [os.path.join(output, f) for f in files]


def convert(src: str, src_format: str, dst: str, dst_format: str,
            bert_config_file: str | None = None, global_step: int = 0,
            do_lower_case: bool = True, approximate_gelu: bool = False) -> list[str]:
    """`do_lower_case`, `approximate_gelu`: the KerasHub preset's tokenizer and activation
    (`modeling.keras_hub_preset`)."""
    from bert_tf2.modeling import checkpoints

    if dst_format in ("hf", "keras_hub"):  # what they cannot hold is refused before any loading
        from bert_tf2.modeling.config import BertConfig

        config = (BertConfig.from_json_file(bert_config_file) if bert_config_file
                  else checkpoints.read_config(src, src_format))
        config.require_bert_architecture(config.source or "--bert_config_file")
    if dst_format == "keras_hub":
        from bert_tf2.modeling import keras_hub_preset

        keras_hub_preset.require()
        keras_hub_preset.check_activation(config, approximate_gelu,
                                          config.source or "--bert_config_file")
        vocab = checkpoints.vocab_beside(src)
        if vocab is None:
            raise checkpoints.CheckpointError(f"{src}: no vocab.txt beside it, which a KerasHub "
                                              f"preset's tokenizer needs")
    model = load_any(src, src_format, bert_config_file)
    if dst_format == "keras_hub":
        keras_hub_preset.save_preset(model, dst, vocab, do_lower_case,
                                     approximate_gelu=approximate_gelu)
        return [os.path.join(dst, name) for name in sorted(os.listdir(dst))]
    written = save_any(model, dst, dst_format, global_step)
    src_folder = src if os.path.isdir(src) else os.path.dirname(src)
    if checkpoints.copy_vocab(src_folder, dst):
        written.append(os.path.join(dst, checkpoints.VOCAB))
    return written


def main(argv):
    del argv
    logging.getLogger("bert_tf2.modeling").setLevel(logging.INFO)
    for name in ("from", "to", "input", "output"):
        if FLAGS[name].value is None:
            raise app.UsageError(f"--{name} is required")
    try:
        with output_lock.holding({FLAGS.output: "--output"}):
            written = convert(FLAGS.input, FLAGS["from"].value, FLAGS.output, FLAGS.to,
                              FLAGS.bert_config_file, FLAGS.global_step, FLAGS.do_lower_case,
                              FLAGS.keras_hub_approximate_gelu)
    except (ValueError, OSError) as error:  # bad files, named in the message
        raise as_user_error(error) from None
    for path in written:
        print(path)


def define_flags():
    """The CLI's flags, defined only when it runs, so that importing this module (as the runners
    do) defines none."""
    from bert_tf2.modeling import checkpoints

    flags.DEFINE_enum("from", None, checkpoints.FORMATS, "Format of --input.")
    flags.DEFINE_enum("to", None, checkpoints.FORMATS, "Format to write into --output.")
    flags.DEFINE_string("input", None, "Source folder (or TF1 checkpoint prefix, .safetensors or "
                        ".keras file).")
    flags.DEFINE_string("output", None, "Folder to write (created if missing).")
    flags.DEFINE_string("bert_config_file", None,
                        "TF1 only: the config, if not beside the checkpoint.")
    flags.DEFINE_integer("global_step", 0, "TF1 output: the global_step value to store.")
    flags.DEFINE_bool("do_lower_case", True, "keras_hub output: the tokenizer lower-cases "
                      "(uncased models).")
    flags.DEFINE_bool("keras_hub_approximate_gelu", False, "keras_hub output of a model with "
                      "the exact GELU (gelu_exact): export it anyway, KerasHub computing the tanh "
                      "approximation (outputs move by up to about 5e-3 on MiniLM).")


def console_main():
    configure_process()  # before define_flags loads Keras for the formats' names
    define_flags()
    run_main(main)


if __name__ == "__main__":
    console_main()
