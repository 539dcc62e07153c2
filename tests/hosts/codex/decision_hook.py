"""A Codex command hook for the harness tests: it keeps the event Codex wrote on its stdin and
answers with a fixed decision, the way askcards' one-line ``curl`` hook will answer with askcards'.

    decision_hook.py RECORD_DIR allow|deny|exit2|silent|sleep [MESSAGE]

- ``allow`` / ``deny``: prints Codex's PermissionRequest decision JSON on stdout and exits 0: the
  one in events/permission_request.decision.<allow|deny>.json (``deny`` with MESSAGE, when given,
  as the reason the model is told).
- ``exit2``: writes MESSAGE to stderr and exits 2 (Codex's other way of denying).
- ``silent``: prints nothing and exits 0 (no decision: Codex falls back to its own prompt).
- ``sleep``: writes its pid to RECORD_DIR/hook.pid and sleeps for a minute (to outlast its timeout).

Each event lands in RECORD_DIR as ``NNN-<hook_event_name>.json``, byte for byte as received.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

DECISIONS = Path(__file__).resolve().parent / "events"


def main() -> int:
    record_dir, behavior = Path(sys.argv[1]), sys.argv[2]
    message = sys.argv[3] if len(sys.argv) > 3 else "denied by the test hook"
    raw = sys.stdin.read()
    event = json.loads(raw)
    record_dir.mkdir(parents=True, exist_ok=True)
    number = len(list(record_dir.glob("*.json")))
    (record_dir / f"{number:03d}-{event.get('hook_event_name', 'unknown')}.json").write_text(raw)

    if behavior in ("allow", "deny"):
        answer = json.loads((DECISIONS / f"permission_request.decision.{behavior}.json").read_text())
        if behavior == "deny" and len(sys.argv) > 3:
            answer["hookSpecificOutput"]["decision"]["message"] = message
        print(json.dumps(answer, ensure_ascii=False))
        return 0
    if behavior == "exit2":
        sys.stderr.write(message + "\n")
        return 2
    if behavior == "silent":
        return 0
    if behavior == "sleep":
        # Whole or not at all: the test reads it as soon as the name exists.
        (record_dir / "hook.pid.tmp").write_text(str(os.getpid()))
        (record_dir / "hook.pid.tmp").replace(record_dir / "hook.pid")
        time.sleep(60)
        (record_dir / "slept-through").write_text("the hook was not stopped at its timeout")
        return 0
    raise SystemExit(f"unknown behavior {behavior!r}")


if __name__ == "__main__":
    sys.exit(main())
