"""A real HTTP server on 127.0.0.1 for download tests, serving in-memory files.

Supports ``Range: bytes=N-`` (206 + Content-Range), and scripted faults per
file, consumed one per request: ``"drop:<n>"`` sends the full Content-Length
header but closes the connection after n bytes; ``"corrupt"`` flips one byte
of the body; ``"ignore-range"`` answers 200 with the whole file.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator


class _Handler(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    faults: dict[str, list[str]] = {}
    log: list[tuple[str, str | None]] = []

    def log_message(self, *args):  # keep test output clean
        pass

    def do_GET(self):
        name = self.path.lstrip("/")
        self.log.append((name, self.headers.get("Range")))
        if name not in self.files:
            self.send_error(404)
            return
        body = self.files[name]
        fault = self.faults.get(name, []).pop(0) if self.faults.get(name) else None
        if fault == "corrupt":
            body = body[: len(body) // 2] + bytes([body[len(body) // 2] ^ 0xFF]) + body[len(body) // 2 + 1 :]
        start = 0
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and fault != "ignore-range":
            start = int(rng[6:].split("-")[0])
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        payload = body[start:]
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if fault and fault.startswith("drop:"):
            self.wfile.write(payload[: int(fault[5:])])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(payload)


@contextlib.contextmanager
def serve(files: dict[str, bytes], faults: dict[str, list[str]] | None = None) -> Iterator[tuple[str, list]]:
    """Yield (base URL ending in '/', request log of (name, Range header))."""
    handler = type("Handler", (_Handler,), {"files": dict(files), "faults": {k: list(v) for k, v in (faults or {}).items()}, "log": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", handler.log
    finally:
        server.shutdown()
        server.server_close()
