"""What a gRPC server's transport costs a call by itself: a server whose one method returns its
request, and closed-loop `grpc.aio` clients in this process, on loopback; the server's and the
clients' CPU time a call. Two servers, one after the other: `grpc.aio`'s (gRPC's Python runtime,
on asyncio and on uvloop) and `serve.py`'s own (`model_server.http2_grpc` on uvloop, the
transport of its gRPC ports); the floor under those ports (docs/serving.md, "Over gRPC").

    python bench/grpc_echo.py [--clients 16] [--channels 16] [--calls 8000] [--bytes 300]

`--channels`: how many HTTP/2 connections the clients share, round robin (16 for 16 clients: one
each; 1: one for all), each a channel of its own connection (`serving_load.own_channel`).
"""
from __future__ import annotations

import argparse
import asyncio
import pathlib
import resource
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from serving_load import free_port, own_channel, process_cpu_s  # noqa: E402


def serve(port: int, loop: str) -> None:
    if loop == "ours":
        return serve_ours(port)
    import grpc

    async def main():
        async def echo(request, context):
            return request

        handler = grpc.method_handlers_generic_handler("bench.Echo", {
            "Echo": grpc.unary_unary_rpc_method_handler(echo)})
        server = grpc.aio.server(handlers=[handler], options=[("grpc.so_reuseport", 0)])
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    if loop == "uvloop":
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())


def serve_ours(port: int) -> None:
    """The echo on `model_server.http2_grpc.Server`, on uvloop as serve.py runs it."""
    import socket

    import uvloop

    from bert_tf2.model_server.http2_grpc import Server, StatusCode

    async def echo(message: bytes):
        return StatusCode.OK, "", message

    async def main():
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", port))
        sock.listen(2048)
        await Server(sock, {"/bench.Echo/Echo": echo}, 4 << 20).start()
        await asyncio.Event().wait()

    uvloop.run(main())


async def load(port: int, calls: int, clients: int, size: int, channels: int) -> None:
    pool = [own_channel(port) for _ in range(channels)]
    body = b"x" * size

    async def client(channel):
        call = channel.unary_unary("/bench.Echo/Echo")
        for _ in range(calls // clients):
            await call(body, timeout=30)

    await asyncio.gather(*(client(pool[i % channels]) for i in range(clients)))
    for channel in pool:
        await channel.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--channels", type=int, default=0,
                        help="connections the clients share (default: one per client)")
    parser.add_argument("--calls", type=int, default=8000)
    parser.add_argument("--bytes", type=int, default=300)
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # PORT,LOOP: the server process
    args = parser.parse_args()
    if args.serve:
        port, loop = args.serve.split(",")
        return serve(int(port), loop)
    from backends import cpu_kind

    channels = args.channels or args.clients
    if not 1 <= channels <= args.clients:
        parser.error(f"--channels={args.channels}: from 1 to --clients ({args.clients})")
    print(f"gRPC echo on loopback, {cpu_kind()}, {args.clients} clients on {channels} connections, "
          f"{args.bytes}-byte requests\n\n| server (loop) | calls/s | server CPU a call | client CPU a call |\n"
          f"|---|---|---|---|")
    for loop in ("asyncio", "uvloop", "ours"):
        port = free_port()
        server = subprocess.Popen([sys.executable, __file__, f"--serve={port},{loop}"])
        try:
            time.sleep(2)
            asyncio.run(load(port, args.calls // 10, args.clients, args.bytes, channels))  # warm-up
            before = process_cpu_s(server.pid), resource.getrusage(resource.RUSAGE_SELF)
            start = time.perf_counter()
            asyncio.run(load(port, args.calls, args.clients, args.bytes, channels))
            wall = time.perf_counter() - start
            after = process_cpu_s(server.pid), resource.getrusage(resource.RUSAGE_SELF)
        finally:
            server.kill()
            server.wait()
        client = (after[1].ru_utime + after[1].ru_stime) - (before[1].ru_utime +
                                                             before[1].ru_stime)
        side = "serve.py's http2_grpc (uvloop)" if loop == "ours" else f"grpc.aio ({loop})"
        print(f"| {side} | {args.calls / wall:,.0f} | {(after[0] - before[0]) / args.calls * 1e6:.0f}"
              f" us | {client / args.calls * 1e6:.0f} us |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
