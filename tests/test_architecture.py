"""The arrows run one way: entry points → services → surfaces / outbox → models.

Read from the source (every ``import`` and ``from … import``, including those inside functions),
so a new import that runs an arrow backwards fails here, naming the module and what it imported.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "askcards"

ENTRY_POINTS = ("askcards.api", "askcards.mcp", "askcards.hosts", "askcards.callbacks", "askcards.pages", "askcards.admin",
                "askcards.worker", "askcards.management")

# (modules, what they must never import, why)
RULES = [
    ("askcards.models", ("askcards.services", "askcards.surfaces", "askcards.outbox", "askcards.selectors",
                         "askcards.tools", *ENTRY_POINTS), "models are the bottom room"),
    ("askcards.tools", ("askcards.models", "askcards.services", "askcards.surfaces", "askcards.outbox",
                        "askcards.selectors", "askcards.db", *ENTRY_POINTS), "tools are plain data in, data out"),
    ("askcards.surfaces", ("askcards.services", "askcards.outbox", *ENTRY_POINTS),
     "surfaces report outcomes; the worker and services act on them"),
    ("askcards.outbox", ("askcards.services", "askcards.surfaces", *ENTRY_POINTS),
     "the outbox reports outcomes; the worker acts on them"),
    ("askcards.selectors", ("askcards.services", "askcards.surfaces", "askcards.outbox", *ENTRY_POINTS),
     "selectors only read"),
    ("askcards.operators.dashboard", ("askcards.services", "askcards.surfaces", "askcards.outbox", *ENTRY_POINTS),
     "the dashboard's numbers only read"),
    ("askcards.operators.presenters", ("askcards.services", "askcards.surfaces", "askcards.outbox", "askcards.selectors",
                             "askcards.db", *ENTRY_POINTS), "presenters shape what is stored, for reading"),
    ("askcards.operators.charts", ("askcards",), "charts are geometry: plain data in, data out"),
    ("askcards.operators.timezones", ("askcards",), "the time zone middleware reads a cookie, nothing of askcards"),
    ("askcards.db", ("askcards.services", "askcards.surfaces", "askcards.outbox", "askcards.selectors",
                     *ENTRY_POINTS), "the database helpers sit under everything"),
    ("askcards.operators.metrics", ("askcards.services", "askcards.surfaces", "askcards.outbox", "askcards.tools", "askcards.db",
                          *ENTRY_POINTS),
     "services, surfaces and entry points count into the metrics; the metrics read the database through selectors"),
    ("askcards.services", ENTRY_POINTS, "services are called by entry points, never the other way"),
    ("askcards.http", ("askcards.services", "askcards.surfaces", "askcards.outbox", *ENTRY_POINTS),
     "the HTTP edge runs before askcards' own code and calls nothing above it"),
    ("askcards.wake", ("askcards.models", "askcards.services", "askcards.surfaces", "askcards.outbox", "askcards.selectors",
                       "askcards.db", *ENTRY_POINTS), "the wake path carries ids, never rows"),
    ("askcards.runtime", ("askcards.services", "askcards.surfaces", "askcards.outbox", "askcards.selectors", *ENTRY_POINTS),
     "the process's own plumbing knows no domain"),
    ("askcards.api", ("askcards.outbox", "askcards.mcp", "askcards.admin", "askcards.pages"),
     "the API writes through services only"),
    ("askcards.admin", ("askcards.outbox", "askcards.api", "askcards.mcp"), "the admin writes through services only"),
    ("askcards.pages", ("askcards.outbox", "askcards.api", "askcards.mcp"), "the pages and the panel socket are thin"),
    ("askcards.hosts", ("askcards.outbox", "askcards.admin", "askcards.pages", "askcards.api.views",
                        "askcards.surfaces"), "agent hosts call public services and selectors only"),
    ("askcards.mcp", ("askcards.outbox", "askcards.admin", "askcards.pages", "askcards.api.views",
                      "askcards.api.auth"), "MCP calls public services and selectors only"),
]

# Inside services, the domains import one another downwards only.
SERVICE_LAYERS = {
    "askcards.services.asks": 0,
    "askcards.services.retention": 0,
    "askcards.services.grants": 0,
    "askcards.services.waiters": 1,
    "askcards.services.feishu_progress": 1,
    "askcards.services.sessions": 2,
    "askcards.services.agents": 2,
    "askcards.services.tool_calls": 3,
    "askcards.services.dingtalk": 4,
    "askcards.services.feishu": 3,
    "askcards.services.hosts": 4,
    "askcards.services.host_app": 1,
    "askcards.services.host_surface": 5,
}


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, root: Path = PACKAGE) -> set[str]:
    """Every askcards module ``path`` imports, as dotted names (``from x import y`` gives x and x.y)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {target for target in found if target == "askcards" or target.startswith("askcards.")}


