"""Readers of delimited text and feature columns (the header's "data"
section) as Python objects.

    r = hetex.Reader("data/adult/adult.data", "adult", batch_size=256, n_threads=2)
    for b in r:                   # one epoch; r.rewind() for the next
        b.labels, b.numeric, b.categorical     # numpy arrays (copies)
    f = hetex.Features(columns, embeddings=[("deep", [6, 7], 8)], n_numeric=6, n_categorical=8)
    f.fit(r)                      # one pass, then the reader is rewound
    fb = f.transform(b)           # labels, dense, ids, wide_ids, wide_offsets

A Batch's arrays are copied out of the reader (its C batch is valid only
until the reader's next call); transform() takes the batch the reader gave
last and raises StateError for an older one.
"""
import os

import numpy as np

from ._enums import value as _enum_value
from ._lib import ffi, lib, text
from ._structs import set_fields, to_dict
from .errors import InvalidArgumentError, StateError, check


def _array(ptr, ctype, count, dtype, shape):
    if count == 0 or ptr == ffi.NULL:
        return np.zeros(shape, dtype)
    buf = ffi.buffer(ffi.cast(ctype + " *", ptr), count * ffi.sizeof(ctype))
    return np.frombuffer(buf, dtype=dtype).reshape(shape).copy()


class Batch:
    """Rows of a reader or generator: n, labels (n), numeric (n, n_numeric),
    numeric_missing (n, n_numeric) uint8, categorical (n, n_categorical) int64."""

    def __init__(self, owner, ptr):
        self._owner = owner
        self._gen = owner._gen
        self._ptr = ptr
        b = ptr[0]
        self.n = n = b.n
        self.n_numeric, self.n_categorical = b.n_numeric, b.n_categorical
        self.labels = _array(b.labels, "float", n, np.float32, (n,))
        self.numeric = _array(b.numeric, "float", n * b.n_numeric, np.float32, (n, b.n_numeric))
        self.numeric_missing = _array(b.numeric_missing, "uint8_t", n * b.n_numeric, np.uint8,
                                      (n, b.n_numeric))
        self.categorical = _array(b.categorical, "int64_t", n * b.n_categorical, np.int64,
                                  (n, b.n_categorical))

    def _handle(self):
        if self._owner._gen != self._gen or self._owner._ptr is None:
            raise StateError("this batch is no longer the reader's current one (the C batch "
                             "lives until the reader's next call): transform it before reading on")
        return self._ptr


_PRESETS = {"default": lambda: lib.hx_reader_config_default(),
            "adult": lambda: lib.hx_reader_config_adult(False),
            "adult_test": lambda: lib.hx_reader_config_adult(True),
            "criteo": lambda: lib.hx_reader_config_criteo()}


class Reader:
    """Reader(path, config="adult" | "adult_test" | "criteo" | "default",
    columns=None, **fields): a reader over `path` with a preset schema (or
    `columns`: a list of dicts with name, kind ("ignore", "label",
    "numeric", "categorical"), missing_value, parse ("hash", "hex")) and
    any other hx_reader_config field by name (batch_size, n_threads,
    shuffle_rows, shuffle_seed, delimiter, missing_token, ...)."""

    def __init__(self, path, config="default", columns=None, **fields):
        self._ptr = None
        self._gen = 0
        if config not in _PRESETS:
            raise InvalidArgumentError(f"Reader: unknown config '{config}'; use one of "
                                       f"{', '.join(_PRESETS)}")
        cfg = ffi.new("hx_reader_config *", _PRESETS[config]())
        keep = []
        if columns is not None:
            specs = ffi.new("hx_column_spec[]", len(columns))
            for i, c in enumerate(columns):
                c = dict(c)
                conv = {"kind": lambda v: _enum_value("HX_COLUMN_", "column kind", v,
                                                      ("ignore", "label", "numeric", "categorical")),
                        "parse": lambda v: _enum_value("HX_CATEGORY_", "parse", v, ("hash", "hex"))}
                set_fields(ffi.addressof(specs[i]), c, "Reader column", conv, keep)
            keep.append(specs)
            cfg.columns, cfg.n_columns = specs, len(columns)
        if "delimiter" in fields:
            fields["delimiter"] = fields["delimiter"].encode()
        conv = {"on_malformed": lambda v: _enum_value("HX_MALFORMED_", "on_malformed", v,
                                                      ("skip", "error"))}
        set_fields(cfg, fields, "Reader", conv, keep)
        self.config = cfg  # keeps the schema for Features (hx_reader_config_find)
        self._keep = keep
        out = ffi.new("hx_reader **")
        check(lib.hx_reader_open(os.fspath(path).encode(), cfg, out))
        self._ptr = out[0]
        self.path = os.fspath(path)

    def find(self, name):
        """The column `name`'s index among the batch's numeric or categorical columns (-1: none)."""
        return lib.hx_reader_config_find(self.config, name.encode())

    def _h(self):
        if self._ptr is None:
            raise StateError("the reader is closed")
        return self._ptr

    def next(self):
        """The next Batch of this epoch, or None at its end."""
        out = ffi.new("const hx_batch **")
        self._gen += 1
        check(lib.hx_reader_next(self._h(), out))
        return None if out[0] == ffi.NULL else Batch(self, out[0])

    def __iter__(self):
        while True:
            b = self.next()
            if b is None:
                return
            yield b

    def rewind(self):
        self._gen += 1
        check(lib.hx_reader_rewind(self._h()))

    def stats(self):
        """This epoch's counts; malformed_by_reason maps each reason's name
        (hx_malformed_reason_name, e.g. "bad label") to its count."""
        s = ffi.new("hx_reader_stats *")
        check(lib.hx_reader_stats_get(self._h(), s))
        d = to_dict(s)
        d["malformed_by_reason"] = {text(lib.hx_malformed_reason_name(i)): n
                                    for i, n in enumerate(d["malformed_by_reason"])}
        return d

    def close(self):
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            lib.hx_reader_close(ptr)

    __del__ = close


