"""Optimizers: dense ones (update nodes of a graph, Graph.apply_optimizer)
and the sparse ones of embedding tables. Each starts from the frameworks'
defaults (hx_optimizer_config_default / hx_embedding_optimizer_default) and
takes the header's field names as keywords:

    hetex.optim.Adam(lr=1e-3, weight_decay=0.0, beta1=0.9, beta2=0.999, eps=1e-8)
    hetex.optim.LazyAdam(lr=1e-3)          # for EmbeddingTable(optimizer=...)

Hyper-parameters are checked by the library when the optimizer is applied
(InvalidArgumentError naming the field)."""
from ._lib import ffi, lib
from ._structs import set_fields, to_dict


class _Hyper:
    """A C optimizer config (_ctype) from its default for _kind (_default, a
    lib function), with the keywords set by the header's field names."""

    _ctype = _default = _kind = None

    def __init__(self, **hyper):
        c = ffi.new(self._ctype + " *", getattr(lib, self._default)(self._kind))
        set_fields(c, hyper, type(self).__name__)
        self._cfg = c

    def config(self):
        """The C config value."""
        return self._cfg[0]

    def __repr__(self):
        d = to_dict(self._cfg)
        d.pop("kind")
        return f"hetex.optim.{type(self).__name__}({', '.join(f'{k}={v}' for k, v in d.items())})"


class Optimizer(_Hyper):
    """A dense optimizer: kind (hx_optimizer_kind) and hyper-parameters."""

    _ctype, _default = "hx_optimizer_config", "hx_optimizer_config_default"


class SGD(Optimizer):
    _kind = lib.HX_OPTIMIZER_SGD


class Adam(Optimizer):
    _kind = lib.HX_OPTIMIZER_ADAM


class AdamW(Optimizer):
    _kind = lib.HX_OPTIMIZER_ADAMW


class Adagrad(Optimizer):
    _kind = lib.HX_OPTIMIZER_ADAGRAD


class FTRL(Optimizer):
    _kind = lib.HX_OPTIMIZER_FTRL


class EmbeddingOptimizer(_Hyper):
    """A table's sparse optimizer (hx_embedding_optimizer)."""

    _ctype, _default = "hx_embedding_optimizer", "hx_embedding_optimizer_default"
    _kind = lib.HX_EMBEDDING_OPTIMIZER_NONE


class LazyAdam(EmbeddingOptimizer):
    _kind = lib.HX_EMBEDDING_OPTIMIZER_LAZY_ADAM


class SparseAdagrad(EmbeddingOptimizer):
    _kind = lib.HX_EMBEDDING_OPTIMIZER_ADAGRAD


class RowWiseAdagrad(EmbeddingOptimizer):
    _kind = lib.HX_EMBEDDING_OPTIMIZER_ROW_ADAGRAD


class SparseFTRL(EmbeddingOptimizer):
    _kind = lib.HX_EMBEDDING_OPTIMIZER_FTRL
