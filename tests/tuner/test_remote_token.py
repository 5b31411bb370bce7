"""The command line finds the local token of a service its own user started on loopback
(`tuner.app.remote.token_for`): `moetune serve &` then `--server http://127.0.0.1:8470` works
for that user, as the README says, without putting the token in the environment or a flag."""

from __future__ import annotations

import argparse

import pytest

from tuner.app.remote import token_for


def _args(server: str, root) -> argparse.Namespace:
    return argparse.Namespace(server=server, root=str(root))


def test_a_loopback_service_gets_the_token_its_user_can_read(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("MOETUNE_TOKEN", raising=False)
    (tmp_path / "local.token").write_text("s3cret-local\n")
    assert token_for(_args("http://127.0.0.1:8470", tmp_path)) == "s3cret-local"
    assert token_for(_args("http://localhost:8470", tmp_path)) == "s3cret-local"
    assert token_for(_args("http://[::1]:8470", tmp_path)) == "s3cret-local"


@pytest.mark.parametrize("server", ["http://10.0.0.5:8470", "https://moetune.example.org",
                                    "http://127.0.0.1.example.org:8470"])
def test_another_host_never_gets_the_local_token(tmp_path, monkeypatch, server) -> None:
    monkeypatch.delenv("MOETUNE_TOKEN", raising=False)
    (tmp_path / "local.token").write_text("s3cret-local\n")
    assert token_for(_args(server, tmp_path)) == ""


def test_the_environment_wins_and_a_missing_file_sends_none(tmp_path, monkeypatch) -> None:
    (tmp_path / "local.token").write_text("s3cret-local\n")
    monkeypatch.setenv("MOETUNE_TOKEN", "team-token")
    assert token_for(_args("http://127.0.0.1:8470", tmp_path)) == "team-token"
    monkeypatch.delenv("MOETUNE_TOKEN")
    assert token_for(_args("http://127.0.0.1:8470", tmp_path / "nowhere")) == ""
