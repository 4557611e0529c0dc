"""The Open Inference Protocol over gRPC (`--grpc_port`), from KServe, on its public API: a
`kserve.Model` whose `predict` answers V2 requests through the server's batcher, in KServe's model
repository, served by KServe's `GRPCServer`. KServe's own clients (`InferenceGRPCClient`) and
Triton's work with it; the answers are the REST route's (`protocol.v2_rows`, `v2_outputs`)."""
from __future__ import annotations

from kserve import Model
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferOutput, InferResponse

from bert_tf2.model_server import protocol
from bert_tf2.model_server.batching import NotServing


class OipModel(Model):
    """The served model as KServe's: V2 requests in, V2 responses out."""

    def __init__(self, served):
        self.served = served
        super().__init__(served.name)

    @property
    def ready(self) -> bool:  # what KServe's ModelReady answers: the served model's readiness
        return self.served.ready

    @ready.setter
    def ready(self, value) -> None:  # KServe's constructor sets it; the served model decides
        pass

    def load(self) -> bool:
        return self.ready

    async def predict(self, payload, headers=None):
        served = self.served
        if not served.ready:
            raise NotServing(f"model {served.name} is not ready (warming up or stopping)")
        tensors = {}
        for tensor in payload.inputs:
            if tensor.datatype != "BYTES":
                raise InvalidInput(f"input {tensor.name}: datatype {tensor.datatype}; texts are "
                                   f"BYTES")
            tensors[tensor.name] = tensor.as_numpy()
        try:
            unknown = sorted(set(tensors) - set(served.inputs))
            if unknown:
                raise protocol.RequestError(f"unknown input {', '.join(unknown)} (the model "
                                            f"takes {', '.join(served.inputs)})")
            missing = [name for name in served.inputs if name not in tensors]
            if missing:
                raise protocol.RequestError(f"no input {', '.join(missing)} (the model takes "
                                            f"{', '.join(served.inputs)})")
            rows = protocol.v2_rows(tensors, served.inputs, served.takes_list)
        except protocol.RequestError as e:
            raise InvalidInput(str(e)) from None
        outputs = await served.batcher.predict(rows) if rows else {}
        return InferResponse(response_id=payload.id or "", model_name=served.name,
                             infer_outputs=[InferOutput(name, shape, datatype, data) for
                                            name, shape, datatype, data in
                                            protocol.v2_outputs(outputs)])


def grpc_server(served, settings):
    """KServe's gRPC server for `served` on `settings.grpc_port` (started by the caller on its
    event loop: `await server.start(workers)`)."""
    from kserve.model_repository import ModelRepository
    from kserve.protocol.dataplane import DataPlane
    from kserve.protocol.grpc.server import GRPCServer
    from kserve.protocol.model_repository_extension import ModelRepositoryExtension

    repository = ModelRepository()
    repository.update(OipModel(served), served.name)
    return GRPCServer(settings.grpc_port, DataPlane(model_registry=repository),
                      ModelRepositoryExtension(model_registry=repository), kwargs={
                          "grpc_max_receive_message_length": settings.max_request_bytes,
                          "grpc_max_send_message_length": max(settings.max_request_bytes,
                                                              64 << 20)},
                      grace_period=int(settings.drain_seconds))
