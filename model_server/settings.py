"""The model server's settings, with every default written here once: serve.py's flags take
theirs from `ServerSettings` (`tests/test_defaults.py` checks), and so does the batcher."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class ServerSettings:
    """serve.py's flags (docs/serving.md lists them)."""
    export_dir: str
    model_name: str
    host: str = "0.0.0.0"
    port: int = 8501
    grpc_port: int = 0  # the Open Inference Protocol's gRPC; 0: none
    tf_serving_grpc_port: int = 0  # TF Serving's gRPC API (TF Serving's own is 8500); 0: none
    runtime: str | None = None  # int8, float32, savedmodel; None: the best the export has
    max_batch_size: int = 32
    batch_timeout_micros: int = 0
    max_enqueued_batches: int = 16
    num_batch_threads: int = 1
    max_request_bytes: int = 8 << 20
    grpc_max_message_bytes: int = 0  # the gRPC ports' request limit; 0: max_request_bytes
    # SIGTERM: answer for this long before closing the listening socket, while load balancers
    # stop sending (model_server.drain); then at most drain_seconds for what is in flight.
    drain_grace_s: float = 5.0
    drain_seconds: float = 30.0
