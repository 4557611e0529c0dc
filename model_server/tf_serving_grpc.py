"""TF Serving's gRPC API (`--tf_serving_grpc_port`, TF Serving's 8500): PredictionService's
Predict, Classify, Regress and GetModelMetadata, and ModelService's GetModelStatus, answered from
the same batcher as the REST routes, so that a client written with `tensorflow-serving-api`'s
stubs and `tf.make_tensor_proto` works unchanged.

- `model_spec`: the served name; no version, version 1, or a label, resolved as the REST routes
  resolve `/versions/N` and `/labels/L` (this server serves version 1 and knows no label); the
  signature `serving_default` or `serve_text` ("" is `serving_default`), or `serve_token_ids`.
- Predict's inputs: texts as DT_STRING tensors, `[batch]` (`[batch, n]` for a list per row,
  multiple choice's `choices`); its outputs as the REST API's numbers in TensorProtos, ragged ones
  (a tagger's words) padded as the SavedModel pads them ("" and -1). On `serve_token_ids`, the
  encoder's DT_INT32 inputs, answered by the runtime's token-id path
  (`tasks.runtimes.token_ids_runtime`) as a batch of its own.
- Classify and Regress: `tf.Example`s whose bytes features are the texts, with an optional
  context shared by every example, as over REST.
- GetModelMetadata: the SavedModel's own `signature_def` map, as TF Serving reads it from
  `saved_model.pb` (`signature_defs`; the REST route's where the export has none).
- Errors: TF Serving's status codes (`grpc_ports.unary`).
"""
from __future__ import annotations

import numpy as np

from bert_tf2.inference.litert_runtime import INPUT_NAMES  # serve_token_ids' inputs
from bert_tf2.inference.runtime import jsonable
from bert_tf2.model_server import grpc_messages as wire
from bert_tf2.model_server import protocol, signature_defs
from bert_tf2.model_server.batching import NotServing
from bert_tf2.model_server.grpc_ports import Refused, StatusCode, unary

PREDICTION_SERVICE = "tensorflow.serving.PredictionService"
TOKEN_IDS = "serve_token_ids"
MODEL_SERVICE = "tensorflow.serving.ModelService"
SIGNATURE_DEF_MAP_URL = "type.googleapis.com/tensorflow.serving.SignatureDefMap"
_STATES = {"LOADING": 20, "AVAILABLE": 30, "UNLOADING": 40}
# The output dtypes answered, with the TensorProto field each fills.
_FIELDS = {"DT_FLOAT": ("float_val", np.float32), "DT_DOUBLE": ("double_val", np.float64),
           "DT_INT32": ("int_val", np.int32), "DT_INT64": ("int64_val", np.int64),
           "DT_BOOL": ("bool_val", bool), "DT_STRING": ("string_val", None)}


def handlers(model, metrics) -> dict:
    """The unary methods of PredictionService and ModelService for `model`, by path."""
    service = _Service(model, model.saved_signatures)
    methods = {
        PREDICTION_SERVICE: {
            "Predict": (service.predict, "PredictRequest", "PredictResponse", "predict"),
            "Classify": (service.classify, "ClassificationRequest", "ClassificationResponse",
                         "classify"),
            "Regress": (service.regress, "RegressionRequest", "RegressionResponse", "regress"),
            "GetModelMetadata": (service.metadata, "GetModelMetadataRequest",
                                 "GetModelMetadataResponse", "metadata")},
        MODEL_SERVICE: {
            "GetModelStatus": (service.status, "GetModelStatusRequest",
                               "GetModelStatusResponse", "status")}}
    return {f"/{name}/{method}": unary(function, wire.serving(request), wire.serving(response),
                                       metrics, "tf_serving_grpc", endpoint)
            for name, table in methods.items()
            for method, (function, request, response, endpoint) in table.items()}