class Generator:
    """Generator(**fields): Criteo-schema rows as a pure function of (seed, row)
    (hx_generator_config fields by name: seed, n_rows, first_row, batch_size,
    n_numeric, n_categorical, vocab_size, zipf_exponent, missing_rate, bias,
    weight_scale, n_threads). Iterate it for an epoch of Batches; logits()
    gives the planted logits of the last batch; write_tsv(path, **fields)
    writes a file the "criteo" Reader reads back."""

    def __init__(self, **fields):
        self._ptr = None
        self._gen = 0
        cfg = ffi.new("hx_generator_config *", lib.hx_generator_config_default())
        set_fields(cfg, fields, "Generator")
        out = ffi.new("hx_generator **")
        check(lib.hx_generator_create(cfg, out))
        self._ptr = out[0]
        self._n = 0

    def _h(self):
        if self._ptr is None:
            raise StateError("the generator is closed")
        return self._ptr

    def next(self):
        out = ffi.new("const hx_batch **")
        self._gen += 1
        check(lib.hx_generator_next(self._h(), out))
        if out[0] == ffi.NULL:
            return None
        b = Batch(self, out[0])
        self._n = b.n
        return b

    def __iter__(self):
        while True:
            b = self.next()
            if b is None:
                return
            yield b

    def logits(self):
        p = lib.hx_generator_logits(self._h())
        return _array(p, "float", self._n, np.float32, (self._n,))

    def rewind(self):
        self._gen += 1
        check(lib.hx_generator_rewind(self._h()))

    def close(self):
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            lib.hx_generator_free(ptr)

    __del__ = close

    @staticmethod
    def write_tsv(path, **fields):
        cfg = ffi.new("hx_generator_config *", lib.hx_generator_config_default())
        set_fields(cfg, fields, "Generator.write_tsv")
        check(lib.hx_generator_write_tsv(cfg, os.fspath(path).encode()))


def feature_column(kind, name, source=-1, boundaries=None, crossed=None, **fields):
    """A feature column description (a dict Features takes): kind "numeric",
    "bucketized", "vocabulary", "hashed" or "crossed"; source the batch
    column (Reader.find); boundaries (bucketized), crossed (indices of 2 or 3
    earlier id-valued columns); other hx_feature_column fields by name
    (log1p, standardize, n_quantiles, min_count, oov_buckets, hash_buckets,
    hash_seed, wide)."""
    d = dict(kind=kind, name=name, source=source, **fields)
    if boundaries is not None:
        d["boundaries"] = list(boundaries)
    if crossed is not None:
        d["crossed"] = list(crossed)
    return d


