"""serve.py's gRPC ports through the real clients: TF Serving's API (`--tf_serving_grpc_port`)
with `tensorflow-serving-api`'s stubs and `tf.make_tensor_proto`, as a TF Serving user's code
calls it, and the Open Inference Protocol (`--grpc_port`) with KServe's client; each answer
checked against the REST API's for the same request, each error against TF Serving's status code,
in one line. The server runs where neither TensorFlow nor grpcio can be imported: the LiteRT
runtimes and both gRPC ports need neither. (Overload and the drain over gRPC:
test_model_server_load.py; other exports: test_model_server.py, test_run_ner.py,
test_run_squad.py.)"""
import contextlib
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import reference_runs
import warm_python
from conftest import REPO, free_ports
from http_server import call, pairs, server

pytest.importorskip("uvicorn", reason="the serve extra is not installed: pip install "
                    "'bert-tf2[serve]'")
pytest.importorskip("kserve", reason="KServe's client is not installed (make test installs it)")
pytest.importorskip("tensorflow_serving", reason="tensorflow-serving-api is not installed (make "
                    "test installs it with --no-deps)")

LIMIT = 200_000  # --grpc_max_message_bytes of the shared server


@pytest.fixture(scope="module")
def grpc_served(pair_export, no_tensorflow, tmp_path_factory):
    """serve.py on the pair export's float32 file with both gRPC ports, where neither TensorFlow
    nor grpcio can be imported (as `pip install 'bert-tf2[serve]'` serves the LiteRT files):
    `(base, proc, ports)`, ports `{"tf": TF Serving's, "v2": the Open Inference Protocol's}`."""
    tf_port, v2_port = free_ports(2)
    no_grpc = tmp_path_factory.mktemp("no_grpc")
    (no_grpc / "grpc").mkdir()
    (no_grpc / "grpc" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'grpc'\", name='grpc')\n")
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": os.pathsep.join(
        [str(no_grpc), reference_runs.without_tensorflow(no_tensorflow)])}
    with server(pair_export[0], "--runtime=float32", f"--tf_serving_grpc_port={tf_port}",
                f"--grpc_port={v2_port}", f"--grpc_max_message_bytes={LIMIT}",
                env=env) as (base, proc):
        yield base, proc, {"tf": tf_port, "v2": v2_port}


def stubs(port):
    import grpc
    from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    return (prediction_service_pb2_grpc.PredictionServiceStub(channel),
            model_service_pb2_grpc.ModelServiceStub(channel))


def predict_request(name="m", **texts):
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    for key, value in texts.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    return request


def example(**features):
    import tensorflow as tf

    return tf.train.Example(features=tf.train.Features(feature={
        name: tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
        for name, v in features.items()}))


def metrics(base) -> dict:
    """The server's /metrics as `{series: value}`."""
    return dict(line.rsplit(" ", 1) for line in call(base + "/metrics")[2].splitlines()
                if line and not line.startswith("#"))


def refusal(call_, request):
    """`(code name, details)` of a call that must fail."""
    import grpc

    with pytest.raises(grpc.RpcError) as caught:
        call_(request, timeout=30)
    return caught.value.code().name, caught.value.details()


