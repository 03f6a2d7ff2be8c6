"""The transport: one HTTP exchange at a time over the SDK's client, every byte bounded.

In: a request's URL, headers and body from a backend (through `fragbench.transport`, the
backend authors' kit). Out: an `Exchange` (status, headers, the body as received, bounded by
`limits.MAX_BODY_BYTES`), `bounded_json.loads` for parsing a body with no recursion and a depth
bound, and `tls_context`. Below every other stage: it imports only `fragbench.errors`.

- `wire`: the transport (`WireTransport`, `calling`, `Exchange`, `tls_context`);
- `bounded_json`: JSON parsing with bounds (`loads`, `depth`, `BodyError`, `clean`);
- `limits`: the byte bounds the transport and the config share.
"""

from __future__ import annotations

from fragbench.lazy import reexport

__getattr__, __dir__ = reexport(__name__, {
    "Exchange": "wire",
    "WireTransport": "wire",
    "calling": "wire",
    "tls_context": "wire",
    "loads": "bounded_json",
    "BodyError": "bounded_json",
    "MAX_BODY_BYTES": "limits",
})
