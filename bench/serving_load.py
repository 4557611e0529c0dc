"""`serve.py` under concurrent load on loopback, against ONNX Runtime int8 (optimum) behind the same
server framework and batching settings; and the fast path's offline batch-32 throughput that the
server should come close to.

    python bench/serving_load.py [--work_dir /tmp/bench-serving] [--clients 1,4,16,64]
                                 [--rounds 5] [--requests 1500]

1. The model: `bench/serving.py`'s MiniLM fine-tuned on MRPC (made once in --work_dir, reused),
   its export (LiteRT int8) and its Hugging Face copy for the peer.
2. Sides, each a server process on loopback, answering TF Serving's predict requests:
   - `ours`: `serve.py --export_dir=... --runtime=int8` (our tokenizer, our LiteRT int8 file),
     over TF Serving's REST API;
   - `ours-tf-grpc` and `ours-v2-grpc`: the same server process over TF Serving's gRPC API
     (`--tf_serving_grpc_port`, PredictionService/Predict) and the Open Inference Protocol's
     gRPC (`--grpc_port`, ModelInfer), each client on its own channel (one HTTP/2 connection),
     the requests' bytes made once before the level;
   - `ours-tf-grpc-raw` and `ours-v2-grpc-raw`: the same ports, each client a minimal HTTP/2
     connection of this file's (`RawGrpcConnection`) instead of a `grpc.aio` channel, as the
     REST side's clients are minimal HTTP/1.1 connections of its own (`Connection`): the
     server's capacity, where grpcio's client, on the same cores, takes 4-5 times the CPU of
     the REST client a request;
   - `ort-int8`: `bench/_serving_load_peer.py`, optimum's dynamic int8 ONNX file on ONNX Runtime
     with transformers' Rust tokenizer, behind the same `model_server` (the same ASGI
     application and dynamic batcher), in `bench/.venv-serving-load` (made on first use; never
     a project dependency).
   Both use `--max_batch_size` and `--batch_timeout_micros` as given.
3. Load: a bounded generator in this process (asyncio on uvloop, one keep-alive HTTP/1.1
   connection per client). At each concurrency of --clients, every client sends one request at
   a time (one MRPC sentence, `{"text_a": s, "text_b": ""}`, or one MRPC pair), the next as soon
   as the last is answered, until --requests are answered or --seconds pass. Texts come from
   MRPC's train file, each text once per side and level. Throughput: answered requests over the
   level's wall time; p50/p99 over its requests; the CPU time (user and system) of the server's
   processes and of the generator over the level, a request (our server's also by thread); for
   our server, the rows its model ran together on average (its /metrics). Every answer is
   checked (200 or OK, a label); a refusal or a failure is counted, not retried.
   Then the open loop (--open_loop): --open_requests requests arriving as a Poisson process at
   each share of the side's capacity (its rate at the most clients, that round), sent at their
   times whatever is still unanswered; a latency runs from the scheduled arrival. Reported with
   the p99 over the quiet p50 (the side's p50 at one client): a server's tail is judged at a
   load below capacity, where closed-loop clients are a queue of their own (Little's law).
4. Offline: the fast path in this process (`LiteRTClassifier`, int8, warmed), batches of 32 of
   the same texts: the ceiling a server's batching aims at.
5. Rounds: every server is up at once (the idle ones sleep); each of --rounds measures every
   side's levels, the sides' order turning each round, and the offline rate just before and
   just after each of our server's levels. The table gives each figure's median over the
   rounds, and our server's rate over the offline rate around it: on a shared 2-core machine
   the offline rate alone moved 20-30% between runs minutes apart, so a ratio of rates taken
   minutes apart says little.

Prints a Markdown table and writes bench/results/serving_load.json (every round's figures). The
generator shares the machine's cores with the server, as a client on the same host would.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pathlib
import platform
import signal
import socket
import struct
import subprocess
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _serving_peer import peak_rss_bytes  # noqa: E402
from backends import cpu_kind  # noqa: E402
from finetune_vs_pytorch import peer_python  # noqa: E402
from serving import PEER_PACKAGES, finetune, hugging_face_copy, read_tsv  # noqa: E402

RESULTS = REPO / "bench" / "results"
PEER_VENV = REPO / "bench" / ".venv-serving-load"
LOAD_PEER_PACKAGES = [*PEER_PACKAGES, "kserve==0.21.0"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------ the client
SIDES = ("ours", "ours-tf-grpc", "ours-v2-grpc", "ours-tf-grpc-raw", "ours-v2-grpc-raw",
         "ort-int8")
GRPC_METHODS = {"ours-tf-grpc": "/tensorflow.serving.PredictionService/Predict",
                "ours-v2-grpc": "/inference.GRPCInferenceService/ModelInfer"}
GRPC_METHODS.update({f"{side}-raw": method for side, method in GRPC_METHODS.items()})
# The server's flag of each gRPC side's port.
GRPC_FLAGS = {side: "--tf_serving_grpc_port" if "-tf-" in side else "--grpc_port"
              for side in GRPC_METHODS}


def own_channel(port: int):
    """A `grpc.aio` channel to `port` on loopback on an HTTP/2 connection of its own, as each REST
    client has: its own subchannel pool (channels to one address with the same options otherwise
    share one connection, gRPC's default)."""
    import grpc

    return grpc.aio.insecure_channel(f"127.0.0.1:{port}",
                                     options=[("grpc.use_local_subchannel_pool", 1)])


class GrpcConnection:
    """One gRPC channel (`own_channel`) calling `method` with requests' bytes as they are; `post`
    answers as `Connection.post` does (0 for a gRPC error)."""

    def __init__(self, port: int, method: str):
        import grpc

        self.grpc = grpc
        self.channel = own_channel(port)
        self.call = self.channel.unary_unary(method)

    async def post(self, path: str, body: bytes) -> tuple:
        try:
            return 200, await self.call(body, timeout=60)
        except self.grpc.aio.AioRpcError as e:
            return e.code().name, b""

    async def aclose(self):
        await self.channel.close()


class RawGrpcConnection:
    """One HTTP/2 connection calling `method` with requests' bytes as they are, one call at a
    time, written as few bytes as the protocol allows: a header block of HPACK literals made once
    (no table, no Huffman), the message in one DATA frame; windows of 2^30 bytes given to the
    server at once, so that it never waits for this end. `post` answers as `Connection.post`
    does (200 for grpc-status 0, the code's name otherwise)."""

    STATUS = {0: 200, 8: "RESOURCE_EXHAUSTED", 14: "UNAVAILABLE"}

    def __init__(self, port: int, method: str):
        import hpack

        from bert_tf2.model_server import http2_grpc as h2

        self.h2, self.port, self.decoder = h2, port, hpack.Decoder()
        authority = f"127.0.0.1:{port}".encode()
        # :method POST (static 3), :scheme http (6), then literals with indexed names: :path (4),
        # :authority (1), content-type (31); te: trailers as a literal name.
        self.block = (b"\x83\x86" + h2.hpack_integer(4, 4) + h2.hpack_integer(len(method), 7)
                      + method.encode() + h2.hpack_integer(1, 4)
                      + h2.hpack_integer(len(authority), 7) + authority + h2.RESPONSE_HEAD[1:]
                      + h2.literal_header(b"te", b"trailers"))
        self.reader = self.writer = None
        self.stream = -1

    async def post(self, path: str, body: bytes) -> tuple:
        h2 = self.h2
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            self.writer.write(h2.PREFACE + h2.frame(h2.SETTINGS, 0, 0, struct.pack(
                ">HI", 0x4, 1 << 30)) + h2.frame(h2.WINDOW_UPDATE, 0, 0, struct.pack(
                    ">I", (1 << 30) - 65535)))
            self.received = 0
        self.stream += 2
        self.writer.write(h2.frame(h2.HEADERS, h2.END_HEADERS, self.stream, self.block)
                          + h2.frame(h2.DATA, h2.END_STREAM, self.stream,
                                     struct.pack(">BI", 0, len(body)) + body))
        answer = bytearray()
        while True:
            head = await self.reader.readexactly(9)
            high, low, kind, flags, stream = h2.FRAME_HEAD.unpack(head)
            payload = await self.reader.readexactly((high << 16) | low)
            if kind == h2.DATA:
                answer += payload
                self.received += len(payload)
            elif kind == h2.HEADERS and flags & h2.END_STREAM and stream == self.stream:
                status = int(dict(self.decoder.decode(payload, raw=True))[b"grpc-status"])
                if self.received >= 1 << 29:  # what the server may still send: give it back
                    self.writer.write(h2.frame(h2.WINDOW_UPDATE, 0, 0, struct.pack(
                        ">I", self.received)))
                    self.received = 0
                return self.STATUS.get(status, status), bytes(answer[5:])
            elif kind == h2.SETTINGS and not flags & h2.ACK:
                self.writer.write(h2.frame(h2.SETTINGS, h2.ACK, 0))
            elif kind == h2.PING and not flags & h2.ACK:
                self.writer.write(h2.frame(h2.PING, h2.ACK, 0, payload))
            elif kind == h2.GOAWAY or kind == h2.RST_STREAM and stream == self.stream:
                raise ConnectionResetError("the server ended the call (GOAWAY or RST_STREAM)")

    async def aclose(self):
        if self.writer is not None:
            self.writer.close()


def connector(side: str):
    """`port -> connection` for `side`, and the bytes every good answer holds."""
    if side in GRPC_METHODS:
        kind = RawGrpcConnection if side.endswith("-raw") else GrpcConnection
        return (lambda port: kind(port, GRPC_METHODS[side])), b"label"
    return Connection, b'"label"'


class Connection:
    """One keep-alive HTTP/1.1 connection sending TF Serving predict requests."""

    def __init__(self, port: int):
        self.port = port
        self.reader = self.writer = None

    async def post(self, path: str, body: bytes) -> tuple:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                          f"application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                          + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:]
                                                        if line)}
        payload = await self.reader.readexactly(int(headers.get("content-length", 0)))
        if headers.get("connection") == "close":
            self.writer.close()
            self.writer = None
        return status, payload

    async def aclose(self):
        if self.writer is not None:
            self.writer.close()