class Features:
    """Features(columns, embeddings=(), n_numeric=0, n_categorical=0): feature
    columns (feature_column dicts) and embedding columns ((name, [columns],
    dim) tuples), fitted on a training pass (fit)."""

    def __init__(self, columns, embeddings=(), n_numeric=0, n_categorical=0):
        self._ptr = None
        keep = []
        cols = ffi.new("hx_feature_column[]", len(columns))
        for i, c in enumerate(columns):
            c = dict(c)
            kind = _enum_value("HX_FEATURE_", "feature kind", c.pop("kind"),
                               ("numeric", "bucketized", "vocabulary", "hashed", "crossed"))
            name = ffi.new("char[]", c.pop("name").encode())
            keep.append(name)
            cols[i] = lib.hx_feature_column_default(kind, name, int(c.pop("source", -1)))
            b = c.pop("boundaries", None)
            if b is not None:
                arr = ffi.new("double[]", [float(v) for v in b])
                keep.append(arr)
                cols[i].boundaries, cols[i].n_boundaries = arr, len(b)
            cr = c.pop("crossed", None)
            if cr is not None:
                if not 2 <= len(cr) <= 3:
                    raise InvalidArgumentError(f"feature column '{ffi.string(name).decode()}': "
                                               "crossed takes 2 or 3 columns")
                cols[i].crossed = list(cr) + [-1] * (3 - len(cr))
                cols[i].n_crossed = len(cr)
            set_fields(ffi.addressof(cols[i]), c, "feature column", None, keep)
        embs = ffi.new("hx_embedding_column[]", max(1, len(embeddings)))
        for i, (ename, ecols, dim) in enumerate(embeddings):
            en = ffi.new("char[]", ename.encode())
            ec = ffi.new("int[]", [int(v) for v in ecols])
            keep += [en, ec]
            embs[i].name, embs[i].columns, embs[i].n_columns, embs[i].dim = en, ec, len(ecols), dim
        cfg = ffi.new("hx_features_config *", lib.hx_features_config_default())
        cfg.columns, cfg.n_columns = cols, len(columns)
        cfg.embeddings, cfg.n_embeddings = (embs if embeddings else ffi.NULL), len(embeddings)
        cfg.n_numeric, cfg.n_categorical = n_numeric, n_categorical
        out = ffi.new("hx_features **")
        check(lib.hx_features_create(cfg, out))
        self._ptr = out[0]
        self.n_columns = len(columns)

    def _h(self):
        if self._ptr is None:
            raise StateError("the features are closed")
        return self._ptr

    def fit(self, reader):
        """Reads the reader's epoch to its end, finishes, rewinds the reader."""
        reader._gen += 1
        check(lib.hx_features_fit(self._h(), reader._h()))

    def fit_batch(self, batch):
        check(lib.hx_features_fit_batch(self._h(), batch._handle()))

    def fit_finish(self):
        check(lib.hx_features_fit_finish(self._h()))

    def info(self, column):
        """What column `column` became (dense, index, cardinality, boundaries, ...)."""
        i = ffi.new("hx_feature_info *")
        check(lib.hx_features_info(self._h(), int(column), i))
        d = to_dict(i)
        d["boundaries"] = [i.boundaries[k] for k in range(i.n_boundaries)]
        return d

    def lookup(self, column, raw_id):
        out = ffi.new("int64_t *")
        check(lib.hx_features_lookup(self._h(), int(column), int(raw_id), out))
        return out[0]

    def shape(self):
        """dense_dim, n_id_columns, n_wide, wide_dim."""
        s = ffi.new("hx_features_shape *")
        check(lib.hx_features_shape_get(self._h(), s))
        return to_dict(s)

    def embedding(self, e, n_columns):
        """(rows, offsets) of embedding column e (offsets: one per its n_columns columns)."""
        rows = ffi.new("int64_t *")
        offs = np.zeros(n_columns, np.int64)
        check(lib.hx_features_embedding(self._h(), int(e), rows,
                                        ffi.from_buffer("int64_t[]", offs)))
        return rows[0], offs

    def transform(self, batch, capacity=None):
        """A dict of numpy arrays for the batch: labels (n), dense (n,
        dense_dim), ids (n_id_columns, n), wide_ids (n * n_wide), wide_offsets (n + 1)."""
        n = batch.n
        cap = max(1, capacity or n)
        fb = ffi.new("hx_feature_batch *")
        check(lib.hx_feature_batch_alloc(self._h(), cap, fb))
        try:
            check(lib.hx_features_transform(self._h(), batch._handle(), fb))
            sh = self.shape()
            d, k, w = sh["dense_dim"], sh["n_id_columns"], sh["n_wide"]
            n = fb.n
            wide_n = fb.wide_offsets[n] if n else 0
            return {"labels": _array(fb.labels, "float", n, np.float32, (n,)),
                    "dense": _array(fb.dense, "float", n * d, np.float32, (n, d)),
                    "ids": _array(fb.ids, "int64_t", n * k, np.int64, (k, n)),
                    "wide_ids": _array(fb.wide_ids, "int64_t", wide_n, np.int64, (wide_n,)),
                    "wide_offsets": _array(fb.wide_offsets, "int64_t", n + 1, np.int64, (n + 1,)),
                    "n_wide": w}
        finally:
            lib.hx_feature_batch_free(fb)

    def close(self):
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            lib.hx_features_free(ptr)

    __del__ = close


def _attach_contracts():
    from ._doc import attach_methods
    attach_methods(Reader, {"__init__": "hx_reader_open", "next": "hx_reader_next",
                            "rewind": "hx_reader_rewind", "stats": "hx_reader_stats_get",
                            "close": "hx_reader_close", "find": "hx_reader_config_find"})
    attach_methods(Generator, {"__init__": "hx_generator_create", "next": "hx_generator_next",
                               "logits": "hx_generator_logits", "rewind": "hx_generator_rewind",
                               "close": "hx_generator_free", "write_tsv": "hx_generator_write_tsv"})
    attach_methods(Features, {"__init__": "hx_features_create", "fit": "hx_features_fit",
                              "fit_batch": "hx_features_fit_batch",
                              "fit_finish": "hx_features_fit_finish", "info": "hx_features_info",
                              "lookup": "hx_features_lookup", "shape": "hx_features_shape_get",
                              "embedding": "hx_features_embedding",
                              "transform": "hx_features_transform", "close": "hx_features_free"})


_attach_contracts()
