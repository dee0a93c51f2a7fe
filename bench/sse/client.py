"""The clients of the sse section, in a process of their own: ``python -m bench.sse.client``.

One asyncio process opens every stream (raw HTTP/1.1, chunked decoding, SSE parsing), so the
clients share no GIL with the server or the bench. It writes ``--ready`` once every client has
its first snapshot (or the connect timeout passed), then ``--out``: each client's events with
their arrival times (``time.monotonic()``), once every client got ``end`` or the timeout passed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: How the clients get the token: an environment variable, not the command line.
TOKEN_ENV = "BENCH_SSE_TOKEN"


@dataclass
class _Stream:
    started_at: float = 0.0
    first_at: float = 0.0
    #: The client side's port: which API worker holds the connection is looked up by it.
    port: int = 0
    #: (arrival, kind): kind is the SSE event name, "keepalive" or "retry".
    events: list[tuple[float, str]] = field(default_factory=list)
    error: str = ""


async def _body(reader: asyncio.StreamReader, chunked: bool) -> AsyncIterator[bytes]:
    if not chunked:
        while data := await reader.read(65536):
            yield data
        return
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            return
        yield (await reader.readexactly(size + 2))[:-2]


async def _watch(stream: _Stream, port: int, path: str, token: str, first: asyncio.Queue[None]) -> None:
    stream.started_at = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        stream.port = int(writer.get_extra_info("sockname")[1])
    except OSError as exc:
        stream.error = f"connect: {exc}"
        first.put_nowait(None)
        return
    try:
        request = (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
            "Accept: text/event-stream\r\n\r\n"
        )
        writer.write(request.encode())
        await writer.drain()
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        status = head.split(" ", 2)[1]
        if status != "200":
            stream.error = f"HTTP {status}: {(await reader.read(300)).decode(errors='replace')}"
            return
        chunked = "transfer-encoding: chunked" in head.lower()
        buffer = b""
        async for data in _body(reader, chunked):
            buffer += data
            at = time.monotonic()
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                kind = _kind(block)
                stream.events.append((at, kind))
                if kind in ("progress", "end") and not stream.first_at:
                    stream.first_at = at
                    first.put_nowait(None)
                if kind == "end":
                    return
        stream.error = "the stream closed before `end`"
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
        stream.error = f"{type(exc).__name__}: {exc}"
    finally:
        if not stream.first_at:
            first.put_nowait(None)
        writer.close()


def _kind(block: bytes) -> str:
    for line in block.split(b"\n"):
        if line.startswith(b"event:"):
            return line[6:].strip().decode()
        if line.startswith(b"retry:"):
            return "retry"
        if line.startswith(b":"):
            return "keepalive"
    return "message"


async def _clients(args: argparse.Namespace) -> dict[str, Any]:
    token = os.environ[TOKEN_ENV]
    streams = [_Stream() for _ in range(args.clients)]
    first: asyncio.Queue[None] = asyncio.Queue()
    start = time.monotonic()
    tasks = [asyncio.create_task(_watch(s, args.port, args.path, token, first)) for s in streams]

    async def all_first() -> None:
        for _ in streams:
            await first.get()

    try:
        await asyncio.wait_for(all_first(), args.connect_timeout)
    except TimeoutError:
        pass
    connected = sum(1 for s in streams if s.first_at)
    _write_json(Path(args.ready), {"connected": connected, "errors": [s.error for s in streams if s.error]})
    await asyncio.wait(tasks, timeout=max(1.0, args.timeout - (time.monotonic() - start)))
    for task in tasks:
        task.cancel()
    firsts = [s.first_at for s in streams if s.first_at]
    return {
        "connect_all_s": (max(firsts) - start) if firsts else 0.0,
        "cpu_s": time.process_time(),
        "streams": [
            {
                "started_at": s.started_at,
                "first_at": s.first_at,
                "port": s.port,
                "events": s.events,
                "error": s.error,
            }
            for s in streams
        ],
    }


def _write_json(path: Path, data: Any) -> None:
    # Written whole, then renamed: the bench polls for the file and must never read half of it.
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(data), encoding="utf-8")
    partial.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the SSE clients of the sse section (token from env)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--clients", type=int, required=True)
    parser.add_argument("--ready", required=True, help="written once every client got its first snapshot")
    parser.add_argument("--out", required=True, help="each client's events, written at the end")
    parser.add_argument("--connect-timeout", type=float, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    args = parser.parse_args(argv)
    _write_json(Path(args.out), asyncio.run(_clients(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
