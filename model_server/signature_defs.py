"""The export's own signatures, as TF Serving reads them from `saved_model.pb` (its first
MetaGraphDef's `signature_def` map), for both metadata answers: gRPC's GetModelMetadata gives the
map as a message, REST's `GET /v1/models/NAME/metadata` as TF Serving writes that message in JSON.
Read with this project's own messages (`grpc_messages`), so no TensorFlow is needed."""
from __future__ import annotations

import os

from bert_tf2.model_server import grpc_messages as wire


def read(export_dir: str):
    """The SignatureDefMap of the export's `saved_model.pb`, or None where it has none (a folder
    of LiteRT files alone)."""
    path = os.path.join(export_dir, "saved_model.pb")
    try:
        with open(path, "rb") as f:
            saved = wire.message("tensorflow.SavedModel").FromString(f.read())
    except OSError:
        return None
    answer = wire.serving("SignatureDefMap")()
    if saved.meta_graphs:
        for name, signature in saved.meta_graphs[0].signature_def.items():
            answer.signature_def[name].CopyFrom(signature)
    return answer


def as_json(signatures) -> dict:
    """`signatures` (a SignatureDefMap) as TF Serving's REST API writes it: proto field names,
    fields at their defaults included, 64-bit integers as strings."""
    from google.protobuf import json_format

    return json_format.MessageToDict(signatures, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)


def from_json(signatures: dict):
    """The SignatureDefMap of `as_json`'s form (the REST metadata of an export without
    `saved_model.pb`, answered over gRPC)."""
    from google.protobuf import json_format

    return json_format.ParseDict(signatures, wire.serving("SignatureDefMap")())
