"""Date-partitioned runs: `{date}` templates, `--date`, and `--from/--to` backfills."""

from __future__ import annotations

import datetime
import json

import pytest

from pipelines.config.loader import ConfigError, fill_date, load_config
from pipelines.etl import run
from tests.reliability.test_faults import tree

DAYS = ("2026-11-24", "2026-11-25")


def _write(tmp_path, output: str = "out/{YYYY}/{MM}/{DD}", days=DAYS) -> str:
    (tmp_path / "in").mkdir(exist_ok=True)
    for n, day in enumerate(days):
        rows = "\n".join(f"{day[-2:]}{i},{n * 10 + i}" for i in range(20))
        (tmp_path / "in" / f"events-{day}.csv").write_text("id,value\n" + rows + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "name: daily\n"
        "sources: [{name: e, format: csv, path: 'in/events-{date}.csv'}]\n"
        "key: id\n"
        "features: {id: {type: int}, value: {type: int}}\n"
        "splits: {train: 0.5, eval: 0.5}\n"
        f"output: {{path: '{output}'}}\n"
    )
    return str(cfg)


def test_templates_are_filled_from_the_date():
    day = datetime.date(2026, 1, 5)
    assert fill_date("gs://b/{YYYY}/{MM}/{DD}/x-{date}-{other}", day) == (
        "gs://b/2026/01/05/x-2026-01-05-{other}"
    )


def test_a_template_without_a_date_is_a_config_error_naming_the_path(tmp_path, capsys):
    cfg = _write(tmp_path)
    with pytest.raises(ConfigError, match=r"sources\[0\]\.path: .*give --date"):
        load_config(cfg)
    assert run(["--config", cfg]) == 2
    assert "sources[0].path" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--date", "2026-11-24", "--from", "2026-11-24"], "--date: give either"),
        (["--from", "2026-11-24"], "--to: --from and --to go together"),
        (["--from", "2026-11-25", "--to", "2026-11-24"], "--to: 2026-11-24 is before"),
        (["--from", "2000-01-01", "--to", "2026-01-01"], "--to: 9498 dates"),
    ],
)
def test_bad_date_flags_exit_2_naming_the_flag(tmp_path, capsys, flags, message):
    cfg = _write(tmp_path)
    assert run(["--config", cfg, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_a_malformed_date_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        run(["--config", _write(tmp_path), "--date", "2026-13-01"])
    assert e.value.code == 2 and "not a date YYYY-MM-DD" in capsys.readouterr().err


def test_a_backfill_into_one_output_is_refused(tmp_path, capsys):
    cfg = _write(tmp_path, output="out/fixed")
    assert run(["--config", cfg, "--from", DAYS[0], "--to", DAYS[1]]) == 2
    assert "output.path" in capsys.readouterr().err


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_backfill_whose_template_repeats_across_the_range_is_refused_before_any_work(
    tmp_path, capsys, overwrite
):
    days = ("2026-12-31", "2027-01-01", "2027-01-02")
    cfg = _write(tmp_path, output="out/{YYYY}", days=days)
    code = run(["--config", cfg, "--from", days[0], "--to", days[-1], *overwrite])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"shardflow etl: error: output.path: gives '{tmp_path / 'out/2027'}' for both 2027-01-01 "
        "and 2027-01-02: every date of --from/--to needs a dataset of its own (a template with "
        "{date}, or {YYYY}, {MM} and {DD})"
    ]
    assert not (tmp_path / "out").exists()  # nothing written, no date skipped as complete


@pytest.mark.slow
def test_date_runs_and_backfill_skip_complete_dates_and_go_on_after_a_failure(tmp_path, capsys):
    cfg = _write(tmp_path)
    out = tmp_path / "out" / "2026" / "11"
    assert run(["--config", cfg, "--date", DAYS[0]]) == 0
    manifest = json.loads((out / "24" / "manifest.json").read_text())
    assert manifest["date"] == DAYS[0] and manifest["sources"]["e"]["records"] == 20
    first = tree(out / "24")
    capsys.readouterr()

    # 24 is complete (skipped), 25 is written, 26 has no input (fails; the others stand)
    assert run(["--config", cfg, "--from", DAYS[0], "--to", "2026-11-26"]) == 1
    captured = capsys.readouterr()
    assert "2026-11-24: " in captured.out and "skipped" in captured.out
    assert "1 written, 1 skipped (complete), 1 failed: 2026-11-26" in captured.err
    assert "sources[0].path" in captured.err and "events-2026-11-26.csv" in captured.err
    assert tree(out / "24") == first
    manifest = json.loads((out / "25" / "manifest.json").read_text())
    assert manifest["date"] == DAYS[1] and manifest["splits"]["train"]["records"] + manifest[
        "splits"]["eval"]["records"] == 20  # fmt: skip
    assert not (out / "26").exists()
    second = tree(out / "25")

    # --overwrite rewrites every date: the same bytes
    assert run(["--config", cfg, "--from", DAYS[0], "--to", DAYS[1], "--overwrite"]) == 0
    assert "2 written, 0 skipped (complete), 0 failed" in capsys.readouterr().out
    assert tree(out / "24") == first and tree(out / "25") == second


def test_a_config_on_gcs_resolves_relative_paths_against_its_folder(gcs_emulator, tmp_path):
    from apache_beam.io.filesystems import FileSystems

    cfg = _write(tmp_path, output="out/{date}")
    remote = "gs://shardflow-test/configs/daily/c.yaml"
    with FileSystems.create(remote) as f:
        f.write(open(cfg, "rb").read())
    dataset = load_config(remote, date=datetime.date(2026, 11, 24))
    assert dataset.sources[0].path == "gs://shardflow-test/configs/daily/in/events-2026-11-24.csv"
    assert dataset.output.path == "gs://shardflow-test/configs/daily/out/2026-11-24"
    with pytest.raises(ConfigError, match="--config: cannot read"):
        load_config("gs://shardflow-test/configs/missing.yaml")


def test_today_and_yesterday_are_utc_dates():
    from pipelines.flags import parse_day

    today = datetime.datetime.now(datetime.timezone.utc).date()
    assert parse_day("today") in (today, today + datetime.timedelta(days=1))  # midnight may pass
    assert parse_day("yesterday") == parse_day("today") - datetime.timedelta(days=1)


@pytest.mark.slow
def test_skip_complete_runs_nothing_when_the_dataset_is_there(tmp_path, capsys):
    cfg = _write(tmp_path)
    assert run(["--config", cfg, "--date", DAYS[1], "--skip-complete"]) == 0
    manifest = tmp_path / "out" / "2026" / "11" / "25" / "manifest.json"
    before = manifest.read_bytes()
    assert run(["--config", cfg, "--date", DAYS[1]]) == 2  # as ever: no silent replacement
    capsys.readouterr()
    assert run(["--config", cfg, "--date", DAYS[1], "--skip-complete"]) == 0
    assert "is complete; skipped" in capsys.readouterr().out
    assert manifest.read_bytes() == before
