#!/usr/bin/env bash
# Checks every #include of the library, the tools and the examples against
# docs/arrows.txt (who may include whom).
#   .ci/check_arrows.sh [ROOT]        exit 1, naming FILE:LINE, the include
#                                     and the rule it breaks, for each
#                                     include that breaks it
#   .ci/check_arrows.sh --dot [ROOT]  the folders and the include arrows the
#                                     code has, as Graphviz DOT
#                                     (docs/architecture.dot); arrows that
#                                     break a rule are red
# A header docs/arrows.txt lists as private to its folder is included by
# the folder's own files only, and not by the header the folder offers (not
# even through another of its headers): what it defines stays a complete
# type inside the folder.
# ROOT is a source tree (default: this repository). Only bash, find, grep, sort
# and a POSIX awk: CI needs nothing else.
set -euo pipefail
shopt -s nullglob

mode=check
if [ "${1:-}" = --dot ]; then mode=dot; shift; fi
[ $# -le 1 ] || { echo "usage: .ci/check_arrows.sh [--dot] [ROOT]" >&2; exit 2; }
root=${1:-$(dirname "$0")/..}
cd "$root"
rules=docs/arrows.txt
[ -r "$rules" ] || { echo "check_arrows.sh: no $rules under $root" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Every file of the tree, as an include may name any of them; hidden folders
# and build trees (those holding a CMakeCache.txt) are not sources.
{
  find . -maxdepth 1 -type f
  for d in ./*/; do
    [ -e "$d/CMakeCache.txt" ] || find "${d%/}" -type f -not -path '*/.*'
  done
} | sed 's|^\./||' | LC_ALL=C sort >"$tmp/files"

# Every #include line of the C and CUDA sources, as FILE:LINE:TEXT.
grep -E '\.(c|h|cu|cuh)$' "$tmp/files" | tr '\n' '\0' |
  xargs -0 -r grep -nHE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]' >"$tmp/includes" || true

awk -v mode="$mode" -v rules="$rules" -v files="$tmp/files" '
# The listed folder that holds path p (the longest one that is a prefix),
# else its first directory (or "." for a file at the root).
function folder_of(p,   f, best) {
    best = ""
    for (f in header)
        if (index(p, f "/") == 1 && length(f) > length(best)) best = f
    if (best != "") return best
    return index(p, "/") ? substr(p, 1, index(p, "/") - 1) : "."
}

# p with "." and ".." resolved; "" when it leaves the tree.
function normalize(p,   n, part, out, k, i, s) {
    n = split(p, part, "/")
    k = 0
    for (i = 1; i <= n; i++) {
        if (part[i] == "" || part[i] == ".") continue
        if (part[i] == "..") { if (k == 0) return ""; k--; continue }
        out[++k] = part[i]
    }
    s = ""
    for (i = 1; i <= k; i++) s = s (i > 1 ? "/" : "") out[i]
    return s
}

# The file of the tree that `#include name` in file `from` reads, as the
# build finds it: "..." first beside the including file, then include/ and
# the root (both on every include path). "" for a header not ours.
function resolve(from, name, quoted,   dir, p) {
    if (quoted) {
        dir = from
        sub(/[^\/]*$/, "", dir)
        p = normalize(dir name)
        if (p in exists) return p
    }
    p = normalize("include/" name)
    if (p in exists) return p
    p = normalize(name)
    return p in exists ? p : ""
}

# An include (or a source file) against the rules: listed in check mode,
# drawn red in the picture.
function fail(where, what) {
    if (mode == "check") print where ": " what
    nbad++
}

# The rules file itself is wrong: no check or picture can be trusted.
function bad_rules(what) {
    print rules ":" FNR ": " what > "/dev/stderr"
    nrules_bad++
}

FILENAME == rules {
    sub(/#.*/, "")
    if (NF == 0) next
    if ($1 == "private") { # checked once the folders are known (END)
        if (NF < 2) bad_rules("a private line names one or more headers")
        for (i = 2; i <= NF; i++) priv[$i] = FNR
        next
    }
    f = $1
    if (NF < 3) { bad_rules("a line needs a folder, its header (or -) and what it may include (-, * or folders)"); next }
    if (f in header) { bad_rules("folder " f " is listed twice"); next }
    if ($2 != "-" && index($2, f "/") != 1) bad_rules("the header " $2 " of " f " is not in " f "/")
    header[f] = $2
    name[++nf] = f
    for (i = 3; i <= NF; i++) {
        if ($i == "*") { any[f] = 1; continue }
        if ($i == "-") continue
        if (!($i in header) || $i == f)
            bad_rules(f " may include " $i ", which is not listed above it (arrows point to folders above)")
        may[f, $i] = 1
        list = f in allowed ? allowed[f] ", " : "" # (mawk makes allowed[f] before the right side)
        allowed[f] = list $i
    }
    next
}

FILENAME == files {
    exists[$0] = 1
    f = folder_of($0)
    if ($0 ~ /\.(c|h|cu|cuh)$/ && !(f in header) && !(f in unlisted)) {
        unlisted[f] = 1
        extra[++nextra] = f
        fail($0, "its folder " f " is not in " rules)
    }
    next
}

{   # FILE:LINE:TEXT
    file = substr($0, 1, index($0, ":") - 1)
    rest = substr($0, length(file) + 2)
    line = substr(rest, 1, index(rest, ":") - 1)
    text = substr(rest, length(line) + 2)
    a = folder_of(file)
    if (any[a] || !(a in header)) next
    if (!match(text, /["<][^">]*[">]/)) next
    inc = substr(text, RSTART + 1, RLENGTH - 2)
    quoted = substr(text, RSTART, 1) == "\""
    t = resolve(file, inc, quoted)
    if (t == "") next
    b = folder_of(t)
    if (b == a) { # kept for the headers a folder offers (END)
        k = ++nedge[file]
        edge_to[file, k] = t
        edge_at[file, k] = file ":" line ": #include " (quoted ? "\"" inc "\"" : "<" inc ">")
        next
    }
    uses[a, b]++
    where = file ":" line
    what = "#include " (quoted ? "\"" inc "\"" : "<" inc ">") ": "
    if (!(b in header)) {
        if (!(b in unlisted)) { unlisted[b] = 1; extra[++nextra] = b }
        what = what "folder " b " is not in " rules
    } else if (!((a, b) in may))
        what = what a " may not include " b " (" rules ": " a " -> " (a in allowed ? allowed[a] : "nothing of ours") ")"
    else if (t in priv)
        what = what t " is private to " b
    else if (t != header[b])
        what = what (header[b] == "-" ? "no folder may include " b "/" : b " offers only " header[b] " to other folders, not " t)
    else
        next
    bad[a, b] = 1
    fail(where, what)
}

function node(f, label) {
    printf "  \"%s\" [label=\"%s\"%s];\n", f, label, f in header ? "" : ", color=red, fontcolor=red"
}

# Fails on each private header that the header folder f offers brings in,
# through the includes among the files of f.
function leaks(f,   q, head, tail, x, k, t, seen) {
    q[tail = 1] = header[f]
    seen[header[f]] = 1
    for (head = 1; head <= tail; head++) {
        x = q[head]
        for (k = 1; k <= nedge[x]; k++) {
            t = edge_to[x, k]
            if (t in priv)
                fail(edge_at[x, k], t " is private to " f ", and " header[f] \
                     ", the header " f " offers, includes it" (x == header[f] ? "" : " through " x))
            else if (!(t in seen)) {
                seen[t] = 1
                q[++tail] = t
            }
        }
    }
}

END {
    for (h in priv) {
        f = folder_of(h)
        if (!(f in header) || any[f] || header[f] == h || !(h in exists)) {
            print rules ":" priv[h] ": private header " h " must be a file of a listed, checked " \
                  "folder other than the header it offers" > "/dev/stderr"
            nrules_bad++
        }
    }
    if (nrules_bad) exit 1
    for (i = 1; i <= nf; i++)
        if (!any[name[i]] && header[name[i]] != "-") leaks(name[i])
    if (mode == "dot") {
        print "// The folders of docs/arrows.txt and the #include arrows between them, as"
        print "// the code has them (label: how many includes). Red: against docs/arrows.txt."
        print "// Regenerate: .ci/check_arrows.sh --dot > docs/architecture.dot"
        print "// Render:     dot -Tsvg docs/architecture.dot > docs/architecture.svg"
        print "digraph hetex {"
        print "  node [shape=box, style=rounded, fontname=\"Helvetica\"];"
        print "  edge [fontname=\"Helvetica\", fontsize=10, color=gray40];"
        for (i = 1; i <= nf; i++)
            if (!any[name[i]]) node(name[i], name[i] (header[name[i]] == "-" ? "" : "\\n" header[name[i]]))
        for (i = 1; i <= nextra; i++) node(extra[i], extra[i] "\\n(not in docs/arrows.txt)")
        for (i = 1; i <= nf + nextra; i++)
            for (j = 1; j <= nf + nextra; j++) {
                a = i <= nf ? name[i] : extra[i - nf]
                b = j <= nf ? name[j] : extra[j - nf]
                if (!((a, b) in uses)) continue
                printf "  \"%s\" -> \"%s\" [label=\"%d\"%s];\n", a, b, uses[a, b],
                       (a, b) in bad ? ", color=red, fontcolor=red" : ""
            }
        print "}"
        exit 0
    }
    if (nbad) {
        printf "check_arrows.sh: %d problem(s) against %s\n", nbad, rules > "/dev/stderr"
        exit 1
    }
}' "$rules" "$tmp/files" "$tmp/includes"
