"""The wire between the harness parent and a rank process: plain data, nothing else.

A *message* is one datagram on an AF_UNIX SOCK_SEQPACKET socket: a JSON object (headers larger
than ``MAX_INLINE_BYTES`` travel in a sealed memfd) plus file descriptors. Tensor bytes never
travel inline: a *blob* is a sealed memfd holding a JSON header (a tree of plain values with
tensor references) followed by the raw bytes of its tensors. Nothing is ever unpickled, and a
blob's tensors are exactly (dtype from ``ALLOWED_DTYPES``, shape, byte length = numel x
itemsize), checked against the file before a byte of it is read. Whoever reads a blob copies
what it keeps: the writer cannot change it afterwards anyway (sealed), and a reader never trusts
more than the bytes. A *device blob* keeps its tensors' bytes in CUDA device memory instead: the
sealed header (its size in ``device_bytes``) is followed, among the message's descriptors, by one
naming an allocation (sandbox/rank/device_share.py), which the reader maps, copies out of and
unmaps; one smaller than the header says is refused by the driver before a byte is read.

This module is imported by rank processes, so it imports only the standard library and torch
(lazily, where tensors are made).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import math
import mmap
import os
import socket
import stat
import struct
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from sandbox.readiness import wait_readable

MAX_INLINE_BYTES = 60_000
CUDA_HOST_REGISTER_READ_ONLY = 0x08  # cudaHostRegisterReadOnly: the device only reads the locked pages
MAX_HEADER_BYTES = 8 * 2**20
MAX_FDS = 64
MAX_TENSORS = 4096
MAX_DIMS = 16
MAX_TREE_DEPTH = 32
MAX_GROUP_RANKS = 1024
MAGIC = b"KLOOPBL1"
BOUNCE_BYTES = 16 * 2**20  # a CUDA tensor goes to a blob through a page-locked buffer of this size, piece by piece
ALIGN = 64
SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
SIZE_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL  # a shared copy: writable, never resized
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "complex64": 8, "complex128": 16, "int64": 8, "int32": 4,
            "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1,
            "float8_e5m2fnuz": 1}
ALLOWED_DTYPES = tuple(ITEMSIZE)


class WireError(Exception):
    """A message or blob that breaks the format (from a rank: a protocol violation)."""


class ChannelClosed(WireError):
    """The other end closed the channel (the process ended)."""


# ---------------------------------------------------------------------------- messages
class Channel:
    """One end of a SEQPACKET socketpair. ``send(message, fds)``; ``recv() -> (message, fds)``;
    the receiver owns (and must close) the fds it gets."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    @classmethod
    def pair(cls) -> tuple[Channel, Channel]:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        return cls(a), cls(b)

    @classmethod
    def from_fd(cls, fd: int) -> Channel:
        return cls(socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=fd))

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: dict[str, Any], fds: Iterable[int] = ()) -> None:
        data = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
        fds = list(fds)
        owned = []
        if len(data) > MAX_INLINE_BYTES:
            blob = sealed_memfd("message", [data])
            owned.append(blob)
            data = json.dumps({"$header_blob": len(fds)}).encode()
            fds = fds + [blob]
        if len(fds) > MAX_FDS:
            raise WireError(f"{len(fds)} file descriptors in one message (at most {MAX_FDS})")
        try:
            socket.send_fds(self.sock, [data], fds)
        except (BrokenPipeError, ConnectionResetError) as error:
            raise ChannelClosed(str(error)) from None
        finally:
            for fd in owned:
                os.close(fd)

    def poll(self, timeout_s: float | None) -> bool:
        return bool(wait_readable([self.sock], timeout_s))

    def recv(self, timeout_s: float | None = None) -> tuple[dict[str, Any], list[int]]:
        if timeout_s is not None and not self.poll(timeout_s):
            raise TimeoutError(f"no message within {timeout_s:.1f} s")
        try:
            data, fds, flags, _ = socket.recv_fds(self.sock, MAX_INLINE_BYTES + 1024, MAX_FDS)
        except ConnectionResetError as error:
            raise ChannelClosed(str(error)) from None
        if not data and not fds:
            raise ChannelClosed("the other end closed the channel")
        try:
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                raise WireError("a message was larger than the wire allows")
            message = _json_object(data)
            if "$header_blob" in message:
                index = message["$header_blob"]
                if not isinstance(index, int) or index != len(fds) - 1:
                    raise WireError("malformed header-blob message")
                raw = read_sealed(fds[-1], MAX_HEADER_BYTES)
                os.close(fds.pop())
                message = _json_object(raw)
        except BaseException:
            for fd in fds:
                close_received(fd)
            raise
        return message, fds

    def close(self) -> None:
        self.sock.close()


