"""Files on the server's host: datasets read where they live, checkpoints
written where the GPU is (FORMAT.md §7.5).

The server exposes folders explicitly (`rgpu-server --data [NAME=]DIR`
read-only, `--data-rw [NAME=]DIR` read-write, or RGPU_REMOTE_DATA); a path
here is "NAME/relative/path", NAME an exposed folder's name, and "" in
listdir() lists the folders themselves. Every rule about paths (no "..", no
absolute path, no symlink out, writes only beneath --data-rw) is the
server's; its refusals come back as exceptions that are both the builtin
OSError kind (FileNotFoundError, PermissionError, IsADirectoryError,
NotADirectoryError) and rgpu.RemoteError, with the server's message.

  listdir(path), scandir(path), stat(path, hash=False)   discovery (one wait each)
  from_file(path, dtype, shape, offset)   an rgpu tensor whose bytes the server reads
                                          from the file: no data byte crosses the link
  save(obj, path)                         torch.save's format, written by the server
  load(path, map_location, weights_only)  the tensors made on the server from the zip

A file-backed tensor's record carries the file's size and XXH3-128 hash,
which the server checks when it reads it; a journal rebuild or rgpu-replay
from a file that changed since is refused (RGPU_ERR_CHANGED)."""
import collections
import dataclasses
import errno
import hashlib
import io
import math
import operator
import os
import pickle
import re
import struct
import sys

import torch

from . import _C, server, transfer
from .waits import wait
from . import tensor as _tensor
from .pending import PENDING, flush_pending
from .transfer import contiguous_strides

# --- errors ------------------------------------------------------------------------------


class RemoteFileNotFoundError(FileNotFoundError, _C.RemoteError):
    """A server path that does not exist (RGPU_ERR_PATH: no such file)."""
    status = "RGPU_ERR_PATH"


class RemotePermissionError(PermissionError, _C.RemoteError):
    """A server path refused: outside every exposed folder, a symlink out, a
    write into a read-only folder, a bad name (RGPU_ERR_PATH)."""
    status = "RGPU_ERR_PATH"


class RemoteIsADirectoryError(IsADirectoryError, _C.RemoteError):
    """A folder where a file is wanted."""
    status = "RGPU_ERR_PATH"


class RemoteNotADirectoryError(NotADirectoryError, _C.RemoteError):
    """A file where a folder is wanted."""
    status = "RGPU_ERR_PATH"


# _C.wait raises RemoteError with the session's message and the status's name
# as .status; a refused path is RGPU_ERR_PATH, its kind in the message: "op N
# (rgpu::file_stat) failed: server path refused: server path "data/x": no such file".
_PATH_KINDS = ((re.compile(r": no such (file|folder)"), RemoteFileNotFoundError, errno.ENOENT),
               (re.compile(r": is a folder"), RemoteIsADirectoryError, errno.EISDIR),
               (re.compile(r"not a folder"), RemoteNotADirectoryError, errno.ENOTDIR))


def _translate(e):
    """The exception to raise for RemoteError e of a file op."""
    msg = str(e)
    if isinstance(e, _C.SessionLost) or getattr(e, "status", None) != "RGPU_ERR_PATH":
        return e
    for pattern, cls, code in _PATH_KINDS:
        if pattern.search(msg):
            break
    else:
        cls, code = RemotePermissionError, errno.EACCES
    out = cls(msg)
    out.errno = code
    out.status = e.status
    return out


def _wait(op, args):
    """Record WAIT op `op` with args and return its result bytes."""
    server.ensure()
    try:
        return wait(_C.record(op, (), (), args))
    except _C.RemoteError as e:
        raise _translate(e) from None


def _path_arg(path, what):
    """The HASH argument naming server path `path` (its UTF-8 bytes, a blob)."""
    path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"rgpu.{what}: a server path is a str (\"NAME/relative/path\"), not {type(path).__name__}")
    server.ensure()
    return _C.put_blob(path.encode("utf-8"))


# --- discovery ---------------------------------------------------------------------------

_FILE, _DIR = 1, 2
_STAT = struct.Struct("<BBHIQq16s")          # FILE_STAT's result (ops.def)
_LIST_ENTRY = struct.Struct("<BBHIQq")       # FILE_LIST's entries, each followed by its name


