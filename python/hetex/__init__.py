"""hetex: train models on a CPU and an accelerator together.

The Python binding of the hetex C library (include/hetex.h), through cffi
in API mode. Build a Graph of Tensors, mark where ops run (`with
g.target("cpu")`, or `target=` per op), add `backward` and an optimizer,
and run it in a Session. Every failure raises a subclass of hetex.Error
carrying the library's message.
"""
from . import init, ops, optim
from ._doc import contract
from ._lib import ffi as _ffi
from ._lib import lib as _lib
from .comm import Comm
from .data import Batch, Features, Generator, Reader, feature_column
from .dtypes import BF16_NUMPY, from_bf16, to_bf16
from .embedding import EmbeddingTable, hash_strings
from .errors import (CommError, CorruptError, DeviceOOMError, DtypeError, Error, IndexError,
                     InternalError, InvalidArgumentError, IOError, NoKernelError, NotFoundError,
                     NumericError, OutOfMemoryError, ShapeError, StateError, UnsupportedError)
from .graph import Graph, Tensor
from .ops import (add, avg_pool2d, batchnorm, bce_with_logits, bias_add, cast, causal_mask, concat,
                  conv2d, cross_entropy, div, dropout, embedding_bag, embedding_lookup, exp,
                  gather, gelu, gelu_erf, global_avg_pool2d, layernorm, log, log_softmax, matmul, max_pool2d,
                  mse, mul, permute, reduce_mean, reduce_sum, relu, reshape, scale, sigmoid,
                  slice, softmax, sqrt, sub, tanh, transpose)
from .memreplay import memreplay
from .session import DeviceBuffer, Session, offload_config

__version__ = _ffi.string(_lib.hx_version()).decode()

# `from hetex import *` leaves out IndexError and IOError, which would hide
# the builtins of the same names (use hetex.IndexError, hetex.IOError).
__all__ = [n for n in dir() if not n.startswith("_") and n not in ("IndexError", "IOError")]
