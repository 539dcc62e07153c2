"""Plain-data builders and card walkers shared by the Feishu tests."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from askcards.surfaces.feishu.cards import PendingAsk, ProgressView


def question(text: str = "Which database should we use?", *, header: str = "Database", multi: bool = False,
             labels: tuple[str, ...] = ("PostgreSQL", "SQLite"), description: str = "") -> dict[str, Any]:
    return {
        "question": text,
        "header": header,
        "options": [{"label": label, "description": description or f"About {label}"} for label in labels],
        "multiSelect": multi,
    }


def ask_id(n: int) -> str:
    return f"q_{n:032x}"


def pending(n: int, questions: list[dict[str, Any]] | None = None, sender: str = "ou_alice") -> PendingAsk:
    return PendingAsk(id=ask_id(n), questions=questions or [question()], sender=sender)


def big_ask(n: int) -> PendingAsk:
    """Four questions of four options, every text at the tool schema's maximum length."""
    questions = [
        question("长" * 2000, header=f"问题{i}" + "很" * 9, multi=bool(i % 2),
                 labels=tuple(f"{i}-{j}-" + "选项" * 98 for j in range(4)), description="说明*<at id=all>" * 100)
        for i in range(4)
    ]
    return pending(n, questions)


def view(status: str = "running", asks: tuple[PendingAsk, ...] = (), **kwargs: Any) -> ProgressView:
    defaults = {"title": "Refactor the parser", "content": "Step 2 of 5: reading files", "session_id": "s_1",
                "sender": "ou_alice"}
    return ProgressView(status=status, asks=asks, **{**defaults, **kwargs})


def walk(node: Any, inside_form: str | None = None) -> Iterator[tuple[dict[str, Any], str | None]]:
    """Every tagged object of a card with the name of the form it sits in (None outside forms)."""
    if isinstance(node, dict):
        if "tag" in node:
            yield node, inside_form
            if node["tag"] == "form":
                inside_form = node["name"]
        for value in node.values():
            yield from walk(value, inside_form)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value, inside_form)


def tagged(card: dict[str, Any], tag: str) -> list[dict[str, Any]]:
    return [element for element, _ in walk(card) if element["tag"] == tag]


def forms(card: dict[str, Any]) -> list[dict[str, Any]]:
    return [element for element in card["body"]["elements"] if element["tag"] == "form"]


def texts(card: dict[str, Any]) -> str:
    """All text a person can read on the card, joined."""
    parts = []
    for element, _ in walk(card):
        if "content" in element:
            parts.append(element["content"])
    return "\n".join(parts)
