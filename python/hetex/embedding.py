"""Host embedding tables (hx_embedding_table): big tables looked up by graph
ops on the CPU and trained sparsely by their own optimizer.

A table must outlive the graphs that use it: in Python a Graph holds the
tables its ops use, so dropping a table early is safe (it is freed when the
last graph using it goes); close() frees it now and raises StateError while
a graph still uses it."""
import numpy as np

from . import dtypes
from ._enums import value as _enum_value
from ._lib import ffi, lib
from ._structs import set_fields, to_dict
from .comm import comm_handle
from .errors import StateError, check
from .optim import EmbeddingOptimizer


def _ids(ids):
    a = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
    return a, ffi.from_buffer("int64_t[]", a)


class EmbeddingTable:
    """EmbeddingTable(rows, dim, dtype="f32", name=None, init=None, seed=0,
    optimizer=None, ids="rows", out_of_range="error", **config)

    `config` takes the other fields of hx_embedding_config by name
    (lazy_init, backing_file, min_count, expire_after, evict_when_full,
    n_threads, ssd_path, cache_bytes; and, sharded over a hetex.Comm's
    ranks, comm, sharding ("auto", "rows" or "table") and shard_rank);
    `ids` is "rows", "modulo" or "dynamic"; `out_of_range` "error" or
    "zero"; `optimizer` a hetex.optim.EmbeddingOptimizer (LazyAdam,
    SparseAdagrad, ...)."""

    def __init__(self, rows, dim, dtype="f32", name=None, init=None, seed=0, optimizer=None,
                 ids="rows", out_of_range="error", **config):
        self._ptr = None
        cfg = ffi.new("hx_embedding_config *", lib.hx_embedding_config_default())
        keep = []
        values = dict(rows=int(rows), dim=int(dim), dtype=dtypes.enum_of(dtype), seed=int(seed),
                      ids=_enum_value("HX_EMBEDDING_IDS_", "ids", ids, ("rows", "modulo", "dynamic")),
                      out_of_range=_enum_value("HX_EMBEDDING_OUT_OF_RANGE_", "out_of_range",
                                               out_of_range, ("error", "zero")))
        if name is not None:
            values["name"] = name
        values.update(config)
        # sharded over a Comm's ranks: the table holds its Comm
        self.comm = values.get("comm")
        conv = {"comm": lambda v: comm_handle(v, self, "EmbeddingTable"),
                "sharding": lambda v: _enum_value("HX_EMBEDDING_SHARD_", "sharding", v,
                                                  ("auto", "rows", "table"))}
        set_fields(cfg, values, "EmbeddingTable", conv, keep)
        if init is not None:
            cfg.init = init
        if optimizer is not None:
            cfg.optimizer = optimizer.config()
        out = ffi.new("hx_embedding_table **")
        check(lib.hx_embedding_table_create(cfg, out))
        self._ptr = out[0]
        self._opt_kind = cfg.optimizer.kind
        self.name = name or "embedding"

    def _handle(self):
        if self._ptr is None:
            raise StateError(f"embedding table '{self.name}' is closed")
        return self._ptr

    def close(self):
        """Frees the table now; StateError while a graph uses it."""
        if self._ptr is not None:
            check(lib.hx_embedding_table_free(self._ptr))
            self._ptr = None

    def __del__(self):
        # Graphs hold their tables, so no graph uses this one by now.
        ptr = getattr(self, "_ptr", None)
        if ptr is not None:
            self._ptr = None
            lib.hx_embedding_table_free(ptr)

    @property
    def rows(self):
        return lib.hx_embedding_table_rows(self._handle())

    @property
    def dim(self):
        return lib.hx_embedding_table_dim(self._handle())

    def set_optimizer(self, optimizer: EmbeddingOptimizer):
        """Another kind starts its state afresh; the same kind keeps it."""
        cfg = ffi.new("hx_embedding_optimizer *", optimizer.config())
        check(lib.hx_embedding_table_set_optimizer(self._handle(), cfg))
        self._opt_kind = cfg.kind

    def read_rows(self, ids):
        """Rows named by ids as f32, shape (len(ids), dim)."""
        a, p = _ids(ids)
        out = np.empty((a.size, self.dim), dtype=np.float32)
        check(lib.hx_embedding_table_read_rows(self._handle(), p, a.size, ffi.from_buffer("float[]", out)))
        return out

    def write_rows(self, ids, rows):
        """Sets rows (len(ids), dim) f32, rounded to the storage dtype."""
        a, p = _ids(ids)
        r = np.ascontiguousarray(rows, dtype=np.float32)
        if r.shape != (a.size, self.dim):
            from .errors import ShapeError
            raise ShapeError(f"write_rows of '{self.name}': rows have shape {r.shape}, "
                             f"want ({a.size}, {self.dim})")
        check(lib.hx_embedding_table_write_rows(self._handle(), p, a.size, ffi.from_buffer("float[]", r)))

    def read_state(self, k, ids):
        """Array k of the table's optimizer state for ids (see the header)."""
        a, p = _ids(ids)
        row_wise = self._opt_kind == lib.HX_EMBEDDING_OPTIMIZER_ROW_ADAGRAD
        out = np.empty((a.size,) if row_wise else (a.size, self.dim), dtype=np.float32)
        check(lib.hx_embedding_table_read_state(self._handle(), int(k), p, a.size,
                                                ffi.from_buffer("float[]", out)))
        return out

    def save(self, path):
        check(lib.hx_embedding_table_save(self._handle(), str(path).encode()))

    def load(self, path):
        check(lib.hx_embedding_table_load(self._handle(), str(path).encode()))

    def stats(self):
        """hx_embedding_stats as a dict."""
        s = ffi.new("hx_embedding_stats *")
        check(lib.hx_embedding_table_stats(self._handle(), s))
        return to_dict(s)

    def prefetch(self, ids):
        """Starts reading the rows of ids from disk (tables on disk)."""
        a, p = _ids(ids)
        check(lib.hx_embedding_table_prefetch(self._handle(), p, a.size))

    def __repr__(self):
        state = "closed" if self._ptr is None else f"{self.rows} x {self.dim}"
        return f"<hetex.EmbeddingTable '{self.name}' {state}>"


