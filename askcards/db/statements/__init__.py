"""Every hand-written SQL statement of askcards, with the one way a name is quoted in them.

The ORM writes every other statement. A statement is written out only where that was measured to
matter on a hot path, against the ORM code it replaces (``tests/bench/bench_statements.py`` and,
for the reads of a wake, ``bench_longpoll``): a share of its path's CPU at the threshold or more;
below that it goes back to the ORM (the rule with its threshold, and the list, in
docs/performance.md; the figures each was decided on, in that file's git history). Each function
builds its text once per database (cached by the connection's alias) and runs it on that
connection; names in the text go through ``quote`` only.

Its parts: ``base`` (quoting, columns, rows made into instances), ``reads`` (the hot reads),
``writes`` (the hot writes), ``vendor`` (what each database does its own way).
"""
from .base import column, concrete_field, insert_fields, keep_related, quote, row_values
from .reads import (FORM_FIELDS, WITHDRAWN_FIELDS, agent_ask, agent_by_key_hash, ask_respondents, card_asks, clicked_ask,
                    panel_ask)
from .vendor import SecondsBetween, commit_without_flush_wait, table_row_estimate
from .writes import (agent_event_seq_bump, ask_close, callback_receipt_insert, card_message_claim,
                     outbox_event_insert, progress_card_mark)

__all__ = [
    "FORM_FIELDS", "WITHDRAWN_FIELDS", "SecondsBetween", "agent_ask", "agent_by_key_hash", "agent_event_seq_bump",
    "ask_close", "ask_respondents", "callback_receipt_insert", "card_asks", "card_message_claim", "clicked_ask",
    "column", "commit_without_flush_wait", "concrete_field", "insert_fields", "keep_related", "outbox_event_insert",
    "panel_ask", "progress_card_mark", "quote", "row_values", "table_row_estimate",
]
