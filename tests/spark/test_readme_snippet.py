"""The README's Spark snippet, run as written by a plain ``python`` of the project's venv with
no ``PYSPARK_PYTHON`` set (issue 19): ``format("odradek")`` must be found. Its own
process, since the shared session of this directory sets ``PYSPARK_PYTHON`` itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import confluent_kafka

from odradek.testing import running_broker

REPO = Path(__file__).resolve().parents[2]


def readme_snippet() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Spark"):]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def plain_env() -> dict[str, str]:
    """The environment of a plain ``python`` of the venv: no ``PYSPARK_PYTHON``, and nothing
    of the tests' on its path but the ``hypothesis`` that fails to import
    (tests/conftest.py), as in an install without the test extras: kio would import
    Hypothesis in the program and in every Python worker its Spark starts (0.6 s of CPU
    each, a dozen of them; issue 51)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")}
    lean = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if Path(p).name.startswith("odradek-lean-")
            and (Path(p) / "hypothesis" / "__init__.py").is_file()]
    assert lean, "tests/conftest.py's hypothesis stub is not on PYTHONPATH"
    env["PYTHONPATH"] = os.pathsep.join(lean)
    return env


def test_the_readme_snippet_finds_the_data_source_from_a_plain_python(tmp_path: Path) -> None:
    snippet = readme_snippet()
    assert snippet.startswith("import odradek.spark")
    assert 'format("odradek")' in snippet and "127.0.0.1:9092" in snippet
    env = plain_env()
    with running_broker() as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(3):
            producer.produce("events", f"e{i}".encode())
        assert producer.flush(30) == 0
        del producer
        program = snippet.replace("127.0.0.1:9092", broker.bootstrap) + (
            "print('rows', events.count())\nspark.stop()\n")
        res = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "rows 3" in res.stdout.splitlines(), res.stdout
    shown = [line.split("|") for line in res.stdout.splitlines() if line.startswith("|")]
    assert [[c.strip() for c in row[1:-1]] for row in shown] == [
        ["partition", "offset", "value"], ["0", "0", "e0"], ["0", "1", "e1"], ["0", "2", "e2"]]


def test_the_readme_names_the_error_of_a_missing_topic(tmp_path: Path) -> None:
    """The README quotes the line that ends the traceback a missing topic gives (before
    Spark's SQLSTATE): it must be the line the connector raises."""
    text = (REPO / "README.md").read_text()
    quoted = text[text.index("## Spark"):].split("then Spark's `SQLSTATE` line): ", 1)[1]
    quoted = " ".join(quoted.split("`", 2)[1].split())
    env = plain_env()
    with running_broker(overrides={"auto.create.topics.enable": "false"}) as broker:
        program = readme_snippet().replace("127.0.0.1:9092", broker.bootstrap)
        res = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-2:]
    assert quoted == last[0].strip() and "SQLSTATE" in last[1], res.stderr[-2000:]