def _json_object(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data, parse_constant=_no_constants)
    except (ValueError, RecursionError) as error:
        raise WireError(f"not a JSON message: {str(error)[:120]}") from None
    if not isinstance(value, dict):
        raise WireError("a message must be a JSON object")
    return value


def close_received(fd: int) -> None:
    """Close a descriptor the other end sent, without waiting on it: the last close() of a TCP
    socket set to linger with unsent data waits for the peer to take the data, for as long as
    the sender asked (tests/fixtures/hostile/lingering_socket_in_reply.py held the parent there,
    where no timeout is looked at). A socket is reset instead (SO_LINGER on, time 0)."""
    try:
        if stat.S_ISSOCK(os.fstat(fd).st_mode):
            sock = socket.socket(fileno=fd)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            finally:
                sock.close()
            return
    except OSError:
        pass  # not a socket this process can set options on: closed as it is
    try:
        os.close(fd)
    except OSError:
        pass


def _no_constants(name: str):
    raise ValueError(f"{name} is not allowed on the wire")


# ---------------------------------------------------------------------------- memfds
def sealed_memfd(name: str, chunks: Iterable[bytes | memoryview]) -> int:
    """A memfd holding ``chunks`` one after the other, sealed against any write or resize."""
    fd = os.memfd_create(f"kloop-{name}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        for chunk in chunks:
            view = memoryview(chunk).cast("B")
            while view:
                view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_sealed(fd: int, max_bytes: int, seals: int = SEALS) -> int:
    """The size of the sealed memfd ``fd``; WireError when it is not one (``seals`` all set), or too large."""
    try:
        found = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        size = os.fstat(fd).st_size
    except OSError as error:
        raise WireError(f"not a sealed memory file: {error}") from None
    if found & seals != seals:
        raise WireError("a memory file that is not sealed against writes" if seals & fcntl.F_SEAL_WRITE else
                        "a memory file that can be resized")
    if size > max_bytes:
        raise WireError(f"a memory file of {size} bytes (at most {max_bytes} expected)")
    return size


def shared_copy(fd: int, max_bytes: int) -> int:
    """A writable copy of the sealed blob ``fd`` that can never be resized: what a rank's inputs
    are views of when the holder of this copy must see afterwards what the rank did to them (a
    reader of it can never fault on a file shrunk under its mapping)."""
    size = check_sealed(fd, max_bytes)
    copy = os.memfd_create("kloop-staged", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(copy, size)
        done = 0
        while done < size:
            moved = os.copy_file_range(fd, copy, size - done, done, done)
            if moved <= 0:
                raise WireError("copying a blob ended early")
            done += moved
        fcntl.fcntl(copy, fcntl.F_ADD_SEALS, SIZE_SEALS)
    except BaseException:
        os.close(copy)
        raise
    return copy


def read_sealed(fd: int, max_bytes: int) -> bytes:
    size = check_sealed(fd, max_bytes)
    return os.pread(fd, size, 0) if size else b""


# ---------------------------------------------------------------------------- blobs
def write_blob(tree: Any, tensors: list, name: str = "blob") -> int:
    """A sealed memfd holding ``tree`` (plain JSON with {"T": i} tensor references) and the bytes
    of ``tensors`` (torch tensors, any device), written into it with pwrite: from a CPU tensor's
    own memory, from a CUDA tensor through a page-locked bounce buffer. On the H200 host (a VM) a
    fresh memfd's pages cost 1.4 GiB/s faulted into a MAP_POPULATE'd mapping, 1.9 GiB/s written
    with pwrite (benchmarks/blob_memory.py); with the mapping page-locked for the copy from the
    device on top, the reference's blobs took 7-8 s of an evaluation at 64 MB (py-spy over
    benchmarks/eval_latency.py), 3.4-3.9 s written this way."""
    layout = _BlobLayout(tree, tensors)
    fd = os.memfd_create(f"kloop-{name}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, layout.size)
        layout.write(fd)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_device_blob(tree: Any, tensors: list, device: int, copies: int = 1) -> tuple[int, ...]:
    """``tensors`` (on CUDA ``device``) as a *device blob*: a sealed memfd holding ``tree`` and the
    tensors' descriptions (its header says ``device_bytes``), and their bytes in device memory,
    ``copies`` times over, each a descriptor of its own allocation (sandbox/rank/device_share.py;
    a call's inputs: one to lend to a process that may write it, one to keep for trusted
    readers). Returns (header, allocation...); read back with :func:`read_blob`. Staging 64 MiB
    this way took 2.9 ms on the H200 against 46 ms through a memfd blob
    (tests/fixtures/gpu_probes/device_share.py)."""
    import torch

    from sandbox.rank import device_share

    layout = _BlobLayout(tree, tensors, on_device=True)
    chunks = [(spec["offset"], flat.view(torch.uint8)) for flat, spec in zip(layout.flats, layout.specs) if spec["nbytes"]]
    header = sealed_memfd("inputs", [layout.prefix])
    fds = [header]
    try:
        for _ in range(copies):
            fds.append(device_share.export(torch, chunks, layout.device_bytes, device))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return tuple(fds)


def read_blob(fds: list[int], max_bytes: int, device=None, pooled: bool = False) -> tuple[Any, list]:
    """The tree and tensors (new ones, on ``device``, else the CPU) of the blob at the head of
    ``fds``: its descriptor, and a device blob's allocation after it, are taken off the list
    and closed."""
    if not fds:
        raise WireError("a blob was expected and none came")
    fd = fds.pop(0)
    try:
        with Blob(fd, max_bytes, pooled=pooled) as blob:
            if blob.device_bytes is None:
                return blob.tree, blob.tensors(device)
            if not fds:
                raise WireError("a device blob without its device memory")
            memory = fds.pop(0)
            try:
                return blob.tree, blob.tensors(device, memory)
            finally:
                os.close(memory)
    finally:
        os.close(fd)


class BlobPool:
    """Blobs written again and again into the same memfds: for a trusted writer whose reader reads
    each blob once, before it asks for the next ones (the reference's expected outputs, which the
    parent copies out as soon as they are made and which no other process ever holds). Pages a
    memfd already has take a blob's bytes 2.5x as fast as fresh ones on the H200 host (4.7 against
    1.9 GiB/s, benchmarks/blob_memory.py). Its blobs are sealed against resizing, never against
    writes (:func:`check_sealed` with SIZE_SEALS): never hand one to a process that could keep a
    mapping and read what is written next. At most ``max_bytes`` of memfds are kept between uses."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.free: dict[int, list[int]] = {}
        self.lent: list[int] = []

    def write(self, tree: Any, tensors: list, name: str = "blob") -> int:
        """A blob holding ``tree`` and ``tensors``: a new descriptor of a memfd kept here."""
        layout = _BlobLayout(tree, tensors)
        kept = self.free.get(layout.size)
        fd = kept.pop() if kept else self._memfd(layout.size, name)
        self.lent.append(fd)
        layout.write(fd)
        return os.dup(fd)

    def returned(self) -> None:
        """Every blob written so far has been read: their memfds may be written again."""
        lent, self.lent = self.lent, []
        held = sum(size * len(fds) for size, fds in self.free.items())
        for fd in lent:
            size = os.fstat(fd).st_size
            if held + size > self.max_bytes:
                os.close(fd)
                continue
            held += size
            self.free.setdefault(size, []).append(fd)

    def close(self) -> None:
        for fd in [*self.lent, *(fd for fds in self.free.values() for fd in fds)]:
            os.close(fd)
        self.lent, self.free = [], {}

    @staticmethod
    def _memfd(size: int, name: str) -> int:
        fd = os.memfd_create(f"kloop-{name}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SIZE_SEALS)
        except BaseException:
            os.close(fd)
            raise
        return fd


class _BlobLayout:
    """A blob's header and where each tensor's bytes go, before any is written."""

    def __init__(self, tree: Any, tensors: list, on_device: bool = False):
        specs, flats, offset = [], [], 0
        for tensor in tensors:
            flat = tensor.detach().contiguous().reshape(-1)
            nbytes = flat.numel() * flat.element_size()
            specs.append({"dtype": dtype_name(flat.dtype), "shape": list(tensor.shape), "offset": offset, "nbytes": nbytes,
                          "requires_grad": bool(tensor.requires_grad)})
            flats.append(flat)
            offset += nbytes + (-nbytes % ALIGN)
        described = {"tree": tree, "tensors": specs, **({"device_bytes": offset} if on_device else {})}
        header = json.dumps(described, separators=(",", ":"), allow_nan=False).encode()
        prefix = MAGIC + struct.pack("<Q", len(header)) + header
        self.prefix = prefix + bytes(-len(prefix) % ALIGN)
        self.specs, self.flats = specs, flats
        self.device_bytes = offset
        self.size = len(self.prefix) + offset

    def write(self, fd: int) -> None:
        """The header and every tensor's bytes into ``fd`` (``size`` bytes long)."""
        import torch

        _pwrite_all(fd, self.prefix, 0)
        bounce = None
        for flat, spec in zip(self.flats, self.specs):
            if not spec["nbytes"]:
                continue
            raw, where = flat.view(torch.uint8), len(self.prefix) + spec["offset"]
            if raw.device.type == "cpu":
                _pwrite_all(fd, _host_bytes(raw), where)
                continue
            if bounce is None:
                bounce = torch.empty(min(BOUNCE_BYTES, max(s["nbytes"] for s in self.specs)), dtype=torch.uint8, pin_memory=True)
            for start in range(0, spec["nbytes"], bounce.numel()):
                piece = raw[start:start + bounce.numel()]
                staged = bounce[:piece.numel()]
                staged.copy_(piece)  # synchronous: the bytes are there when it returns
                _pwrite_all(fd, _host_bytes(staged), where + start)


def _host_bytes(tensor) -> memoryview:
    """The bytes of a contiguous uint8 CPU tensor, without a copy (the tensor must outlive them)."""
    return memoryview((ctypes.c_char * tensor.numel()).from_address(tensor.data_ptr())).cast("B")


def _pwrite_all(fd: int, data, offset: int) -> None:
    view, done = memoryview(data).cast("B"), 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


class Blob:
    """A blob opened for reading: ``header`` (validated) and its bytes, mapped read-only; or, with
    ``shared``, a :func:`shared_copy` mapped writable, whose tensors are views of the file itself
    (CPU only; whatever is written to them, the holder of the file sees); with ``pooled``, a
    :class:`BlobPool` blob (its writer is trusted and writes it again only after it is read). A
    device blob's header says ``device_bytes``: its tensors are read from the device memory that
    came with it (:meth:`tensors` with ``device_fd``)."""

    def __init__(self, fd: int, max_bytes: int, shared: bool = False, pooled: bool = False):
        size = check_sealed(fd, max_bytes, SIZE_SEALS if shared or pooled else SEALS)
        if size < len(MAGIC) + 8:
            raise WireError("a blob too short to hold a header")
        self.size = size
        self.shared = shared
        # populated now, in one call: a call must not pay the page faults that a copy made in staging would have paid, and
        # a copy to the device must not pay one a page (benchmarks/staging.py)
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        self.map = mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ | (mmap.PROT_WRITE if shared else 0))
        try:
            if self.map[:len(MAGIC)] != MAGIC:
                raise WireError("not a blob (bad magic)")
            (length,) = struct.unpack("<Q", self.map[len(MAGIC):len(MAGIC) + 8])
            start = len(MAGIC) + 8
            if length > min(MAX_HEADER_BYTES, size - start):
                raise WireError("a blob header longer than the blob")
            header = _json_object(self.map[start:start + length])
            self.data_start = start + length + (-(start + length) % ALIGN)
            device_bytes = header.get("device_bytes")
            if device_bytes is not None and (not _natural(device_bytes) or device_bytes > max_bytes or shared):
                raise WireError("a device blob with a bad size, or one staged as shared host memory")
            self.device_bytes: int | None = device_bytes
            self.specs = _checked_specs(header.get("tensors"), size - self.data_start if device_bytes is None else device_bytes)
            self.tree = header.get("tree")
            check_tree(self.tree, len(self.specs))
        except BaseException:
            self.map.close()
            raise

    def tensor(self, index: int, device=None):
        """Tensor ``index`` as a new tensor (its own memory; on ``device`` when given), or in a
        shared blob a view of the file's bytes."""
        import torch

        spec = self.specs[index]
        dtype = getattr(torch, spec["dtype"])
        if self.shared:
            if device is not None and torch.device(device).type != "cpu":
                raise WireError("a shared blob's tensors live on the CPU")
            raw = torch.frombuffer(self.map, dtype=torch.uint8, count=spec["nbytes"], offset=self.data_start + spec["offset"]) \
                if spec["nbytes"] else torch.empty(0, dtype=torch.uint8)
            out = raw.view(dtype).reshape(spec["shape"])
        elif spec["nbytes"] == 0:
            out = torch.empty(spec["shape"], dtype=dtype, device=device)
        else:
            with warnings.catch_warnings():  # read-only memory: copied below before anything could write it
                warnings.simplefilter("ignore", UserWarning)
                raw = torch.frombuffer(self.map, dtype=torch.uint8, count=spec["nbytes"], offset=self.data_start + spec["offset"])
            view = raw.view(dtype).reshape(spec["shape"])
            out = view.to(device, copy=True) if device is not None else view.clone()
        if spec["requires_grad"] and out.is_floating_point():
            out.requires_grad_(True)
        return out

    def tensors(self, device=None, device_fd: int | None = None) -> list:
        """Every tensor (see :meth:`tensor`); a device blob's from ``device_fd``, the device memory
        that came with it, copied to ``device`` (a CUDA device), which must be where it lives."""
        if self.device_bytes is not None:
            return self._from_device(device, device_fd)
        with self._page_locked(device):
            return [self.tensor(i, device) for i in range(len(self.specs))]

    def _from_device(self, device, device_fd: int | None) -> list:
        import torch

        from sandbox.rank import device_share

        if device_fd is None or device is None or torch.device(device).type != "cuda":
            raise WireError("a device blob read without its device memory, or onto the CPU")
        device = torch.device(device)
        index = torch.cuda.current_device() if device.index is None else device.index
        try:
            with device_share.imported(torch, device_fd, self.device_bytes, index) as raw:
                out = []
                for spec in self.specs:
                    view = raw[spec["offset"]:spec["offset"] + spec["nbytes"]].view(getattr(torch, spec["dtype"]))
                    tensor = view.reshape(spec["shape"]).clone()
                    if spec["requires_grad"] and tensor.is_floating_point():
                        tensor.requires_grad_(True)
                    out.append(tensor)
                return out
        except device_share.DeviceShareError as error:
            raise WireError(f"device memory that could not be read: {error}") from None

    @contextlib.contextmanager
    def _page_locked(self, device) -> Iterator[None]:
        """The mapping page-locked while its tensors are copied to a CUDA ``device``: on the H200
        a 128 MiB blob staged in 15-16 ms against 24-32 ms from pageable memory, with less spread
        (benchmarks/staging.py), and the clock check compares the two groups' staging times.
        Where the driver refuses, the copy goes on from pageable memory."""
        import torch

        if self.shared or device is None or torch.device(device).type != "cuda" or self.size <= self.data_start:
            yield
            return
        cudart = torch.cuda.cudart()
        with warnings.catch_warnings():  # read-only memory: only copied from
            warnings.simplefilter("ignore", UserWarning)
            pointer = torch.frombuffer(self.map, dtype=torch.uint8, count=1).data_ptr()
        locked = int(cudart.cudaHostRegister(pointer, self.size, CUDA_HOST_REGISTER_READ_ONLY)) == 0
        if not locked:
            _clear_cuda_error()
        try:
            yield
        finally:
            if locked:
                torch.cuda.synchronize(device)
                cudart.cudaHostUnregister(pointer)

    def close(self) -> None:
        if not self.shared:  # a shared blob's map lives as long as the tensors that view it
            self.map.close()

    def __enter__(self) -> Blob:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _clear_cuda_error() -> None:
    """Reset the CUDA runtime's last error after a call that failed without harm (torch checks it
    after its next kernel launch): through the libcudart this process already loaded."""
    with open("/proc/self/maps", errors="surrogateescape") as maps:
        paths = {line.split()[-1] for line in maps if "libcudart.so" in line}
    for path in paths:
        ctypes.CDLL(path).cudaGetLastError()


def dtype_name(dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in ALLOWED_DTYPES:
        raise WireError(f"tensors of dtype {name} cannot cross the wire")
    return name


def itemsize(name: str) -> int:
    return ITEMSIZE[name]


def _checked_specs(specs: Any, data_bytes: int) -> list[dict[str, Any]]:
    if not isinstance(specs, list) or len(specs) > MAX_TENSORS:
        raise WireError("a blob's tensor list is missing or too long")
    checked = []
    for spec in specs:
        if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "offset", "nbytes", "requires_grad"}:
            raise WireError("a malformed tensor description")
        dtype, shape, offset, nbytes = spec["dtype"], spec["shape"], spec["offset"], spec["nbytes"]
        if dtype not in ALLOWED_DTYPES:
            raise WireError(f"dtype {str(dtype)[:40]!r} is not allowed")
        if not (isinstance(shape, list) and len(shape) <= MAX_DIMS and all(_natural(d) for d in shape)):
            raise WireError("a malformed tensor shape")
        if not (_natural(offset) and _natural(nbytes)) or not isinstance(spec["requires_grad"], bool):
            raise WireError("a malformed tensor extent")
        if math.prod(shape) * itemsize(dtype) != nbytes:
            raise WireError(f"a tensor of shape {shape} and dtype {dtype} cannot hold {nbytes} bytes")
        if math.prod(max(d, 1) for d in shape) * itemsize(dtype) >= 2**62:  # an empty tensor's strides are these products
            raise WireError(f"a tensor of shape {shape[:MAX_DIMS]} and dtype {dtype} is too large to describe, even empty")
        if offset % ALIGN or offset + nbytes > data_bytes:
            raise WireError("a tensor outside its blob")
        checked.append(spec)
    return checked


def _natural(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**62


# ---------------------------------------------------------------------------- trees
def check_tree(tree: Any, tensor_count: int, depth: int = 0) -> None:
    """Raise WireError unless ``tree`` is a well-formed value tree (see encode_tree)."""
    if depth > MAX_TREE_DEPTH:
        raise WireError("a value tree nested too deeply")
    if tree is None or isinstance(tree, (bool, int, str)):
        return
    if isinstance(tree, float):
        return
    if isinstance(tree, list):
        for item in tree:
            check_tree(item, tensor_count, depth + 1)
        return
    if not isinstance(tree, dict) or len(tree) != 1:
        raise WireError("a malformed value in a tree")
    (kind, value), = tree.items()
    if kind == "T":
        if not (_natural(value) and value < tensor_count):
            raise WireError("a tensor reference outside the blob")
    elif kind == "F":
        if value not in ("nan", "inf", "-inf"):
            raise WireError("a malformed float")
    elif kind in ("tuple", "size"):
        if not isinstance(value, list):
            raise WireError(f"a malformed {kind}")
        for item in value:
            check_tree(item, tensor_count, depth + 1)
    elif kind == "dict":
        if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], (str, int)) for p in value):
            raise WireError("a malformed dict")
        for _, item in value:
            check_tree(item, tensor_count, depth + 1)
    elif kind in ("dtype", "device"):
        if not isinstance(value, str) or len(value) > 64:
            raise WireError(f"a malformed {kind}")
    elif kind == "group":
        if value != "world" and not (isinstance(value, list) and 0 < len(value) <= MAX_GROUP_RANKS and all(_natural(r) for r in value)):
            raise WireError("a malformed process group")
    elif kind == "coo":
        if not (isinstance(value, list) and len(value) == 3 and isinstance(value[2], list) and len(value[2]) <= MAX_DIMS
                and all(_natural(d) for d in value[2])):
            raise WireError("a malformed sparse tensor")
        for item in value[:2]:
            if not (isinstance(item, dict) and set(item) == {"T"}):
                raise WireError("a malformed sparse tensor")
            check_tree(item, tensor_count, depth + 1)
    elif kind == "module":
        _check_module(value, tensor_count, depth)
    else:
        raise WireError(f"unknown value kind {kind[:20]!r}")


