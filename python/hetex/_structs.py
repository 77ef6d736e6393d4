"""C structs of the header to and from Python dicts, field by field, by the
names the header gives them (read from cffi's type information, so a field
added to the header shows up here without a change)."""
from ._lib import ffi
from .errors import InvalidArgumentError


def to_dict(cdata):
    """A struct's fields as a dict: nested structs as dicts, char arrays as
    str, other arrays as lists, pointers left out."""
    t = ffi.typeof(cdata)
    if t.kind == "pointer":
        cdata, t = cdata[0], t.item
    out = {}
    for fname, field in t.fields:
        ft = field.type
        v = getattr(cdata, fname)
        if ft.kind == "struct":
            out[fname] = to_dict(v)
        elif ft.kind == "array":
            out[fname] = ffi.string(v).decode("utf-8", "replace") if ft.item.cname == "char" \
                else list(v)
        elif ft.kind == "pointer":
            continue
        else:
            out[fname] = v
    return out


def set_fields(cdata, values, what, converters=None, keep=None):
    """Sets struct fields from a dict. converters maps a field name to a function
    taking the Python value and returning the C value (enum names, say); nested
    structs take dicts; char* fields take str (kept alive in `keep`); an unknown
    field raises InvalidArgumentError naming the known ones."""
    t = ffi.typeof(cdata)
    if t.kind == "pointer":
        t = t.item
        target = cdata[0]
    else:
        target = cdata
    fields = dict(t.fields)
    converters = converters or {}
    for key, v in values.items():
        if key not in fields:
            raise InvalidArgumentError(
                f"{what}: unknown setting '{key}'; known: {', '.join(sorted(fields))}")
        ft = fields[key].type
        if key in converters:
            v = converters[key](v)
        if ft.kind == "struct":
            if not isinstance(v, dict):
                raise InvalidArgumentError(f"{what}: '{key}' takes a dict of its fields")
            set_fields(ffi.addressof(target, key), v, f"{what}.{key}", None, keep)
            continue
        if ft.kind == "pointer" and ft.item.cname == "char":
            if v is None:
                v = ffi.NULL
            else:
                v = ffi.new("char[]", str(v).encode())
                if keep is not None:
                    keep.append(v)
        elif ft.kind == "array" and ft.item.cname == "char":
            b = str(v).encode()
            if len(b) >= ft.length:
                raise InvalidArgumentError(f"{what}: '{key}' is longer than {ft.length - 1} bytes")
            v = b
        try:
            setattr(target, key, v)
        except (TypeError, OverflowError) as e:
            raise InvalidArgumentError(f"{what}: '{key}' = {v!r}: {e}") from None
