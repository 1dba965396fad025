"""What crosses between the trainer and a reward worker: requests are pickles, replies are data.

The rule: **nothing a worker produces is ever unpickled.** Code running inside a
worker (a completion that a scorer ``eval``s, a hostile reward callable) can write
anything into its reply pipe, so the trainer reads replies as length-prefixed
frames of at most ``MAX_REPLY_BYTES`` bytes of UTF-8 JSON and accepts only the
fixed schema below, field by field; anything else (garbage, an oversized or
half-written frame, a wrong type, an extra key) is a protocol error: the item
fails (scored 0 and counted) and the worker is killed. Requests (the trainer's
own data: completions, answers, metadata) flow only from the trainer to the
worker, so they stay pickles; the worker never writes into that pipe.

Replies (``kind`` first; ``ready``, ``init_error`` and ``done`` come from the zygote on its
control pipe, ``result`` from a call's child on the reply pipe):

* ``{"kind": "ready", "report": {...}}``: the sandbox report, string fields only;
* ``{"kind": "init_error", "error": str}``: the worker could not start (e.g. the
  reward module failed to import inside the sandbox);
* ``{"kind": "done", "code": int, "consumed": bool}``: a call's process ended
  (its exit code; whether it had read its whole request and its directory was emptied);
* ``{"kind": "result", "i": int, "ok": bool, "value": scalar, "error": str,
  "cpu_s": float}``: one call's outcome; ``value`` is a plain
  scalar (``None``, bool, int, float, or a string of at most ``MAX_TEXT`` characters).

Frames: a 4-byte big-endian unsigned length, then the payload.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import traceback
from dataclasses import dataclass
from typing import Any, Optional

MAX_REPLY_BYTES = 16384
"""Largest reply frame the trainer accepts; a longer one is a protocol error."""
MAX_TEXT = 1000
"""Longest string (error message, string value) a reply may carry."""
_HEADER = struct.Struct("!I")
_REPORT_KEYS = {"workdir": str, "limits": str, "filesystem": str, "network": str, "processes": str, "reads": str,
                "signals": str, "workdir_size": str}


class ProtocolError(ValueError):
    """A worker sent something that is not a well-formed reply."""


@dataclass(frozen=True)
class Result:
    """One call's outcome, as decoded from a worker's reply."""

    i: int
    ok: bool
    value: Any
    error: str
    cpu_s: float


# --------------------------------------------------------------------------- frames


def frame(payload: bytes) -> bytes:
    """``payload`` with its length header."""
    return _HEADER.pack(len(payload)) + payload


class FrameReader:
    """Collects bytes read from a pipe and returns the complete frames (never more than ``limit`` bytes each)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        frames = []
        while len(self._buf) >= _HEADER.size:
            (n,) = _HEADER.unpack_from(self._buf)
            if n > self.limit:
                raise ProtocolError(f"a reply of {n} bytes (at most {self.limit} are accepted)")
            if len(self._buf) < _HEADER.size + n:
                break
            frames.append(bytes(self._buf[_HEADER.size:_HEADER.size + n]))
            del self._buf[:_HEADER.size + n]
        return frames

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held back."""
        return len(self._buf)


def read_frame(fd: int) -> Optional[bytes]:
    """Blocking read of one whole frame from ``fd`` (the worker's request pipe); ``None`` at EOF."""
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    body = _read_exactly(fd, _HEADER.unpack(header)[0])
    return body


def _read_exactly(fd: int, n: int) -> Optional[bytes]:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def write_some(fd: int, data: bytes) -> bytes:
    """Write what a non-blocking pipe takes now; returns the rest (``OSError`` when the reader is gone)."""
    try:
        return data[os.write(fd, data):]
    except BlockingIOError:
        return data


def write_all(fd: int, data: bytes) -> None:
    """Blocking write of all of ``data``."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# --------------------------------------------------------------------------- worker side: encode


def plain_value(value: Any) -> Any:
    """``value`` as a JSON scalar, or ``TypeError``: the worker sends numbers and short strings only.

    Exact types only (a ``str`` or ``float`` subclass could carry methods); other
    numbers (numpy scalars, 0-d tensors) are converted with ``float()`` here, in
    the worker, where their code may run.
    """
    if value is None or type(value) in (bool, float):
        return value
    if type(value) is int:
        return value if abs(value) < 2**63 else float(value)
    if type(value) is str:
        if len(value) > MAX_TEXT:
            raise TypeError(f"a string of {len(value)} characters (at most {MAX_TEXT} can be sent back)")
        return value
    if hasattr(type(value), "__float__") and not isinstance(value, (str, bytes)):
        return float(value)
    raise TypeError(f"a {type(value).__name__} (a reward returns a number; only numbers and short strings are sent back)")


def encode(kind: str, **fields: Any) -> bytes:
    """A reply frame; strings are cut to ``MAX_TEXT`` so a reply always fits."""
    for k, v in fields.items():
        if isinstance(v, str):
            fields[k] = v[:MAX_TEXT]
    payload = json.dumps({"kind": kind, **fields}, allow_nan=True).encode()
    if len(payload) > MAX_REPLY_BYTES:
        raise ValueError(f"reply of {len(payload)} bytes")
    return frame(payload)


# --------------------------------------------------------------------------- trainer side: decode


def decode(payload: bytes) -> tuple[str, Any]:
    """``(kind, body)`` of a reply frame: a ``Result``, a report dict, or an error string.

    Raises ``ProtocolError`` for anything outside the schema.
    """
    try:
        msg = json.loads(payload.decode("utf-8"), parse_constant=_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ProtocolError(f"not a JSON reply ({type(e).__name__})") from None
    if not isinstance(msg, dict):
        raise ProtocolError("a reply is not an object")
    kind = msg.get("kind")
    if kind == "result":
        _keys(msg, {"kind", "i", "ok", "value", "error", "cpu_s"})
        i, ok, value, error = msg["i"], msg["ok"], msg["value"], msg["error"]
        if type(i) is not int or type(ok) is not bool:
            raise ProtocolError("a result with a wrong field type")
        if not (value is None or type(value) in (bool, int, float) or (type(value) is str and len(value) <= MAX_TEXT)):
            raise ProtocolError("a result value that is not a number or a short string")
        cpu = msg["cpu_s"]
        if type(cpu) not in (int, float) or not math.isfinite(cpu):
            raise ProtocolError("a result with a wrong cpu_s")
        return kind, Result(i, ok, value, clean_text(_text(error)), float(cpu))
    if kind == "ready":
        _keys(msg, {"kind", "report"})
        report = msg["report"]
        if report is None:
            return kind, None
        if not isinstance(report, dict):
            raise ProtocolError("a sandbox report that is not an object")
        _keys(report, set(_REPORT_KEYS) | {"missing"})
        out: dict[str, Any] = {k: clean_text(_text(report[k])) for k in _REPORT_KEYS}
        missing = report["missing"]
        if not isinstance(missing, list) or len(missing) > 20:
            raise ProtocolError("a sandbox report with a wrong 'missing' list")
        out["missing"] = [clean_text(_text(m)) for m in missing]
        return kind, out
    if kind == "done":
        _keys(msg, {"kind", "code", "consumed"})
        if type(msg["code"]) is not int or type(msg["consumed"]) is not bool:
            raise ProtocolError("a 'done' with a wrong field type")
        return kind, (msg["code"], msg["consumed"])
    if kind == "init_error":
        _keys(msg, {"kind", "error"})
        return kind, clean_text(_text(msg["error"]))
    raise ProtocolError(f"a reply of unknown kind {clean_text(str(kind))[:40]!r}")


def _constant(name: str) -> float:
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[name]


def _keys(msg: dict, expected: set[str]) -> None:
    if set(msg) != expected:
        raise ProtocolError("a reply with unexpected or missing fields")


def _text(value: Any) -> str:
    if type(value) is not str or len(value) > MAX_TEXT:
        raise ProtocolError("a reply field that is not a short string")
    return value


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def clean_text(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` safe to print: control characters (terminal escapes, carriage returns, bidi
    overrides) shown as ``\\xNN``/``\\uNNNN``, newlines as ``\\n``, cut to ``limit`` characters."""
    text = _CONTROL.sub(lambda m: repr(m.group())[1:-1], text.replace("\n", "\\n"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_summary(exc: BaseException) -> str:
    """``Type: message`` plus the innermost frame, short enough for a log line."""
    summary = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        f = frames[-1]
        summary += f" (at {os.path.basename(f.filename)}:{f.lineno} in {f.name})"
    return summary
