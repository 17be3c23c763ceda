"""The server's stdio loop and protocol rules, in place of pygls 2.1's (``pygls.io_.run_async``), which

- trusted ``Content-Length``: a header that lied by a few bytes glued the rest of one message onto the next
  message's header, and every message after was lost (the header is only recognised as a whole line);
- allocated whatever ``Content-Length`` said (``stdin.read(n)``): a huge one killed the server with MemoryError;
- answered nothing to a request whose params do not deserialise (a negative position): it only logged it.

Here a message's header is found wherever it starts (a raw ``Content-Length: N\\r\\n`` cannot occur inside a
JSON body: JSON escapes line breaks in strings), so a lying length costs that message only: a body that runs
into the next header is cut there, and bytes left before a header are skipped.  A message over
``MAX_MESSAGE_BYTES`` is skipped without being held (the request, if its id can be read, gets an error).  A
request that does not deserialise gets InvalidParams.

``GradguardProtocol`` adds the lifecycle rules of the LSP: a request before ``initialize`` gets -32002
(ServerNotInitialized) and a notification is dropped; after ``shutdown`` a request gets InvalidRequest; ``exit``
ends the process with 0 after ``shutdown`` and 1 without (pygls computed that, then lost it: ``main`` returned 0).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

from lsprotocol import types
from pygls.exceptions import (JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest,
                              JsonRpcServerNotInitialized)
from pygls.io_ import StdoutWriter
from pygls.protocol import LanguageServerProtocol

logger = logging.getLogger("gradguard.lsp")

MAX_MESSAGE_BYTES = int(os.environ.get("GRADGUARD_LSP_MAX_MESSAGE_BYTES") or 64 * 1024 * 1024)
HEADER = re.compile(rb"Content-Length:[ \t]*(\d{1,19})[ \t]*\r\n(?:[A-Za-z][\w-]*:[^\r\n]*\r\n)*\r\n", re.IGNORECASE)
MAX_GARBAGE = 1 << 16  # bytes kept while looking for a header (the end of a cut header may follow)
ID = re.compile(rb'"id"[ \t\r\n]*:[ \t\r\n]*("(?:[^"\\]|\\.){0,200}"|-?\d{1,19})')


def _request_id(head: bytes) -> Any:
    """The id of the request a message's first bytes begin, when one is there to read."""
    match = ID.search(head)
    if match is None or b'"method"' not in head:
        return None
    try:
        return json.loads(match.group(1))
    except ValueError:
        return None


class Framer:
    """Splits a byte stream into message bodies (see the module docs).  ``feed`` bytes in; ``pop`` gives the
    next complete body (bytes), an oversized message's id as ``("too large", size, id)``, or None."""

    def __init__(self, limit: int = MAX_MESSAGE_BYTES) -> None:
        self.buffer = bytearray()
        self.limit = limit
        self.skipping = 0  # bytes of an oversized body still to skip
        self.scanned = 0  # bytes of the body being received already searched for a header (linear, not quadratic)

    def feed(self, data: bytes) -> None:
        self.buffer += data

    def pop(self) -> bytes | tuple[str, int, Any] | None:
        while True:
            if self.skipping:
                header = HEADER.search(self.buffer)
                end = min(self.skipping, len(self.buffer) if header is None else header.start())
                del self.buffer[:end]
                self.skipping = 0 if header is not None else self.skipping - end
                if self.skipping:
                    return None
            header = HEADER.search(self.buffer)
            if header is None:
                if len(self.buffer) > MAX_GARBAGE:  # no header anywhere: keep only where one may be starting
                    del self.buffer[:-64]
                return None
            if header.start():
                logger.warning("skipped %d bytes that were not a message", header.start())
            length = int(header.group(1))
            if length > self.limit:
                if len(self.buffer) - header.end() < 4096 and HEADER.search(self.buffer, header.end()) is None:
                    return None  # the start of the body, where its id is, has not all come yet
                head = bytes(self.buffer[header.end():header.end() + 4096])
                del self.buffer[:header.end()]
                self.skipping = length
                logger.warning("skipping a message of %d bytes (the limit is %d)", length, self.limit)
                return ("too large", length, _request_id(head))
            start = header.end()
            end = min(len(self.buffer), start + length)
            following = HEADER.search(self.buffer, start + max(0, self.scanned - 256), end)
            if following is not None:  # the length runs into the next message: it lied, cut here
                logger.warning("a Content-Length of %d ran into the next message; cut at %d bytes", length,
                               following.start() - start)
                body = bytes(self.buffer[start:following.start()])
                del self.buffer[:following.start()]
                self.scanned = 0
                return body
            if len(self.buffer) - start < length:
                self.scanned = end - start
                return None  # not all here yet
            body = bytes(self.buffer[start:start + length])
            del self.buffer[:start + length]
            self.scanned = 0
            return body


