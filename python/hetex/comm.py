"""Communicators: data parallel training over MPI (hx_comm).

    comm = hetex.Comm()                    # over MPI_COMM_WORLD
    s = hetex.Session(g, comm=comm, zero_stage=1, seed=7, ...)
    t = hetex.EmbeddingTable(rows, dim, comm=comm, sharding="rows")

Run the script under mpirun (`mpirun -np 4 python train.py`; alone it is
one rank): every rank runs it, creates its communicators, sessions and
sharded tables in the same order (those calls are collective) and feeds
its share of the global batch. A program that uses mpi4py passes its
communicator: `hetex.Comm(MPI.COMM_WORLD)` or any communicator it made
(every rank of that one calls it).

MPI starts with the first Comm where nobody started it, and cannot start
again in a process once it stopped; the library stops MPI it started when
its last communicator is freed. So that Comm objects can come and go, the
package holds one communicator of its own over MPI_COMM_WORLD from the
first Comm() of the world until the interpreter exits. A library built
without MPI (CMake found none, or HX_MPI=OFF) raises UnsupportedError from
Comm(), with the library's message saying how to get a build with MPI.

Lifetimes: sessions and tables created with a Comm hold it, so it is freed
only after them; close() frees it now and raises StateError while one of
them is alive.
"""
import atexit
import weakref

from ._lib import ffi, lib
from .errors import InvalidArgumentError, StateError, UnsupportedError, check

_world_anchor = None  # the package's own world communicator (see the module)


def _drop_anchor():
    global _world_anchor
    anchor, _world_anchor = _world_anchor, None
    if anchor is not None:
        lib.hx_comm_free(anchor)


atexit.register(_drop_anchor)


def _create(mpi_comm, timeout_s):
    cfg = ffi.new("hx_comm_config *", lib.hx_comm_config_default())
    if mpi_comm is not None:
        cfg.mpi_comm = ffi.cast("void *", mpi_comm)
    if timeout_s is not None:
        cfg.timeout_s = timeout_s
    out = ffi.new("hx_comm **")
    try:
        check(lib.hx_comm_create(cfg, out))
    except UnsupportedError as e:  # a library without MPI: how to get the package with it
        raise UnsupportedError(
            f"{e} -- for this Python package: with Open MPI installed, `pip install ./python` "
            "again (the library is built with MPI when CMake finds it), or link an install "
            "that has it (HETEX_PREFIX)") from None
    return out[0]


def _mpi_comm_address(mpi_comm):
    """The address of an MPI_Comm handle: an int, or an mpi4py communicator's."""
    if mpi_comm is None or isinstance(mpi_comm, int) and not isinstance(mpi_comm, bool):
        return mpi_comm
    mod = type(mpi_comm).__module__ or ""
    if mod.startswith("mpi4py"):
        from mpi4py import MPI
        return MPI._addressof(mpi_comm)
    raise InvalidArgumentError(
        f"Comm: mpi_comm must be an mpi4py communicator or the address of an MPI_Comm (int), "
        f"not {type(mpi_comm).__name__}")


class Comm:
    """Comm(mpi_comm=None, timeout_s=None): hetex's duplicate of an MPI
    communicator (MPI_COMM_WORLD when mpi_comm is None; else an mpi4py
    communicator or the address of an MPI_Comm). timeout_s: a collective
    not complete after this long fails with CommError naming the ranks it
    waits for (None: the library's 300 s). A collective call: every rank of
    the communicator makes it, in the same order as its other collectives."""

    def __init__(self, mpi_comm=None, timeout_s=None):
        global _world_anchor
        self._ptr = None
        self._users = weakref.WeakSet()  # sessions and tables created with it
        address = _mpi_comm_address(mpi_comm)
        if timeout_s is not None:
            timeout_s = float(timeout_s)
        if address is None and _world_anchor is None:
            # MPI stays started while the package holds this one (see the module)
            _world_anchor = _create(None, None)
        self._ptr = _create(address, timeout_s)

    def _handle(self):
        if self._ptr is None:
            raise StateError("the communicator is closed")
        return self._ptr

    def _use(self, user):
        """The C handle for a session or table being created; it holds the Comm."""
        self._users.add(user)
        return self._handle()

    @property
    def rank(self):
        """This process's rank in the communicator."""
        return lib.hx_comm_rank(self._handle())

    @property
    def size(self):
        """The number of ranks."""
        return lib.hx_comm_size(self._handle())

    @property
    def bytes_sent(self):
        """Bytes this rank sent over the communicator since its creation."""
        return lib.hx_comm_bytes_sent(self._handle())

    def close(self):
        """Frees the communicator now; StateError while a session or table made
        with it is alive (close or drop those first)."""
        if self._ptr is None:
            return
        alive = [u for u in self._users if getattr(u, "_ptr", None) is not None]
        if alive:
            raise StateError(f"Comm.close: {len(alive)} session(s) or table(s) still use the "
                             "communicator: close them first")
        ptr, self._ptr = self._ptr, None
        lib.hx_comm_free(ptr)

    def __del__(self):
        # Its sessions and tables hold it, so none is alive by now.
        ptr = getattr(self, "_ptr", None)
        if ptr is not None:
            self._ptr = None
            lib.hx_comm_free(ptr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        if self._ptr is None:
            return "<hetex.Comm closed>"
        return f"<hetex.Comm rank {self.rank} of {self.size}>"


def comm_handle(comm, user, what):
    """The hx_comm * a config field takes: NULL for None, else comm's (which
    `user` then holds); InvalidArgumentError for anything but a Comm."""
    if comm is None:
        return ffi.NULL
    if not isinstance(comm, Comm):
        raise InvalidArgumentError(f"{what}: comm must be a hetex.Comm, not {type(comm).__name__}")
    return comm._use(user)


def _attach_contracts():
    from ._doc import attach_methods
    attach_methods(Comm, {"__init__": ("hx_comm_create", "hx_comm_config_default"),
                          "close": "hx_comm_free", "rank": "hx_comm_rank",
                          "size": "hx_comm_size", "bytes_sent": "hx_comm_bytes_sent"})


_attach_contracts()
