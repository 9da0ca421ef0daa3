r"""Generates the bundled demo dataset `examples/penguins/` (deterministic).

Run `python examples/penguins/generate.py [--out DIR]`; it rewrites `measurements.csv`,
`observations.jsonl`, `nests.parquet`, `bands.db` and `penguins.yaml` byte for byte (seed
20070101; the Parquet and SQLite bytes also depend on the pyarrow and SQLite versions), so the
checked-in files are its output and tests may rely on the facts below. The penguins are
synthetic, drawn per species and sex from normal distributions with the means and spreads of
the real Palmer Archipelago penguins (Adelie, Chinstrap, Gentoo), so a model learns `species`
from the measurements.

measurements.csv: a header and 3,000 data lines for ids 1..2995 (the id is an integer in both
files: text in the CSV, a JSON number in the JSONL, so a join compares keys by their text form).
Optional numeric cells are sometimes empty or `NA`; `sex` is sometimes empty or `NA`; about 4% of
fields are double-quoted (`"Biscoe"`, `"41.3"`); no field contains a comma or a newline.
The deliberately bad data lines (1-based line numbers in the file, header = line 1):

  | id   | line | what                                   | expected outcome                       |
  |------|------|----------------------------------------|----------------------------------------|
  | 137  | 138  | bill_length_mm is `abc`                | rejected: bill_length_mm not a number  |
  | 512  | 514  | species is `Emperor`                   | rejected: species not in values        |
  | 777  | 779  | island is `Anvers`                     | rejected: island not in values         |
  | 1024 | 1026 | body_mass_g is `-350`                  | rejected: body_mass_g below min 0      |
  | 1333 | 1336 | year is `20O8` (letter O)              | rejected: year not an integer          |
  | 1555 | 1559 | year is empty                          | rejected: year missing required value  |
  | 2048 | 2052 | 10 fields (an extra `,extra`)          | rejected: unparseable line (10 != 9)   |
  | 2222 | 2226 | 8 fields (the `year` column is absent) | rejected: unparseable line (8 != 9)    |

  Duplicates (key `id`): the lines for ids 45, 901, 1402, 2100 and 2750 appear twice, the second
  copy byte-identical and 150 lines after the first (lines 196, 1053, 1555, 2254, 2905). Each
  adds 1 to `duplicates`; which copy is kept does not matter, they are equal.

  Ledger for measurements: 3,000 records read = 2,987 valid + 8 rejected + 5 duplicates.

observations.jsonl: one object per line, `{"id", "observer", "notes", "tags"}`, for 2,694 of
the ids (every bad id above has one; `notes` may hold `\"` quotes, commas, a `\n` and non-ASCII
text such as `°C`; it is absent in some objects, `observer` is null in some; `tags` has 0-3
strings), in shuffled order, plus 2 bad lines:

  | line | what                                          | expected outcome                    |
  |------|-----------------------------------------------|-------------------------------------|
  | 700  | truncated JSON (`{"id": 2901, ...` unclosed)  | rejected: unparseable line          |
  | 1900 | `{"id": 2902, ..., "tags": 3}`                | rejected: tags not a list of strings |

  Ids 2901 and 2902 have no other observation line; their measurements are valid.
  Ledger for observations: 2,696 lines read = 2,694 valid + 2 rejected.
  Of the 2,987 valid measurements, 2,686 have a valid observation and 301 have none.

nests.parquet (written with pyarrow; columns id int64, colony string, clutch_size int64
(5% null), nest_height_m float64): a row for about 70% of the ids, in id order, then
  - ids 333 and 1717 have clutch_size -1: their joined record is rejected (clutch_size below min 0);
  - a second row for ids 45 and 2600 at the end of the file (colony "Colony 99"): duplicates;
  - rows for ids 2996, 2997 and 2998, which have no measurement: unmatched, so the joined record
    has no species and is rejected (species missing required value).

bands.db (SQLite; table `bands`: id INTEGER PRIMARY KEY, band_color TEXT (3% null),
banded_year INTEGER): a row for about 60% of the ids 1..2995; read by the `sql` source in 2 id
ranges.

penguins.yaml: the dataset config of the contract (four sources in four formats joined on `id`,
label `species`, 80/10/10, a tf.Transform analyzed on train).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SEED = 20070101
N_IDS = 2995
HEADER = [
    "id",
    "species",
    "island",
    "bill_length_mm",
    "bill_depth_mm",
    "flipper_length_mm",
    "body_mass_g",
    "sex",
    "year",
]
OPTIONAL_NUMERIC = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]

# Share of each species and the islands it lives on, as in the real data set (344 birds).
SPECIES = {
    "Adelie": (152, {"Biscoe": 44, "Dream": 56, "Torgersen": 52}),
    "Chinstrap": (68, {"Dream": 68}),
    "Gentoo": (124, {"Biscoe": 124}),
}
# (mean, sd) per species and sex of bill length, bill depth, flipper length, body mass.
MEASURES = {
    ("Adelie", "female"): ((37.3, 2.0), (17.6, 0.9), (188.0, 5.6), (3369.0, 269.0)),
    ("Adelie", "male"): ((40.4, 2.3), (19.1, 1.0), (192.4, 6.6), (4043.0, 347.0)),
    ("Chinstrap", "female"): ((46.6, 3.1), (17.6, 0.8), (191.7, 5.8), (3527.0, 285.0)),
    ("Chinstrap", "male"): ((51.1, 1.6), (19.3, 0.8), (199.9, 6.0), (3939.0, 362.0)),
    ("Gentoo", "female"): ((45.6, 2.1), (14.2, 0.5), (212.7, 3.9), (4680.0, 282.0)),
    ("Gentoo", "male"): ((49.5, 2.7), (15.7, 0.7), (221.5, 5.7), (5485.0, 313.0)),
}

# id -> how its line is broken (see the module docstring).
BAD_ROWS = {
    137: "bill_length_mm=abc",
    512: "species=Emperor",
    777: "island=Anvers",
    1024: "body_mass_g=-350",
    1333: "year=20O8",
    1555: "year=",
    2048: "extra column",
    2222: "missing column",
}
DUPLICATED_IDS = (45, 901, 1402, 2100, 2750)
DUPLICATE_DISTANCE = 150  # the copy follows the original this many data lines later
OBSERVATION_SHARE = 0.9
TRUNCATED_OBSERVATION_ID = 2901
BAD_TAGS_OBSERVATION_ID = 2902
BAD_OBSERVATION_LINES = {700: TRUNCATED_OBSERVATION_ID, 1900: BAD_TAGS_OBSERVATION_ID}

NEST_SHARE = 0.7
NEGATIVE_CLUTCH_IDS = (333, 1717)  # clutch_size -1: the joined record is rejected (below min 0)
DUPLICATED_NEST_IDS = (45, 2600)  # a second nest row later in the file: a duplicate
UNMATCHED_NEST_IDS = (2996, 2997, 2998)  # nests of birds never measured: rejected, no species
BAND_SHARE = 0.6

OBSERVERS = ["M. Okafor", "L. Jensen", "R. Alvarez", "S. Tanaka", "J. O'Neill", "P. Novak"]
TAGS = ["molting", "tagged", "banded", "nesting", "chick", "injured", "resighted"]
NOTE_OPENINGS = [
    "Seen near the colony edge",
    "Calm, easy to measure",
    "Bird was restless, measured twice",
    "Nest with two eggs",
    "Returned to the water quickly",
    "Feathers wet after a dive",
    "Band read from a distance",
]
NOTE_DETAILS = [
    'partner called "loudly", then settled',
    "wind 20 kn, -2 °C",
    "scale re-zeroed, reading stable",
    'label says "N14A2", check the log',
    "photo taken, see card 3",
    "fog, visibility poor",
    "second observer agreed",
]

CONFIG = """\
# The bundled demo dataset: synthetic Palmer penguins, written by examples/penguins/generate.py.
# Relative paths are resolved against this file's folder.
name: penguins
sources:
  - name: measurements
    format: csv
    path: measurements.csv
    options:
      null_values: ["", "NA"]
  - name: observations
    format: jsonl
    path: observations.jsonl
  - name: nests
    format: parquet
    path: nests.parquet
  - name: bands
    format: sql
    options:
      url: sqlite:///bands.db
      table: bands
      partition_column: id
      partitions: 2
