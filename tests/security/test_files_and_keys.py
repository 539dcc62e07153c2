"""Issue 10, point 10: the data directory, the database and the generated key are private;
processes starting together agree on one key; stored secrets the key cannot decrypt are reported
at start, and their callbacks are refused cleanly."""
from __future__ import annotations

import io
import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from rest_framework.test import APIClient
from django.core.management import call_command

from askcards.runtime import checks
from askcards import services

ROOT = Path(__file__).resolve().parent.parent.parent

# Everything slow is imported first; then each process says so and waits for the word to go, so
# the processes reach the key together (released within microseconds of one another).
PRINT_KEY = r"""
import sys
import django, django.conf, dj_database_url, cryptography.fernet
print("ready", file=sys.stderr, flush=True)
sys.stdin.readline()
django.setup()
from django.conf import settings
print(repr(settings.SECRET_KEY))
"""


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "ASKCARDS_SECRET_KEY"}}
    env.update(ASKCARDS_DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="project.settings")
    return env


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("round_", range(3))
def test_processes_starting_together_share_one_whole_key(tmp_path, round_):
    data_dir = tmp_path / "data"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PRINT_KEY], cwd=ROOT, env=_env(data_dir),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(4)
    ]
    for proc in procs:  # each has imported everything slow (bounded: a dead process gives "")
        assert proc.stderr.readline().strip() == "ready"
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 4, [err[-500:] for _, err in outputs]
    keys = {out.strip() for out, _ in outputs}
    assert len(keys) == 1
    (key,) = keys
    assert len(key) > 50  # repr of a whole token_urlsafe(50), not ''
    assert _mode(data_dir) == 0o700
    assert _mode(data_dir / "secret_key") == 0o600
    assert repr((data_dir / "secret_key").read_text()) == key
    assert [p.name for p in data_dir.iterdir()] == ["secret_key"]  # no temporary file left behind


# Opens the database, writes, and lists the data directory while the connection (and so the
# -wal and -shm files) is open.
LIST_FILES = r"""
import json, os, stat, sys
import django
django.setup()
from django.conf import settings
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("CREATE TABLE IF NOT EXISTS probe (x)")
    cursor.execute("INSERT INTO probe VALUES (1)")
    print(json.dumps({p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in settings.DATA_DIR.iterdir()}))
"""


def test_database_files_are_private(tmp_path):
    data_dir = tmp_path / "data"
    env = _env(data_dir)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=120)
    assert _mode(data_dir) == 0o700
    assert _mode(data_dir / "askcards.sqlite3") == 0o600
    done = _run(env, "-c", LIST_FILES)
    assert done.returncode == 0, done.stderr
    modes = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"askcards.sqlite3", "askcards.sqlite3-wal", "askcards.sqlite3-shm", "secret_key"} <= modes.keys()
    assert set(modes.values()) == {"0o600"}, modes


def test_a_database_left_readable_by_others_is_tightened(tmp_path):
    data_dir = tmp_path / "data"
    env = _env(data_dir)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=120)
    (data_dir / "askcards.sqlite3").chmod(0o644)  # as earlier versions created it
    done = _run(env, "-c", LIST_FILES)
    assert done.returncode == 0, done.stderr
    modes = json.loads(done.stdout.strip().splitlines()[-1])
    assert modes["askcards.sqlite3"] == "0o600"


def test_an_empty_key_file_is_a_clear_configuration_error(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "secret_key").write_text("")  # what a crash of an earlier version could leave
    done = _run(_env(data_dir), "-c", PRINT_KEY, "0")
    assert done.returncode != 0
    assert "secret_key is empty" in done.stderr


# --- stored secrets the current key cannot decrypt -------------------------------------------------

BOT_SECRET = "app-secret-never-printed"
ENCRYPT_KEY = "encrypt-key-never-printed"


@pytest.fixture
def secrets_under_another_key(transactional_db, settings):
    """A Feishu bot and an agent with a webhook saved under one key, read under another."""
    services.bot_add(platform="feishu", app_id="cli_lost", app_secret=BOT_SECRET, encrypt_key=ENCRYPT_KEY)
    services.bot_add(platform="dingtalk", app_id="ding_ok", app_secret="x")
    services.agent_create(name="hooked", webhook_url="https://hooks.example.com/a")
    settings.SECRET_KEY = "a-different-key-" + "x" * 40
    services.bot_add(platform="dingtalk", app_id="ding_new", app_secret="saved under the new key")


def test_the_database_check_names_the_rows_never_the_secrets(secrets_under_another_key):
    (error,) = checks.askcards_stored_secrets(None, databases=["default"])
    assert error.id == "askcards.E002"
    assert "feishu bot cli_lost (app_secret, encrypt_key)" in error.msg
    assert "ding_ok (app_secret)" in error.msg and "ding_new" not in error.msg
    assert "agent hooked (webhook_secret)" in error.msg
    assert BOT_SECRET not in error.msg + error.hint and ENCRYPT_KEY not in error.msg + error.hint
    # Not run by the plain checks every command runs (they have no database).
    assert checks.askcards_stored_secrets(None, databases=None) == []


def test_the_worker_reports_them_at_start_and_keeps_working(secrets_under_another_key):
    out, err = io.StringIO(), io.StringIO()
    call_command("askcards_worker", "--once", stdout=out, stderr=err)
    assert "askcards.E002" in err.getvalue() and "cli_lost" in err.getvalue()
    assert out.getvalue().startswith("done:")


@pytest.mark.django_db
def test_the_check_passes_before_the_first_migration(tmp_path):
    env = _env(tmp_path / "fresh")
    done = _run(env, "manage.py", "check", "--database", "default")
    assert done.returncode == 0, done.stderr
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=120)


def test_a_callback_for_such_a_bot_is_refused_cleanly(secrets_under_another_key, client, caplog):
    caplog.set_level(logging.INFO)
    for _ in range(2):
        response = client.post("/callbacks/feishu/cli_lost/", data=b"{}", content_type="application/json")
        assert response.status_code == 503
        assert "cli_lost" in response.json()["error"]
    refusals = [r for r in caplog.records if r.name.startswith("askcards") and "cli_lost" in r.getMessage()]
    assert len(refusals) == 1  # logged once, not on every callback (Django adds its one-line request log)
    assert not any(r.exc_info for r in caplog.records)
    assert BOT_SECRET not in caplog.text and ENCRYPT_KEY not in caplog.text


def test_an_agent_whose_webhook_secret_is_unreadable_still_uses_the_api(transactional_db, settings):
    _, key = services.agent_create(name="hooked", webhook_url="https://hooks.example.com/a")
    settings.SECRET_KEY = "a-different-key-" + "x" * 40
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    response = api.get("/api/v1/asks")
    assert response.status_code == 200, response.content