@dataclasses.dataclass(frozen=True)
class StatResult:
    """What rgpu.stat() says of a server path (os.stat_result's names where they apply)."""
    kind: int                   # 1 file, 2 folder, 3 other (device, FIFO, socket)
    writable: bool              # beneath a --data-rw folder
    st_size: int
    st_mtime_ns: int
    hash: str = None            # XXH3-128 of the file's bytes, hex (stat(..., hash=True) of a file)
    _raw_hash: bytes = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def st_mtime(self):
        return self.st_mtime_ns / 1e9

    def is_file(self):
        return self.kind == _FILE

    def is_dir(self):
        return self.kind == _DIR


@dataclasses.dataclass(frozen=True)
class DirEntry:
    """One entry of rgpu.scandir(): name, path ("NAME/rel/name") and its stat (no hash)."""
    name: str
    path: str
    _stat: StatResult = dataclasses.field(repr=False)

    def is_file(self):
        return self._stat.is_file()

    def is_dir(self):
        return self._stat.is_dir()

    def stat(self):
        return self._stat


def stat(path, hash=False):
    """The server file or folder at path: size, mtime, kind, writability, and
    with hash=True (a file only) the XXH3-128 of its bytes, which the server
    computes then (and caches while the file is unchanged)."""
    return _stat(_path_arg(path, "stat"), hash)


def _stat(ph, hash):
    data = _wait(_C.OP_FILE_STAT, (ph, bool(hash)))
    if len(data) != _STAT.size:
        raise RuntimeError(f"rgpu: file_stat returned {len(data)} bytes, expected {_STAT.size}")
    kind, writable, _, _, size, mtime_ns, h = _STAT.unpack(data)
    have = hash and kind == _FILE
    return StatResult(kind, bool(writable), size, mtime_ns, h.hex() if have else None, h if have else None)


def _list(path):
    path = os.fspath(path)
    if isinstance(path, str) and path.endswith("/") and path != "/":
        path = path[:-1]                # "data/sub/" names the folder, as os.listdir takes it
    data = _wait(_C.OP_FILE_LIST, (_path_arg(path, "listdir"),))
    (count,), at, out = struct.unpack_from("<I", data), 4, []
    for _ in range(count):
        kind, writable, n, _, size, mtime_ns = _LIST_ENTRY.unpack_from(data, at)
        at += _LIST_ENTRY.size
        out.append((data[at:at + n].decode("utf-8", "surrogateescape"), StatResult(kind, bool(writable), size, mtime_ns)))
        at += n
    if at != len(data):
        raise RuntimeError(f"rgpu: file_list returned {len(data)} bytes, its {count} entries take {at}")
    return out


def listdir(path=""):
    """The names in server folder path, sorted (os.listdir's answer); "" lists the exposed folders."""
    return [name for name, _ in _list(path)]


def scandir(path=""):
    """The entries of server folder path (sorted by name) with their sizes and kinds, in one wait."""
    path = os.fspath(path)
    pre = path[:-1] if path.endswith("/") else path
    pre = pre + "/" if pre else ""
    return [DirEntry(name, pre + name, st) for name, st in _list(path)]


# --- tensors from files ------------------------------------------------------------------

# dtypes the server does not hold: read as the signed type of the same width,
# returned widened to the next signed type with the unsigned values
_WIDENED = {torch.uint16: (torch.int16, torch.int32, 0xFFFF),
            torch.uint32: (torch.int32, torch.int64, 0xFFFFFFFF)}


