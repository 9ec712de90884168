#!/usr/bin/env python3
"""The size rule of docs/contributing.md, checked: no production source file
over 600 lines and no function over 120, except those listed in
docs/contributing.md's "Size" section (a line "- `path`" or
"- `path`: `Function`" each, with the reason beside it).

Function bodies are found without a compiler: comments, strings and
preprocessor lines are blanked, then a `{` that closes a parameter list at
namespace or class level opens a function, and its length runs to the
matching `}` (lambdas inside count towards their function). Good enough for
this code base's style; a miss shows as a function no longer than it is.

Usage: python3 scripts/size-check.py [--list]   (exit 1 when over the rule)
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_FILE, MAX_FUNCTION = 600, 120
SOURCE_DIRS = ("common", "contract", "kube", "operator", "services", "proto", "tools")
SKIP_PARTS = ("/tests/", "/bench/", "/fuzz/", "/examples/")
CONTROL = {"if", "for", "while", "switch", "catch", "return", "else", "do", "try", "sizeof", "alignof", "decltype"}


def sources():
    for top in SOURCE_DIRS:
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            rel_dir = os.path.relpath(dirpath, ROOT) + "/"
            if any(p in "/" + rel_dir for p in SKIP_PARTS):
                continue
            for f in sorted(files):
                if f.endswith((".cc", ".cu")):
                    yield os.path.join(rel_dir, f)


def blank(text):
    """Comments, string and char literals, and preprocessor lines as spaces
    (newlines kept, so line numbers hold)."""
    out, i, n = [], 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            j = i
            while j < n and (text[j] != "\n" or text[j - 1] == "\\"):
                j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "R" and text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            if m:
                end = text.find(")" + m.group(1) + '"', i)
                j = n if end < 0 else end + len(m.group(1)) + 2
                out.append(re.sub(r"[^\n]", " ", text[i:j]))
                i = j
                continue
        if c in "\"'":
            # A digit separator (1'000) is not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(c)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
            continue
        out.append(c)
        at_line_start = c == "\n" or (at_line_start and c in " \t")
        i += 1
    return "".join(out)


def functions(text):
    """(name, first line, lines) of each function body at namespace or
    class level."""
    code = blank(text)
    result = []
    stack = []  # for each open brace: "scope" (namespace/class/extern/enum/init) or "function"
    i, n = 0, len(code)
    last_stmt_end = 0
    while i < n:
        c = code[i]
        if c in ";}":
            if c == "}" and stack:
                kind, start, name = stack.pop()
                if kind == "function" and not any(k == "function" for k, _, _ in stack):
                    first = code.count("\n", 0, start) + 1
                    last = code.count("\n", 0, i) + 1
                    result.append((name, first, last - first + 1))
            last_stmt_end = i + 1
        elif c == "{":
            head = code[last_stmt_end:i].strip()
            if any(k == "function" for k, _, _ in stack):
                stack.append(("inner", i, ""))
            else:
                kind, name = "scope", ""
                if re.search(r"\)\s*(const|override|final|noexcept|mutable|&|&&|->[^{;]*|\s|TFJOB_\w+\([^)]*\)|\w+\s*\([^)]*\)\s*(,\s*\w+\s*\([^)]*\)\s*)*)*$", head) \
                        and not re.match(r"^(namespace|class|struct|union|enum|extern)\b", head):
                    m = re.search(r"([~\w:]+(?:operator\s*[^\s(]+)?)\s*\(", head)
                    word = m.group(1).split("::")[-1] if m else ""
                    if word and word not in CONTROL and not head.endswith("]") and "=" not in head.split("(")[0]:
                        kind, name = "function", m.group(1)
                stack.append((kind, i, name))
            last_stmt_end = i + 1
        i += 1
    return result


def allowed():
    """Exceptions from docs/contributing.md's Size section."""
    path = os.path.join(ROOT, "docs", "contributing.md")
    text = open(path).read()
    m = re.search(r"^## Size\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    files, funcs = set(), set()
    for line in (m.group(1) if m else "").splitlines():
        e = re.match(r"^- `([^`]+)`(?::\s*`([^`]+)`)?", line)
        if e:
            if e.group(2):
                funcs.add((e.group(1), e.group(2)))
            else:
                files.add(e.group(1))
    return files, funcs


def main():
    listing = "--list" in sys.argv
    ok_files, ok_funcs = allowed()
    over = []
    longest = []
    for rel in sources():
        text = open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace").read()
        lines = text.count("\n")
        if lines > MAX_FILE and rel not in ok_files:
            over.append(f"{rel}: {lines} lines (the rule: {MAX_FILE})")
        for name, first, length in functions(text):
            longest.append((length, rel, name, first))
            if length > MAX_FUNCTION and (rel, name) not in ok_funcs and (rel, name.split("::")[-1]) not in ok_funcs:
                over.append(f"{rel}:{first}: {name} is {length} lines (the rule: {MAX_FUNCTION})")
    if listing:
        for length, rel, name, first in sorted(longest, reverse=True)[:15]:
            print(f"{length:5d}  {rel}:{first}  {name}")
    if over:
        print("size-check: over the rule of docs/contributing.md (split it, or list it there with the reason):")
        for o in over:
            print("  " + o)
        return 1
    n = len(ok_files) + len(ok_funcs)
    print(f"size-check: every production file <= {MAX_FILE} lines and function <= {MAX_FUNCTION}" +
          (f", but the {n} exceptions docs/contributing.md lists" if n else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