def test_the_messages_are_tf_servings_and_kserves_field_for_field():
    """protos/*.proto against TF Serving's, TensorFlow's and KServe's own descriptors: every
    message, field (number, type, label, message or enum type, oneof), enum value and service
    method the server knows; and a request made by the real classes reads back byte for byte."""
    import tensorflow as tf
    from google.protobuf import descriptor_pool
    from kserve.protocol.grpc import grpc_predict_v2_pb2  # noqa: F401 - registers KServe's
    from tensorflow_serving.apis import (  # noqa: F401 - registers TF Serving's descriptors
        get_model_status_pb2,
        model_service_pb2,
        prediction_service_pb2,
    )

    from bert_tf2.model_server import grpc_messages as wire

    real, ours = descriptor_pool.Default(), wire._pool()
    checked = {"messages": 0, "fields": 0, "enums": 0, "methods": 0}

    def messages(descriptor):
        yield descriptor
        for nested in descriptor.nested_types:
            if not nested.GetOptions().map_entry:
                yield from messages(nested)

    def repeated(field):
        return field.is_repeated if hasattr(field, "is_repeated") else field.label == 3

    def same_enum(enum):
        theirs = real.FindEnumTypeByName(enum.full_name)
        for value in enum.values:
            assert theirs.values_by_name[value.name].number == value.number, value.name
        checked["enums"] += 1

    for name in wire.FILES:
        file = ours.FindFileByName(name)
        for enum in file.enum_types_by_name.values():
            same_enum(enum)
        for top in file.message_types_by_name.values():
            for message in messages(top):
                theirs = real.FindMessageTypeByName(message.full_name)
                checked["messages"] += 1
                for enum in message.enum_types:
                    same_enum(enum)
                for field in message.fields:
                    other = theirs.fields_by_name[field.name]
                    assert (other.number, other.type, repeated(other)) == (
                        field.number, field.type, repeated(field)), \
                        f"{message.full_name}.{field.name}"
                    for kind in ("message_type", "enum_type"):
                        mine, its = getattr(field, kind), getattr(other, kind)
                        assert (mine and mine.full_name) == (its and its.full_name), field.name
                    if field.containing_oneof is not None:
                        assert other.containing_oneof.name == field.containing_oneof.name
                    checked["fields"] += 1
        for service in file.services_by_name.values():
            theirs = real.FindServiceByName(service.full_name)
            for method in service.methods:
                other = theirs.methods_by_name[method.name]
                assert (other.input_type.full_name, other.output_type.full_name) == (
                    method.input_type.full_name, method.output_type.full_name)
                checked["methods"] += 1
    assert checked == {"messages": 53, "fields": 127, "enums": 3, "methods": 11}, checked
    request = predict_request(text_a=["He said so.", "Ünïcode"], text_b=["So he said.", ""])
    request.model_spec.version.value = 1
    request.output_filter.append("label")
    read = wire.serving("PredictRequest").FromString(request.SerializeToString())
    assert read.SerializeToString(deterministic=True) == request.SerializeToString(
        deterministic=True)
    assert list(read.inputs["text_a"].string_val) == ["He said so.".encode(), "Ünïcode".encode()]
    assert tf.make_ndarray(read.inputs["text_b"]).tolist() == [b"So he said.", b""]


