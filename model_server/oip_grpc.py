"""The Open Inference Protocol over gRPC (`--grpc_port`): `inference.GRPCInferenceService` (the
messages of `protos/open_inference.proto`, KServe's and Triton's on the wire), answered on this
server's own gRPC port (`grpc_ports`) from the same batcher as the REST routes. KServe's `InferenceGRPCClient` and
Triton's clients work with it; the answers are the REST route's (`protocol.v2_rows`,
`v2_outputs`).

Texts are BYTES tensors, in `contents.bytes_contents` or in `raw_input_contents` (each element
its 4-byte little-endian length, then its bytes, as Triton's clients send them). A shape that does
not match its data, a wrong name or datatype, is INVALID_ARGUMENT naming the input.
"""
from __future__ import annotations

import struct

from bert_tf2.model_server import grpc_messages, protocol
from bert_tf2.model_server.batching import NotServing
from bert_tf2.model_server.grpc_ports import Refused, StatusCode, unary

SERVICE = "inference.GRPCInferenceService"
# V2 datatype -> the InferTensorContents field that carries it.
_CONTENTS = {"BYTES": "bytes_contents", "FP32": "fp32_contents", "INT32": "int_contents",
             "BOOL": "bool_contents"}


def handlers(model, metrics) -> dict:
    """The unary methods of the V2 gRPC service for `model`, by path."""
    service = _Service(model, _Messages())
    methods = {"ServerLive": (service.live, "status"), "ServerReady": (service.server_ready,
                                                                       "status"),
               "ModelReady": (service.model_ready, "status"),
               "ServerMetadata": (service.server_metadata, "metadata"),
               "ModelMetadata": (service.model_metadata, "metadata"),
               "ModelInfer": (service.infer, "infer")}
    return {f"/{SERVICE}/{name}": unary(
        function, grpc_messages.message(f"inference.{name}Request"),
        grpc_messages.message(f"inference.{name}Response"), metrics, "v2_grpc", endpoint)
        for name, (function, endpoint) in methods.items()}


class _Messages:
    """`messages.ModelInferResponse` and the like: the `inference` package's message classes."""

    def __getattr__(self, name: str):
        return grpc_messages.message(f"inference.{name}")


class _Service:
    def __init__(self, model, pb):
        self.model, self.pb = model, pb

    def check(self, name: str, version: str = "") -> None:
        if name != self.model.name:
            raise Refused(StatusCode.NOT_FOUND, f"no model {name} (this server serves "
                                                f"{self.model.name})")
        if version not in ("", protocol.VERSION):
            raise Refused(StatusCode.NOT_FOUND, f"model {name} has no version {version} "
                                                f"(it has {protocol.VERSION})")

    async def live(self, request):
        return self.pb.ServerLiveResponse(live=True)

    async def server_ready(self, request):
        return self.pb.ServerReadyResponse(ready=self.model.takes_traffic)

    async def model_ready(self, request):
        self.check(request.name, request.version)
        return self.pb.ModelReadyResponse(ready=self.model.takes_traffic)

    async def server_metadata(self, request):
        return self.pb.ServerMetadataResponse(name="bert_tf2", version=protocol.VERSION)

    async def model_metadata(self, request):
        self.check(request.name, request.version)
        model = self.model
        if model.example_outputs is None:
            raise NotServing(f"model {model.name} is warming up")
        metadata = protocol.v2_metadata(model.name, model.inputs, model.takes_list,
                                        model.example_outputs)
        tensor = grpc_messages.message("inference.ModelMetadataResponse.TensorMetadata")
        return self.pb.ModelMetadataResponse(
            name=metadata["name"], versions=metadata["versions"], platform=metadata["platform"],
            inputs=[tensor(**entry) for entry in metadata["inputs"]],
            outputs=[tensor(**entry) for entry in metadata["outputs"]])

    async def infer(self, request):
        model = self.model
        self.check(request.model_name, request.model_version)
        if not model.ready:
            raise NotServing(f"model {model.name} is not ready (warming up or stopping)")
        raw = list(request.raw_input_contents)
        if raw and len(raw) != len(request.inputs):
            raise protocol.RequestError(f"{len(raw)} raw_input_contents for "
                                        f"{len(request.inputs)} inputs")
        tensors = {}
        for i, tensor in enumerate(request.inputs):
            if tensor.name not in model.inputs:
                raise protocol.RequestError(f"unknown input {tensor.name} (the model takes "
                                            f"{', '.join(model.inputs)})")
            if tensor.datatype != "BYTES":
                raise protocol.RequestError(f"input {tensor.name}: datatype {tensor.datatype}; "
                                            f"texts are BYTES")
            shape = list(tensor.shape)
            if any(size < 0 for size in shape):
                raise protocol.RequestError(f"input {tensor.name}: shape {shape} has a negative "
                                            f"size")
            tensors[tensor.name] = protocol.shaped(
                tensor.name, _unpacked(raw[i], tensor.name) if raw else
                list(tensor.contents.bytes_contents), shape)
        missing = [name for name in model.inputs if name not in tensors]
        if missing:
            raise protocol.RequestError(f"no input {', '.join(missing)} (the model takes "
                                        f"{', '.join(model.inputs)})")
        rows = protocol.v2_rows(tensors, model.inputs, model.takes_list)
        outputs = await model.batcher.predict(rows) if rows else {}
        answer = self.pb.ModelInferResponse(model_name=model.name,
                                            model_version=protocol.VERSION, id=request.id)
        for name, shape, datatype, data in protocol.v2_outputs(outputs):
            output = answer.outputs.add(name=name, datatype=datatype, shape=shape)
            getattr(output.contents, _CONTENTS[datatype]).extend(
                [str(v).encode("utf-8") for v in data] if datatype == "BYTES" else data)
        return answer


def _unpacked(raw: bytes, name: str) -> list:
    """BYTES elements of a raw buffer: each a 4-byte little-endian length, then its bytes."""
    values, at = [], 0
    while at < len(raw):
        if at + 4 > len(raw):
            raise protocol.RequestError(f"input {name}: raw_input_contents ends inside an "
                                        f"element's length")
        (size,) = struct.unpack_from("<I", raw, at)
        if at + 4 + size > len(raw):
            raise protocol.RequestError(f"input {name}: raw_input_contents ends inside an "
                                        f"element ({size} bytes announced)")
        values.append(raw[at + 4:at + 4 + size])
        at += 4 + size
    return values
