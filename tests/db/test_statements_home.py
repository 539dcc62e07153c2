"""Every hand-written statement lives in askcards/db/statements/: no other module runs SQL text."""
from __future__ import annotations

import ast
from pathlib import Path

import askcards

PACKAGE = Path(askcards.__file__).parent
HOME = PACKAGE / "db" / "statements"
RUNS_SQL_TEXT = {"execute", "executemany", "raw", "extra", "RawSQL"}
NOT_SQL = {PACKAGE / "wake" / "bus.py"}  # its execute() runs Redis pipelines of PUBLISH commands, no SQL


def sql_calls(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in RUNS_SQL_TEXT:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {name}()")
    return found


def test_no_module_but_statements_runs_sql_text():
    found = [
        call
        for path in sorted(PACKAGE.rglob("*.py"))
        if HOME not in path.parents and path not in NOT_SQL and "migrations" not in path.parts
        for call in sql_calls(path)
    ]
    assert found == []


def test_the_check_finds_sql_text_where_it_is():
    assert any("execute()" in call for path in HOME.glob("*.py") for call in sql_calls(path))
