"""A person answering an agent host's prompts on askcards: a real ``serve`` seeded with an agent
granted alice, and alice's panel socket (a real WebSocket, signed in through the real login form)
answering in a thread of its own while the host runs in the test's.

``Person.answers(labels, custom)`` queues what alice answers to the next prompts, in order;
``person.shown`` lists what the panel showed (each ask message), ``person.ended`` how they ended.
"""
from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
from typing import Any, Iterator

from websockets.sync.client import connect

from tests.mcp import support

WEB_SESSION = "session=host-web&platform=web&web_user=alice"
TIMEOUT = 60


class Person(threading.Thread):
    """alice's panel, answering each ask it is shown with the next queued answer (or none)."""

    def __init__(self, base: str, cookie: str) -> None:
        super().__init__(daemon=True)
        ws_url = base.replace("http://", "ws://") + "/ws/panel/"
        self.stack = contextlib.ExitStack()
        self.socket = self.stack.enter_context(
            connect(ws_url, additional_headers={"Cookie": f"sessionid={cookie}", "Origin": base}, open_timeout=10))
        self.plan: queue.Queue[tuple[list[list[str]], str | None, float] | None] = queue.Queue()
        self.shown: list[dict[str, Any]] = []
        self.ended: dict[str, str] = {}  # ask id -> reason
        self.stop = threading.Event()

    def answers(self, labels: list[list[str]], custom: str | None = None, *, after: float = 0) -> None:
        """Answer the next ask shown with these labels, ``after`` seconds once it is shown."""
        self.plan.put((labels, custom, after))

    def holds(self) -> None:
        """The next prompt is left unanswered (the host gives up on it)."""
        self.plan.put(None)

    def run(self) -> None:
        deadline = time.monotonic() + 5 * TIMEOUT
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                message = json.loads(self.socket.recv(timeout=0.5))
            except TimeoutError:
                continue
            except Exception:  # the socket closed: the test is over
                return
            if message.get("type") == "ask_user_questions_cancelled":
                self.ended[message["requestId"]] = message.get("reason", "")
            if message.get("type") != "ask_user_questions":
                continue
            self.shown.append(message)
            planned = self.plan.get(timeout=TIMEOUT)
            if planned is None:
                continue
            labels, custom, after = planned
            if self.stop.wait(after):
                return
            answers = [{"question": q["question"], "selectedLabels": labels[i] if i < len(labels) else [],
                        "customInput": custom if i == 0 else None} for i, q in enumerate(message["questions"])]
            self.socket.send(json.dumps({"type": "ask_user_questions_result", "requestId": message["requestId"],
                                         "answers": answers}))

    def wait_ended(self, ask_id: str, seconds: float = 30) -> str:
        deadline = time.monotonic() + seconds
        while ask_id not in self.ended and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.ended.get(ask_id, "")

    def close(self) -> None:
        self.stop.set()
        self.stack.close()
        self.join(timeout=5)


@contextlib.contextmanager
def askcards(data_dir) -> Iterator[tuple[str, str, Person]]:
    """(base URL, the agent's key, alice's answering panel) on a fresh ``serve``."""
    with support.seeded(data_dir) as (base, seed):
        person = Person(base, support.login_cookie(base))
        person.start()
        try:
            yield base, seed["key"], person
        finally:
            person.close()
