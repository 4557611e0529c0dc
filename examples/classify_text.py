"""Classify raw sentences with a SavedModel that `run_classifier.py --export_dir` wrote.

It imports only tensorflow and tensorflow_text, as a serving process would: the model tokenises
the strings inside its own graph, so nothing of this project is needed to use it.

    python examples/classify_text.py out/demo/finetune/serving "Return the square root of x."
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow: no C++ start-up chatter

import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401  (registers the in-graph tokenizer's ops)


def main():
    if len(sys.argv) < 3:
        sys.exit(f"usage: {sys.argv[0]} SAVED_MODEL_DIR SENTENCE [SENTENCE ...]")
    model = tf.saved_model.load(sys.argv[1])
    sentences = sys.argv[2:]
    out = model.signatures["serve_text"](text_a=tf.constant(sentences))
    labels = [label.decode() for label in out["label"].numpy()]
    best = tf.reduce_max(out["probabilities"], axis=-1).numpy()
    width = max(len(label) for label in labels + ["label"])
    print(f"  {'label':<{width}}  probability  sentence")
    for sentence, label, probability in zip(sentences, labels, best):
        print(f"  {label:<{width}}  {probability:11.2f}  {sentence}")


if __name__ == "__main__":
    main()
