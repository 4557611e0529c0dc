"""Classify raw sentences with what `run_classifier.py --export_dir` wrote.

By default it loads the SavedModel and imports only tensorflow and tensorflow_text, as a serving
process would: the model tokenises the strings inside its own graph, so nothing of this project
is needed to use it.

With --fast it answers from the export's LiteRT int8 file instead (`litert/int8.tflite`, the
fast CPU path of docs/serving.md), tokenising with this project's copy of the original tokenizer
(`tasks/classification/litert_serving.py`), without TensorFlow.

    python examples/classify_text.py out/demo/finetune/serving "Return the square root of x."
    python examples/classify_text.py --fast out/demo/finetune/serving "Return the square root of x."
"""
import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow: no C++ start-up chatter


def savedmodel_answers(export_dir: str, sentences: list) -> tuple:
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the in-graph tokenizer's ops)

    model = tf.saved_model.load(export_dir)
    out = model.signatures["serve_text"](text_a=tf.constant(sentences))
    labels = [label.decode() for label in out["label"].numpy()]
    return labels, tf.reduce_max(out["probabilities"], axis=-1).numpy()


def litert_answers(export_dir: str, sentences: list) -> tuple:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    from bert_tf2.inference.litert_layout import LiteRTError
    from bert_tf2.tasks.classification.litert_serving import LiteRTClassifier

    try:
        out = LiteRTClassifier.load(export_dir, "int8")(sentences)
    except LiteRTError as e:  # a mistake of the command line: one line, no traceback
        sys.exit(f"{sys.argv[0]}: {e}")
    return out["label"], out["probabilities"].max(axis=-1)


def main():
    args = sys.argv[1:]
    fast = bool(args) and args[0] == "--fast"
    args = args[1:] if fast else args
    if len(args) < 2:
        sys.exit(f"usage: {sys.argv[0]} [--fast] EXPORT_DIR SENTENCE [SENTENCE ...]")
    export_dir, sentences = args[0], args[1:]
    labels, best = (litert_answers if fast else savedmodel_answers)(export_dir, sentences)
    width = max(len(label) for label in list(labels) + ["label"])
    print(f"  {'label':<{width}}  probability  sentence")
    for sentence, label, probability in zip(sentences, labels, best):
        print(f"  {label:<{width}}  {probability:11.2f}  {sentence}")


if __name__ == "__main__":
    main()
