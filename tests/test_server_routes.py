"""The model server's routes, called in process as ASGI (no socket): TF Serving's REST surface as
its API documentation gives it (versions and labels on status, metadata and predict; classify and
regress where the head fits, with their request and response shapes) and the Open Inference
Protocol's REST routes, over a stand-in runtime whose answers are known."""
import asyncio
import json

import numpy as np
import pytest

pytest.importorskip("uvicorn", reason="the serve extra is not installed: pip install "
                    "'bert-tf2[serve]'")


class Classifier:
    """A pair classifier's runtime: class 1's logit is len(text_a) - len(text_b)."""
    input_names = ("text_a", "text_b")
    list_inputs = ()
    labels = np.array(["no", "yes"], dtype=object)

    def warm_up(self, batches):
        pass

    def __call__(self, text_a, text_b):
        logits = np.array([[0.0, len(a) - len(b)] for a, b in zip(text_a, text_b)], np.float32)
        shifted = np.exp(logits - logits.max(-1, keepdims=True))
        label_id = logits.argmax(-1).astype(np.int32)
        return {"logits": logits, "probabilities": shifted / shifted.sum(-1, keepdims=True),
                "label_id": label_id, "label": self.labels[label_id].tolist()}


class Regressor:
    """A regression's runtime: the score is the text's length over 10."""
    input_names = ("text_a",)
    list_inputs = ()

    def warm_up(self, batches):
        pass

    def __call__(self, text_a):
        score = np.array([len(a) / 10 for a in text_a], np.float32)
        return {"logits": score[:, None], "score": score}


def app_of(runtime, description: dict):
    import functools

    from bert_tf2.inference.runtime import predict_rows
    from bert_tf2.model_server.app import App, ServedModel
    from bert_tf2.model_server.batching import DynamicBatcher

    batcher = DynamicBatcher(functools.partial(predict_rows, runtime))
    model = ServedModel("m", runtime, batcher)
    model.describe(description)
    row = {name: "warm up" for name in model.inputs}
    model.example_outputs = {k: v[0] for k, v in predict_rows(runtime, [row]).items()}
    batcher.start_accepting()
    model.ready = True
    return App(model)


def call(app, method: str, path: str, body=None) -> tuple:
    """`(status, JSON answer)` of one request, run to its end."""
    data = body if isinstance(body, bytes) else (b"" if body is None else json.dumps(body).encode())

    async def run():
        messages = [{"type": "http.request", "body": data, "more_body": False}]
        sent = []

        async def receive():
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        await app({"type": "http", "method": method, "path": path, "headers": []}, receive,
                  send)
        return sent[0]["status"], json.loads(b"".join(m.get("body", b"") for m in sent[1:]))

    return asyncio.run(run())


@pytest.fixture(scope="module")
def classifier():
    return app_of(Classifier(), {"task": "classification", "labels": ["no", "yes"]})


@pytest.fixture(scope="module")
def regressor():
    return app_of(Regressor(), {"task": "classification", "labels": []})


PAIRS = {"instances": [{"text_a": "a long text", "text_b": "short"},
                       {"text_a": "x", "text_b": "longer"}]}


def test_version_1_answers_as_the_model_and_other_versions_and_labels_are_404(classifier):
    for suffix in ("", "/metadata"):
        plain = call(classifier, "GET", f"/v1/models/m{suffix}")
        assert plain[0] == 200
        assert call(classifier, "GET", f"/v1/models/m/versions/1{suffix}") == plain
        assert call(classifier, "GET", f"/v1/models/m/versions/2{suffix}") == (404, {
            "error": "Servable not found for request: Specific(m, 2)"})
        assert call(classifier, "GET", f"/v1/models/m/labels/stable{suffix}") == (404, {
            "error": "Unrecognized servable version label: stable"})
    assert call(classifier, "GET", "/v1/models/m")[1]["model_version_status"][0][
        "version"] == "1"
    assert call(classifier, "GET", "/v1/models/m/metadata")[1]["model_spec"] == {
        "name": "m", "signature_name": "", "version": "1"}
    predicted = call(classifier, "POST", "/v1/models/m:predict", PAIRS)
    assert predicted[0] == 200
    assert call(classifier, "POST", "/v1/models/m/versions/1:predict", PAIRS) == predicted
    assert call(classifier, "POST", "/v1/models/m/versions/7:predict", PAIRS)[0] == 404
    assert call(classifier, "POST", "/v1/models/m/labels/canary:predict", PAIRS)[0] == 404
    assert call(classifier, "POST", "/v1/models/other/versions/1:predict", PAIRS) == (404, {
        "error": "no model other (this server serves m)"})


