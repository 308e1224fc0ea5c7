"""`switchboard-local dashboard`: the URL with the install's token, which opens the dashboard."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest

from switchboard_local.core import access_token
from switchboard_local.core.store.shared import describe

from support.backends import PASSWORD, with_password
from support.cli import as_json, invoke
from support.receiver import serve_process
from support.waits import until


def test_dashboard_prints_the_url_of_the_running_serve_with_the_token(db_path, cli):
    with serve_process(db_path) as serving:
        receiver = serving.wait_serving()
        # `serve` leads ingest within a moment of starting, and says where its receiver listens
        until(lambda: as_json(cli, "dashboard")["serving"], True, dead=lambda: None if serving.proc.poll() is None else serving.stderr)
        shown = as_json(cli, "dashboard")
        url = urlsplit(shown["url"])
        assert (url.hostname, url.port) == ("127.0.0.1", receiver.port)
        assert url.query == f"token={access_token.read_or_create(db_path)}"

        conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
        conn.request("GET", f"/?{url.query}")
        opened = conn.getresponse()
        opened.read()
        assert opened.status == 303 and opened.getheader("location") == "/"
        cookie = opened.getheader("set-cookie")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        serving.stop()


@pytest.mark.both_backends
def test_dashboard_says_when_nothing_serves_it(db_path):
    db = with_password(db_path)
    result = invoke(db, "dashboard")
    assert result.code == 0
    first, second = result.out.splitlines()
    assert first.startswith("http://127.0.0.1:8787/?token=")
    assert "no process serves it now" in second
    shown = json.loads(invoke(db, "dashboard", "--json").out)
    assert shown["serving"] is False
    assert shown["db"] == describe(db)  # the database, a URL without its password; not a local file's name
    assert PASSWORD not in result.out + json.dumps(shown)
    assert first == f"http://127.0.0.1:8787/?token={access_token.read_or_create(db_path)}"
