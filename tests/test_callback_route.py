"""The ASGI route for platform callbacks (project/asgi.py → askcards.callbacks.CallbackApp)."""
import json

import pytest
from channels.testing import HttpCommunicator

from askcards.http.edge import MAX_CALLBACK_BYTES
from project.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


async def _call(method: str, path: str, body: bytes = b"{}"):
    communicator = HttpCommunicator(application, method, path, body=body, headers=[(b"host", b"testserver"), (b"content-length", str(len(body)).encode())])
    response = await communicator.get_response(timeout=10)
    return response["status"], json.loads(response["body"])


@pytest.mark.parametrize("path", ["/callbacks/feishu/cli_nobody/", "/callbacks/dingtalk/ding_nobody/"])
async def test_unknown_app_is_not_found(path):
    assert await _call("POST", path) == (404, {"error": "unknown app"})


@pytest.mark.parametrize("path", ["/callbacks/feishu/cli_nobody/", "/callbacks/dingtalk/ding_nobody/"])
async def test_callbacks_are_posted(path):
    assert (await _call("GET", path, b""))[0] == 405


async def test_oversized_body_is_refused_unread():
    status, body = await _call("POST", "/callbacks/feishu/cli_nobody/", b"x" * (MAX_CALLBACK_BYTES + 1))
    assert status == 413 and "at most" in body["error"]["message"]