key: id
combine: join
features:
  bill_length_mm:    {type: float, required: false, min: 0}
  bill_depth_mm:     {type: float, required: false, min: 0}
  flipper_length_mm: {type: float, required: false, min: 0}
  body_mass_g:       {type: int, required: false, min: 0, default: 0}
  species:           {type: string, values: [Adelie, Chinstrap, Gentoo]}
  island:            {type: string, values: [Biscoe, Dream, Torgersen]}
  sex:               {type: string, required: false}
  year:              {type: int}
  observer:          {type: string, required: false}
  tags:              {type: string, shape: [null], required: false}
  notes:             {type: string, required: false}
  colony:            {type: string, required: false}
  clutch_size:       {type: int, required: false, min: 0}
  nest_height_m:     {type: float, required: false, min: 0}
  band_color:        {type: string, required: false}
  banded_year:       {type: int, required: false}
label: species
splits: {train: 0.8, eval: 0.1, test: 0.1}
transform:  # tf.Transform: analyzed on train; the trainer and the served model apply it
  features:
    bill_length_mm:    [{fill_missing: 44.0}, z_score]
    bill_depth_mm:     [{fill_missing: 17.0}, z_score]
    flipper_length_mm: [{fill_missing: 200.0}, z_score]
    body_mass_g:       [log1p, z_score]
    island:            {vocabulary: {num_oov_buckets: 1}}
    colony:            {vocabulary: {top_k: 20, num_oov_buckets: 1}}
    nest_height_m:     {bucketize: {num_buckets: 4}}
    observer:          {hash: {buckets: 8}}
