"""Operator console (SPEC §8): inspect and cancel asks, manage agents and bots, see deliveries.

Lifecycle rows (asks, audit, outbox) are read-only here: every change goes through the same
services as the API, so an operator action writes the audit row, the outbox event and the card
update exactly like any other actor. Secrets are write-only: no page ever renders one, except a
freshly generated agent key or webhook secret, shown once in a message right after it is made.
"""
from django.contrib import admin

from . import agents, asks, bots, records, sessions  # noqa: F401  (each registers its models)

# The index links the operator dashboard (AskAdmin.dashboard_view).
admin.site.index_template = "admin/askcards/index.html"