class _Service:
    def __init__(self, model, saved_signatures):
        self.model, self.saved_signatures = model, saved_signatures
        # The signatures' output dtypes in the SavedModel, as TF Serving would answer them.
        self.output_dtypes = _output_dtypes(saved_signatures, protocol.SIGNATURES[0])
        self.token_id_dtypes = _output_dtypes(saved_signatures, TOKEN_IDS)
        self.signatures = protocol.SIGNATURES + ((TOKEN_IDS,) if model.token_ids else ())

    def resolve(self, spec, signature: bool = True):
        """The answer's `model_spec`, once `spec` names this model, its version and signature."""
        model = self.model
        if not spec.name:
            raise Refused(StatusCode.INVALID_ARGUMENT, "Missing ModelSpec: model_spec.name "
                                                       f"must name the model ({model.name})")
        version = spec.version.value if spec.HasField("version") else None
        if spec.name != model.name:
            raise Refused(StatusCode.NOT_FOUND, f"Servable not found for request: "
                          f"{'Latest' if version is None else 'Specific'}({spec.name}"
                          f"{'' if version is None else f', {version}'}) (this server serves "
                          f"{model.name})")
        if spec.WhichOneof("version_choice") == "version_label":
            raise Refused(StatusCode.NOT_FOUND, f"Unrecognized servable version label: "
                                                f"{spec.version_label}")
        if version is not None and str(version) != protocol.VERSION:
            raise Refused(StatusCode.NOT_FOUND, f"Servable not found for request: "
                                                f"Specific({spec.name}, {version})")
        answer = wire.serving("ModelSpec")(name=model.name)
        answer.version.value = int(protocol.VERSION)
        if signature:
            name = spec.signature_name or protocol.SIGNATURES[0]
            if name not in self.signatures:
                raise Refused(StatusCode.INVALID_ARGUMENT, f"Serving signature key "
                              f"\"{name}\" not found: this server answers "
                              f"{', '.join(self.signatures)}")
            answer.signature_name = name
        return answer

    def ready(self) -> None:
        if not self.model.ready:
            raise NotServing(f"model {self.model.name} is not ready (warming up or stopping)")

    async def predict(self, request):
        spec = self.resolve(request.model_spec)
        self.ready()
        if spec.signature_name == TOKEN_IDS:
            return await self.predict_token_ids(request, spec)
        model = self.model
        tensors = {}
        for name, tensor in request.inputs.items():
            if name not in model.inputs:
                raise protocol.RequestError(f"input tensor alias not found in signature: {name}. "
                                            f"Inputs expected to be in the set "
                                            f"{{{','.join(model.inputs)}}}.")
            tensors[name] = _texts(name, tensor)
        missing = [name for name in model.inputs if name not in tensors]
        if missing:
            raise protocol.RequestError(f"no input {', '.join(missing)} (the signature takes "
                                        f"{', '.join(model.inputs)})")
        rows = protocol.v2_rows(tensors, model.inputs, model.takes_list)
        outputs = await model.batcher.predict(rows) if rows else {}
        return self.answer(spec, outputs, request.output_filter, self.output_dtypes)

    async def predict_token_ids(self, request, spec):
        """`serve_token_ids`: the encoder's int32 inputs in, the signature's numeric outputs out
        (all of them with --runtime=savedmodel), run as a batch of its own."""
        token_ids = self.model.token_ids
        given = dict(request.inputs)
        unknown = sorted(set(given) - set(INPUT_NAMES))
        missing = [name for name in INPUT_NAMES if name not in given]
        if unknown or missing:
            raise protocol.RequestError(
                (f"input tensor alias not found in signature: {unknown[0]}" if unknown else
                 f"no input {', '.join(missing)}")
                + f" ({TOKEN_IDS} takes {', '.join(INPUT_NAMES)})")
        inputs = {name: _int32s(name, given[name]) for name in INPUT_NAMES}
        shapes = {name: value.shape for name, value in inputs.items()}
        shape = shapes["input_word_ids"]
        if len(set(shapes.values())) > 1:
            raise protocol.RequestError("the inputs' shapes differ: " + ", ".join(
                f"{name} {list(value)}" for name, value in shapes.items()))
        if len(shape) < 2 or tuple(shape[1:-1]) != tuple(token_ids.fixed_axes):
            raise protocol.RequestError(
                f"inputs shaped {list(shape)}; {TOKEN_IDS} takes [batch, "
                f"{''.join(f'{n}, ' for n in token_ids.fixed_axes)}length]")
        if token_ids.max_length is not None and shape[-1] > token_ids.max_length:
            raise protocol.RequestError(f"{shape[-1]} tokens in a row; the model takes at "
                                        f"most {token_ids.max_length}")
        outputs = await self.model.batcher.run_alone(lambda: token_ids(**inputs), shape[0])
        return self.answer(spec, outputs, request.output_filter, self.token_id_dtypes)

    @staticmethod
    def answer(spec, outputs: dict, output_filter, dtypes: dict):
        """The PredictResponse of `outputs`, those `output_filter` names (default: all)."""
        unknown = sorted(set(output_filter) - set(outputs))
        if unknown:
            raise protocol.RequestError(f"output tensor alias not found in signature: "
                                        f"{unknown[0]} (the outputs are "
                                        f"{', '.join(sorted(outputs))})")
        answer = wire.serving("PredictResponse")(model_spec=spec)
        for name in sorted(output_filter or outputs):
            answer.outputs[name].CopyFrom(tensor_proto(outputs[name], dtypes.get(name)))
        return answer

    async def classify(self, request):
        spec = self.resolve(request.model_spec)
        if not self.model.classes:
            raise protocol.RequestError(f"model {self.model.name} is not a classifier: ask it "
                                        f"with Predict" + (" or Regress" if self.model.regression
                                                           else ""))
        outputs = await self.examples(request.input)
        answer = wire.serving("ClassificationResponse")(model_spec=spec)
        if outputs:
            for row in protocol.classify_response(outputs, self.model.classes)["result"]:
                answer.result.classifications.add().classes.extend(
                    wire.serving("Class")(label=label, score=score) for label, score in row)
        return answer

    async def regress(self, request):
        spec = self.resolve(request.model_spec)
        if not self.model.regression:
            raise protocol.RequestError(f"model {self.model.name} is not a regression model: "
                                        f"ask it with Predict" + (" or Classify" if
                                                                  self.model.classes else ""))
        outputs = await self.examples(request.input)
        answer = wire.serving("RegressionResponse")(model_spec=spec)
        if outputs:
            answer.result.regressions.extend(wire.serving("Regression")(value=value) for value in
                                             protocol.regress_response(outputs)["result"])
        return answer

    async def examples(self, given) -> dict:
        """The outputs for the rows of a Classify or Regress `Input`."""
        self.ready()
        kind = given.WhichOneof("kind")
        if kind is None:
            raise protocol.RequestError("input: no examples (input.example_list or "
                                        "input.example_list_with_context)")
        listed = getattr(given, kind)
        context = _features(listed.context, "context") if kind.endswith("context") else {}
        body = {"examples": [_features(example, f"examples[{i}]")
                             for i, example in enumerate(listed.examples)], "context": context}
        rows = protocol.parse_examples(body, self.model.inputs, self.model.takes_list)
        return await self.model.batcher.predict(rows) if rows else {}

    async def metadata(self, request):
        spec = self.resolve(request.model_spec, signature=False)
        fields = list(request.metadata_field)
        if fields != ["signature_def"]:
            raise protocol.RequestError(f"metadata_field {fields}: this server has the metadata "
                                        f"field signature_def (ask for [\"signature_def\"])")
        signatures = self.saved_signatures
        if signatures is None:
            model = self.model
            if model.example_outputs is None:
                raise NotServing(f"model {model.name} is warming up")
            signatures = signature_defs.from_json(protocol.metadata_response(
                model.name, model.inputs, model.takes_list, model.example_outputs)
                ["metadata"]["signature_def"])
        answer = wire.serving("GetModelMetadataResponse")(model_spec=spec)
        packed = answer.metadata["signature_def"]
        packed.type_url, packed.value = SIGNATURE_DEF_MAP_URL, signatures.SerializeToString()
        return answer

    async def status(self, request):
        self.resolve(request.model_spec, signature=False)
        model = self.model
        state = ("UNLOADING" if model.draining else "AVAILABLE") if model.ready else "LOADING"
        answer = wire.serving("GetModelStatusResponse")()
        answer.model_version_status.add(version=int(protocol.VERSION), state=_STATES[state])
        return answer


