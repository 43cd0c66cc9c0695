"""The gate before a timed call on a GPU: the call's launch queued behind it and not timed, and the
key of the call's inputs released by the parent to the device, never earlier to the rank's process.

A timed call's interval used to start on an idle GPU, so it held the host's launch of the call
(Python, dispatch, the driver): for a short call most of the interval, and a share that moved with
the host's pace from process to process (an all_reduce reference at world 1 on an H100, 0.027 ms on
the device, timed at 0.084-0.228 ms in 18 fresh processes: ``benchmarks/reference_call_noise.py``),
which no number of rounds averages out of a single job.

Now, on every rank of a group and in this order on the rank's current stream: the gate kernel
(``kloop_gate``, one thread spinning on the rank's slot of the gate board), the ranks' barrier, the
start event, the inputs' unmasking with the key the gate copied to device memory, the L2 flush, the
call; the rank says ``launched`` once the call has returned, then waits for the device as before.
The parent, once every rank said so (or LAUNCH_WAIT_S passed: a call that waits on the device inside
it), writes each rank's key and then the call's sequence number into the board, and starts its own
clock (the one that checks the claims, sandbox/harness/timing.py) at that moment.

Why this is sound against a solution that wants its work done before the start event: whatever
depends on the inputs needs the key, which exists in the rank's process only once the parent wrote
it, the moment the gate opens; a kernel of the solution's spinning on the board sees it no earlier
than the gate does, and the start event follows the gate (and the barrier) directly. Work that does
not depend on the inputs could run beside the gate; the inputs' unmasking, the flush and the call
itself all come after the start. A rank that opens its own gate (the board is writable from its
process) has no key for it: its inputs stay masked and its outputs wrong.

Board layout: SLOT_BYTES a rank, ``<Q`` sequence number then ``<8I`` key words. The parent's side is
:class:`Board`, the rank's :class:`RankGate`. Imported by rank processes and by the parent.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import struct

SLOT_BYTES = 64
GATE_LIMIT_NS = 60 * 10**9  # a gate gives up after this (a parent that died); its key is then stale: the outputs wrong
_F_SEAL_SEAL, _F_SEAL_SHRINK, _F_SEAL_GROW = 0x0001, 0x0002, 0x0004
_CU_MEMHOSTREGISTER_DEVICEMAP = 0x02


def board_bytes(world: int) -> int:
    return -(-max(world, 1) * SLOT_BYTES // mmap.PAGESIZE) * mmap.PAGESIZE


class Board:
    """The parent's side: a memfd of one slot per rank, which it alone opens gates on. Sealed
    against shrinking (a rank that shrank it would have the parent's next write fault)."""

    def __init__(self, world: int):
        self.world = world
        self.fd = os.memfd_create("kloop-gate", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, board_bytes(world))
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, _F_SEAL_SHRINK | _F_SEAL_GROW | _F_SEAL_SEAL)
        self._map = mmap.mmap(self.fd, board_bytes(world))
        self.sequence = 0

    def next(self) -> int:
        self.sequence += 1
        return self.sequence

    def release(self, sequence: int, keys: list[list[int]]) -> None:
        """Open every rank's gate for call ``sequence``: the keys' words first, then the numbers."""
        for rank, words in enumerate(keys):
            struct.pack_into("<8I", self._map, rank * SLOT_BYTES + 8, *words)
        for rank in range(len(keys)):
            struct.pack_into("<Q", self._map, rank * SLOT_BYTES, sequence)

    def close(self) -> None:
        self._map.close()
        os.close(self.fd)


class RankGate:
    """A rank's side: its slot of the board mapped and registered with the driver for the device,
    and a device buffer the gate copies the key to."""

    def __init__(self, fd: int, rank: int, world: int, torch, device):
        from kloop_runtime.driver import check, libcuda

        if not 0 <= rank < world:
            raise ValueError("no slot for this rank")
        size = board_bytes(world)
        if os.fstat(fd).st_size != size:
            raise ValueError("the gate board is not of its group's size")
        self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        host = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        torch.cuda.current_stream(device).synchronize()  # the primary context current on this thread
        cuda = libcuda()
        check(cuda.cuMemHostRegister_v2(ctypes.c_void_p(host), ctypes.c_size_t(size), ctypes.c_uint(_CU_MEMHOSTREGISTER_DEVICEMAP)),
              "registering the gate board")
        pointer = ctypes.c_uint64()
        check(cuda.cuMemHostGetDevicePointer_v2(ctypes.byref(pointer), ctypes.c_void_p(host), ctypes.c_uint(0)),
              "mapping the gate board for the device")
        self.slot = pointer.value + rank * SLOT_BYTES
        self.key = torch.zeros(8, dtype=torch.int32, device=device)

    def wait(self, sequence: int) -> None:
        """Queue the gate for call ``sequence`` on the current stream."""
        from sandbox.rank import device_kernels

        device_kernels.launch("kloop_gate", 1, [self.slot, sequence, self.key, GATE_LIMIT_NS], self.key.device)
