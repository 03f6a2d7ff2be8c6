"""Bounds and words the HTTP layer shares, in a leaf that imports nothing of fragbench.

`fragbench.http.wire` (the transport) and `fragbench.experiment.config` need them, and both sit
below `fragbench.transport` (the backend kit, which imports the wire): read from the kit, they would
close an import circle. The kit documents them under their public names
(`fragbench.transport.MAY_BE_BILLED`, `fragbench.transport.MAX_BODY_BYTES`), the same objects.
"""

from __future__ import annotations

MAY_BE_BILLED = "the server may have received and billed it"
"""The words a BackendFailure's message ends with when the request may have reached the server
(`fragbench.transport.MAY_BE_BILLED`)."""

MAX_BODY_BYTES = 4 * 1024 * 1024
"""The default bound on a response body, after decompression: 4 MiB
(`fragbench.transport.MAX_BODY_BYTES`)."""