def _check_module(value: Any, tensor_count: int, depth: int) -> None:
    if not (isinstance(value, dict) and set(value) == {"class", "attrs", "params", "buffers", "children"}):
        raise WireError("a malformed module")
    if not (isinstance(value["class"], str) and value["class"].startswith("torch.nn.") and len(value["class"]) < 100):
        raise WireError("only torch.nn modules can cross the wire")
    for part in ("attrs", "params", "buffers", "children"):
        if not isinstance(value[part], dict):
            raise WireError("a malformed module")
        for item in value[part].values():
            check_tree(item, tensor_count, depth + 1)


def encode_tree(obj: Any, tensors: list) -> Any:
    """``obj`` as a JSON-able tree, appending its tensors to ``tensors``. Values: tensors, None,
    bool, int, float, str, lists, tuples, dicts, torch.Size, dtypes, devices, the world process
    group, and torch.nn modules (their plain attributes, parameters, buffers and children)."""
    import torch

    if isinstance(obj, torch.Tensor):
        if obj.layout == torch.sparse_coo:  # as its indices and values (coalesced), rebuilt on the other side
            obj = obj.coalesce()
            tensors.extend([obj.indices(), obj.values()])
            return {"coo": [{"T": len(tensors) - 2}, {"T": len(tensors) - 1}, list(obj.shape)]}
        if obj.layout != torch.strided:
            raise WireError(f"tensors of layout {obj.layout} cannot cross the wire")
        tensors.append(obj)
        return {"T": len(tensors) - 1}
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else {"F": "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")}
    if isinstance(obj, torch.Size):
        return {"size": list(obj)}
    if isinstance(obj, torch.dtype):
        return {"dtype": str(obj).removeprefix("torch.")}
    if isinstance(obj, torch.device):
        return {"device": str(obj)}
    if isinstance(obj, list):
        return [encode_tree(item, tensors) for item in obj]
    if isinstance(obj, tuple):
        return {"tuple": [encode_tree(item, tensors) for item in obj]}
    if isinstance(obj, dict):
        return {"dict": [[key, encode_tree(value, tensors)] for key, value in obj.items()]}
    if isinstance(obj, torch.nn.Module):
        return {"module": _encode_module(obj, tensors)}
    import torch.distributed as dist

    if dist.is_initialized() and obj is dist.group.WORLD:
        return {"group": "world"}
    if dist.is_initialized() and isinstance(obj, dist.ProcessGroup):  # made by an input generator: rebuilt rank-side
        return {"group": [int(r) for r in dist.get_process_group_ranks(obj)]}
    raise WireError(f"a value of type {type(obj).__name__} cannot cross the wire")


