"""Agent hosts (Claude Code, Codex): the prompts a host stops on, asked of people through askcards.

A host posts the event it would otherwise show in its terminal (a permission prompt, its own
``AskUserQuestion``) to ``/hooks/<host>``; the module of that host reads the event into a
``Prompt`` — what askcards asks, as the arguments of an ordinary ask tool — and turns the person's
answer into the host's own decision shape. These modules are pure (no database, no platform code):
the services make and close the ask, ``views`` is the thin entry point.
"""
