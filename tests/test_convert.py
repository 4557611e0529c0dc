"""The converter CLI: every format to every other, losslessly, with the vocabulary carried along."""
import os
import sys

import numpy as np
import pytest
import tensorflow as tf
import warm_python
from test_checkpoints import assert_bit_identical, raw_tf1

from bert_tf2.modeling import convert
from bert_tf2.modeling.checkpoint_names import tf1_variable_map

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(*args):
    return warm_python.run([sys.executable, "-m", "bert_tf2.modeling.convert", *args], cwd=REPO,
                           timeout=300)


@pytest.mark.integration
def test_cli_tf1_to_hf_to_keras_to_tf1_is_lossless(tf1_tiny_dir, tmp_path):
    hops = [("tf1", str(tf1_tiny_dir)), ("hf", str(tmp_path / "hf")),
            ("keras", str(tmp_path / "keras")), ("tf1", str(tmp_path / "tf1"))]
    for (src_fmt, src), (dst_fmt, dst) in zip(hops, hops[1:]):
        result = run_cli("--from", src_fmt, "--input", src, "--to", dst_fmt, "--output", dst)
        assert result.returncode == 0, result.stderr
        assert os.path.join(dst, "vocab.txt") in result.stdout.split()
        # No TensorFlow start-up noise reaches the user on a machine without a GPU.
        assert "cuInit" not in result.stderr and "cuda drivers" not in result.stderr
    original = {n: v for n, v in raw_tf1(tf1_tiny_dir / "bert_model.ckpt").items()
                if "adam_" not in n and n != "global_step"}
    final = raw_tf1(tmp_path / "tf1" / "bert_model.ckpt")
    final.pop("global_step")
    assert_bit_identical(final, original)
    assert (tmp_path / "tf1" / "vocab.txt").read_text() == \
        (tf1_tiny_dir / "vocab.txt").read_text()


def test_minilm_to_tf1_keeps_every_tensor(minilm_dir, tmp_path):
    model = convert.load_any(str(minilm_dir), "hf")
    convert.save_any(model, str(tmp_path), "tf1")
    written = raw_tf1(tmp_path / "bert_model.ckpt")
    expected = {n: v.numpy() for n, v in tf1_variable_map(model).items()}
    written.pop("global_step")
    assert len(expected) == 5 + 6 * 16 + 2
    assert_bit_identical(written, expected)


def test_classifier_head_is_carried_across_formats(tf1_tiny_dir, tmp_path):
    reader = tf.train.load_checkpoint(str(tf1_tiny_dir / "bert_model.ckpt"))
    tensors = {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()
               if n.startswith("bert/") and "adam_" not in n}
    tensors["output_weights"] = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensors["output_bias"] = np.array([1, 2, 3], np.float32)
    tf.raw_ops.SaveV2(prefix=str(tmp_path / "src" / "bert_model.ckpt"),
                      tensor_names=list(tensors), shape_and_slices=[""] * len(tensors),
                      tensors=[tf.constant(v) for v in tensors.values()])
    (tmp_path / "src" / "bert_config.json").write_text(
        (tf1_tiny_dir / "bert_config.json").read_text())
    convert.convert(str(tmp_path / "src"), "tf1", str(tmp_path / "hf"), "hf")
    model = convert.load_any(str(tmp_path / "hf"), "hf")
    assert type(model).__name__ == "BertClassifier" and model.num_labels == 3
    np.testing.assert_array_equal(model.head.projection.output_weights.numpy(),
                                  tensors["output_weights"])


@pytest.mark.integration
@pytest.mark.parametrize("args,message", [
    (["--from", "tf1", "--input", "/nonexistent/ckpt", "--to", "hf"],
     "no bert_config.json beside the tf1 checkpoint"),
    (["--from", "tf1", "--to", "hf"], "--input is required"),
])
def test_cli_errors_are_clear(tmp_path, args, message):
    result = run_cli(*args, "--output", str(tmp_path / "out"))
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
