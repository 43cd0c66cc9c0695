"""A stand-in rank group for the gate protocol's CPU tests (tests/sandbox/harness/test_gate_protocol.py):
started as a group's zygote, one thread a rank, each speaking the harness protocol for ``gate`` and
gated ``call`` messages, with the rank's GPU gate played by a loop that polls its board slot.

``behaviour`` (in the group's config): ``launches`` (a launch of LAUNCH_S, then ``launched``),
``waits_inside`` (waits for its gate before it says ``launched``, as a call that syncs inside does),
``done_early`` (answers ``done`` before any ``launched``). A rank that finds its gate open before it
said ``launched`` answers ``failed``. ``done``'s checksum is the first 32 hex digits of the key words it read."""

from __future__ import annotations

import hashlib
import json
import mmap
import struct
import sys
import threading
import time

from sandbox.rank.gate import SLOT_BYTES, board_bytes
from sandbox.rank.wire import Channel, ChannelClosed

LAUNCH_S = 0.003


def serve(entry: dict, world: int, behaviour: str) -> None:
    channel, slot, board = Channel.from_fd(entry["channel"]), entry["rank"] * SLOT_BYTES, None
    while True:
        try:
            message, fds = channel.recv()
        except ChannelClosed:
            return
        if message["type"] == "gate":
            board = mmap.mmap(fds[0], board_bytes(world), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            channel.send({"type": "gate_ready"})
            continue

        def opened() -> bool:
            return struct.unpack_from("<Q", board, slot)[0] >= message["gate"]

        if behaviour == "launches":
            time.sleep(LAUNCH_S)
            if opened():
                channel.send({"type": "failed", "kind": "call", "message": "the gate opened before the launch was done"})
                continue
            channel.send({"type": "launched"})
        elif behaviour == "done_early":
            channel.send({"type": "done", "round": message["round"], "index": message["index"], "ms": 0.1, "checksum": "0" * 32})
            continue
        while not opened():
            time.sleep(0.0001)
        words = struct.unpack_from("<8I", board, slot + 8)
        if behaviour == "waits_inside":
            channel.send({"type": "launched"})
        checksum = hashlib.sha256(struct.pack("<8I", *words)).hexdigest()[:32]
        channel.send({"type": "done", "round": message["round"], "index": message["index"], "ms": 0.1, "checksum": checksum})


def main() -> None:
    config = json.loads(sys.argv[1])
    threads = [threading.Thread(target=serve, args=(entry, config["world"], config["behaviour"]), daemon=True)
               for entry in config["ranks"]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
