"""The header's contract blocks (what each C function does, its failures,
ownership and threads) appended to the docstrings of the Python calls that
wrap them. _contracts.py is generated from include/hetex.h when the
package is built."""
import textwrap

try:
    from ._contracts import CONTRACTS
except ImportError:  # pragma: no cover - a source tree that was never built
    CONTRACTS = {}


def contract(name):
    """The contract block of C function `name` (e.g. "hx_session_run") in
    include/hetex.h; KeyError for a name the header does not declare."""
    return CONTRACTS[name]


def attach(fn, *names):
    """Appends the contracts of the C functions `names` to fn's docstring."""
    target = getattr(fn, "__func__", fn)
    parts = [textwrap.dedent(target.__doc__ or "").strip()]
    for n in names:
        if n in CONTRACTS:
            parts.append(f"C contract ({n}, include/hetex.h):\n"
                         + textwrap.indent(CONTRACTS[n], "    "))
    target.__doc__ = "\n\n".join(p for p in parts if p)
    return fn


def attach_methods(cls, mapping):
    """attach() for each method name -> C function name(s) of cls."""
    for meth, names in mapping.items():
        names = (names,) if isinstance(names, str) else names
        attr = cls.__dict__[meth]
        if isinstance(attr, property):  # a property copies its getter's doc when made
            attach(attr.fget, *names)
            setattr(cls, meth, property(attr.fget, attr.fset, attr.fdel, attr.fget.__doc__))
        else:
            attach(attr, *names)
