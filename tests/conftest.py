"""Shared fixtures. The render helpers live in tests/rendering.py."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from rendering import HELM_VERSIONS


@pytest.fixture(params=HELM_VERSIONS, ids=lambda v: f"helm{v}")
def helm_major(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def signing_keyrings(tmp_path_factory):
    """A signing key made here (no passphrase), exported as Helm reads keyrings."""
    if not shutil.which("gpg"):
        pytest.skip("gpg (GnuPG) is not installed: apt-get install gnupg to test signed packages")
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    gpg = ["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run(
        [*gpg, "--quick-gen-key", "tf-cluster test <test@example.invalid>", "rsa3072", "sign", "never"],
        env=env,
        check=True,
        capture_output=True,
    )
    secring, pubring = home / "secring.gpg", home / "pubring.export.gpg"
    secring.write_bytes(subprocess.run([*gpg, "--export-secret-keys"], env=env, check=True, capture_output=True).stdout)
    pubring.write_bytes(subprocess.run(["gpg", "--batch", "--export"], env=env, check=True, capture_output=True).stdout)
    yield secring, pubring
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, capture_output=True)  # the agent gpg started
