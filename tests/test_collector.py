"""The server's full collections (askcards/runtime/collector.py), with CPython's real collector, each in a
process of its own (they freeze and unfreeze the whole heap)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PRELUDE = r"""
import gc, json, time, weakref
from askcards.runtime import collector

class Node:
    pass

seen = {}
"""

SETTLED = PRELUDE + r"""
collector.settle()                           # what a server process does once start-up is over
seen["CPython's own full collections"] = "off" if gc.get_threshold()[2] == collector.OFF else "on"
paced = Node(); paced.me = paced
paced_ref = weakref.ref(paced)
gc.collect(1); gc.collect(1)                 # it reaches the oldest generation
del paced
for _ in range(100):                         # bounded: 10 s; the pacing thread's next collection frees it
    if paced_ref() is None:
        break
    time.sleep(0.1)
seen["an old cycle freed"] = paced_ref() is None
print(json.dumps(seen))
"""

STEPS = PRELUDE + r"""
collector.FLOOR = 0                          # a bare interpreter is far below a server's floor
pacer = collector.Pacer()
pacer.take_over()

young = Node(); young.me = young            # a cycle made and dropped between two collections
young_ref = weakref.ref(young); del young
pacer.tick()
seen["young cycle freed"] = young_ref() is None

old = Node(); old.me = old; old.load = [Node() for _ in range(1000)]
old_ref = weakref.ref(old)
pacer.tick()                                 # it survives a collection: frozen
del old                                      # now a cycle among frozen objects
plain = Node(); plain_ref = weakref.ref(plain)
pacer.tick()
del plain                                    # no cycle: freed at once, frozen or not
seen["frozen, no cycle, freed"] = plain_ref() is None
for _ in range(5):
    pacer.tick()
seen["frozen cycle kept while memory has not grown"] = old_ref() is not None

# Memory grows past GROWTH times what it was: the next collection is of everything.
keep = []
for _ in range(1000):                        # bounded: a few hundred MB at most
    if collector.resident_bytes() > 1.2 * collector.GROWTH * pacer.baseline:
        break
    keep.append([Node() for _ in range(10_000)])
    pacer.tick()                             # frozen as they come
pacer.tick()
seen["frozen cycle freed once memory grew"] = old_ref() is None
seen["the rest kept"] = all(type(n) is Node for chunk in keep for n in chunk)
print(json.dumps(seen))
"""


def _run(script: str) -> dict:
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_once_a_server_has_started_its_full_collections_are_paced_by_a_thread():
    """CPython's own full collections are off; askcards' thread makes them, so a cycle that reached
    the oldest generation is still freed, within seconds."""
    assert _run(SETTLED) == {"CPython's own full collections": "off", "an old cycle freed": True}


def test_paced_collections_freeze_what_lives_and_free_frozen_cycles_once_memory_grew():
    """Each paced collection frees young cycles and freezes what survives; what is frozen is still
    freed when its last reference goes; a cycle among frozen objects is kept only until the
    process's memory has grown GROWTH times, then freed."""
    assert _run(STEPS) == {
        "young cycle freed": True,
        "frozen, no cycle, freed": True,
        "frozen cycle kept while memory has not grown": True,
        "frozen cycle freed once memory grew": True,
        "the rest kept": True,
    }