def _shape(name: str, tensor, dtype: str, takes: str) -> list:
    """The sizes of input `name`'s TensorProto, once its dtype is `dtype` (what the signature
    `takes`, in words) and its shape a shape of sizes."""
    names = wire.enum("tensorflow.DataType")
    if tensor.dtype != names.values_by_name[dtype].number:
        given = names.values_by_number.get(tensor.dtype)
        raise protocol.RequestError(f"input {name}: dtype "
                                    f"{given.name if given else tensor.dtype}; {takes}")
    shape = [dim.size for dim in tensor.tensor_shape.dim]
    if tensor.tensor_shape.unknown_rank or any(size < 0 for size in shape):
        raise protocol.RequestError(f"input {name}: shape {shape} is not a shape of sizes")
    return shape


def _texts(name: str, tensor):
    """A DT_STRING tensor's values as an object array of its shape."""
    shape = _shape(name, tensor, "DT_STRING", "this signature takes texts (DT_STRING)")
    return protocol.shaped(name, list(tensor.string_val), shape, "texts")


def _int32s(name: str, tensor):
    """A DT_INT32 tensor's values (`int_val`, or `tensor_content` as `tf.make_tensor_proto`
    writes arrays) as an int32 array of its shape."""
    shape = _shape(name, tensor, "DT_INT32", f"{TOKEN_IDS} takes DT_INT32")
    if tensor.tensor_content:
        if len(tensor.tensor_content) % 4:
            raise protocol.RequestError(f"input {name}: tensor_content of "
                                        f"{len(tensor.tensor_content)} bytes is not int32s")
        values = np.frombuffer(tensor.tensor_content, "<i4")
    else:
        values = np.asarray(tensor.int_val, np.int32)
    count = int(np.prod(shape))
    if values.size == 1 and count != 1:  # TF's one value filling the shape
        values = np.full(count, values[0], np.int32)
    if values.size != count:
        raise protocol.RequestError(f"input {name}: {values.size} values for shape {shape}")
    return values.astype(np.int32).reshape(shape)


