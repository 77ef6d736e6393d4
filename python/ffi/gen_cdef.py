"""The cffi declarations of the binding, made from include/hetex.h itself.

The header is the one source of the binding's types and functions: this
module turns it into what cffi's cdef() takes, mechanically, so that the
binding cannot drift from it (a declaration added to the header is in the
next build; a header this script cannot read fails the build, naming the
line). The rules:

- comments go (block and line);
- preprocessor conditionals are evaluated with the macros the header itself
  defines (`#ifdef __cplusplus` is false, `#ifndef HETEX_H` true, `#if
  defined(HX_BUILDING_LIBRARY)` false); any other `#if` expression is an
  error;
- `#include` lines go (cffi knows the standard integer types and bool);
- a macro defined empty (HX_API) is removed wherever it is used;
- a macro with a value becomes `#define NAME ...`, whose value the C
  compiler fills in when cffi builds the module (API mode), so casts and
  shifts in it need no parsing here.

cffi then checks every struct's layout and every function's signature
against the real header when it compiles the module.
"""

import re
import sys

_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_DEFINED = re.compile(r"^defined\s*\(\s*([A-Za-z_]\w*)\s*\)$|^defined\s+([A-Za-z_]\w*)$")


class HeaderError(Exception):
    """The header holds something this generator does not read."""


def _strip_comments(text):
    # Keep newlines inside block comments so that line numbers stay right.
    text = _BLOCK_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return _LINE_COMMENT.sub("", text)


def _condition(expr, macros, lineno):
    expr = expr.strip()
    neg = expr.startswith("!")
    if neg:
        expr = expr[1:].strip()
    m = _DEFINED.match(expr)
    if not m:
        raise HeaderError(f"line {lineno}: cannot evaluate '#if {expr}'")
    value = (m.group(1) or m.group(2)) in macros
    return not value if neg else value


def cdef_from_header(text):
    """The cdef text for the header `text` (its whole contents)."""
    macros = {}
    stack = []  # (active, taken) per open conditional
    out = []
    lines = _strip_comments(text).split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        lineno = i + 1
        # continuation lines of a directive
        while line.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line.rstrip()[:-1] + " " + lines[i]
        i += 1
        active = all(a for a, _ in stack)
        s = line.strip()
        if not s.startswith("#"):
            if active and s:
                out.append(line)
            continue
        directive = s[1:].strip()
        word, _, rest = directive.partition(" ")
        rest = rest.strip()
        if word in ("ifdef", "ifndef"):
            value = rest in macros
            value = value if word == "ifdef" else not value
            stack.append([value, value])
        elif word == "if":
            value = _condition(rest, macros, lineno) if active else False
            stack.append([value, value])
        elif word == "elif":
            if not stack:
                raise HeaderError(f"line {lineno}: #elif without #if")
            taken = stack[-1][1]
            value = not taken and _condition(rest, macros, lineno)
            stack[-1] = [value, taken or value]
        elif word == "else":
            if not stack:
                raise HeaderError(f"line {lineno}: #else without #if")
            stack[-1] = [not stack[-1][1], True]
        elif word == "endif":
            if not stack:
                raise HeaderError(f"line {lineno}: #endif without #if")
            stack.pop()
        elif not active:
            continue
        elif word == "include":
            continue
        elif word == "define":
            m = re.match(r"([A-Za-z_]\w*)(\([^)]*\))?\s*(.*)$", rest)
            if not m:
                raise HeaderError(f"line {lineno}: cannot read '#define {rest}'")
            name, params, value = m.group(1), m.group(2), m.group(3).strip()
            if params:
                raise HeaderError(f"line {lineno}: function-like macro {name} is not supported")
            macros[name] = value
            if value and name != "HETEX_H":
                out.append(f"#define {name} ...")
        else:
            raise HeaderError(f"line {lineno}: unsupported directive '#{word}'")
    if stack:
        raise HeaderError("unterminated #if at the end of the header")
    body = "\n".join(out)
    for name, value in macros.items():
        if value == "":
            body = re.sub(r"\b%s\b" % re.escape(name), "", body)
    return body + "\n"


_CONTRACT = re.compile(r"/\*(?P<block>(?:[^*]|\*(?!/))*)\*/(?P<decls>(?:\s*HX_API[^;]*;)+)")
_DECL_NAME = re.compile(r"\b(hx_\w+)\s*\(")


def contracts_from_header(text):
    """{function name: its contract block's text} for every HX_API function
    that directly follows a comment block (the block describes the run of
    declarations after it, as the header's conventions say)."""
    out = {}
    for m in _CONTRACT.finditer(text):
        lines = [ln.strip() for ln in m.group("block").strip("\n").split("\n")]
        body = "\n".join(ln[2:] if ln.startswith("* ") else ln.lstrip("*") for ln in lines)
        for decl in re.split(r";", m.group("decls")):
            n = _DECL_NAME.search(decl)
            if n:
                out[n.group(1)] = body.strip()
    return out


def main(argv):
    if len(argv) != 3:
        print("usage: gen_cdef.py HEADER OUT", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        text = f.read()
    try:
        cdef = cdef_from_header(text)
    except HeaderError as e:
        print(f"gen_cdef.py: {argv[1]}: {e}", file=sys.stderr)
        return 1
    with open(argv[2], "w", encoding="utf-8") as f:
        f.write(cdef)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