def test_classify_answers_each_class_with_its_probability(classifier):
    predicted = call(classifier, "POST", "/v1/models/m:predict", PAIRS)[1]["predictions"]
    status, answer = call(classifier, "POST", "/v1/models/m/versions/1:classify", {
        "signature_name": "serving_default", "context": {"text_b": "short"},
        "examples": [{"text_a": "a long text"}, {"text_a": "x", "text_b": "longer"}]})
    assert status == 200
    assert [[name for name, _ in row] for row in answer["result"]] == [["no", "yes"]] * 2
    np.testing.assert_allclose([[p for _, p in row] for row in answer["result"]],
                               [row["probabilities"] for row in predicted], atol=1e-7)
    assert call(classifier, "POST", "/v1/models/m:classify", {"examples": []}) == (200, {
        "result": []})
    status, answer = call(classifier, "POST", "/v1/models/m:classify",
                          {"examples": [{"text_a": "x"}]})
    assert status == 400 and answer == {
        "error": "examples[0]: no text_b (the signature takes text_a, text_b)"}
    assert call(classifier, "POST", "/v1/models/m:regress", {"examples": []}) == (400, {
        "error": "model m is not a regression model: ask it with :predict or :classify"})


def test_regress_answers_the_score_of_each_example(regressor):
    status, answer = call(regressor, "POST", "/v1/models/m:regress",
                          {"examples": [{"text_a": "four"}, {"text_a": "ten chars!"}]})
    assert status == 200
    np.testing.assert_allclose(answer["result"], [0.4, 1.0], rtol=1e-6)
    assert call(regressor, "POST", "/v1/models/m:classify", {"examples": []}) == (400, {
        "error": "model m is not a classifier: ask it with :predict or :regress"})


def test_wrong_methods_and_unknown_paths_are_answered_in_one_line(classifier):
    assert call(classifier, "GET", "/v1/models/m:predict")[0] == 405
    assert call(classifier, "POST", "/v1/models/m", {})[0] == 405
    assert call(classifier, "GET", "/v3/anything") == (404, {
        "error": "/v3/anything: not served here"})
    assert call(classifier, "POST", "/v1/models/m:predict", b"[" * 5000 + b"]" * 5000) == (
        400, {"error": "the body is not JSON this server reads: nested deeper than 1,000 "
                       "levels"})


def test_the_open_inference_protocol_over_rest(classifier):
    assert call(classifier, "GET", "/v2/health/live") == (200, {"live": True})
    assert call(classifier, "GET", "/v2/health/ready") == (200, {"ready": True})
    assert call(classifier, "GET", "/v2/models/m/ready") == (200, {"name": "m", "ready": True})
    status, meta = call(classifier, "GET", "/v2/models/m")
    assert status == 200 and meta["inputs"] == [
        {"name": "text_a", "datatype": "BYTES", "shape": [-1]},
        {"name": "text_b", "datatype": "BYTES", "shape": [-1]}]
    assert {o["name"]: o["datatype"] for o in meta["outputs"]} == {
        "label": "BYTES", "label_id": "INT32", "logits": "FP32", "probabilities": "FP32"}
    status, answer = call(classifier, "POST", "/v2/models/m/infer", {"id": "7", "inputs": [
        {"name": "text_a", "shape": [2], "datatype": "BYTES", "data": ["a long text", "x"]},
        {"name": "text_b", "shape": [2], "datatype": "BYTES", "data": ["short", "longer"]}]})
    assert status == 200 and answer["id"] == "7" and answer["model_name"] == "m"
    outputs = {o["name"]: o for o in answer["outputs"]}
    assert outputs["label"]["data"] == ["yes", "no"]
    assert outputs["probabilities"]["shape"] == [2, 2]
    assert call(classifier, "POST", "/v2/models/m/infer", {"inputs": [
        {"name": "text_a", "shape": [1], "datatype": "FP32", "data": [1.0]}]}) == (400, {
            "error": "input text_a: datatype \"FP32\"; texts are BYTES"})


class _FailsItsWarmUp(Classifier):
    name = "float32"

    def warm_up(self, batches):
        raise RuntimeError("cannot cache function '_fill_table': no locator available for file "
                           "'.../compiled_wordpiece.py'")


