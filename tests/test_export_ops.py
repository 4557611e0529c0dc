"""Stock TensorFlow Serving can load every export: each SavedModel uses only ops of core
TensorFlow and of the tensorflow/text release that tensorflow/serving builds in (2.20.0; the list
in tests/fixtures/tensorflow_text_2.20.0_ops.txt, from that release's source)."""
import subprocess
import sys

import pytest
from conftest import REPO

TEXT_OPS = REPO / "tests" / "fixtures" / "tensorflow_text_2.20.0_ops.txt"
CORE_OPS = """
from tensorflow.python.client import pywrap_tf_session as session
from tensorflow.core.framework import op_def_pb2
import sys
assert "tensorflow_text" not in sys.modules
ops = op_def_pb2.OpList()
ops.ParseFromString(session.TF_GetBuffer(session.TF_GetAllOpList()))
print("\\n".join(sorted(op.name for op in ops.op)))
"""


@pytest.fixture(scope="module")
def allowed_ops() -> set:
    """Core TensorFlow's ops (a process that never imported tensorflow_text) and the list's."""
    result = subprocess.run([sys.executable, "-c", CORE_OPS], capture_output=True, text=True,
                            check=True)
    core = set(result.stdout.split())
    text = {line.strip() for line in TEXT_OPS.read_text().splitlines()
            if line.strip() and not line.startswith("#")}
    assert len(text) == 38 and "FastWordpieceTokenizeWithOffsets" in text
    assert not core & text and len(core) > 1000
    return core | text


def saved_model_graphs(export_dir) -> list:
    """The graphs (`GraphDef`) of a SavedModel's meta graphs."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((export_dir / "saved_model.pb").read_bytes())
    return [graph.graph_def for graph in saved.meta_graphs]


def saved_model_ops(graphs) -> set:
    """Every op the graphs and their functions use."""
    ops = set()
    for graph in graphs:
        ops |= {node.op for node in graph.node}
        for function in graph.library.function:
            ops |= {node.op for node in function.node_def}
    return ops


def serving_modules(vocab: str) -> dict:
    """One serving module of each task, on a tiny random BERT (the ops do not depend on the
    weights), with the options that add graph: windows, thresholds, SQuAD 2.0."""
    import keras
    from conftest import TINY

    from bert_tf2.modeling.config import BertConfig
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import (
        BertClassifier,
        BertMultipleChoice,
        BertSpanLabeler,
        BertTokenClassifier,
    )
    from bert_tf2.tasks.classification.serving import ClassifierServing
    from bert_tf2.tasks.feature_extraction.serving import EmbeddingServing
    from bert_tf2.tasks.multiple_choice.serving import MultipleChoiceServing
    from bert_tf2.tasks.ner.serving import NerServing
    from bert_tf2.tasks.squad.serving import SquadServing

    keras.utils.set_random_seed(1)

    def encoder():
        return BertEncoder(BertConfig.from_dict(TINY))

    return {
        "classifier": ClassifierServing(BertClassifier(encoder(), 2), vocab, True, 64,
                                        ["0", "1"], pair=True),
        "multilabel_windows": ClassifierServing(
            BertClassifier(encoder(), 3), vocab, True, 32, ["a", "b", "c"], pair=False,
            thresholds=[0.5, 0.4, 0.3], doc_stride=8, pooling="max"),
        "squad_v2": SquadServing(BertSpanLabeler(encoder()), vocab, True, 64, doc_stride=16,
                                 max_query_length=16, version_2=True),
        "ner": NerServing(BertTokenClassifier(encoder(), 3), vocab, True, 32, ["O", "B", "I"],
                          doc_stride=8),
        "multiple_choice": MultipleChoiceServing(BertMultipleChoice(encoder(), 3), vocab, True,
                                                 32, 3),
        "embeddings": EmbeddingServing(encoder(), vocab, True, 32, "mean", True, doc_stride=8),
    }


@pytest.mark.integration
def test_every_export_uses_only_ops_stock_tf_serving_has(allowed_ops, minilm_dir, tmp_path):
    from bert_tf2.engine import export

    seen = {}
    for name, module in serving_modules(str(minilm_dir / "vocab.txt")).items():
        folder = tmp_path / name
        export.save(module, str(folder))
        graphs = saved_model_graphs(folder)
        ops = saved_model_ops(graphs)
        assert not ops - allowed_ops, f"{name}: ops outside core TF and tensorflow/text 2.20.0"
        seen[name] = ops
        # Only what the signatures call is saved: not the function of the model's call that
        # Keras offers every model (`_default_save_signature`), which is Keras's again after.
        assert not [f.signature.name for graph in graphs for f in graph.library.function
                    if "serving_default" in f.signature.name], name
        model = getattr(module, "model", None) or module.encoder
        assert model._default_save_signature is not None
    # The check sees the tokenizer's ops: every export tokenises raw strings in its graph.
    for name, ops in seen.items():
        assert {"FastWordpieceTokenizeWithOffsets", "RegexSplitWithOffsets"} <= ops, name


@pytest.mark.integration
def test_an_op_from_elsewhere_is_caught(allowed_ops):
    ops = {"MatMul", "NormalizeUTF8", "TFText>FastBertTokenizeV9"}
    assert ops - allowed_ops == {"TFText>FastBertTokenizeV9"}
