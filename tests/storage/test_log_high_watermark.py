"""The high watermark of a PartitionLog: a plain attribute, read on every Produce and
Fetch, moved only by ``PartitionLog.update_high_watermark``, which lets the producer
state forget the transactions whose markers it passed (issue 46: a follower that never
computes its last stable offset must not keep them). Read as an attribute, it could be
assigned past that method: this holds the tree to the one way of moving it."""

from __future__ import annotations

import ast
from pathlib import Path

import odradek

SRC = Path(odradek.__file__).parent
LOG = SRC / "storage" / "log.py"
# Where ``high_watermark`` may be assigned in storage/log.py: set at creation, moved.
ALLOWED_IN_LOG = {"__init__", "update_high_watermark"}


def _stores(tree: ast.AST) -> list[tuple[str, ast.expr, int]]:
    """(enclosing function, the object, line) of every store to ``<x>.high_watermark``
    and every ``setattr(<x>, "high_watermark", ...)``."""
    found: list[tuple[str, ast.expr, int]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if (isinstance(node, ast.Attribute) and node.attr == "high_watermark"
                and isinstance(node.ctx, ast.Store)):
            found.append((function, node.value, node.lineno))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "setattr" and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value == "high_watermark"):
            found.append((function, node.args[0], node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "<module>")
    return found


def test_only_update_high_watermark_moves_a_logs_high_watermark() -> None:
    """Outside storage/log.py a ``high_watermark`` may be stored only on ``self`` (another
    class's own field, e.g. a fetch session's partition); inside it, only where the log
    sets it at creation and in ``update_high_watermark``."""
    wrong: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        for function, target, line in _stores(ast.parse(path.read_text(), str(path))):
            on_self = isinstance(target, ast.Name) and target.id == "self"
            if path == LOG:
                if not (on_self and function in ALLOWED_IN_LOG):
                    wrong.append(f"{path.relative_to(SRC)}:{line} in {function}")
            elif not on_self:
                wrong.append(f"{path.relative_to(SRC)}:{line} in {function}")
    assert wrong == [], "use PartitionLog.update_high_watermark"


def test_the_check_sees_an_assignment_through_another_name() -> None:
    tree = ast.parse("def step(log):\n    log.high_watermark = 3\n"
                     "def other(log):\n    setattr(log, 'high_watermark', 4)\n")
    assert [(f, line) for f, _t, line in _stores(tree)] == [("step", 2), ("other", 4)]