def run_load(port: int, bodies: list, clients: int, seconds: float, side: str = "ours") -> dict:
    """`load` on uvloop where it is installed (`model_server.app.run_on`, as the server runs):
    the generator shares the server's cores, and on the standard loop it took more of them (35
    against 40 microseconds of CPU a request at 16 clients)."""
    from uvicorn.loops.auto import auto_loop_factory

    from bert_tf2.model_server.app import run_on

    return run_on(auto_loop_factory(), load(port, bodies, clients, seconds, side))


def run_open_load(port: int, bodies: list, rate: float, seed: int, side: str = "ours") -> dict:
    """`open_load` on uvloop, as `run_load`."""
    from uvicorn.loops.auto import auto_loop_factory

    from bert_tf2.model_server.app import run_on

    return run_on(auto_loop_factory(), open_load(port, bodies, rate, seed, side))


async def open_load(port: int, bodies: list, rate: float, seed: int, side: str) -> dict:
    """Open loop: `bodies` sent at Poisson arrivals of `rate` a second (seeded), each at its
    time whatever is still unanswered, on an idle keep-alive connection or a new one. A latency
    runs from the request's scheduled arrival, so a client late to send counts against it."""
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, len(bodies))
    arrivals = np.cumsum(gaps)
    connect, word = connector(side)
    idle, latencies, failures = [], [], {}
    start = time.perf_counter() + 0.05

    async def one(at: float, body: bytes):
        await asyncio.sleep(max(0.0, start + at - time.perf_counter()))
        connection = idle.pop() if idle else connect(port)
        try:
            status, payload = await connection.post("/v1/models/m:predict", body)
        except OSError as e:
            failures[type(e).__name__] = failures.get(type(e).__name__, 0) + 1
            await connection.aclose()
            return
        if status == 200 and word in payload:
            latencies.append(time.perf_counter() - (start + at))
        else:
            failures[status] = failures.get(status, 0) + 1
        idle.append(connection)

    await asyncio.gather(*[one(at, body) for at, body in zip(arrivals, bodies)])
    wall = time.perf_counter() - start
    connections = len(idle)
    for connection in idle:
        await connection.aclose()
    ms = np.asarray(latencies) * 1e3
    return {"offered_per_s": rate, "answered": len(latencies), "failures": failures,
            "per_s": len(latencies) / wall, "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)), "connections": connections}


async def load(port: int, bodies: list, clients: int, seconds: float, side: str) -> dict:
    """`clients` connections sending `bodies` one request at a time each, until all are answered
    or `seconds` pass."""
    queue = list(reversed(bodies))
    latencies, failures = [], {}
    deadline = time.perf_counter() + seconds
    connect, word = connector(side)

    async def client():
        connection = connect(port)
        try:
            while queue and time.perf_counter() < deadline:
                body = queue.pop()
                start = time.perf_counter()
                status, payload = await connection.post("/v1/models/m:predict", body)
                if status == 200 and word in payload:
                    latencies.append(time.perf_counter() - start)
                else:
                    failures[status] = failures.get(status, 0) + 1
        finally:
            await connection.aclose()

    start = time.perf_counter()
    await asyncio.gather(*[client() for _ in range(clients)])
    wall = time.perf_counter() - start
    ms = np.asarray(latencies) * 1e3
    return {"clients": clients, "answered": len(latencies), "failures": failures,
            "wall_s": wall, "per_s": len(latencies) / wall,
            "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}


# ------------------------------------------------------------------------------------ servers
@contextlib.contextmanager
def server(command: list, port: int, log_path: pathlib.Path, measured: dict,
           ready_path: str = "/v1/models/m", ready_word: bytes = b"AVAILABLE"):
    """The server process, ready (`ready_word` in the answer to GET `ready_path`); on leaving,
    the peak memory of it and its child processes goes into `measured`."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                start_new_session=True)  # its workers go with it (killpg)
        try:
            deadline = time.time() + 900
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"the server died: {log_path.read_text()[-3000:]}")
                with contextlib.suppress(OSError, ValueError, KeyError):
                    with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                        s.sendall(f"GET {ready_path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                        if ready_word in s.recv(4096):
                            break
                if time.time() > deadline:
                    raise SystemExit(f"the server was not ready in 900 s: {log_path}")
                time.sleep(0.2)
            yield proc
        finally:
            measured["peak_rss_mb"] = sum(peak_rss_bytes(pid) for pid in
                                          process_tree(proc.pid)) / 2 ** 20
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # a worker that ignored SIGTERM


def batch_rows(port: int) -> tuple:
    """`(rows, batches)` the server's model has run so far (its /metrics' bert_batch_rows)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        lines = dict(line.rsplit(" ", 1) for line in answer.read().decode().splitlines()
                     if line and not line.startswith("#"))
    return float(lines["bert_batch_rows_sum"]), float(lines["bert_batch_rows_count"])


def stat_cpu_s(folder: pathlib.Path) -> float:
    """User and system CPU seconds so far of the process or thread whose /proc folder this is."""
    fields = (folder / "stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds of process `pid` and its children so far (/proc)."""
    total = 0.0
    for member in process_tree(pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += stat_cpu_s(pathlib.Path("/proc") / str(member))
    return total


def thread_cpu_s(pid: int) -> dict:
    """`{thread name: user and system CPU seconds so far}` over process `pid` and its children's
    threads (/proc; serve.py names its threads for the OS: the batch thread, the event loop,
    gRPC's poller; native threads keep the program's name or their library's)."""
    totals = {}
    for member in process_tree(pid):
        for task in (pathlib.Path("/proc") / str(member) / "task").glob("*"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                name = (task / "comm").read_text().strip()
                totals[name] = totals.get(name, 0.0) + stat_cpu_s(task)
    return totals


def process_tree(pid: int) -> list:
    """`pid` and its descendants (a server's worker processes)."""
    children = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, stack = [], [pid]
    while stack:
        tree.append(stack.pop())
        stack.extend(children.get(tree[-1], []))
    return tree


def bodies_of(texts: list, side: str = "ours") -> list:
    """Each request's bytes as `side` sends them: TF Serving's REST predict body, a serialized
    PredictRequest (TF Serving's gRPC) or ModelInferRequest (the Open Inference Protocol's)."""
    side = side.removesuffix("-raw")
    if side == "ours-tf-grpc":
        from bert_tf2.model_server import grpc_messages as wire

        bodies = []
        for a, b in texts:
            request = wire.serving("PredictRequest")()
            request.model_spec.name = "m"
            for name, text in (("text_a", a), ("text_b", b)):
                tensor = request.inputs[name]
                tensor.dtype = 7  # DT_STRING
                tensor.tensor_shape.dim.add(size=1)
                tensor.string_val.append(text.encode("utf-8"))
            bodies.append(request.SerializeToString())
        return bodies
    if side == "ours-v2-grpc":
        from bert_tf2.model_server import grpc_messages

        bodies = []
        for a, b in texts:
            request = grpc_messages.message("inference.ModelInferRequest")(model_name="m")
            for name, text in (("text_a", a), ("text_b", b)):
                request.inputs.add(name=name, datatype="BYTES", shape=[1]).contents. \
                    bytes_contents.append(text.encode("utf-8"))
            bodies.append(request.SerializeToString())
        return bodies
    return [json.dumps({"instances": [{"text_a": a, "text_b": b}]}).encode() for a, b in texts]


def offline_classifier(export: pathlib.Path):
    from bert_tf2.tasks.classification.litert_serving import LiteRTClassifier

    fast = LiteRTClassifier.load(str(export), "int8")
    fast.warm_up((1, 2, 4, 8))
    return fast


def offline_batch32(fast, texts: list) -> float:
    """Texts per second through the fast path in this process, in batches of 32."""
    fast([a for a, _ in texts[:64]], [b for _, b in texts[:64]])
    start = time.perf_counter()
    for i in range(0, len(texts), 32):
        part = texts[i:i + 32]
        fast([a for a, _ in part], [b for _, b in part])
    return len(texts) / (time.perf_counter() - start)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be at least 1")
    return value


def median_of(rounds: list, key: str) -> float:
    return float(np.median([r[key] for r in rounds]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default="/tmp/bench-serving")
    parser.add_argument("--shared", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--sides", default="ours,ort-int8")
    parser.add_argument("--clients", default="1,4,16,64")
    parser.add_argument("--rounds", type=positive, default=5,
                        help="measure every side and level this many times, interleaved with "
                        "the offline rate; the table gives medians")
    parser.add_argument("--requests", type=positive, default=1500,
                        help="requests per level and round (at most the texts of the kind "
                        "over the levels, so that no text repeats within a round)")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--open_loop", default="0.5,0.8",
                        help="after each side's levels, Poisson arrivals at these shares of its "
                        "capacity (its rate at the most clients, the same round); '' for none")
    parser.add_argument("--open_requests", type=positive, default=2000,
                        help="requests per open-loop level and round")
    parser.add_argument("--max_batch_size", type=positive, default=32)
    parser.add_argument("--batch_timeout_micros", type=int, default=0)
    parser.add_argument("--json_out", default=str(RESULTS / "serving_load.json"))
    args = parser.parse_args()
    sides = args.sides.split(",")
    unknown = sorted(set(sides) - set(SIDES))
    if unknown:
        parser.error(f"--sides: unknown {', '.join(unknown)} ({', '.join(SIDES)})")
    try:
        levels = [positive(c) for c in args.clients.split(",")]
    except (ValueError, argparse.ArgumentTypeError):
        parser.error(f"--clients={args.clients}: a comma-separated list of counts of at least 1")
    try:
        shares = [float(s) for s in args.open_loop.split(",") if s]
    except ValueError:
        shares = [0.0]
    if any(not 0 < s < 1 for s in shares):
        parser.error(f"--open_loop={args.open_loop}: shares of the capacity between 0 and 1")
    work = pathlib.Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    shared = pathlib.Path(args.shared)
    export = finetune("mrpc", shared / "glue" / "MRPC", work,
                      ["--task_name=MRPC", "--num_train_epochs=3", "--max_seq_length=128"])
    hf_dir = hugging_face_copy(export.parent, 2)
    rows = read_tsv(shared / "glue" / "MRPC" / "train.tsv")[1:]
    kinds = {"sentences": [(r[3], "") for r in rows] + [(r[4], "") for r in rows],
             "pairs": [(r[3], r[4]) for r in rows]}
    batching = [f"--max_batch_size={args.max_batch_size}",
                f"--batch_timeout_micros={args.batch_timeout_micros}"]
    fast = offline_classifier(export)
    results = {"cpu": cpu_kind(), "machine": platform.machine(), "settings": batching,
               "rounds": args.rounds,
               "sides": {side: {kind: {str(c): [] for c in levels} for kind in kinds}
                         for side in sides},
               "open_loop": {side: {kind: {str(s): [] for s in shares} for kind in kinds}
                             for side in sides}}
    memory = {side: {} for side in sides}
    with contextlib.ExitStack() as stack:
        ports, pids = {side: free_port() for side in sides}, {}
        flag_ports = {}  # a raw side and its grpcio twin call the same port
        for side in sides:
            if side in GRPC_FLAGS:
                ports[side] = flag_ports.setdefault(GRPC_FLAGS[side], ports[side])
        servers = [side for side in sides if side in ("ours", "ort-int8")]
        if not servers or any(side in GRPC_METHODS for side in sides) and "ours" not in sides:
            servers.insert(0, "ours")  # the gRPC sides are ports of our server
            ports["ours"] = free_port()
        for side in servers:  # every server up at once; the idle ones sleep while one is measured
            port = ports[side]
            if side == "ours":
                grpc_ports = [f"{flag}={port}" for flag, port in flag_ports.items()]
                command = [sys.executable, str(REPO / "serve.py"), f"--export_dir={export}",
                           "--model_name=m", "--host=127.0.0.1", f"--port={port}",
                           "--runtime=int8", "--drain_grace_s=0", *grpc_ports, *batching]
            else:
                command = [peer_python(PEER_VENV, LOAD_PEER_PACKAGES),
                           str(REPO / "bench" / "_serving_load_peer.py"), f"--hf_dir={hf_dir}",
                           f"--work_dir={work / 'peer'}", f"--port={port}", *batching]
            print(f"{side}: {' '.join(command[-6:])}", flush=True)
            pids[side] = stack.enter_context(server(command, port, work / f"load-{side}.log",
                                                    memory.setdefault(side, {}))).pid
            run_load(port, bodies_of(kinds["pairs"][-64:]), 4, 60)  # warm-up, untimed
        for side in sides:
            if side in GRPC_METHODS:  # warm-up of the port, untimed
                run_load(ports[side], bodies_of(kinds["pairs"][-64:], side), 4, 60, side)
                memory[side] = memory["ours"]  # the same process
                pids[side] = pids["ours"]
        for round_ in range(args.rounds):
            for side in sides[round_ % len(sides):] + sides[:round_ % len(sides)]:
                for kind, texts in kinds.items():
                    count = min(args.requests, len(texts) // len(levels))
                    for i, clients in enumerate(levels):
                        part = texts[i * count:(i + 1) * count]
                        ours = side.startswith("ours")
                        before = offline_batch32(fast, texts[:1024]) if ours else 0
                        bodies = bodies_of(part, side)
                        batches = batch_rows(ports["ours"]) if ours else None
                        cpu = process_cpu_s(pids[side]), time.process_time()
                        threads = thread_cpu_s(pids[side]) if ours else {}
                        result = run_load(ports[side], bodies, clients, args.seconds, side)
                        answered = max(result["answered"], 1)
                        result["server_cpu_us"] = (process_cpu_s(pids[side]) - cpu[0]) / \
                            answered * 1e6
                        result["client_cpu_us"] = (time.process_time() - cpu[1]) / answered * 1e6
                        if ours:
                            # Where the server's CPU went, by thread.
                            after = thread_cpu_s(pids[side])
                            result["server_cpu_us_by_thread"] = {
                                name: (after[name] - threads.get(name, 0.0)) / answered * 1e6
                                for name in sorted(after, key=lambda n: threads.get(n, 0.0)
                                                   - after[n])}
                            # The rows the model ran together, on average.
                            ran, batches = np.subtract(batch_rows(ports["ours"]), batches)
                            result["mean_batch_rows"] = float(ran / max(batches, 1))
                            # The offline rate on either side of the level.
                            result["offline_batch32"] = (before + offline_batch32(
                                fast, texts[:1024])) / 2
                            result["over_offline"] = result["per_s"] / result["offline_batch32"]
                        results["sides"][side][kind][str(clients)].append(result)
                        print(f"round {round_ + 1}: {side:12} {kind:9} {clients:3} clients: "
                              f"{result['per_s']:7.1f}/s  p50 {result['p50_ms']:6.1f} ms  p99 "
                              f"{result['p99_ms']:6.1f} ms  CPU a request: server "
                              f"{result['server_cpu_us']:.0f} us, client "
                              f"{result['client_cpu_us']:.0f} us  failures "
                              f"{result['failures'] or 0}"
                              + (f"  offline batch 32 {result['offline_batch32']:.0f}/s, "
                                 f"batches of {result['mean_batch_rows']:.1f} rows; server "
                                 f"threads (us a request): " + ", ".join(
                                     f"{name} {us:.0f}" for name, us in
                                     result["server_cpu_us_by_thread"].items() if us >= 5)
                                 if ours else ""), flush=True)
                    by_level = results["sides"][side][kind]
                    capacity = by_level[str(levels[-1])][-1]["per_s"]
                    quiet = by_level[str(levels[0])][-1]["p50_ms"]
                    for share in shares:
                        part = texts[-min(args.open_requests, len(texts)):]
                        result = run_open_load(ports[side], bodies_of(part, side),
                                               share * capacity, round_, side)
                        result.update(share=share, capacity_per_s=capacity,
                                      quiet_p50_ms=quiet,
                                      p99_over_quiet_p50=result["p99_ms"] / quiet)
                        results["open_loop"][side][kind][str(share)].append(result)
                        print(f"round {round_ + 1}: {side:8} {kind:9} open loop at {share:.0%} "
                              f"of {capacity:.0f}/s: p50 {result['p50_ms']:6.1f} ms  p99 "
                              f"{result['p99_ms']:6.1f} ms ({result['p99_over_quiet_p50']:.1f}x "
                              f"the quiet p50)  failures {result['failures'] or 0}", flush=True)
    results["peak_rss_mb"] = {side: memory[side]["peak_rss_mb"] for side in sides}
    offline = {}
    ours = [side for side in sides if side.startswith("ours")]
    if ours:
        offline = {kind: float(np.median([r["offline_batch32"] for side in ours for c in levels
                                          for r in results["sides"][side][kind][str(c)]]))
                   for kind in kinds}
        results["offline_batch32_median"] = offline
    RESULTS.mkdir(exist_ok=True)
    partial = pathlib.Path(args.json_out + f".tmp{os.getpid()}")
    partial.write_text(json.dumps(results, indent=1))
    partial.replace(args.json_out)
    print(f"\nMRPC on loopback, {results['cpu']}; requests of one text (pair) each; "
          f"{' '.join(batching)}; medians of {args.rounds} rounds\n")
    print("| side | texts | clients | requests/s | p50 ms | p99 ms | server CPU a request (us) | "
          "client CPU a request (us) | rows a batch | over offline batch 32 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for side in sides:
        for kind in kinds:
            for clients in levels:
                runs = results["sides"][side][kind][str(clients)]
                ratio = (f"{median_of(runs, 'over_offline'):.2f}x (rounds "
                         + ", ".join(f"{r['over_offline']:.2f}" for r in runs) + ")"
                         if side.startswith("ours") else "")
                print(f"| {side} | {kind} | {clients} | {median_of(runs, 'per_s'):.0f} | "
                      f"{median_of(runs, 'p50_ms'):.1f} | {median_of(runs, 'p99_ms'):.1f} | "
                      f"{median_of(runs, 'server_cpu_us'):.0f} | "
                      f"{median_of(runs, 'client_cpu_us'):.0f} | "
                      + (f"{median_of(runs, 'mean_batch_rows'):.1f}" if ratio else "")
                      + f" | {ratio} |")
    if shares:
        print(f"\nOpen loop: Poisson arrivals at a share of each side's capacity (its rate at "
              f"{levels[-1]} clients, the same round); the quiet p50 is its p50 at "
              f"{levels[0]} client(s); medians of {args.rounds} rounds\n")
        print("| side | texts | offered | p50 ms | p99 ms | p99 / quiet p50 | failures |")
        print("|---|---|---|---|---|---|---|")
        for side in sides:
            for kind in kinds:
                for share in shares:
                    runs = results["open_loop"][side][kind][str(share)]
                    failed = sum(sum(r["failures"].values()) for r in runs)
                    print(f"| {side} | {kind} | {share:.0%} of "
                          f"{median_of(runs, 'capacity_per_s'):.0f}/s | "
                          f"{median_of(runs, 'p50_ms'):.1f} | {median_of(runs, 'p99_ms'):.1f} | "
                          f"{median_of(runs, 'p99_over_quiet_p50'):.1f}x | {failed} |")
    print("\npeak memory (MB): " + ", ".join(f"{side} {mb:.0f}"
                                             for side, mb in results["peak_rss_mb"].items()))
    if offline:
        print(f"offline batch 32 (median): {offline['sentences']:.0f} sentences/s, "
              f"{offline['pairs']:.0f} pairs/s")


if __name__ == "__main__":
    main()
