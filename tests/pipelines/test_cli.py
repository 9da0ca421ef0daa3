"""The `shardflow` command answers at once and quietly: `--help` of every command, `--version`
and a config error in a fresh process, timed, without importing Beam or TensorFlow; and
TensorFlow's native start-up lines kept off stderr (`pipelines.runner.quiet`)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
# The limits on the 2-core machine are 1 s (help, version) and 2 s (a config error); twice that
# here, for a busy CI machine. These tests are marked `timed`: `make test` runs them on their
# own, before the rest of the suite fills both cores.
HELP_LIMIT_S, CONFIG_LIMIT_S = 2.0, 4.0
BAD_CONFIG = (
    "name: x\nsources:\n  - {name: a, format: csv, path: a.csv}\nfeatures:\n  y: {type: integr}\n"
)

# Runs the CLI in this fresh process and then says which heavy modules it imported.
_PROBE = """
import sys
from pipelines.cli import main
sys.argv = ["shardflow", *sys.argv[1:]]
try:
    main()
except SystemExit as e:
    code = e.code
heavy = [m for m in ("apache_beam", "tensorflow", "tf_keras") if m in sys.modules]
print("HEAVY", ",".join(heavy), file=sys.stderr)
sys.exit(code)
"""


def _shardflow(*args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    return proc, time.perf_counter() - started


def _median_seconds(*args: str) -> float:
    runs = []
    for _ in range(3):
        proc, seconds = _shardflow(*args)
        assert proc.returncode in (0, 2), proc.stderr
        runs.append(seconds)
    return statistics.median(runs)


@pytest.mark.timed
@pytest.mark.parametrize(
    "args",
    [["--help"], ["--version"], *([name, "--help"] for name in COMMANDS)],
    ids=lambda args: " ".join(args),
)
def test_help_and_version_answer_at_once_without_beam_or_tensorflow(args):
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stderr.splitlines()[-1] == "HEAVY "  # nothing heavy imported
    assert probe.stdout.startswith(("usage: shardflow", "shardflow "))
    if len(args) == 2:  # every command's help shows examples
        assert "examples:" in probe.stdout and f"shardflow {args[0]} " in probe.stdout
    assert _median_seconds(*args) < HELP_LIMIT_S


def test_version_is_the_installed_one():
    from importlib.metadata import version

    proc, _ = _shardflow("--version")
    assert (proc.returncode, proc.stdout) == (0, f"shardflow {version('shardflow')}\n")


@pytest.mark.timed
def test_a_config_error_is_told_before_beam_is_imported(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text(BAD_CONFIG)
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, "etl", "--config", str(config)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert probe.returncode == 2
    assert probe.stderr.splitlines() == [
        "shardflow etl: error: features.y.type: unknown type 'integr' (int, float, string, "
        "bytes, image); did you mean 'int'?",
        "HEAVY ",
    ]
    assert _median_seconds("etl", "--config", str(config)) < CONFIG_LIMIT_S


_FILTER = """
import os, sys
from pipelines.runner.quiet import native_log_filtered
with native_log_filtered():
    os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are "
                b"written to STDERR\\n")
    os.write(2, b"I0000 00:00:1795774259.294365    4611 port.cc:153] oneDNN custom ops\\n")
    os.write(2, b"E0000 00:00:1795774261.678597    4611 cuda_platform.cc:52] failed call to "
                b"cuInit: INTERNAL: CUDA error\\n")
    os.write(2, b"E0000 00:00:1795774261.678597    4611 op.cc:1] a real error\\n")
    print("WARNING trainer.run.fit: ours", file=sys.stderr)
    os.write(2, b"no newline at the end")
