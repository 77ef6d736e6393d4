"""Enum values of the header by their names: "cpu" -> HX_TARGET_CPU, etc."""
from ._lib import lib
from .errors import InvalidArgumentError


def value(prefix, what, name, allowed=None):
    """lib.<prefix><NAME> for a str name (case-insensitive, '-' as '_'), or an
    int passed through; InvalidArgumentError naming `what` for an unknown one."""
    if isinstance(name, int) and not isinstance(name, bool):
        return name
    if isinstance(name, str):
        key = name.strip().upper().replace("-", "_")
        if allowed is None or key.lower() in allowed:
            v = getattr(lib, prefix + key, None)
            if v is not None:
                return v
    names = allowed or sorted(n[len(prefix):].lower() for n in dir(lib) if n.startswith(prefix))
    raise InvalidArgumentError(f"{what}: unknown value {name!r}; use one of {', '.join(names)}")


def name(prefix, v):
    """The lower-case name of enum value v among lib.<prefix>*."""
    for n in dir(lib):
        if n.startswith(prefix) and getattr(lib, n) == v:
            return n[len(prefix):].lower()
    return str(v)
