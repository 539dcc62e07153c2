"""The README and the documentation site: the README stays short and stands alone for the two
commands and the walkthrough; docs/ builds as a site with no broken link; nothing points outside
the repository."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_LIMIT = 12 * 1024  # bytes: read in five minutes


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)].rstrip()


def test_the_readme_is_read_in_five_minutes():
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes; move what is not the two commands or the walkthrough to docs/"


def test_the_readme_has_exactly_two_set_up_commands():
    blocks = re.findall(r"```sh\n(.*?)```", _section(README.read_text(), "Two commands"), re.S)
    assert len(blocks) == 2 and all(len(block.strip().splitlines()) == 1 for block in blocks)
    assert "manage.py serve" in blocks[0] and "-m pytest" in blocks[1]


def test_getting_started_repeats_the_readme_word_for_word():
    readme, page = README.read_text(), (DOCS / "getting-started.md").read_text()
    for title in ("Two commands", "Five minutes: an agent asks, you answer in the browser"):
        assert _section(readme, title) == _section(page, title), f"README and docs/getting-started.md differ in {title!r}"


def test_the_walkthrough_asks_nothing_and_names_no_fixed_port():
    walkthrough = _section(README.read_text(), "Five minutes: an agent asks, you answer in the browser")
    assert "createsuperuser" not in walkthrough, "interactive: without a TTY it skips and exits 0"
    shell = "\n".join(re.findall(r"```sh\n(.*?)```", README.read_text(), re.S))
    assert ":8000" not in shell, "the README's shell lines use $PORT"


def test_nothing_points_outside_the_repository():
    for page in _pages():
        text = page.read_text()
        assert "../shared" not in text and "SPEC" not in text and "§" not in text, page


def test_the_site_builds_with_no_broken_link(tmp_path):
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "site" / "agents" / "mcp" / "index.html").exists()


def _tree_names(indent: int) -> list[tuple[str, list[str]]]:
    """The architecture page's tree: (line's names, their parent's path) at ``indent`` spaces under
    ``askcards/`` — ``models/``, ``outbox.py``, ``admin/, management/commands/`` name entries."""
    block = (DOCS / "architecture.md").read_text(encoding="utf-8").split("```")[1]
    found, parent = [], ""
    for line in block.splitlines():
        depth = len(line) - len(line.lstrip(" "))
        head = re.match(r"\s*((?:[a-z_]+(?:/[a-z_]+)*/?(?:\.py)?)(?:, [a-z_]+(?:/[a-z_]+)*/?(?:\.py)?)*)(?:\s{2,}|$)", line)
        if head is None or depth not in (2, 4):
            continue
        names = head.group(1).split(", ")
        if depth == 2:
            parent = names[0]
        if depth == indent:
            found.append((parent if depth == 4 else "", names))
    return found


def test_the_architecture_page_names_every_module_of_the_tree_and_no_other():
    """Every package and loose module of askcards/ has its line on the architecture page, and every
    entry there (``services/``'s modules too) exists: a move or a new room updates the page."""
    package = ROOT / "askcards"
    named = {name.split("/")[0].removesuffix("/") for _, names in _tree_names(2) for name in names}
    present = {path.name for path in package.iterdir() if not path.name.startswith(("_", "."))
               and (path.suffix == ".py" or (path / "__init__.py").exists())}
    assert named == present - {"apps.py", "migrations"}
    services = {name for parent, names in _tree_names(4) if parent == "services/" for name in names}
    assert services == {path.name for path in (package / "services").glob("*.py")} - {"__init__.py"}