output:
  path: out/penguins
  compression: gzip
  shard_size_mb: 1
"""


def _weighted(rng: random.Random, weights: dict[str, int]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def penguin(rng: random.Random, penguin_id: int) -> dict[str, str]:
    """Draws one well-formed penguin as CSV cell texts ('' or 'NA' for a missing value)."""
    species = _weighted(rng, {name: share for name, (share, _) in SPECIES.items()})
    island = _weighted(rng, SPECIES[species][1])
    sex = rng.choice(["female", "male"])
    (bl, bd, fl, bm) = MEASURES[(species, sex)]
    row = {
        "id": str(penguin_id),
        "species": species,
        "island": island,
        "bill_length_mm": f"{rng.gauss(*bl):.1f}",
        "bill_depth_mm": f"{rng.gauss(*bd):.1f}",
        "flipper_length_mm": str(round(rng.gauss(*fl))),
        "body_mass_g": str(25 * round(rng.gauss(*bm) / 25)),
        "sex": sex,
        "year": str(rng.choice([2007, 2008, 2009])),
    }
    if rng.random() < 0.004:  # a bird that escaped before it was measured
        for column in OPTIONAL_NUMERIC:
            row[column] = ""
    for column in OPTIONAL_NUMERIC:
        draw = rng.random()
        if draw < 0.015:
            row[column] = ""
        elif draw < 0.022:
            row[column] = "NA"
    draw = rng.random()
    if draw < 0.03:
        row["sex"] = ""
    elif draw < 0.036:
        row["sex"] = "NA"
    return row


def csv_line(rng: random.Random, cells: list[str]) -> str:
    """Joins cells, double-quoting about 4% of the non-missing, non-id ones."""
    out = []
    for index, cell in enumerate(cells):
        if index > 0 and cell not in ("", "NA") and rng.random() < 0.04:
            cell = f'"{cell}"'
        out.append(cell)
    return ",".join(out)


def broken(row: dict[str, str], how: str) -> list[str]:
    """Applies one deliberate defect to a well-formed row; returns its cells."""
    if "=" in how:
        column, value = how.split("=", 1)
        row = {**row, column: value}
    cells = [row[column] for column in HEADER]
    if how == "extra column":
        cells.append("extra")
    elif how == "missing column":
        cells.pop(HEADER.index("year"))
    return cells


def measurement_lines(rng: random.Random) -> list[str]:
    """The data lines of measurements.csv, duplicates included, in file order."""
    lines: list[tuple[int, str]] = []
    for penguin_id in range(1, N_IDS + 1):
        row = penguin(rng, penguin_id)
        if penguin_id in BAD_ROWS:
            cells = broken(row, BAD_ROWS[penguin_id])
        else:
            cells = [row[column] for column in HEADER]
        lines.append((penguin_id, csv_line(rng, cells)))
    by_id = dict(lines)
    ordered = [text for _, text in lines]
    for penguin_id in DUPLICATED_IDS:
        position = ordered.index(by_id[penguin_id]) + DUPLICATE_DISTANCE
        ordered.insert(position, by_id[penguin_id])
    return ordered


def observation(rng: random.Random, penguin_id: int) -> dict:
    """Draws one field observation of a penguin."""
    record: dict = {"id": penguin_id, "observer": rng.choice(OBSERVERS)}
    if rng.random() < 0.02:
        record["observer"] = None
    draw = rng.random()
    if draw < 0.6:
        record["notes"] = f"{rng.choice(NOTE_OPENINGS)}, {rng.choice(NOTE_DETAILS)}."
    elif draw < 0.75:
        record["notes"] = f"{rng.choice(NOTE_OPENINGS)}.\n{rng.choice(NOTE_DETAILS)}."
    elif draw < 0.9:
        record["notes"] = rng.choice(NOTE_OPENINGS)
    record["tags"] = rng.sample(TAGS, rng.choice([0, 0, 1, 1, 1, 2, 3]))
    return record


def observation_lines(rng: random.Random) -> list[str]:
    """The lines of observations.jsonl, the two bad ones included, in file order."""
    special = {TRUNCATED_OBSERVATION_ID, BAD_TAGS_OBSERVATION_ID}
    ids = [
        penguin_id
        for penguin_id in range(1, N_IDS + 1)
        if penguin_id not in special
        and (penguin_id in BAD_ROWS or rng.random() < OBSERVATION_SHARE)
    ]
    rng.shuffle(ids)
    lines = [json.dumps(observation(rng, penguin_id), ensure_ascii=False) for penguin_id in ids]
    truncated = json.dumps(observation(rng, TRUNCATED_OBSERVATION_ID), ensure_ascii=False)
    bad_tags = {**observation(rng, BAD_TAGS_OBSERVATION_ID), "tags": 3}
    bad = {
        TRUNCATED_OBSERVATION_ID: truncated[: truncated.index(', "observer"') + 20],
        BAD_TAGS_OBSERVATION_ID: json.dumps(bad_tags, ensure_ascii=False),
    }
    for line_number, penguin_id in sorted(BAD_OBSERVATION_LINES.items()):
        lines.insert(line_number - 1, bad[penguin_id])
    return lines


def nest_rows(rng: random.Random) -> list[dict]:
    """The rows of nests.parquet, duplicates, bad and unmatched rows included, in file order."""
    rows = []
    forced = set(NEGATIVE_CLUTCH_IDS) | set(DUPLICATED_NEST_IDS)
    for penguin_id in range(1, N_IDS + 1):
        if penguin_id not in forced and rng.random() >= NEST_SHARE:
            continue
        clutch = rng.choice([0, 1, 1, 2, 2, 2, 3])
        rows.append(
            {
                "id": penguin_id,
                "colony": f"Colony {rng.randrange(1, 13):02d}",
                "clutch_size": None if rng.random() < 0.05 else clutch,
                "nest_height_m": round(rng.uniform(0.0, 60.0), 2),
            }
        )
    for row in rows:
        if row["id"] in NEGATIVE_CLUTCH_IDS:
            row["clutch_size"] = -1
    by_id = {row["id"]: row for row in rows}
    for penguin_id in DUPLICATED_NEST_IDS:
        rows.append({**by_id[penguin_id], "colony": "Colony 99"})  # a later, second nest: dropped
    for penguin_id in UNMATCHED_NEST_IDS:
        rows.append(
            {"id": penguin_id, "colony": "Colony 01", "clutch_size": 1, "nest_height_m": 1.0}
        )
    return rows


def band_rows(rng: random.Random) -> list[tuple]:
    """The rows of bands.db's `bands` table: (id, band_color, banded_year)."""
    colors = ["red", "blue", "green", "yellow", "white"]
    return [
        (
            penguin_id,
            None if rng.random() < 0.03 else rng.choice(colors),
            rng.choice([2005, 2006, 2007]),
        )
        for penguin_id in range(1, N_IDS + 1)
        if rng.random() < BAND_SHARE
    ]