def _encode_module(module, tensors: list) -> dict[str, Any]:
    cls = type(module)
    path = f"{cls.__module__}.{cls.__qualname__}"
    if not path.startswith("torch.nn."):
        raise WireError(f"module {path} is not a torch.nn module")
    attrs = {key: encode_tree(value, tensors) for key, value in vars(module).items()
             if not key.startswith("_") and (value is None or isinstance(value, (bool, int, float, str, tuple)))}
    return {"class": f"torch.nn.{cls.__name__}" if hasattr(_torch_nn(), cls.__name__) else path, "attrs": attrs,
            "params": {name: encode_tree(p.detach().requires_grad_(p.requires_grad), tensors)
                       for name, p in module._parameters.items() if p is not None},
            "buffers": {name: encode_tree(b, tensors) for name, b in module._buffers.items() if b is not None},
            "children": {name: encode_tree(child, tensors) for name, child in module._modules.items() if child is not None}}


def _torch_nn():
    import torch

    return torch.nn


def decode_tree(tree: Any, tensors: list) -> Any:
    """The value ``encode_tree`` encoded (``tree`` must have passed ``check_tree``)."""
    if tree is None or isinstance(tree, (bool, int, str, float)):
        return tree
    if isinstance(tree, list):
        return [decode_tree(item, tensors) for item in tree]
    (kind, value), = tree.items()
    import torch

    if kind == "T":
        return tensors[value]
    if kind == "F":
        return float(value)
    if kind == "tuple":
        return tuple(decode_tree(item, tensors) for item in value)
    if kind == "size":
        return torch.Size(decode_tree(item, tensors) for item in value)
    if kind == "dict":
        return {key: decode_tree(item, tensors) for key, item in value}
    if kind == "dtype":
        dtype = getattr(torch, value, None)
        if not isinstance(dtype, torch.dtype):
            raise WireError(f"unknown dtype {value[:40]!r}")
        return dtype
    if kind == "device":
        return torch.device(value)
    if kind == "group":
        import torch.distributed as dist

        return dist.group.WORLD if value == "world" else subgroup(tuple(value))
    if kind == "coo":
        return torch.sparse_coo_tensor(tensors[value[0]["T"]], tensors[value[1]["T"]], size=value[2], check_invariants=True).coalesce()
    return _decode_module(value, tensors)


