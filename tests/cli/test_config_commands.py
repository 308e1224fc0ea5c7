"""`config`: the settings every process on the database shares."""

from __future__ import annotations

import pytest

from support.cli import as_json


def test_config_list_names_every_setting_with_its_value(cli) -> None:
    listed = {v["name"]: v for v in as_json(cli, "config", "list")}
    assert listed["limits.max_payload"]["value"] == 1024 * 1024
    assert listed["http.listen"]["value"] is None and listed["http.listen"]["is_default"]
    code, out, _, _ = cli("config", "list")
    assert "http.listen" in out and "not set" in out


def test_http_listen_is_set_shown_and_unset(cli) -> None:
    changed = as_json(cli, "config", "set", "http.listen", "127.0.0.1:8787")
    assert (changed["value"], changed["is_default"]) == ("127.0.0.1:8787", False)
    assert cli("config", "get", "http.listen").out == "http.listen = 127.0.0.1:8787 (default not set)\n"
    assert as_json(cli, "config", "set", "http.listen", "[::1]:09000")["value"] == "[::1]:9000"
    assert as_json(cli, "config", "unset", "http.listen")["value"] is None


@pytest.mark.parametrize(
    "address",
    ["8787", "localhost", "127.0.0.1:", "127.0.0.1:70000", ":8787", "a b:1", "h:0", "h:²", "h:٨٠٨٠", "h:８０"],
)
def test_a_listen_address_that_is_not_host_and_port_is_refused(cli, address: str) -> None:
    code, _, err, _ = cli("config", "set", "http.listen", address)
    assert code == 2 and "http.listen must be HOST:PORT" in err
    assert as_json(cli, "config", "get", "http.listen")["value"] is None


def test_a_size_setting_is_still_shown_in_binary_units(cli) -> None:
    assert cli("config", "set", "limits.max_payload", "2MiB").out == "limits.max_payload = 2 MiB (default 1 MiB)\n"