def _output_dtypes(saved_signatures, name: str) -> dict:
    """`{output: dtype name}` of signature `name` in the SavedModel's map, or {}."""
    names = wire.enum("tensorflow.DataType").values_by_number
    signature = saved_signatures.signature_def.get(name) if saved_signatures is not None \
        else None
    return {output: names[info.dtype].name for output, info in signature.outputs.items()
            if info.dtype in names} if signature else {}


def _features(example, where: str) -> dict:
    """An Example's features as `{name: text or list of texts}` (bytes features only)."""
    features = {}
    for name, feature in example.features.feature.items():
        if feature.WhichOneof("kind") != "bytes_list":
            raise protocol.RequestError(f"{where}.{name}: a {feature.WhichOneof('kind')} "
                                        f"feature; texts are bytes_list features")
        values = []
        for value in feature.bytes_list.value:
            try:
                values.append(value.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise protocol.RequestError(f"{where}.{name} is not UTF-8 text "
                                            f"({e.reason})") from None
        features[name] = values[0] if len(values) == 1 else values
    return features


def tensor_proto(value, dtype: str | None = None):
    """One output over the rows as a TensorProto: of `dtype` (the SavedModel's, where it has one),
    else of the REST metadata's; ragged rows (a tagger's words) padded as the SavedModel pads
    them, with "" and -1."""
    array = value if isinstance(value, np.ndarray) and value.dtype != object else None
    if array is None:
        array = np.asarray(_padded(jsonable(value)))
    if dtype not in _FIELDS:
        kind = array.dtype.kind
        dtype = ("DT_STRING" if kind in "USO" else "DT_BOOL" if kind == "b" else
                 "DT_INT32" if kind in "iu" else "DT_FLOAT")
    field, numpy_type = _FIELDS[dtype]
    answer = wire.message("tensorflow.TensorProto")(
        dtype=wire.enum("tensorflow.DataType").values_by_name[dtype].number)
    for size in array.shape:
        answer.tensor_shape.dim.add(size=size)
    flat = array.ravel()
    getattr(answer, field).extend(
        [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in flat.tolist()]
        if numpy_type is None else flat.astype(numpy_type).tolist())
    return answer


def _padded(value):
    """`value` (nested lists) made rectangular: short lists padded with "" or -1."""
    if not isinstance(value, list) or not value or not all(isinstance(v, list) for v in value):
        return value
    rows = [_padded(v) for v in value]
    width = max(len(v) for v in rows)
    if all(len(v) == width for v in rows):
        return rows
    fill = next(("" if isinstance(x, str) else -1 for v in rows for x in v), -1)
    return [v + [fill] * (width - len(v)) for v in rows]