_SUBGROUPS: dict[tuple[int, ...], Any] = {}


def subgroup(ranks: tuple[int, ...]):
    """The process group of ``ranks`` in this process, made once (by the ranks in it only) and
    reused: groups an input generator made cross the wire as their rank lists."""
    import torch.distributed as dist

    if not dist.is_initialized():
        raise WireError("a process group crossed the wire to a process without torch.distributed")
    if any(r >= dist.get_world_size() for r in ranks) or len(set(ranks)) != len(ranks):
        raise WireError(f"a process group of ranks {list(ranks)[:16]} in a world of {dist.get_world_size()}")
    if dist.get_rank() not in ranks:
        return dist.GroupMember.NON_GROUP_MEMBER
    if ranks not in _SUBGROUPS:
        _SUBGROUPS[ranks] = dist.new_group(list(ranks), use_local_synchronization=True)
    return _SUBGROUPS[ranks]


def _decode_module(value: dict[str, Any], tensors: list):
    import torch

    cls = torch
    for part in value["class"].split(".")[1:]:
        cls = getattr(cls, part, None)
        if cls is None:
            raise WireError(f"unknown module class {value['class'][:80]!r}")
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise WireError(f"{value['class'][:80]!r} is not a module class")
    module = cls.__new__(cls)
    torch.nn.Module.__init__(module)
    for key, item in value["attrs"].items():
        setattr(module, key, decode_tree(item, tensors))
    for key, item in value["params"].items():
        tensor = decode_tree(item, tensors)
        module.register_parameter(key, torch.nn.Parameter(tensor.detach(), requires_grad=tensor.requires_grad))
    for key, item in value["buffers"].items():
        module.register_buffer(key, decode_tree(item, tensors))
    for key, item in value["children"].items():
        module.add_module(key, decode_tree(item, tensors))
    return module


def tree_tensors(tree: Any, tensors: list) -> list[int]:
    """Indices of the tensors a tree refers to, in order."""
    found: list[int] = []

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            (kind, value), = node.items()
            if kind == "T":
                found.append(value)
            elif kind in ("tuple", "size"):
                walk(value)
            elif kind == "coo":
                walk(value[:2])
            elif kind == "dict":
                for _, item in value:
                    walk(item)
            elif kind == "module":
                for part in ("params", "buffers", "children"):
                    for item in value[part].values():
                        walk(item)

    walk(tree)
    return found