@pytest.mark.integration
def test_the_compiled_descriptors_are_the_protos_as_they_stand():
    """grpc_descriptors.py is what `make protos` makes of protos/*.proto now. In a process
    of its own: protoc's library and TensorFlow's bundled protobuf crash a process that loads
    both."""
    result = subprocess.run([sys.executable, "-m", "bert_tf2.model_server.grpc_messages",
                             "--check"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_outputs_are_tensor_protos_of_the_saved_models_dtypes_ragged_ones_padded():
    """A tagger's ragged words and tag ids, padded with "" and -1 as its SavedModel pads them;
    numbers in the dtype the SavedModel's signature names."""
    import tensorflow as tf

    from bert_tf2.model_server.tf_serving_grpc import tensor_proto

    words = tensor_proto([["Ann", "wrote"], [], ["Paris"]])
    assert tf.make_ndarray(words).tolist() == [[b"Ann", b"wrote"], [b"", b""], [b"Paris", b""]]
    ids = tf.make_ndarray(tensor_proto([[1, 2], [], [3]], "DT_INT32"))
    assert ids.dtype == np.int32 and ids.tolist() == [[1, 2], [-1, -1], [3, -1]]
    wide = tf.make_ndarray(tensor_proto(np.array([3, 4], np.int64), "DT_INT64"))
    assert wide.dtype == np.int64 and wide.tolist() == [3, 4]
    floats = np.array([[0.25, -1.5e-7], [3.0, 1e30]], np.float32)
    assert np.array_equal(tf.make_ndarray(tensor_proto(floats)), floats)
    assert tf.make_ndarray(tensor_proto(np.array(["1", "0"]))).tolist() == [b"1", b"0"]


@pytest.mark.integration
def test_tf_serving_clients_get_the_rest_apis_answers(grpc_served, pair_export):
    """Predict (rows of pairs, version 1, either signature name, an output filter), Classify
    (examples with a shared context), GetModelMetadata (the SavedModel's own signatures, read by
    TensorFlow, and REST's metadata the same map) and GetModelStatus, against REST."""
    import tensorflow as tf
    from google.protobuf import json_format
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow_serving.apis import (
        classification_pb2,
        get_model_metadata_pb2,
        get_model_status_pb2,
    )

    base, proc, ports = grpc_served
    with open(f"/proc/{proc.pid}/maps") as f:
        assert "libtensorflow_framework" not in f.read()  # served without TensorFlow
    export, data = pair_export
    text_a, text_b = pairs(data, 12)
    text_b[3] = ""
    predict, models = stubs(ports["tf"])
    rest = call(base + "/v1/models/m:predict", {"inputs": {"text_a": text_a,
                                                           "text_b": text_b}})[2]["outputs"]
    request = predict_request(text_a=text_a, text_b=text_b)
    answer = predict.Predict(request, timeout=30)
    assert (answer.model_spec.name, answer.model_spec.version.value,
            answer.model_spec.signature_name) == ("m", 1, "serving_default")
    outputs = {name: tf.make_ndarray(value) for name, value in answer.outputs.items()}
    assert sorted(outputs) == sorted(rest) == ["label", "label_id", "logits", "probabilities"]
    assert [v.decode() for v in outputs["label"]] == rest["label"]
    assert outputs["label_id"].dtype == np.int32 and outputs["label_id"].tolist() == \
        rest["label_id"]
    for name in ("logits", "probabilities"):
        assert outputs[name].dtype == np.float32 and outputs[name].shape == (12, 2)
        np.testing.assert_allclose(outputs[name], rest[name], atol=1e-6)
    request.model_spec.version.value = 1
    request.model_spec.signature_name = "serve_text"
    request.output_filter.append("probabilities")
    filtered = predict.Predict(request, timeout=30)
    assert list(filtered.outputs) == ["probabilities"]
    assert filtered.model_spec.signature_name == "serve_text"
    np.testing.assert_allclose(tf.make_ndarray(filtered.outputs["probabilities"]),
                               outputs["probabilities"], atol=1e-6)

    classify = classification_pb2.ClassificationRequest()
    classify.model_spec.name = "m"
    shared = classify.input.example_list_with_context
    shared.context.CopyFrom(example(text_b=text_b[0]))
    shared.examples.extend(example(text_a=a) for a in text_a[:3])
    classes = predict.Classify(classify, timeout=30).result.classifications
    by_rest = call(base + "/v1/models/m:classify", {"context": {"text_b": text_b[0]}, "examples": [
        {"text_a": a} for a in text_a[:3]]})[2]["result"]
    assert [[c.label for c in row.classes] for row in classes] == [[label for label, _ in row]
                                                                 for row in by_rest]
    np.testing.assert_allclose([[c.score for c in row.classes] for row in classes],
                               [[p for _, p in row] for row in by_rest], atol=1e-6)

    metadata = predict.GetModelMetadata(get_model_metadata_pb2.GetModelMetadataRequest(
        model_spec={"name": "m"}, metadata_field=["signature_def"]), timeout=30)
    signatures = get_model_metadata_pb2.SignatureDefMap()
    assert metadata.metadata["signature_def"].Unpack(signatures)
    saved = saved_model_pb2.SavedModel.FromString((export / "saved_model.pb").read_bytes())
    assert dict(signatures.signature_def) == dict(saved.meta_graphs[0].signature_def)
    assert {"serving_default", "serve_text", "serve_token_ids"} <= set(signatures.signature_def)
    # REST's metadata is the same map, in JSON as TF Serving writes the message.
    assert call(base + "/v1/models/m/metadata")[2] == {
        "model_spec": {"name": "m", "signature_name": "", "version": "1"},
        "metadata": {"signature_def": json_format.MessageToDict(
            signatures, preserving_proto_field_name=True,
            always_print_fields_with_no_presence=True)}}
    status = models.GetModelStatus(get_model_status_pb2.GetModelStatusRequest(
        model_spec={"name": "m"}), timeout=30)
    assert [(s.version, get_model_status_pb2.ModelVersionStatus.State.Name(s.state),
             s.status.error_code) for s in status.model_version_status] == [(1, "AVAILABLE", 0)]


@pytest.mark.integration
def test_the_servers_threads_are_named_for_top_and_py_spy(grpc_served):
    """The batch thread and the event loop, which answers the gRPC ports too, carry their names
    in the OS; the process keeps its own, the runtime's worker threads do not take the
    warm-up's, and no gRPC runtime runs threads of its own (its poller was `_poll_wrapper`)."""
    _, proc, _ = grpc_served
    names = [(task / "comm").read_text().strip()
             for task in pathlib.Path(f"/proc/{proc.pid}/task").iterdir()]
    process_name = (pathlib.Path(f"/proc/{proc.pid}") / "comm").read_text().strip()
    assert {"batch-0", "server", process_name} <= set(names), names
    assert not {"warm-up", "MainThread", "_poll_wrapper", "event_engine"} & set(names), names


@pytest.mark.integration
def test_token_ids_are_answered_as_the_saved_models_serve_token_ids(grpc_served, pair_export):
    """Predict on `serve_token_ids` (the encoder's int32 inputs, as `tf.make_tensor_proto` writes
    arrays): the SavedModel's numeric outputs, from the float32 LiteRT file, within its
    tolerance; a request of int64 ids, or of inputs of different shapes, is INVALID_ARGUMENT.
    The SavedModel runtime's token-id path gives the signature's own outputs."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - the ops of the SavedModel's text signatures

    from bert_tf2.data_gen.tokenization import FullTokenizer

    _, _, ports = grpc_served
    export, data = pair_export
    tokenizer = FullTokenizer(str(export / "assets.extra" / "vocab.txt"), do_lower_case=True)
    text_a, text_b = pairs(data, 3)
    ids = np.zeros((3, 24), np.int32)
    types = np.zeros((3, 24), np.int32)
    for row, (a, b) in enumerate(zip(text_a, text_b)):
        first = ["[CLS]", *tokenizer.tokenize(a)[:10], "[SEP]"]
        second = [*tokenizer.tokenize(b)[:row * 5], "[SEP]"] if row else []
        pieces = tokenizer.convert_tokens_to_ids(first + second)
        ids[row, :len(pieces)] = pieces
        types[row, len(first):len(pieces)] = 1
    inputs = {"input_word_ids": ids, "input_mask": (ids > 0).astype(np.int32),
              "input_type_ids": types}
    expected = tf.saved_model.load(str(export)).signatures["serve_token_ids"](
        **{name: tf.constant(value) for name, value in inputs.items()})
    predict, _ = stubs(ports["tf"])
    request = predict_request(**inputs)
    request.model_spec.signature_name = "serve_token_ids"
    answer = predict.Predict(request, timeout=30)
    assert answer.model_spec.signature_name == "serve_token_ids"
    numeric = sorted(name for name, value in expected.items() if value.dtype != tf.string)
    assert sorted(answer.outputs) == numeric and "logits" in numeric
    for name in numeric:
        got = tf.make_ndarray(answer.outputs[name])
        assert got.dtype == expected[name].dtype.as_numpy_dtype, name
        np.testing.assert_allclose(got, expected[name].numpy(), atol=2e-5)
    wide = predict_request(**{**inputs, "input_mask": inputs["input_mask"].astype(np.int64)})
    wide.model_spec.signature_name = "serve_token_ids"
    assert refusal(predict.Predict, wide) == (
        "INVALID_ARGUMENT", "input input_mask: dtype DT_INT64; serve_token_ids takes DT_INT32")
    cut = predict_request(**{**inputs, "input_type_ids": types[:, :20]})
    cut.model_spec.signature_name = "serve_token_ids"
    code, details = refusal(predict.Predict, cut)
    assert code == "INVALID_ARGUMENT" and details.startswith("the inputs' shapes differ")
    # With --runtime=savedmodel the SavedModel's own signature answers, string outputs too.
    from bert_tf2.tasks.runtimes import load_runtime, token_ids_runtime

    saved = token_ids_runtime(load_runtime(str(export), "savedmodel"))
    assert (saved.fixed_axes, saved.max_length) == ((), None)
    answered = saved(**inputs)
    assert sorted(answered) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(answered[name], value.numpy())


@pytest.mark.integration
def test_every_grpc_mistake_is_tf_servings_code_in_one_line_and_counted(grpc_served):
    """NOT_FOUND, INVALID_ARGUMENT and RESOURCE_EXHAUSTED as TF Serving answers them; a V2 shape
    that does not match its data is INVALID_ARGUMENT; the log has one line per mistake and no
    traceback; /metrics counts each protocol apart."""
    import grpc
    import tensorflow as tf
    from kserve.protocol.grpc import grpc_predict_v2_pb2 as v2
    from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc
    from tensorflow_serving.apis import regression_pb2

    base, proc, ports = grpc_served
    predict, _ = stubs(ports["tf"])
    good = predict_request(text_a=["a"], text_b=["b"])
    before = proc.log().count("\n")
    counted_before = metrics(base)
    cases = []
    for change, code, words in [
            (lambda r: setattr(r.model_spec, "name", "other"), "NOT_FOUND",
             "Servable not found for request: Latest(other)"),
            (lambda r: r.model_spec.version.CopyFrom(r.model_spec.version.__class__(value=2)),
             "NOT_FOUND", "Servable not found for request: Specific(m, 2)"),
            (lambda r: setattr(r.model_spec, "version_label", "stable"), "NOT_FOUND",
             "Unrecognized servable version label: stable"),
            (lambda r: setattr(r.model_spec, "signature_name", "serve_examples"),
             "INVALID_ARGUMENT", 'Serving signature key "serve_examples" not found: this '
             'server answers serving_default, serve_text, serve_token_ids'),
            (lambda r: r.inputs.pop("text_b"), "INVALID_ARGUMENT", "no input text_b"),
            (lambda r: r.inputs["text_c"].CopyFrom(tf.make_tensor_proto(["c"])),
             "INVALID_ARGUMENT", "input tensor alias not found in signature: text_c"),
            (lambda r: r.inputs["text_b"].CopyFrom(tf.make_tensor_proto([1.5])),
             "INVALID_ARGUMENT", "input text_b: dtype DT_FLOAT; this signature takes texts"),
            (lambda r: r.inputs["text_b"].tensor_shape.dim[0].__setattr__("size", 2),
             "INVALID_ARGUMENT", "input text_b: 1 texts for shape [2]"),
            (lambda r: r.inputs["text_a"].CopyFrom(tf.make_tensor_proto(["x" * LIMIT])),
             "RESOURCE_EXHAUSTED", "larger than max")]:
        request = type(good)()
        request.CopyFrom(good)
        change(request)
        cases.append((refusal(predict.Predict, request), code, words))
    cases.append((refusal(predict.Regress, regression_pb2.RegressionRequest(
        model_spec={"name": "m"})), "INVALID_ARGUMENT", "model m is not a regression model"))
    infer = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{ports['v2']}")).ModelInfer
    shapeless = v2.ModelInferRequest(model_name="m")
    for name, texts in (("text_a", [b"one"]), ("text_b", [b"one", b"two"])):
        tensor = shapeless.inputs.add(name=name, datatype="BYTES", shape=[2])
        tensor.contents.bytes_contents.extend(texts)
    cases.append((refusal(infer, shapeless), "INVALID_ARGUMENT",
                  "input text_a: 1 values for shape [2]"))
    for (got, details), code, words in cases:
        assert got == code and words in details and "\n" not in details, (got, details)
    assert predict.Predict(good, timeout=30).outputs["label"].string_val  # still serving
    log = proc.log()
    new = log.splitlines()[before:]
    assert "Traceback" not in log
    assert sum("INVALID_ARGUMENT" in line or "NOT_FOUND" in line for line in new) == 10
    counted_after = metrics(base)

    def counted(protocol, endpoint, code):  # this test's calls
        key = f'bert_requests_total{{code="{code}",endpoint="{endpoint}",protocol="{protocol}"}}'
        return float(counted_after.get(key, 0)) - float(counted_before.get(key, 0))

    assert counted("tf_serving_grpc", "predict", "NOT_FOUND") == 3
    assert counted("tf_serving_grpc", "predict", "INVALID_ARGUMENT") == 5
    assert counted("tf_serving_grpc", "regress", "INVALID_ARGUMENT") == 1
    assert counted("v2_grpc", "infer", "INVALID_ARGUMENT") == 1
    assert counted("tf_serving_grpc", "predict", "OK") >= 1


@pytest.mark.integration
def test_the_open_inference_protocols_client_gets_the_rest_answers(grpc_served, pair_export):
    """--grpc_port with KServe's own client: the same answers as REST; its metadata and
    readiness as REST's."""
    import asyncio

    from kserve import InferenceGRPCClient, InferInput, InferRequest

    base, _, ports = grpc_served
    text_a, text_b = pairs(pair_export[1], 5)
    rest = call(base + "/v1/models/m:predict", {"inputs": {"text_a": text_a,
                                                           "text_b": text_b}})[2]

    async def infer():
        inputs = []
        for name, texts in (("text_a", text_a), ("text_b", text_b)):
            tensor = InferInput(name, [len(texts)], "BYTES")
            tensor.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=object))
            inputs.append(tensor)
        client = InferenceGRPCClient(f"127.0.0.1:{ports['v2']}")
        response = await client.infer(InferRequest(model_name="m", infer_inputs=inputs,
                                                   request_id="1"))
        return {o.name: o.as_numpy() for o in response.outputs}

    answer = asyncio.run(infer())
    assert [label.decode() for label in answer["label"]] == rest["outputs"]["label"]
    np.testing.assert_allclose(answer["probabilities"], rest["outputs"]["probabilities"],
                               atol=1e-6)
    import grpc
    from google.protobuf import json_format
    from kserve.protocol.grpc import grpc_predict_v2_pb2 as v2
    from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc

    stub = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{ports['v2']}"))
    metadata = json_format.MessageToDict(stub.ModelMetadata(v2.ModelMetadataRequest(name="m")),
                                         preserving_proto_field_name=True)
    for tensor in metadata["inputs"] + metadata["outputs"]:
        tensor["shape"] = [int(n) for n in tensor["shape"]]  # int64 is a string in JSON
    assert metadata == call(base + "/v2/models/m")[2]
    assert stub.ModelReady(v2.ModelReadyRequest(name="m")).ready
    assert stub.ServerLive(v2.ServerLiveRequest()).live
    assert stub.ServerReady(v2.ServerReadyRequest()).ready


