"""gcp-storage-emulator with GCS's ``ifGenerationMatch=0`` precondition on uploads.

Real GCS answers 412 Precondition Failed to an upload with ``ifGenerationMatch=0``
when the object already exists; that is how a corpus manifest is committed
(``storage.create_if_absent`` via gcsfs ``pipe_file(mode="create")``).
gcp-storage-emulator 2026.7 ignores the parameter (it never reads it), so the
tests run it through this wrapper, which adds exactly that rule: any upload
(media, multipart, or the last request of a resumable one, which carries the
initiating query string) whose query has ``ifGenerationMatch=0`` fails with 412
if the name exists at the moment the object would be created. It also splits a multipart upload at its
own delimiters (the emulator's parser dropped a trailing CR from the content).

    python tests/gcs_emulator.py start --host 127.0.0.1 --port N --in-memory
"""

from __future__ import annotations

import json
import sys
import threading
from http import HTTPStatus
from urllib.parse import parse_qs, urlparse

from gcp_storage_emulator import server as _server
from gcp_storage_emulator.__main__ import main
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.storage import Storage

_state = threading.local()
_lock = threading.Lock()


class PreconditionFailed(Exception):
    """The object exists and the request asked for generation 0 (no live object)."""


_original_handle = _server.Router.handle
_original_create = Storage.create_file


def _handle(self: _server.Router, method: str) -> None:
    query = parse_qs(urlparse(self._request_handler.path).query)
    _state.if_generation_match = query.get("ifGenerationMatch", [None])[0]
    try:
        _original_handle(self, method)
    except PreconditionFailed as e:
        response = _server.Response(self._request_handler)
        response.status = HTTPStatus.PRECONDITION_FAILED
        response.json({"error": {"code": 412, "message": str(e),
                                 "errors": [{"reason": "conditionNotMet", "message": str(e)}]}})
        response.close()
    finally:
        _state.if_generation_match = None


def _create_file(self: Storage, bucket_name, file_name, content, file_obj, file_id=None):
    with _lock:  # check and create as one step
        if getattr(_state, "if_generation_match", None) == "0":
            try:
                self.get_file_obj(bucket_name, file_name)
            except NotFound:
                pass
            else:
                raise PreconditionFailed(f"At least one of the pre-conditions you specified did not hold: "
                                         f"{bucket_name}/{file_name} exists")
        return _original_create(self, bucket_name, file_name, content, file_obj, file_id)


_original_read_data = _server._read_data


def _read_data(request_handler, query):
    """A multipart upload's parts split at its own delimiters: the emulator's email parser strips a line
    ending before each boundary by the universal-newline rule, so content ending in CR (gcsfs delimits with
    LF alone) lost its last byte. Other bodies, and parts with a transfer encoding, go to the emulator's."""
    content_type = request_handler.headers.get("Content-Type") or ""
    if not content_type.startswith("multipart/related") or "boundary=" not in content_type:
        return _original_read_data(request_handler, query)
    raw = _server._decode_raw_data(_server._read_raw_data(request_handler), request_handler)
    if not raw:
        return None
    boundary = b"--" + content_type.split("boundary=", 1)[1].split(";")[0].strip().strip('"').encode()
    eol = b"\r\n" if raw.startswith(boundary + b"\r\n") else b"\n"
    parts = raw[len(boundary):].split(eol + boundary)  # [meta part, content part, "--" closing]
    if len(parts) != 3 or not parts[2].startswith(b"--"):
        raise ValueError("a multipart upload that is not one metadata part and one content part")
    heads, bodies = [], []
    for part in parts[:2]:
        head, _, body = part.removeprefix(eol).partition(eol + eol)
        fields = dict(line.split(b":", 1) for line in head.split(eol) if b":" in line)
        heads.append({k.strip().lower(): v.strip().decode() for k, v in fields.items()})
        bodies.append(body)
    if any("content-transfer-encoding" in h for h in heads):
        raise ValueError("a multipart upload part with a transfer encoding: not parsed by this wrapper")
    return {"meta": json.loads(bodies[0]), "content": bodies[1],
            "content-type": heads[1].get("content-type", "application/octet-stream").split(";")[0].strip()}


_server.Router.handle = _handle
_server._read_data = _read_data
Storage.create_file = _create_file

if __name__ == "__main__":
    main(sys.argv[1:])
