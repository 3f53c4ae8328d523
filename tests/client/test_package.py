"""``odradek.client`` loads its names on first use (the package's header)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_a_sibling_module_does_not_load_the_connection() -> None:
    code = ("import sys, odradek.client.security\n"
            "print('odradek.client.connection' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


def test_the_package_names_load_on_use() -> None:
    import odradek.client
    from odradek.client import BrokerConnection, ClientError, murmur2, partition_for_key
    from odradek.client.connection import BrokerConnection as direct

    assert BrokerConnection is direct
    assert issubclass(ClientError, Exception)
    assert murmur2(b"key") == odradek.client.murmur2(b"key")
    assert callable(partition_for_key)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        odradek.client.nothing  # noqa: B018


def test_submodules_are_attributes_and_dir_lists_the_names() -> None:
    code = ("import odradek.client as c\n"
            "print(c.connection.__name__, 'BrokerConnection' in dir(c), "
            "'murmur2' in dir(c))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["odradek.client.connection", "True", "True"]