class GradguardProtocol(LanguageServerProtocol):
    """pygls's protocol with the LSP's lifecycle rules (see the module docs)."""

    initialize_seen = False

    def _refuse(self, message: Any, error: JsonRpcException) -> None:
        self._send_response(message.id, None, error.to_response_error())

    def handle_message(self, message: Any) -> None:
        method = getattr(message, "method", None)
        request = method is not None and getattr(message, "id", None) is not None
        if method == types.EXIT:
            return super().handle_message(message)
        if self._shutdown:
            if request:
                self._refuse(message, JsonRpcInvalidRequest(f"the server is shut down: {method} is not answered"))
            return
        if not self.initialize_seen:
            if method == types.INITIALIZE:
                self.initialize_seen = True
            elif request:
                self._refuse(message, JsonRpcServerNotInitialized(f"{method} before initialize"))
                return
            elif method is not None:
                return  # a notification before initialize is dropped
        super().handle_message(message)


def _answer_undecodable(protocol: LanguageServerProtocol, body: bytes, error: Exception) -> None:
    """A body that did not become a message: a request whose id can be read gets an error answer."""
    try:
        data = json.loads(body)
    except ValueError:
        msg_id = _request_id(body[:4096])  # cut short by a Content-Length that lied: its id is at the start
        if msg_id is not None:
            protocol._send_response(msg_id, None, JsonRpcInvalidRequest(
                "the message could not be read (is its Content-Length right?)").to_response_error())
        logger.warning("a message that is not JSON was skipped: %s", error)
        return
    if isinstance(data, dict) and data.get("id") is not None and isinstance(data.get("method"), str):
        failure = error if isinstance(error, JsonRpcException) else JsonRpcInvalidParams()
        protocol._send_response(data["id"], None, failure.to_response_error())
    else:
        logger.warning("a message that could not be read was skipped: %s", error)


async def serve(server: Any, stdin: BinaryIO, stop: threading.Event) -> None:
    """Read messages from ``stdin`` and hand them to ``server.protocol`` until EOF, ``stop`` or ``exit``."""
    protocol = server.protocol
    framer = Framer()
    loop = asyncio.get_running_loop()
    reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradguard-stdin")
    read = getattr(stdin, "read1", stdin.read)
    try:
        while not stop.is_set():
            data = await loop.run_in_executor(reader, read, 65536)
            if not data:
                break
            framer.feed(data)
            while (item := framer.pop()) is not None:
                if isinstance(item, tuple):
                    _, size, msg_id = item
                    if msg_id is not None:
                        protocol._send_response(msg_id, None, JsonRpcInvalidRequest(
                            f"message of {size} bytes is too large (the limit is {framer.limit})").to_response_error())
                    continue
                try:
                    text = item.decode("utf-8")
                    message, end = json.JSONDecoder(object_hook=protocol.structure_message).raw_decode(text.lstrip())
                except Exception as exc:  # noqa: BLE001 - one bad message must not stop the server
                    _answer_undecodable(protocol, item, exc)
                    continue
                rest = text.lstrip()[end:]
                if rest.strip():  # the length ran a few bytes into the next header: give them back
                    framer.buffer[:0] = rest.encode("utf-8")
                try:
                    protocol.handle_message(message)
                except Exception:  # noqa: BLE001
                    logger.exception("Unable to handle message")
    finally:
        reader.shutdown(wait=False, cancel_futures=True)


def start_io(server: Any, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
    """``server.start_io()`` with this loop; the process's exit code (``exit``: 0 after shutdown, else 1)."""
    server._stop_event = stop = threading.Event()
    server.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
    code = 0
    try:
        asyncio.run(serve(server, stdin or sys.stdin.buffer, stop))
    except BrokenPipeError:
        logger.error("the connection to the client is lost; shutting down")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        code = 130
    finally:
        server.shutdown()
    return code
