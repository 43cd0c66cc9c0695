"""Blobs as a writer could make them, for tests that read them back."""

import json
import struct

from sandbox.rank import wire


def device_header(tree, tensors, device_bytes=None) -> int:
    """A device blob's header (what wire.write_device_blob seals), with ``device_bytes`` forged where given."""
    layout = wire._BlobLayout(tree, tensors, on_device=True)
    if device_bytes is None:
        return wire.sealed_memfd("inputs", [layout.prefix])
    header = json.dumps({"tree": tree, "tensors": layout.specs, "device_bytes": device_bytes}).encode()
    return wire.sealed_memfd("inputs", [wire.MAGIC + struct.pack("<Q", len(header)) + header])