def test_a_model_that_fails_its_warm_up_stops_the_server_in_one_line(tmp_path):
    """A server that could never get ready exits (it stayed up, unready, forever), with one line
    naming the export and the error (and the error behind it for BERT_TRACEBACK)."""
    from bert_tf2.model_server.app import WarmUpError, serve
    from bert_tf2.model_server.settings import ServerSettings
    from bert_tf2.process.errors import user_error_status

    settings = ServerSettings(export_dir=str(tmp_path), model_name="m", host="127.0.0.1", port=0,
                              drain_grace_s=0.0, drain_seconds=1.0)
    import signal

    def hung(*_):
        raise AssertionError("the server is still up 30 s after its warm-up failed")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        with pytest.raises(WarmUpError) as refused:
            serve(settings, runtime=_FailsItsWarmUp())
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert str(refused.value) == (
        f"{tmp_path}: the model failed its warm-up, so the server never got ready (cannot cache "
        f"function '_fill_table': no locator available for file '.../compiled_wordpiece.py'); "
        f"BERT_TRACEBACK=1 shows where it failed")
    assert user_error_status(refused.value) == 1
    assert isinstance(refused.value.__cause__, RuntimeError)


def test_tf_serving_grpc_methods_in_process_answer_as_the_rest_routes(classifier, regressor):
    """TF Serving's gRPC methods called in process (no socket) on the stand-in runtimes: Regress
    gives each example's score, Classify each class's probability, Predict the REST outputs as
    tensors; with no saved_model.pb, GetModelMetadata is the REST route's signature."""
    import base64

    from google.protobuf import json_format

    from bert_tf2.model_server import grpc_messages as wire
    from bert_tf2.model_server.tf_serving_grpc import _Service

    def example(**features):  # a tf.Example in protobuf's JSON (bytes in base64)
        return {"features": {"feature": {name: {"bytesList": {"value": [
            base64.b64encode(text.encode()).decode()]}} for name, text in features.items()}}}

    def message(name, value):
        return json_format.ParseDict(value, wire.serving(name)())

    regression = _Service(regressor.model, None)
    answer = asyncio.run(regression.regress(message("RegressionRequest", {
        "model_spec": {"name": "m"}, "input": {"example_list": {"examples": [
            example(text_a="four"), example(text_a="ten chars!")]}}})))
    np.testing.assert_allclose([r.value for r in answer.result.regressions], [0.4, 1.0],
                               rtol=1e-6)
    assert (answer.model_spec.name, answer.model_spec.version.value) == ("m", 1)

    classification = _Service(classifier.model, None)
    answer = asyncio.run(classification.classify(message("ClassificationRequest", {
        "model_spec": {"name": "m"}, "input": {"example_list_with_context": {
            "context": example(text_b="short"),
            "examples": [example(text_a="a long text"), example(text_a="x")]}}})))
    rest = call(classifier, "POST", "/v1/models/m:classify", {
        "context": {"text_b": "short"}, "examples": [{"text_a": "a long text"},
                                                     {"text_a": "x"}]})[1]["result"]
    assert [[(c.label, pytest.approx(c.score, abs=1e-7)) for c in row.classes]
            for row in answer.result.classifications] == [[tuple(c) for c in row]
                                                          for row in rest]
    tensors = {"text_a": {"dtype": "DT_STRING", "tensor_shape": {"dim": [{"size": 2}]},
                          "string_val": ["YSBsb25nIHRleHQ=", "eA=="]},  # "a long text", "x"
               "text_b": {"dtype": "DT_STRING", "tensor_shape": {"dim": [{"size": 2}]},
                          "string_val": ["c2hvcnQ=", "bG9uZ2Vy"]}}  # "short", "longer"
    answer = asyncio.run(classification.predict(message("PredictRequest", {
        "model_spec": {"name": "m"}, "inputs": tensors})))
    rest = call(classifier, "POST", "/v1/models/m:predict", PAIRS)[1]["predictions"]
    assert list(answer.outputs["label"].string_val) == [p["label"].encode() for p in rest]
    assert list(answer.outputs["label_id"].int_val) == [p["label_id"] for p in rest]
    np.testing.assert_allclose(np.reshape(answer.outputs["probabilities"].float_val, (2, 2)),
                               [p["probabilities"] for p in rest], atol=1e-7)

    metadata = asyncio.run(classification.metadata(message("GetModelMetadataRequest", {
        "model_spec": {"name": "m"}, "metadata_field": ["signature_def"]})))
    signatures = wire.serving("SignatureDefMap").FromString(
        metadata.metadata["signature_def"].value)
    rest = call(classifier, "GET", "/v1/models/m/metadata")[1]["metadata"]["signature_def"]
    assert json_format.MessageToDict(signatures, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True) == rest