def write_nests(path: Path, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("colony", pa.string()),
            ("clutch_size", pa.int64()),
            ("nest_height_m", pa.float64()),
        ]
    )
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, path, row_group_size=1000, compression="snappy")


def write_bands(path: Path, rows: list[tuple]) -> None:
    import sqlite3

    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE bands (id INTEGER PRIMARY KEY, band_color TEXT, banded_year INTEGER)"
        )
        db.executemany("INSERT INTO bands VALUES (?, ?, ?)", rows)
    db.close()


def write(out: Path) -> dict[str, int]:
    """Writes the sample files into `out`; returns record counts for the summary."""
    rng = random.Random(SEED)
    out.mkdir(parents=True, exist_ok=True)
    measurements = measurement_lines(rng)
    observations = observation_lines(rng)
    extra = random.Random(SEED + 1)  # the later sources draw from their own stream
    nests = nest_rows(extra)
    bands = band_rows(extra)
    write_nests(out / "nests.parquet", nests)
    write_bands(out / "bands.db", bands)
    (out / "measurements.csv").write_text(
        "\n".join([",".join(HEADER), *measurements]) + "\n", encoding="utf-8"
    )
    (out / "observations.jsonl").write_text("\n".join(observations) + "\n", encoding="utf-8")
    (out / "penguins.yaml").write_text(CONFIG, encoding="utf-8")
    return {
        "measurement_lines": len(measurements),
        "observation_lines": len(observations),
        "nest_rows": len(nests),
        "band_rows": len(bands),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent,
        help="folder to write (default: the folder of this script)",
    )
    args = parser.parse_args(argv)
    counts = write(args.out)
    print(f"wrote {args.out}: {counts}")


if __name__ == "__main__":
    main()
