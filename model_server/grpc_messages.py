"""The gRPC messages of the server's two gRPC ports, without TensorFlow or KServe:
`protos/*.proto` (TF Serving's and TensorFlow's messages; the Open Inference Protocol's; their
packages, names and field numbers, written for this server), compiled by grpcio-tools' protoc
into `grpc_descriptors.py` (`make protos`, which runs `python -m
bert_tf2.model_server.grpc_messages`), and loaded from there into a descriptor pool of this
module's own.

Why a pool of its own: the messages keep their full names (`tensorflow.TensorProto`,
`tensorflow.serving.SignatureDefMap`, which a client's `Any.Unpack` checks), and TensorFlow, when
the SavedModel runtime imports it, registers the same names in protobuf's default pool (as KServe
does the `inference` ones), where a second definition is refused. Why not the generated modules of
`tensorflow-serving-api` and KServe: the first imports TensorFlow, which the LiteRT runtimes serve
without; the second imports KServe (a second of start-up and some 1,500 modules). Why compiled
ahead: protoc's library and TensorFlow's bundled protobuf crash a process that loads both.
"""
from __future__ import annotations

import functools
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = os.path.join(HERE, "protos")
FILES = ("tensorflow.proto", "tensorflow_error.proto", "tensorflow_serving.proto",
         "open_inference.proto")
GENERATED = os.path.join(HERE, "grpc_descriptors.py")


def compile_protos() -> bytes:
    """The serialized FileDescriptorSet of `FILES`, with the files they import."""
    import grpc_tools
    from grpc_tools import protoc

    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="bert-grpc-protos") as folder:
        out = os.path.join(folder, "set.binpb")
        status = protoc.main(["protoc", f"-I{PROTOS}", f"-I{include}", "--include_imports",
                              f"--descriptor_set_out={out}", *FILES])
        if status != 0:
            raise RuntimeError(f"protoc could not compile {PROTOS} (exit status {status})")
        with open(out, "rb") as f:
            return f.read()


@functools.lru_cache(maxsize=None)
def _pool():
    from google.protobuf import descriptor_pb2, descriptor_pool

    from bert_tf2.model_server.grpc_descriptors import DESCRIPTORS

    files = descriptor_pb2.FileDescriptorSet.FromString(DESCRIPTORS)
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return pool


@functools.lru_cache(maxsize=None)
def message(full_name: str):
    """The message class of `full_name` ("tensorflow.TensorProto", "inference.ModelInferRequest",
    ...)."""
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(_pool().FindMessageTypeByName(full_name))


@functools.lru_cache(maxsize=None)
def enum(full_name: str):
    """The enum descriptor of `full_name`: `.values_by_name[NAME].number`."""
    return _pool().FindEnumTypeByName(full_name)


def serving(name: str):
    """`message("tensorflow.serving." + name)`."""
    return message("tensorflow.serving." + name)


def generated_module(descriptors: bytes) -> str:
    """The text of `grpc_descriptors.py` holding `descriptors` (in base64)."""
    import base64

    text = base64.b64encode(descriptors).decode("ascii")
    lines = [text[i:i + 76] for i in range(0, len(text), 76)]
    return ('"""Generated from protos/*.proto by `make protos` (python -m '
            'bert_tf2.model_server.grpc_messages);\ndo not edit: the serialized '
            'FileDescriptorSet that grpc_messages loads."""\nimport base64\n\n'
            'DESCRIPTORS = base64.b64decode(\n'
            + "".join(f'    "{line}"\n' for line in lines) + ")\n")


def main(argv) -> int:
    """Write `grpc_descriptors.py` from the protos; with --check, say whether it is up to
    date (exit status 1 if not)."""
    text = generated_module(compile_protos())
    if "--check" in argv:
        with open(GENERATED, encoding="utf-8") as f:
            if f.read() != text:
                print(f"{GENERATED} is older than {PROTOS}: run make protos", file=sys.stderr)
                return 1
        return 0
    with open(GENERATED + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(GENERATED + ".tmp", GENERATED)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