def within(name: str, room: str) -> bool:
    return name == room or name.startswith(room + ".")


SOURCES = {module_name(path): path for path in PACKAGE.rglob("*.py") if "migrations" not in path.parts}


@pytest.mark.parametrize("room, forbidden, why", RULES, ids=[rule[0] for rule in RULES])
def test_no_arrow_runs_backwards(room, forbidden, why):
    wrong = sorted(
        f"{name} imports {target}"
        for name, path in SOURCES.items()
        if within(name, room)
        for target in imports(path)
        if any(within(target, other) for other in forbidden)
    )
    assert not wrong, f"{why}:\n" + "\n".join(wrong)


def test_service_domains_import_downwards_only():
    wrong = []
    for name, layer in SERVICE_LAYERS.items():
        for target in imports(SOURCES[name]):
            other = next((module for module in SERVICE_LAYERS if within(target, module)), None)
            if other is not None and other != name and SERVICE_LAYERS[other] >= layer:
                wrong.append(f"{name} imports {target}")
    assert not wrong, "\n".join(wrong)


# Where no two modules import each other (the hub owns the bus; the bus imports what they share).
NO_TWO_CYCLES = ("askcards.api", "askcards.wake")


def mutual_imports(sources: dict[str, Path], room: str, root: Path = PACKAGE) -> list[str]:
    """The pairs of modules in ``room`` that import each other. A submodule naming its own package
    (``from . import x``) is not counted: the package holds it."""
    graph = {
        name: {target for target in imports(path, root) if target in sources and not within(name, target)}
        for name, path in sources.items()
        if within(name, room)
    }
    return sorted(f"{name} and {other}" for name, targets in graph.items() for other in targets
                  if name < other and name in graph.get(other, ()))


@pytest.mark.parametrize("room", NO_TWO_CYCLES)
def test_no_two_modules_import_each_other(room):
    wrong = mutual_imports(SOURCES, room)
    why = "a pair that imports each other has no arrow between them: one must sit under the other"
    assert not wrong, f"{why}:\n" + "\n".join(wrong)


def test_the_lifecycle_core_names_no_tool():
    for name in ("askcards.services.asks", "askcards.services.tool_calls"):
        source = SOURCES[name].read_text(encoding="utf-8")
        named = [tool for tool in ("ask_user_questions", "dingtalk") if tool in source]
        assert not named, f"{name} names {named}: a tool's lifecycle belongs in its hooks"


def test_the_checker_sees_a_backwards_arrow(tmp_path):
    """The rules above can fail: an import inside a function is found, a relative one resolved."""
    fake = tmp_path / "askcards" / "surfaces" / "x.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("from . import base\n\ndef f():\n    from .. import services\n")
    found = imports(fake, tmp_path / "askcards")
    assert {"askcards.surfaces.base", "askcards.services"} <= found


def test_the_checker_sees_two_modules_import_each_other(tmp_path):
    """The pair check can fail: an import inside a function counts; a submodule naming its package does not."""
    api = tmp_path / "askcards" / "api"
    api.mkdir(parents=True)
    (api / "__init__.py").write_text("from . import a\n")
    (api / "a.py").write_text("from . import b\n")
    (api / "b.py").write_text("def f():\n    from .a import x\n")
    sources = {module_name(path, tmp_path / "askcards"): path for path in (tmp_path / "askcards").rglob("*.py")}
    assert mutual_imports(sources, "askcards.api", tmp_path / "askcards") == ["askcards.api.a and askcards.api.b"]