def hash_strings(strings, seed=0):
    """XXH3-64 of each string's UTF-8 bytes with seed, as int64 ids."""
    bs = [s.encode() if isinstance(s, str) else bytes(s) for s in strings]
    n = len(bs)
    cstrs = [ffi.from_buffer(b) for b in bs]
    arr = ffi.new("const char *[]", cstrs) if n else ffi.NULL
    lens = ffi.new("size_t[]", [len(b) for b in bs]) if n else ffi.NULL
    out = np.empty(n, dtype=np.int64)
    lib.hx_embedding_hash_strings(arr, lens, n, int(seed), ffi.from_buffer("int64_t[]", out))
    return out


def _attach_contracts():
    from ._doc import attach, attach_methods
    attach(hash_strings, "hx_embedding_hash_strings")
    attach_methods(EmbeddingTable, {
        "__init__": ("hx_embedding_table_create", "hx_embedding_config_default"),
        "close": "hx_embedding_table_free", "rows": "hx_embedding_table_rows",
        "dim": "hx_embedding_table_dim", "set_optimizer": "hx_embedding_table_set_optimizer",
        "read_rows": "hx_embedding_table_read_rows", "write_rows": "hx_embedding_table_write_rows",
        "read_state": "hx_embedding_table_read_state", "save": "hx_embedding_table_save",
        "load": "hx_embedding_table_load", "stats": "hx_embedding_table_stats",
        "prefetch": "hx_embedding_table_prefetch"})


_attach_contracts()
