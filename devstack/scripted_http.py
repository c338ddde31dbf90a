"""The HTTP side of the scripted model servers (``devstack.model_server``,
``devstack.anthropic_server``, ``tests.support.responses_server``): a server on
127.0.0.1, in a thread of the calling process, that hands each POST's path, headers and
JSON body to the script's reply function and sends back the (status, JSON) it returns.
The scripts decide what a model answers; this module only carries it over HTTP."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (request path, request headers, JSON body) -> (HTTP status, JSON answer)
Reply = Callable[[str, Message, Any], tuple[int, Any]]


def scripted_handler(reply: Reply) -> type[BaseHTTPRequestHandler]:
    """A request handler class that answers every POST with ``reply`` (as JSON) and
    logs nothing (a test's output stays its own)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, out = reply(self.path, self.headers, body)
            data = json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away before its answer (a caller's timeout under test)
        is expected: nothing printed. (Printing a traceback from this thread would also
        race the test's own ``ast.parse``: Python 3.11's traceback parses the failing
        line to place its carets, and the parser's recursion count is shared between
        threads, CPython gh-106905.) Any other error is printed."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


@contextmanager
def serve_scripted(reply: Reply) -> Iterator[str]:
    """The server's base URL (``http://127.0.0.1:<port>``) while the block runs; each
    request in a thread of its own (a slow reply holds up no other). Stopped after."""
    server = _Server(("127.0.0.1", 0), scripted_handler(reply))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