def _shape(shape, n_avail, itemsize, path, offset):
    if shape is None:
        if n_avail % itemsize:
            raise ValueError(f"rgpu.from_file: the {n_avail} bytes of server file \"{path}\" after offset {offset} "
                             f"are not a multiple of the element size {itemsize} (pass shape=)")
        return (n_avail // itemsize,)
    shape = (operator.index(shape),) if not isinstance(shape, (tuple, list, torch.Size)) else \
        tuple(operator.index(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"rgpu.from_file: negative dimension in shape {shape}")
    return shape


def _from_file(ph, ident, dtype, shape, offset):
    """A new contiguous rgpu tensor of shape and dtype := the file's bytes from
    offset (one FROM_FILE record; ident is the file's (size, 16-byte hash))."""
    key = (shape, contiguous_strides(shape), 0, dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    return _tensor.record_new(_C.OP_FROM_FILE, key, _tensor.out_def(key, nbytes), (), (ph, offset) + ident)


def from_file(path, dtype=torch.uint8, shape=None, offset=0):
    """An rgpu tensor holding the bytes of server file path from byte offset,
    as numpy.memmap(path, dtype, "r", offset, shape) reads them: shape None is
    1-D over the rest of the file; the elements are little-endian. The server
    reads the file (one stat wait here for its size and hash, then one record):
    no data byte crosses the link. The tensor is a copy: later changes to
    the file do not reach it, and a replay or journal rebuild from a changed
    file is refused.

    torch.uint16 and torch.uint32, which rgpu's server lacks, come back
    widened to int32 / int64 with the same (non-negative) values: nanoGPT's
    train.bin as `from_file("data/train.bin", torch.uint16)` holds its token
    ids exactly (the server holds 4 bytes per token)."""
    read_dtype, widen_to, mask = _WIDENED.get(dtype, (dtype, None, 0))
    _tensor.rgpu_dtype(read_dtype)                      # TypeError for a dtype rgpu lacks
    offset = operator.index(offset)
    if offset < 0:
        raise ValueError(f"rgpu.from_file: offset {offset} is negative")
    ph = _path_arg(path, "from_file")
    st = _stat(ph, True)
    if not st.is_file():
        if st.is_dir():
            raise RemoteIsADirectoryError(f"rgpu.from_file: server path \"{path}\" is a folder, not a file")
        raise RemotePermissionError(f"rgpu.from_file: server path \"{path}\" is not a regular file")
    size = st.st_size
    shape = _shape(shape, max(size - offset, 0), read_dtype.itemsize, path, offset)
    end = offset + math.prod(shape) * read_dtype.itemsize
    if end > size:
        raise ValueError(f"rgpu.from_file: a {shape} {dtype} tensor at offset {offset} reads bytes "
                         f"[{offset}, {end}) of server file \"{path}\", which has {size} bytes")
    t = _from_file(ph, (size, st._raw_hash), read_dtype, shape, offset)
    if widen_to is None:
        return t
    return t.to(widen_to).bitwise_and_(mask)


# --- the checkpoint format ---------------------------------------------------------------

# torch.save's records besides data.pkl and the storages (torch/serialization.py's
# _save, and the "version" PyTorchFileWriter writes: caffe2's kProducedFileFormatVersion)
_FORMAT_VERSION = b"1"
_ALIGNMENT = b"64"
_WRITER_VERSION = b"3\n"
_PROTOCOL = 2                                   # torch.serialization.DEFAULT_PROTOCOL
_V2_TYPES = torch.storage._dtype_to_storage_type_map()     # {dtype: "FloatStorage"}: _rebuild_tensor_v2's


def _archive_name(path):
    """The folder torch.save puts a file's records in: its basename without the last extension."""
    base = os.path.basename(os.fspath(path))
    return base[:base.rfind(".")] if "." in base else base or "archive"


class _Stored:
    """A storage going into the zip: torch's persistent id for it, and the
    rgpu tensor whose whole storage SAVE_ZIP writes (or the id of the
    uploaded copy of a CPU storage, freed after the save)."""
    __slots__ = ("pid", "tensor", "tid")

    def __init__(self, pid, tensor, tid):
        self.pid, self.tensor, self.tid = pid, tensor, tid


class _Saver:
    """torch.serialization._save's pickling, for a zip the server writes: rgpu
    tensors pickle as torch's _rebuild_tensor_v2 (v3 for dtypes without a
    typed storage) over a persistent storage id, as a CPU tensor would; CPU
    storages are uploaded. Storage keys are "0", "1", ... in first-use order,
    one per storage (views and tied weights share it); location "cpu", so a
    plain torch.load reads the file with no rgpu."""

    def __init__(self):
        self.stored = {}        # storage identity -> _Stored, in key order
        self.dtypes = {}        # storage identity -> the dtype it is saved as
        self.keep = []          # tensors made while pickling (resolved conj/neg), alive until the wait
        self.uploaded = []      # ids of the uploaded CPU storages (freed after the save)

    def _key(self, ident, dtype, stype, numel, tensor, upload=None):
        old = self.dtypes.setdefault(ident, dtype)
        if old != dtype:
            raise RuntimeError("Cannot save multiple tensors or storages that view the same data as different types")
        s = self.stored.get(ident)
        if s is None:
            key = str(len(self.stored))
            tid = tensor._tid if upload is None else transfer.upload_tensor(upload)
            s = self.stored[ident] = _Stored(["storage", stype, key, "cpu", numel], tensor, tid)
            if upload is not None:
                self.uploaded.append(tid)
        return s

    def remote_storage(self, t, dtype):
        st = t._st
        untyped = dtype not in _V2_TYPES
        item = 1 if untyped else dtype.itemsize
        if st.nbytes % item:
            raise RuntimeError(f"rgpu.save: a {dtype} tensor's storage has {st.nbytes} bytes, "
                               f"not a multiple of {item}")
        stype = torch.UntypedStorage if untyped else getattr(torch, _V2_TYPES[dtype])
        return self._key(("rgpu", st.sid), torch.uint8 if untyped else dtype, stype, st.nbytes // item, t)

    def reduce_remote(self, t):
        """t's reduction, as torch.Tensor.__reduce_ex__ / Parameter.__reduce_ex__ give a CPU tensor's."""
        state = {k: v for k, v in t.__dict__.items() if k not in _tensor._OWN_ATTRS}
        hooks = collections.OrderedDict()
        if t.__dict__.get("_is_param"):
            if state:
                return (torch._utils._rebuild_parameter_with_state, (t.detach(), t.requires_grad, hooks, state))
            return (torch._utils._rebuild_parameter, (t.detach(), t.requires_grad, hooks))
        if t.is_conj() or t.is_neg():       # lazy bits: save the values they stand for
            with torch.no_grad():
                r = t.resolve_conj().resolve_neg()
            r.requires_grad_(t.requires_grad)
            self.keep.append(r)
            t = r
        sizes, strides, offset, dtype = t._key
        s = self.remote_storage(t, dtype)
        # new tuples, as torch's reduction makes (a shared one would pickle as a memo reference)
        args = (s, offset, tuple([*sizes]), tuple([*strides]), t.requires_grad, hooks)
        func = torch._utils._rebuild_tensor_v2
        if dtype not in _V2_TYPES:
            func, args = torch._utils._rebuild_tensor_v3, args + (dtype,)
        if state:
            return (torch._tensor._rebuild_from_type_v2, (func, torch.Tensor, args, state))
        return (func, args)

    def persistent_id(self, obj):
        if isinstance(obj, _Stored):
            return tuple(obj.pid)       # a new tuple each time, as torch's (the same pickle bytes)
        if not (isinstance(obj, torch.storage.TypedStorage) or torch.is_storage(obj)):
            return None
        if isinstance(obj, torch.storage.TypedStorage):     # as torch.serialization._save
            storage, dtype = obj._untyped_storage, obj.dtype
            stype, numel = getattr(torch, obj._pickle_storage_type()), obj._size()
        else:
            storage, dtype = obj, torch.uint8
            stype, numel = torch.serialization.normalize_storage_type(type(obj)), obj.nbytes()
        if storage.device.type != "cpu":
            raise TypeError(f"rgpu.save: a storage on {storage.device} (rgpu.save writes rgpu and CPU tensors; "
                            "move it to one of them first)")
        whole = torch.empty(0, dtype=torch.uint8).set_(storage)    # uploaded as one uint8 tensor
        return tuple(self._key(("cpu", storage._cdata), dtype, stype, numel, None, whole).pid)


class _Pickler(pickle.Pickler):
    def __init__(self, f, saver):
        super().__init__(f, protocol=_PROTOCOL)
        self._saver = saver

    def reducer_override(self, obj):
        if type(obj) is _tensor.RemoteTensor:
            return self._saver.reduce_remote(obj)
        return NotImplemented

    def persistent_id(self, obj):
        return self._saver.persistent_id(obj)


def _manifest(entries):
    """SAVE_ZIP's manifest (ops.def): entries are (name, bytes) inline or (name, k) for tids[k]."""
    out = [struct.pack("<I", len(entries))]
    for name, v in entries:
        n = name.encode("utf-8")
        if isinstance(v, int):
            out.append(struct.pack("<H", len(n)) + n + struct.pack("<BI", 1, v))
        else:
            out.append(struct.pack("<H", len(n)) + n + struct.pack("<BI", 0, len(v)) + v)
    return b"".join(out)


def save(obj, path):
    """torch.save(obj, path) with the file on the server: path "NAME/rel/file"
    beneath a --data-rw folder. The client pickles obj as torch.save does and
    the server writes the zip (torch.save's records and layout; each rgpu
    storage's bytes straight from server memory, CPU tensors uploaded first),
    atomically: a temporary file beside path, fsynced and renamed over it,
    so path holds the old file or the new one, never a part. The result loads
    with plain torch.load on the server's host and with rgpu.load. Returns
    when the file is written; raises (the old file intact) when it is not."""
    ph = _path_arg(path, "save")
    saver = _Saver()
    buf = io.BytesIO()
    try:
        _Pickler(buf, saver).dump(obj)
        pkl = buf.getvalue()
        saver.uploaded.append(transfer.upload_tensor(torch.frombuffer(bytearray(pkl), dtype=torch.uint8)))
        stored = list(saver.stored.values())
        tids = tuple(s.tid for s in stored) + (saver.uploaded[-1],)
        pre = _archive_name(path) + "/"
        entries = [(pre + "data.pkl", len(stored)), (pre + ".format_version", _FORMAT_VERSION),
                   (pre + ".storage_alignment", _ALIGNMENT)]
        if sys.byteorder == "little":
            entries.append((pre + "byteorder", b"little"))
        entries += [(pre + "data/" + s.pid[2], k) for k, s in enumerate(stored)]
        # torch derives its serialization id from the records' names and CRCs; this
        # one from what the client sends, so the same save gives the same bytes
        sid = int.from_bytes(hashlib.sha256(_manifest(entries) + pkl).digest()[:16], "little")
        entries += [(pre + "version", _WRITER_VERSION), (pre + ".data/serialization_id", b"%040d" % sid)]
        man = _C.put_blob(_manifest(entries))
        if PENDING:
            flush_pending()
        data = _wait(_C.OP_SAVE_ZIP, (ph, man, tids))
    finally:
        for tid in saver.uploaded:
            _C.free(tid)
    if len(data) != 24:
        raise RuntimeError(f"rgpu: save_zip returned {len(data)} bytes, expected 24")


# --- loading -----------------------------------------------------------------------------

def _zip_index(ph):
    data = _wait(_C.OP_ZIP_INDEX, (ph,))
    size, _, h, count = struct.unpack_from("<Qq16sI", data)
    at, entries = 36, {}
    for _ in range(count):
        off, n, ln = struct.unpack_from("<QQH", data, at)
        at += 18
        entries[data[at:at + ln].decode("utf-8", "surrogateescape")] = (off, n)
        at += ln
    return (size, h), entries


def _location(map_location):
    dev = torch.device(map_location) if isinstance(map_location, (str, torch.device)) else None
    if dev is None or dev.type not in ("rgpu", "cpu"):
        raise ValueError(f"rgpu.load: map_location {map_location!r}: rgpu.load places tensors on \"rgpu\" "
                         "(made on the server) or \"cpu\" (downloaded)")
    return dev.type


class _FileStorage:
    """A storage of the zip being loaded, made on the server: base is a uint8
    rgpu tensor over all of its bytes; dtype its typed storage's dtype."""
    __slots__ = ("base", "dtype", "nbytes")

    def __init__(self, base, dtype, nbytes):
        self.base, self.dtype, self.nbytes = base, dtype, nbytes


def _view(s, offset, size, stride, dtype, path):
    """An rgpu tensor viewing _FileStorage s as torch's _rebuild_tensor does."""
    size, stride = tuple(size), tuple(stride)
    if len(size) != len(stride) or offset < 0 or any(x < 0 for x in size + stride):
        raise ValueError(f"rgpu.load: \"{path}\": a tensor of size {size}, stride {stride}, offset {offset}")
    span = 0 if 0 in size else offset + 1 + sum((n - 1) * st for n, st in zip(size, stride))
    if span * dtype.itemsize > s.nbytes:
        raise ValueError(f"rgpu.load: \"{path}\": a tensor of size {size}, stride {stride}, offset {offset} "
                         f"reaches past its storage of {s.nbytes} bytes")
    key = (size, stride, offset, dtype)
    if PENDING:                 # the base of an empty storage is a pending EMPTY
        flush_pending()
    return _tensor.record_view(s.base, key, _tensor.out_def(key, -1))


def _rebuild_v2(path):
    def rebuild(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None):
        if not isinstance(storage, _FileStorage):
            return torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
                                                   backward_hooks, metadata)
        t = _view(storage, storage_offset, size, stride, storage.dtype, path)
        return _finish(t, requires_grad, backward_hooks, metadata)
    return rebuild


def _rebuild_v3(path):
    def rebuild(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None):
        if not isinstance(storage, _FileStorage):
            return torch._utils._rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad,
                                                   backward_hooks, dtype, metadata)
        return _finish(_view(storage, storage_offset, size, stride, dtype, path), requires_grad, backward_hooks, metadata)
    return rebuild


def _finish(t, requires_grad, backward_hooks, metadata):
    # the rest of torch._utils._rebuild_tensor_v2
    t.requires_grad = requires_grad
    if metadata:
        torch._utils.set_tensor_metadata(t, metadata)
    t._backward_hooks = backward_hooks
    return t


class _Loader:
    """Reads the zip's records on the server: storage key -> a tensor made by
    FROM_FILE at the record's data offset (each storage once)."""

    def __init__(self, path, ph, ident, entries, prefix, where):
        self.path, self.ph, self.ident, self.entries, self.prefix = path, ph, ident, entries, prefix
        self.where = where
        self.loaded = {}

    def record(self, name):
        e = self.entries.get(self.prefix + name)
        if e is None:
            raise RuntimeError(f"rgpu.load: \"{self.path}\" has no record {self.prefix + name}")
        return e

    def storage(self, saved_id):
        """persistent_load, as torch.serialization._load's."""
        typename = torch.serialization._maybe_decode_ascii(saved_id[0])
        if typename != "storage" or len(saved_id) != 5:
            raise pickle.UnpicklingError(f"rgpu.load: \"{self.path}\": persistent id {typename!r} is not a storage")
        stype, key, _, numel = saved_id[1:]
        key = torch.serialization._maybe_decode_ascii(key)
        dtype = torch.uint8 if stype is torch.UntypedStorage else stype.dtype
        got = self.loaded.get(key)
        if got is None:
            nbytes = numel * torch._utils._element_size(dtype)
            off, n = self.record("data/" + key)
            if n != nbytes:
                raise RuntimeError(f"rgpu.load: \"{self.path}\": record data/{key} has {n} bytes, "
                                   f"its storage {numel} x {dtype} = {nbytes}")
            base = _from_file(self.ph, self.ident, torch.uint8, (nbytes,), off) if nbytes else \
                torch.empty(0, dtype=torch.uint8, device="rgpu")
            if self.where == "cpu":
                c = transfer.download(base)
                got = torch.storage.TypedStorage(wrap_storage=c.untyped_storage(), dtype=dtype, _internal=True)
            else:
                got = _FileStorage(base, dtype, nbytes)
            self.loaded[key] = got
        return got


def _meta_storage(saved_id):
    """persistent_load for the weights-only check: a meta storage of the right size."""
    stype, numel = saved_id[1], saved_id[4]
    dtype = torch.uint8 if stype is torch.UntypedStorage else stype.dtype
    nbytes = numel * torch._utils._element_size(dtype)
    return torch.storage.TypedStorage(wrap_storage=torch.UntypedStorage(nbytes, device="meta"), dtype=dtype,
                                      _internal=True)


def _check_weights_only(pkl, path):
    """torch.load(weights_only=True)'s own unpickler over the pickle (tensors on
    meta): raises what it raises, so rgpu.load refuses what torch.load refuses."""
    from torch import _weights_only_unpickler as wo
    u = wo.Unpickler(io.BytesIO(pkl), encoding="utf-8")
    u.persistent_load = _meta_storage
    try:
        u.load()
    except Exception as e:
        raise pickle.UnpicklingError(f"rgpu.load(\"{path}\"): weights only load failed: {e} (torch.load refuses "
                                     "this file with weights_only=True too; pass weights_only=False only if "
                                     "you trust where it came from)") from None


class _Unpickler(pickle.Unpickler):
    """torch.serialization._load's unpickler, whose tensors are views of
    server storages: _rebuild_tensor_v2/_v3 are ours; with weights_only the
    globals are limited to the weights-only allowlist (already checked)."""

    def __init__(self, f, loader, weights_only):
        super().__init__(f, encoding="utf-8")
        self._loader, self._wo = loader, weights_only
        self._mine = {}
        if loader.where == "rgpu":
            self._mine = {"torch._utils._rebuild_tensor_v2": _rebuild_v2(loader.path),
                          "torch._utils._rebuild_tensor_v3": _rebuild_v3(loader.path)}

    def find_class(self, mod, name):
        if type(name) is str and "Storage" in name:
            try:
                return torch.serialization.StorageType(name)
            except KeyError:
                pass
        mod = {"torch.tensor": "torch._tensor"}.get(mod, mod)
        full = f"{mod}.{name}"
        if full in self._mine:
            return self._mine[full]
        if self._wo:
            from torch import _weights_only_unpickler as wo
            for allowed in (wo._get_allowed_globals(), wo._get_user_allowed_globals()):
                if full in allowed:
                    return allowed[full]
            raise pickle.UnpicklingError(f"rgpu.load: global {full} is not allowed with weights_only=True")
        return super().find_class(mod, name)

    def persistent_load(self, saved_id):
        return self._loader.storage(saved_id)


def load(path, map_location="rgpu", weights_only=True):
    """torch.load of a server file (path "NAME/rel/file", torch.save's zip
    format, written by rgpu.save or by torch.save on the server's host).
    map_location "rgpu": every storage is made on the server from the file
    (FROM_FILE at its record's offset) and tensors are views of it, so shared
    storages stay shared and no tensor byte crosses the link: only the zip's
    index and its pickle come to the client. "cpu": the storages are
    downloaded. weights_only=True (torch.load's default) refuses, with
    torch's own weights-only unpickler, every pickle torch.load refuses."""
    where = _location(map_location)
    ph = _path_arg(path, "load")
    ident, entries = _zip_index(ph)
    pkls = [n for n in entries if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pkls) != 1:
        raise RuntimeError(f"rgpu.load: \"{path}\" is not a torch.save file (no single <archive>/data.pkl record "
                           f"among its {len(entries)})")
    prefix = pkls[0][:-len("data.pkl")]
    loader = _Loader(path, ph, ident, entries, prefix, where)
    # data.pkl and byteorder in one read when they lie close (they do in torch.save's layout)
    small = [loader.record("data.pkl")] + ([loader.record("byteorder")] if prefix + "byteorder" in entries else [])
    lo, hi = min(o for o, _ in small), max(o + n for o, n in small)
    if hi - lo <= sum(n for _, n in small) + 65536:
        span = transfer.download(_from_file(ph, ident, torch.uint8, (hi - lo,), lo)).numpy().tobytes()
        parts = [span[o - lo:o - lo + n] for o, n in small]
    else:
        parts = [transfer.download(_from_file(ph, ident, torch.uint8, (n,), o)).numpy().tobytes()
                 for o, n in small]
    pkl = parts[0]
    if len(parts) > 1 and parts[1] != b"little":
        raise RuntimeError(f"rgpu.load: \"{path}\" was saved {parts[1][:16]!r}-endian; rgpu reads little-endian files")
    if weights_only:
        _check_weights_only(pkl, path)
    result = _Unpickler(io.BytesIO(pkl), loader, weights_only).load()
    torch._utils._validate_loaded_sparse_tensors()
    return result