print(" - after", file=sys.stderr)
"""


def test_the_native_start_up_lines_are_dropped_and_the_rest_kept():
    proc = subprocess.run(
        [sys.executable, "-c", _FILTER], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0
    assert proc.stderr == (
        "E0000 00:00:1795774261.678597    4611 op.cc:1] a real error\n"
        "WARNING trainer.run.fit: ours\n"
        "no newline at the end - after\n"
    )


def test_tensorflow_commands_are_quiet_unless_verbose(tmp_path):
    from tests.trainer.datasets import make_rows, write_dataset

    data = write_dataset(tmp_path / "d", make_rows(20), splits={"test": 1})
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    # predict --data loads TensorFlow (its module serves models), then finds no model
    argv = ("predict", "--model-dir", str(tmp_path / "m"), "--data", str(data.root))
    refused = (
        f"shardflow predict: no export/ in {str(tmp_path / 'm')!r} (train a model there first)"
    )
    quiet, _ = _shardflow(*argv, env=env)
    assert (quiet.returncode, quiet.stderr) == (2, refused + "\n")
    loud, _ = _shardflow(*argv, env=dict(env, TF_CPP_MIN_LOG_LEVEL="0"))
    assert loud.returncode == 2 and "absl::InitializeLog" in loud.stderr


def test_etl_with_a_transform_is_quiet_too(tmp_path):
    """tf.Transform runs TensorFlow in the ETL's process: its native start-up lines (a CUDA
    probe that reads as an error on a machine without a GPU) are filtered as in `train`."""
    rows = "".join(f"{i},{i * 1.5},{'ab'[i % 2]}\n" for i in range(40))
    (tmp_path / "a.csv").write_text("id,x,c\n" + rows)
    (tmp_path / "c.yaml").write_text(
        "name: t\nsources: [{name: s, format: csv, path: a.csv}]\n"
        "features: {id: {type: int}, x: {type: float}, c: {type: string}}\n"
        "splits: {train: 1.0}\noutput: {path: out}\n"
        "transform: {features: {x: [z_score], c: {vocabulary: {num_oov_buckets: 1}}}}\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc, _ = _shardflow("etl", "--config", str(tmp_path / "c.yaml"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "transform").is_dir()
    for noise in ("I0000", "absl::InitializeLog", "cuInit", "oneDNN", "cpu_feature_guard"):
        assert noise not in proc.stderr, proc.stderr


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path):
    from tests.trainer.datasets import make_rows, write_dataset

    data = write_dataset(tmp_path / "d", make_rows(200), splits={"train": 1})
    command = f"{sys.executable} -m pipelines.cli inspect {data.root} --take 100 | head -n 1"
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.stdout.splitlines() == [f"dataset: penguins at {data.root}"]
    # no traceback, no noise; the exit status of SIGPIPE (141) when the pipe closed while it
    # wrote, or 0 when all of it went into the pipe's buffer before `head` exited (a race)
    assert proc.returncode in (0, 141) and proc.stderr == ""


def test_an_unknown_command_is_answered_with_the_nearest_one():
    proc, _ = _shardflow("trian")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == (
        "shardflow: error: unknown command 'trian'; did you mean 'train'?"
    )


def _interrupted(argv: list[str]) -> int:  # a command stopped by Ctrl-C
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    "name, says",
    [
        ("etl", "shardflow etl: interrupted; nothing published\n"),
        (
            "train",
            "shardflow train: interrupted; checkpoints kept; rerun the same command to resume "
            "(or --fresh to start anew)\n",
        ),
        ("inspect", "shardflow inspect: interrupted\n"),
    ],
)
def test_ctrl_c_says_in_one_line_what_is_left(name, says, monkeypatch, capsys):
    from pipelines import cli

    module, _, parser, summary = COMMANDS[name]
    monkeypatch.setitem(COMMANDS, name, (__name__, "_interrupted", parser, summary))
    monkeypatch.setattr(cli, "_check_etl", lambda args: None)
    with pytest.raises(SystemExit) as stopped:
        cli.main([name, "--data", "d"])
    assert stopped.value.code == 130  # the shell's status for SIGINT
    assert capsys.readouterr().err == says


def test_ctrl_c_while_the_etl_config_is_checked_says_nothing_was_published(monkeypatch, capsys):
    from pipelines import cli, flags

    monkeypatch.setattr(flags, "config_error", _interrupted)
    with pytest.raises(SystemExit) as stopped:
        cli.main(["etl", "--config", "c.yaml"])
    assert stopped.value.code == 130
    assert capsys.readouterr().err == "shardflow etl: interrupted; nothing published\n"


def test_init_ends_its_process_after_its_exit_handlers_without_the_teardown(
    tmp_path, monkeypatch, capsys
):
    """`shardflow init` ends with os._exit (after flushing and the atexit handlers), so that
    pyarrow's threads are not torn down with the interpreter (an abort after the work)."""
    import pipelines.init
    from pipelines import cli

    class Ended(Exception):
        pass

    def _exit(code: int):
        raise Ended(code)

    monkeypatch.setattr(pipelines.init.os, "_exit", _exit)
    monkeypatch.setattr(pipelines.init.atexit, "_run_exitfuncs", lambda: None)
    (tmp_path / "a.csv").write_text("id,x\n1,2\n2,3\n")
    with pytest.raises(Ended) as ended:
        cli.main(
            ["init", "--source", str(tmp_path / "a.csv"), "--output", str(tmp_path / "c.yaml")]
        )
    assert ended.value.args == (0,)
    assert (tmp_path / "c.yaml").read_text().startswith("# A dataset config written by")
    assert capsys.readouterr().err.startswith(f"shardflow init: wrote {tmp_path / 'c.yaml'}:")


def test_init_in_a_fresh_process_ends_cleanly(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"id": list(range(50)), "kind": ["a", "b"] * 25}), tmp_path / "a.parquet"
    )
    (tmp_path / "b.csv").write_text(
        "id,kind\n" + "".join(f"{i},{'ab'[i % 2]}\n" for i in range(50))
    )
    for source in ("a.parquet", "b.csv"):
        proc, _ = _shardflow("init", "--source", str(tmp_path / source))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("# A dataset config written by")
        assert "terminate called" not in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.splitlines()) == 2, proc.stderr  # wrote ...; read ...
