"""``odradek`` (cli/main.py): every sub-command is there, and a broken one is an error."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.interop._broker import REPO, odradek_executable, refusing_address

from odradek.cli import main

SRC = REPO / "src"
#: every sub-command ``odradek --help`` must list
SUBCOMMANDS = ("serve", "dump-log", "topics", "configs", "acls", "produce", "consume",
               "groups", "transactions", "leader-election", "status", "dev-cluster",
               "reassign", "perf", "console", "mirror", "zookeeper-security-migration")
CLI_TIMEOUT_S = 60.0


def _odradek(*args: str, src: Path = SRC) -> subprocess.CompletedProcess[str]:
    """Run the installed ``odradek`` script with ``src`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(odradek_executable()), *args], capture_output=True, text=True, env=env,
        timeout=CLI_TIMEOUT_S, check=False,
    )


def test_every_cli_module_is_registered() -> None:
    package = Path(main.__file__).parent
    modules = {p.stem for p in package.glob("*.py") if not p.stem.startswith("_")} - {"main"}
    assert modules == set(main.SUBCOMMAND_MODULES)


def test_help_lists_every_subcommand() -> None:
    result = _odradek("--help")
    assert result.returncode == 0, result.stderr
    listed = result.stdout.split("{", 1)[1].split("}", 1)[0].split(",")
    assert listed == list(SUBCOMMANDS)


@pytest.mark.parametrize(
    ("broken_line", "error"),
    [
        ("import odradek_no_such_module", "ModuleNotFoundError: No module named "
                                          "'odradek_no_such_module'"),
        ("raise RuntimeError('broken at import')", "RuntimeError: broken at import"),
        ("def broken(:", "SyntaxError: "),
    ],
)
def test_a_subcommand_that_fails_to_import_is_an_error(
    tmp_path: Path, broken_line: str, error: str
) -> None:
    src = tmp_path / "src"
    shutil.copytree(SRC / "odradek", src / "odradek",
                    ignore=shutil.ignore_patterns("__pycache__"))
    groups = src / "odradek" / "cli" / "groups.py"
    groups.write_text(groups.read_text() + f"\n{broken_line}\n")
    for args in (["--help"], ["serve", "--help"], ["topics", "list"]):
        result = _odradek(*args, src=src)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert result.stderr.startswith(
            "odradek: the sub-command module odradek.cli.groups failed to import: "
        ), result.stderr
        assert error in result.stderr
        assert "groups.py" in result.stderr
        assert "Traceback" not in result.stderr
        assert result.stdout == ""


def test_serve_on_a_locked_log_dir_or_a_taken_port_says_so_in_one_line(tmp_path: Path) -> None:
    """`make serve` twice, or a port already in use: one clear line and a non-zero exit,
    not a traceback."""
    import socket

    from tests.interop._broker import start_broker

    running = start_broker(tmp_path)
    try:
        again = _odradek("serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                         "--override", f"log.dirs={running.data_dir}")
        assert again.returncode == 1
        assert again.stderr.splitlines() == [
            f"odradek: cannot start: log dir {running.data_dir} is locked by another process "
            "(another broker?)"], again.stderr
    finally:
        running.stop()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = _odradek("serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                        "--override", f"log.dirs={tmp_path / 'other'}")
    assert busy.returncode == 1
    assert busy.stderr.splitlines() == [
        f"odradek: cannot listen: Address already in use (binding 127.0.0.1:{port})"]
    assert not (tmp_path / "other").exists()  # the port is bound before anything is created


def _serve_fails(*args: str, limit_file_size: bool = False) -> str:
    """Run ``odradek serve`` that must fail to start; its stderr."""
    import resource

    def no_file_growth() -> None:  # writes fail as on a full disk (EFBIG instead of ENOSPC)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))

    env = {**os.environ, "PYTHONPATH": str(SRC)}
    result = subprocess.run(
        [str(odradek_executable()), "serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
         *args], capture_output=True, text=True, env=env, timeout=CLI_TIMEOUT_S, check=False,
        preexec_fn=no_file_growth if limit_file_size else None,
    )
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr
    return result.stderr


def test_every_start_up_failure_is_one_line(tmp_path: Path) -> None:
    """Issue 19: a bad log dir, one the broker may not create, a disk that refuses writes,
    an unreadable config file: one line naming the cause and the file, a non-zero exit."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    assert _serve_fails("--override", f"log.dirs={a_file}") == (
        f"odradek: cannot start: not a directory: {a_file}\n")
    assert _serve_fails("--override", f"log.dirs={a_file}/sub") == (
        f"odradek: cannot start: Not a directory: {a_file}/sub\n")
    # /sys refuses new directories to everyone, root included (EPERM, or EACCES)
    assert _serve_fails("--override", "log.dirs=/sys/odradek-data").startswith(
        "odradek: cannot start: ")
    full = tmp_path / "full"
    assert _serve_fails("--override", f"log.dirs={full}", limit_file_size=True) == (
        f"odradek: cannot start: File too large: {full}/odradek-metadata.json\n")
    assert list(full.iterdir()) == []  # no temporary file left behind
    assert _serve_fails("--config", str(tmp_path)) == (
        f"odradek: invalid configuration: cannot read config file {tmp_path}: Is a directory\n")
    latin = tmp_path / "latin.properties"
    latin.write_bytes(b"broker.id=0\nlog.dirs=caf\xe9\n")
    assert _serve_fails("--config", str(latin)) == (
        f"odradek: invalid configuration: cannot read config file {latin}: "
        "not UTF-8 text (byte 24)\n")


def test_a_mistyped_flag_is_named_with_the_nearest_one_under_its_command() -> None:
    """Issue 19: `--topc`, `--from-begining`: the sub-command's usage, the flag, and the
    flag meant; exit 2 and nothing done. Unique prefixes still work as in argparse."""
    for args, usage, wrong, meant in (
        (("consume", "--topc", "t"), "usage: odradek consume", "--topc", "--topic"),
        (("consume", "--topic", "t", "--from-begining"), "usage: odradek consume",
         "--from-begining", "--from-beginning"),
        (("topics", "list", "--bootstrap-servr", "x:1"), "usage: odradek topics list",
         "--bootstrap-servr", "--bootstrap-server"),
    ):
        res = _odradek(*args)
        assert res.returncode == 2, res
        assert res.stderr.startswith(usage), res.stderr
        assert f"error: unrecognized argument {wrong} (did you mean {meant}?)" in res.stderr
    res = _odradek("dev-cluster", "--brokr", "3")  # a command that also has sub-commands
    assert res.returncode == 2, res
    assert "error: unrecognized argument --brokr (did you mean --brokers?)" in res.stderr
    res = _odradek("topics", "list", "--zzzz")
    assert res.returncode == 2 and res.stderr.rstrip().endswith(
        "error: unrecognized argument --zzzz")
    res = _odradek("topics", "list", "--boot", "127.0.0.1:1")  # a prefix: not a typo
    assert "unrecognized" not in res.stderr


def test_exit_statuses_are_two_for_usage_and_one_for_runtime_failures(tmp_path: Path) -> None:
    """One rule for every sub-command: 2 when the command line or the configuration is
    wrong (as argparse's own errors), 1 when what it did failed; the reason on stderr."""
    with refusing_address() as unused:  # connections refused there
        _exit_statuses(tmp_path, unused)


def _exit_statuses(tmp_path: Path, unused: str) -> None:
    for args, message in (
        (("consume", "--topic", "t", "--offset", "5"), "--offset N needs --partition"),
        (("consume", "--topic", "t", "--group", "g", "--partition", "0"), "--group takes"),
        (("topics", "alter", "--topic", "t"), "topics alter needs"),
        (("topics", "create", "--topic", "t", "--config", "novalue"), "expected key=value"),
        (("groups", "reset-offsets", "--group", "g", "--topic", "t:x", "--to-earliest",
          "-b", unused), "invalid partitions"),
        (("dev-cluster", "--override", "broker.id=3"), "broker.id is set per broker"),
        (("serve", "--override", "num.partitions=many"), "invalid configuration"),
        (("consume", "--topic"), "expected one argument"),
    ):
        res = _odradek(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert message in res.stderr and "Traceback" not in res.stderr, (args, res.stderr)
    for args, message in (
        (("topics", "list", "-b", unused), "cannot reach"),
        (("dev-cluster", "restart", "--broker", "1", "--data-dir", str(tmp_path)),
         "no dev-cluster runs"),
    ):
        res = _odradek(*args)
        assert res.returncode == 1, (args, res.stderr)
        assert message in res.stderr, (args, res.stderr)


def test_make_serve_reports_the_same_statuses(tmp_path: Path) -> None:
    """`make serve` passes odradek's status on: make's "Error 2" for a configuration
    error, "Error 1" for a failure at start (a port in use)."""
    import socket

    def make_serve(*overrides: str) -> subprocess.CompletedProcess[str]:
        args = " ".join(f"--override {o}" for o in overrides)
        return subprocess.run(["make", "-s", "serve", f"ARGS={args}"], cwd=REPO,
                              capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
                              env={**os.environ, "PYTHONPATH": str(SRC)}, check=False)

    bad = make_serve("num.partitions=many")
    assert bad.returncode == 2, bad.stderr
    assert "invalid configuration" in bad.stderr and "Error 2" in bad.stderr, bad.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = make_serve(f"listeners=PLAINTEXT://127.0.0.1:{port}",
                          f"log.dirs={tmp_path / 'data'}")
    assert busy.returncode == 2  # make's own status: a recipe failed
    assert "cannot listen" in busy.stderr and "Error 1" in busy.stderr, busy.stderr


@pytest.mark.parametrize("how", ["script", "module"])
def test_a_command_does_not_import_the_test_libraries(how: str) -> None:
    """kio imports hypothesis whenever it can (for its strategies); a command, a broker
    included, never uses it, and its import cost each process about 0.3 s of CPU. The
    command talks to a broker (none listens: it fails), so that it does import kio."""
    import importlib.util

    assert importlib.util.find_spec("hypothesis") is not None  # installed here: it could
    with refusing_address() as refused:
        argv = ["odradek", "topics", "--list", "--bootstrap-server", refused]
        probe = ("import atexit, sys\n"
                 "atexit.register(lambda: print('imported:', sorted(m for m in ('hypothesis',"
                 " 'kio', 'trio') if sys.modules.get(m) is not None), file=sys.stderr))\n"
                 f"sys.argv = {argv!r}\n")
        if how == "script":
            probe += "exec(open(sys.executable.rsplit('/', 1)[0] + '/odradek').read())\n"
        else:
            probe += "import runpy; runpy.run_module('odradek', run_name='__main__')\n"
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        result = subprocess.run([str(odradek_executable().parent / "python"), "-c", probe],
                                capture_output=True, text=True, env=env,
                                timeout=CLI_TIMEOUT_S, check=False)
    assert result.returncode == 1, result.stderr
    assert "cannot reach" in result.stderr, result.stderr
    assert "imported: ['kio']" in result.stderr, result.stderr


def test_a_tool_does_not_load_the_broker() -> None:
    """Every ``odradek`` command builds the whole command line (each sub-command's module,
    so that a broken one is an error of all), and the suite starts hundreds of them: a
    sub-command module imports the broker's own modules (``odradek.server``, its network
    layer, handlers and coordinators; the storage engine; the controller's placement; the
    group coordinators' record types) only where it runs. Those imports cost each command
    0.63 s of CPU before, 0.39 s after (issue 51). Nor what only one command runs: the
    record batches' reader, builder and codecs (crc32c, cramjam), the segment and index
    files (dump-log), the ZooKeeper client and store (zookeeper-security-migration), the
    local ZooKeeper (dev-cluster); the client (kio's schemas, the protocol, routing, admin,
    groups, security) and asyncio, which only a command talking to a broker needs."""
    heavy = ("odradek.server", "odradek.storage.log", "odradek.storage.manager",
             "odradek.storage.cleaner_manager", "odradek.cluster.metadata",
             "odradek.coordinator.consumer_group_records",
             "odradek.records", "crc32c", "cramjam", "odradek.storage.index",
             "odradek.storage.txn_index", "odradek.cluster.store",
             "odradek.cluster.zk_security", "kazoo", "odradek.cluster.local_zookeeper",
             "odradek.client", "odradek.protocol", "kio", "asyncio", "odradek.security.acl")
    probe = ("import sys\n"
             "sys.modules['hypothesis'] = None\n"
             "from odradek.cli.main import build_parser\n"
             "build_parser()\n"
             f"heavy = {heavy!r}\n"
             "print(sorted(m for m in sys.modules if m in heavy"
             " or m.startswith(tuple(h + '.' for h in heavy))))\n")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    result = subprocess.run([str(odradek_executable().parent / "python"), "-c", probe],
                            capture_output=True, text=True, env=env,
                            timeout=CLI_TIMEOUT_S, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\n", result.stdout


def test_the_parsers_plain_constants_are_those_of_the_modules_they_stand_for() -> None:
    """The constants the parsers hold as plain values, not to import their modules at
    every command's start (issue 51), are those modules' own."""
    from kio.schema.errors import ErrorCode

    from odradek.cli import console, groups, leader_election
    from odradek.client.groups import CLASSIC, CONSUMER
    from odradek.cluster import zk_security, zk_security_names
    from odradek.records.compression import CompressionType

    assert groups.GROUP_TYPES == (CLASSIC, CONSUMER)
    assert ErrorCode.none.value == leader_election.NONE
    assert ErrorCode.not_controller.value == leader_election.NOT_CONTROLLER
    assert ErrorCode.election_not_needed.value == leader_election.ELECTION_NOT_NEEDED
    assert sorted(console._CODECS) == sorted(c.name.lower() for c in CompressionType)
    assert zk_security.ZK_TLS_SYSTEM_PROPERTIES is zk_security_names.ZK_TLS_SYSTEM_PROPERTIES
