"""The hostile corpus, part 4: nonsense that `train`, `inspect` and `validate` used to take (tests/
reliability/hostile.py has the harness and its invariants). One dataset given twice, a shard
listed twice or in two splits (a model scored on what it trained on), files that are no regular
files or too large (a manifest linked to /dev/zero, statistics a FIFO, facts larger than listed),
and numbers out of any sane range (a learning rate of inf, a batch of a billion records, zero
epochs): each is refused before training, in one line naming what, exit 2, the dataset
unchanged."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.reliability.hostile import Case, run_case
from tests.trainer.datasets import make_rows, write_dataset

_SOURCE: dict[str, Path] = {}
KEEP = ("d/manifest.json", "d/train")  # what every case's dataset must still hold, unchanged


@pytest.fixture(scope="module", autouse=True)
def source_dataset(tmp_path_factory):
    _SOURCE["d"] = write_dataset(
        tmp_path_factory.mktemp("nonsense") / "d", make_rows(80), splits={"train": 2},
        compression="none",
    ).root  # fmt: skip


def _copy(d: Path, name: str = "d") -> Path:
    root = d / name
    shutil.copytree(_SOURCE["d"], root)
    return root


def _edited(edit):
    """A copy whose manifest.json `edit(raw, root)` changed."""

    def damaged(d: Path) -> Path:
        root = _copy(d)
        raw = json.loads((root / "manifest.json").read_text())
        edit(raw, root)
        (root / "manifest.json").write_text(json.dumps(raw))
        return root

    return damaged


def _train_args(d: Path, *data: str | Path, flags: tuple[str, ...] = ()) -> tuple[str, list]:
    return "train", ["--data", *map(str, data), "--model-dir", str(d / "m"), "--epochs", "1",
                     *flags]  # fmt: skip


def _train(damage, *flags: str):
    return lambda d: _train_args(d, damage(d), flags=flags)


def _inspect(damage, *flags: str):
    return lambda d: ("inspect", [str(damage(d)), *flags])


def _validate(damage):
    return lambda d: ("validate", [str(damage(d))])


def _flags(*flags: str):
    return lambda d: _train_args(d, _copy(d), flags=flags)


def _twice(second):
    """`--data` the dataset and `second(d, root)`: the same one, named another way."""
    return lambda d: _train_args(d, _copy(d), second(d, d / "d"))


def _link(d: Path, root: Path) -> Path:
    (d / "link").symlink_to(root)
    return d / "link"


def _date_range_repeating(d: Path) -> tuple[str, list]:
    for day in ("2026-11-01", "2026-11-02"):
        _copy(d, f"daily/{day}")
    _copy(d)  # for the cases' check that it is unchanged
    return _train_args(d, d / "daily/{2026-11-01..2026-11-02}", d / "daily/2026-11-02/")


def _hard_linked_twin(d: Path) -> tuple[str, list]:
    """A second dataset whose shards are hard links to the first one's: other names, the
    same files."""
    root = _copy(d)
    twin = d / "twin"
    (twin / "train").mkdir(parents=True)
    shutil.copy(root / "manifest.json", twin)
    for shard in (root / "train").iterdir():
        os.link(shard, twin / "train" / shard.name)
    return _train_args(d, root, twin)


def _train_shard_twice(raw: dict, root: Path) -> None:
    raw["splits"]["train"]["files"].append(dict(raw["splits"]["train"]["files"][1]))


def _test_shard_under_train(raw: dict, root: Path) -> None:
    """A test split whose shard is also a train shard: the model scored on its train data."""
    shard = dict(raw["splits"]["train"]["files"][0])
    raw["splits"]["test"] = {"records": shard["records"], "files": [shard]}


def _eval_linked_to_train(raw: dict, root: Path) -> None:
    """An eval split whose shard is a symbolic link to a train shard (other paths, one file)."""
    shard = dict(raw["splits"]["train"]["files"][1])
    (root / "eval").mkdir()
    (root / "eval/eval-00000-of-00001.tfrecord").symlink_to(root / shard["path"])
    shard["path"] = "eval/eval-00000-of-00001.tfrecord"
    raw["splits"]["eval"] = {"records": shard["records"], "files": [shard]}


def _manifest_dev_zero(d: Path) -> Path:
    root = _copy(d)
    (root / "manifest.json").rename(root / "manifest.kept")
    (root / "manifest.json").symlink_to("/dev/zero")
    return root


def _manifest_huge(d: Path) -> Path:
    root = _copy(d)
    with open(root / "manifest.json", "r+b") as f:
        f.truncate(65 << 20)  # sparse: 65 MiB that take no disk
    return root


def _statistics_fifo(d: Path) -> Path:
    root = _copy(d)
    os.mkfifo(root / "statistics.json")
    return root


def _shard_fifo(d: Path) -> Path:
    root = _copy(d)
    shard = root / "train/train-00001-of-00002.tfrecord"
    shard.rename(root / "kept.tfrecord")
    os.mkfifo(shard)
    return root


def _facts_larger_than_listed(raw: dict, root: Path) -> None:
    raw["facts"] = {"path": "facts.json", "bytes": 100, "sha256": "0" * 64}
    with open(root / "facts.json", "wb") as f:
        f.truncate(2 << 30)  # sparse: 2 GiB that take no disk


def _not_trained(d: Path) -> None:
    assert not (d / "m" / "export").exists()


CASES = [
    Case("data-given-twice", "nonsense", lambda d: _train_args(d, _copy(d), d / "d"), 2,
         "given twice: its records would be read (and scored) twice", keep=KEEP,
         check=_not_trained),
    Case("data-and-its-trailing-slash", "nonsense", _twice(lambda d, root: f"{root}/"), 2,
         "given twice", keep=KEEP, check=_not_trained),
    Case("data-and-a-link-to-it", "nonsense", _twice(_link), 2, "link is ", keep=KEEP,
         check=_not_trained),
    Case("data-date-range-repeats-a-day", "nonsense", _date_range_repeating, 2,
         "daily/2026-11-02 given twice", keep=KEEP, check=_not_trained),
    Case("data-twin-of-hard-linked-shards", "nonsense", _hard_linked_twin, 2,
         "one shard listed twice (split 'train')", keep=KEEP, check=_not_trained),
    Case("shard-twice-in-train", "nonsense", _train(_edited(_train_shard_twice)), 2,
         "splits.train.files[2].path: 'train/train-00001-of-00002.tfrecord' is also "
         "splits.train.files[1]: a shard listed twice would be read twice", keep=("d/train",),
         check=_not_trained),
    Case("test-shard-also-under-train", "nonsense", _train(_edited(_test_shard_under_train)), 2,
         "splits.test.files[0].path: 'train/train-00000-of-00002.tfrecord' is also "
         "splits.train.files[0]: a shard listed twice would be in two splits",
         keep=("d/train",), check=_not_trained),
    Case("test-shard-also-under-train-inspect", "nonsense",
         _inspect(_edited(_test_shard_under_train)), 2, "would be in two splits",
         keep=("d/train",)),
    Case("test-shard-also-under-train-validate", "nonsense",
         _validate(_edited(_test_shard_under_train)), 2, "would be in two splits",
         keep=("d/train",)),
    Case("eval-shard-a-link-to-a-train-shard", "nonsense",
         _train(_edited(_eval_linked_to_train)), 2,
         "one shard listed twice (splits 'train' and 'eval')", keep=("d/train",),
         check=_not_trained),
    Case("manifest-a-link-to-dev-zero", "nonsense", _inspect(_manifest_dev_zero), 2,
         "manifest.json: a character device, not a regular file", keep=("d/train",)),
    Case("manifest-a-link-to-dev-zero-train", "nonsense", _train(_manifest_dev_zero), 2,
         "manifest.json: a character device, not a regular file", keep=("d/train",),
         check=_not_trained),
    Case("manifest-65-mib", "nonsense", _inspect(_manifest_huge), 2,
         "manifest.json: 68,157,440 bytes, more than the 67,108,864", keep=("d/train",)),
    Case("statistics-a-fifo", "nonsense", _inspect(_statistics_fifo, "--stats"), 2,
         "statistics.json: a FIFO (named pipe), not a regular file", keep=KEEP),
    Case("shard-a-fifo", "nonsense", _train(_shard_fifo), 2,
         "train-00001-of-00002.tfrecord: a FIFO (named pipe), not a regular file",
         keep=("d/manifest.json",), check=_not_trained),
    Case("shard-a-fifo-inspect", "nonsense", _inspect(_shard_fifo, "--take", "3"), 2,
         "train-00001-of-00002.tfrecord: a FIFO (named pipe)", keep=("d/manifest.json",)),
    Case("facts-2-gib-listed-as-100-bytes", "nonsense",
         _train(_edited(_facts_larger_than_listed)), 2,
         "facts.json: 2,147,483,648 bytes, more than the 1,073,741,824", keep=("d/train",),
         check=_not_trained),
    Case("learning-rate-inf", "nonsense", _flags("--learning-rate", "inf"), 2,
         "argument --learning-rate: inf is not a finite number > 0 and <= 100", keep=KEEP,
         check=_not_trained),
    Case("learning-rate-nan", "nonsense", _flags("--learning-rate", "nan"), 2,
         "argument --learning-rate: nan is not a finite number", keep=KEEP, check=_not_trained),
    Case("learning-rate-0", "nonsense", _flags("--learning-rate", "0"), 2,
         "argument --learning-rate: 0 is not a finite number > 0", keep=KEEP),
    Case("learning-rate-negative", "nonsense", _flags("--learning-rate=-1"), 2,
         "argument --learning-rate: -1 is not a finite number > 0", keep=KEEP),
    Case("batch-size-a-billion", "nonsense", _flags("--batch-size", "1000000000"), 2,
         "argument --batch-size: '1000000000' must be at most 1,048,576", keep=KEEP,
         check=_not_trained),
    Case("batch-size-0", "nonsense", _flags("--batch-size", "0"), 2,
         "argument --batch-size: '0' must be at least 1", keep=KEEP),
    Case("epochs-0", "nonsense", _flags("--epochs", "0"), 2,
         "argument --epochs: '0' must be at least 1", keep=KEEP),
    Case("epochs-a-billion", "nonsense", _flags("--epochs", str(10**9)), 2,
         "argument --epochs: '1000000000' must be at most 100,000", keep=KEEP),
    Case("steps-per-epoch-0", "nonsense", _flags("--steps-per-epoch", "0"), 2,
         "argument --steps-per-epoch: '0' must be at least 1", keep=KEEP),
    Case("shuffle-buffer-a-trillion", "nonsense", _flags("--shuffle-buffer", str(10**12)), 2,
         "argument --shuffle-buffer: '1000000000000' must be at most 67,108,864", keep=KEEP),
    Case("seed-negative", "nonsense", _flags("--seed=-5"), 2,
         "argument --seed: '-5' must be at least 0", keep=KEEP),
    Case("hidden-units-a-million", "nonsense", _flags("--hidden-units", "64,1000000"), 2,
         "argument --hidden-units: '64,1000000': each size must be in 1..65,536", keep=KEEP),
    Case("inspect-take-a-billion", "nonsense",
         lambda d: ("inspect", [str(_copy(d)), "--take", str(10**9)]), 2,
         "argument --take: '1000000000' must be at most 10,000", keep=KEEP),
]  # fmt: skip


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_nonsense(case: Case, tmp_path: Path, capfd):
    try:
        run_case(case, tmp_path, capfd)
    finally:  # a damaged manifest is not left for the session's check that every one parses
        for path in tmp_path.iterdir():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)


# Every whole number `train` takes: (flag, the lowest and highest value in range). A value just
# outside either end is refused naming the flag and the bound it breaks.
RANGES = [
    ("--epochs", 1, 100_000),
    ("--batch-size", 1, 1 << 20),
    ("--seed", 0, 2**32 - 1),
    ("--vocabulary-size", 0, 10_000_000),
    ("--shuffle-buffer", 1, 1 << 26),
    ("--read-batch", 1, 1 << 16),
    ("--cycle-length", 1, 1024),
    ("--block-length", 1, 1 << 16),
    ("--input-ram-mb", 1, 1 << 24),
    ("--checkpoint-every", 1, 10**9),
    ("--profile-batches", 1, 100_000),
    ("--steps-per-epoch", 1, 10**9),
    ("--steps-per-execution", 1, 10_000),
]


@pytest.mark.parametrize("flag, low, high", RANGES, ids=[r[0] for r in RANGES])
def test_every_whole_number_flag_is_held_to_its_range(flag, low, high, capsys):
    from trainer.flags import parse_args

    base = ["--data", "d", "--model-dir", "m"]
    for value in (low, high):
        parse_args([*base, f"{flag}={value}"], environ={})
    for value, says in (
        (low - 1, f"'{low - 1}' must be at least {low:,}"),
        (high + 1, f"'{high + 1}' must be at most {high:,}"),
        ("1e3", "'1e3' is not a whole number"),
        ("nan", "'nan' is not a whole number"),
    ):
        with pytest.raises(SystemExit) as e:
            parse_args([*base, f"{flag}={value}"], environ={})
        assert e.value.code == 2
        error = capsys.readouterr().err.splitlines()[-1]
        assert error == f"shardflow train: error: argument {flag}: {says}", error


@pytest.mark.parametrize(
    "flag, value, says",
    [
        ("--learning-rate", "inf", "inf is not a finite number > 0 and <= 100"),
        ("--learning-rate", "-inf", "-inf is not a finite number"),
        ("--learning-rate", "1e999", "1e999 is not a finite number"),
        ("--learning-rate", "101", "101 is not a finite number > 0 and <= 100"),
        ("--learning-rate", "0.0", "0.0 is not a finite number > 0"),
        ("--hidden-units", "0,8", "each size must be in 1..65,536"),
        ("--hidden-units", ",".join(["8"] * 101), "more than 100 layers"),
        ("--tensorboard-profile", "1,1001", "traces more than 1,000 batches"),
        ("--tensorboard-profile", f"1,{10**10}", "need 1 <= FIRST <= LAST <= 1,000,000,000"),
    ],
)
def test_the_other_number_flags_are_held_to_their_ranges(flag, value, says, capsys):
    from trainer.flags import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--data", "d", "--model-dir", "m", f"{flag}={value}"], environ={})
    error = capsys.readouterr().err.splitlines()[-1]
    assert error == f"shardflow train: error: argument {flag}: {says}" or (
        error.startswith(f"shardflow train: error: argument {flag}: ") and says in error
    ), error
    parse = parse_args(["--data", "d", "--model-dir", "m", "--learning-rate", "100"], environ={})
    assert parse.model.learning_rate == 100.0


def test_inspect_takes_0_to_10000_examples(capsys):
    from trainer.flags import inspect_parser

    assert inspect_parser().parse_args(["d", "--take", "10000"]).take == 10_000
    for value in ("-1", "10001"):
        with pytest.raises(SystemExit):
            inspect_parser().parse_args(["d", "--take", value])
        assert "argument --take: " in capsys.readouterr().err
