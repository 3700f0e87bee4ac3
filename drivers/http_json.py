"""JSON over HTTP for the emulators' side channels (fault control, truth, tracker options).

One reader of a POST body and one writer of a JSON answer, so every emulator endpoint refuses a
bad body the same way (400, with the reason) and reports a failing action as an HTTP error
instead of dying: an emulator keeps serving whatever a client sends.
"""
from __future__ import annotations

import json

MAX_BODY = 65536


def serve_json(h, route, client_errors: tuple[type[BaseException], ...] = ()) -> None:
    """Answer handler `h` with `route()` as JSON: 200, or 400 for `client_errors`, else 500."""
    try:
        body = json.dumps(route()).encode()
    except Exception as exc:  # noqa: BLE001 - report it to the client, keep serving
        h.send_error(400 if isinstance(exc, client_errors) else 500, f"{type(exc).__name__}: {exc}")
        return
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def serve_post(h, route, client_errors: tuple[type[BaseException], ...] = ()) -> None:
    """A JSON object in (at most MAX_BODY bytes; anything else is a 400), `route(body)` out."""
    try:
        n = int(h.headers.get("Content-Length") or 0)
        if not 0 <= n <= MAX_BODY:
            raise ValueError(f"body of {n} bytes")
        body = json.loads(h.rfile.read(n) or b"{}")
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
    except ValueError as exc:
        h.send_error(400, f"bad request: {exc}")
        return
    serve_json(h, lambda: route(body), client_errors)
