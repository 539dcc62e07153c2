"""The Feishu / Lark surface: asks shown as forms on a session's progress card (SPEC §6.1).

- ``client``   — thin OpenAPI client (tenant token, send / reply / PATCH a card, retries).
- ``security`` — callback verification: signature, AES decryption, token, freshness.
- ``cards``    — the progress card builder (card JSON 2.0 within the platform's limits).
- ``parse``    — ``card.action.trigger`` callbacks into actions, form values into answers.
"""
