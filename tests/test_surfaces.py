"""The surface seam: every configured surface subclasses ``Surface``, and a hook a surface leaves
out is the base's no-op, so the lifecycle runs on a surface that only says whom it reaches."""
from __future__ import annotations

import pytest
from django.utils import timezone

from askcards import services, surfaces
from askcards.surfaces.base import Surface

from .conftest import QUESTIONS


class ReachOnly(Surface):
    name = "reach-only"

    def reachable(self, session, tool: str) -> bool:
        return True


class NotASurface:
    name = "not-a-surface"


def test_a_surface_with_only_reachable_carries_an_ask_from_call_to_cancel(settings, agent, web_session):
    settings.ASKCARDS_SURFACES = ["tests.test_surfaces.ReachOnly"]
    outcome = services.tool_call(agent=agent, session=web_session, name="ask_user_questions",
                                 arguments={"questions": QUESTIONS})
    assert (outcome.status, outcome.ask.surfaces) == ("pending", ["reach-only"])

    assert services.ask_cancel(ask=outcome.ask, actor="agent:test")
    surfaces.result_undeliverable(outcome.ask)
    assert surfaces.sync_due(timezone.now(), surfaces.SyncReport()) == 0
    outcome.ask.refresh_from_db()
    assert outcome.ask.status == "cancelled"


def test_a_configured_surface_that_is_not_a_surface_is_refused(settings, db):
    settings.ASKCARDS_SURFACES = ["tests.test_surfaces.NotASurface"]
    with pytest.raises(TypeError, match="NotASurface .* must subclass askcards.surfaces.base.Surface"):
        surfaces.all_surfaces()
