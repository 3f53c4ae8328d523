#!/usr/bin/env python3
"""The largest modules and functions, by line count.

How it works: every ``*.py`` file under the given paths (default ``src``) is parsed with
:mod:`ast`; a module's size is its number of lines, a function's (methods and nested
functions included, each counted on its own) the lines from its ``def`` to its last
statement, decorators and docstring included. Classes are listed too, as one more view of
where the bulk is. Nothing is imported or run, so it works on any checkout with any
Python >= 3.8.

    python3 scripts/code_size.py                          # src/, the top 15 of each
    python3 scripts/code_size.py src/odradek/server --top 10
    python3 scripts/code_size.py src --over 60            # every function over 60 lines
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def _sources(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return files


def _definitions(tree: ast.Module) -> list[tuple[str, str, int, int]]:
    """(kind, qualified name, first line, lines) of every function and class."""
    found: list[tuple[str, str, int, int]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                lines = (child.end_lineno or child.lineno) - first + 1
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                found.append((kind, prefix + child.name, child.lineno, lines))
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(tree, "")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("paths", nargs="*", type=Path, default=[Path("src")])
    parser.add_argument("--top", type=int, default=15, help="rows of each table")
    parser.add_argument("--over", type=int, help="instead: every function over N lines")
    args = parser.parse_args(argv)
    modules: list[tuple[int, str]] = []
    functions: list[tuple[int, str]] = []
    classes: list[tuple[int, str]] = []
    for path in _sources(args.paths):
        text = path.read_text(encoding="utf-8")
        modules.append((len(text.splitlines()), str(path)))
        for kind, name, line, lines in _definitions(ast.parse(text, str(path))):
            where = f"{path}:{line} {name}"
            (classes if kind == "class" else functions).append((lines, where))
    if args.over is not None:
        over = sorted((f for f in functions if f[0] > args.over), reverse=True)
        for lines, where in over:
            print(f"{lines:6,}  {where}")
        print(f"{len(over)} functions over {args.over} lines")
        return 0
    for title, rows in (("modules", modules), ("classes", classes), ("functions", functions)):
        print(f"| lines | largest {title} |")
        print("|---:|---|")
        for lines, where in sorted(rows, reverse=True)[: args.top]:
            print(f"| {lines:,} | `{where}` |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