def listening(port: int) -> list:
    """The IPv4 addresses listening on `port` (IPv4-mapped IPv6 ones as IPv4, "::" as "all"),
    read from /proc/net/tcp and tcp6."""
    import ipaddress

    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.read().splitlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                hex_address, hex_port = local.rsplit(":", 1)
                if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                    continue
                # The kernel writes each 32-bit word of the address in host (little-endian) order.
                packed = b"".join(bytes.fromhex(hex_address[i:i + 8])[::-1]
                                  for i in range(0, len(hex_address), 8))
                address = ipaddress.ip_address(packed)
                mapped = getattr(address, "ipv4_mapped", None)
                found.append(str(mapped or ("all" if address.is_unspecified else address)))
    return found


@pytest.mark.integration
def test_each_grpc_port_listens_on_host_only_and_a_taken_one_is_refused_in_one_line(
        grpc_served, pair_export):
    """--host=127.0.0.1 holds for the gRPC ports too (not every interface); a second server on a
    gRPC port, or a gRPC port equal to --port, is refused in one line (SO_REUSEPORT is off)."""
    base, _, ports = grpc_served
    export = pair_export[0]
    for port in ports.values():
        assert listening(port) == ["127.0.0.1"], listening(port)
    rest_port = base.rsplit(":", 1)[1]
    for flags, line in [
            ([f"--port={free_ports()[0]}", f"--tf_serving_grpc_port={ports['tf']}"],
             f"--tf_serving_grpc_port={ports['tf']}: cannot listen on 127.0.0.1:{ports['tf']} "
             f"(another process is listening there; stop it or pick another "
             f"--tf_serving_grpc_port)"),
            ([f"--port={free_ports()[0]}", f"--grpc_port={ports['v2']}"],
             f"--grpc_port={ports['v2']}: cannot listen on 127.0.0.1:{ports['v2']} (another "
             f"process is listening there; stop it or pick another --grpc_port)"),
            ([f"--port={rest_port}", f"--grpc_port={rest_port}"],
             f"--grpc_port={rest_port}: --port is {rest_port} too; each protocol needs a port "
             f"of its own")]:
        second = warm_python.run([sys.executable, str(REPO / "serve.py"), f"--export_dir={export}",
                                  "--host=127.0.0.1", *flags], cwd=REPO, timeout=120)
        assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr[-2000:]
        assert second.stderr.strip().splitlines()[-1] == f"serve.py: error: {line}"
    assert call(base + "/v1/models/m")[0] == 200  # the first one is untouched
