"""`shardflow init`'s guesses on files shaped like the public datasets a new user tries first:
the label from the column's name, then its place (or unset, the config saying why), and dates
named by how they are written (day first, month first, YYYY-MM-DD)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipelines.init import main

SPECIES = ("Adelie", "Chinstrap", "Gentoo")


def _penguins(i: int) -> str:  # palmerpenguins: the label is the first column
    return (
        f"{SPECIES[i % 3]},{('Biscoe', 'Dream')[i % 2]},{30 + i % 30}.{i % 10},{180 + i % 40},"
        f"{3000 + 7 * i},{('male', 'female')[i % 2]},{2007 + i % 3}"
    )


def _adult(i: int) -> str:  # UCI adult: `income`, last, of two values
    return (
        f"{20 + i % 50},{('Private', 'State-gov', 'Self-emp')[i % 3]},{9 + i % 5},"
        f"{('Male', 'Female')[i % 2]},{30 + i % 20},c{i % 30},{('<=50K', '>50K')[i % 3 == 0]}"
    )


def _housing(i: int) -> str:  # California housing: `median_income` is a feature
    proximity = ("NEAR BAY", "INLAND", "<1H OCEAN", "NEAR OCEAN", "ISLAND")[i % 5]
    return f"-122.{i},37.{i},{i % 50},{1 + i % 9}.{i % 100},{100000 + 917 * i}.0,{proximity}"


def _titanic(i: int) -> str:  # an id first, the label second
    return f"{i + 1},{i % 2},{1 + i % 3},name {i},{('male', 'female')[i % 2]},{7 + i % 50}.25"


DATASETS = {
    "penguins": (
        "species,island,bill_length_mm,flipper_length_mm,body_mass_g,sex,year",
        _penguins,
        "label: species                    # named like what a model predicts",
    ),
    "adult": (
        "age,workclass,education-num,sex,hours-per-week,native-country,income",
        _adult,
        "label: income                     # named like what a model predicts",
    ),
    "housing": (
        "longitude,latitude,housing_median_age,median_income,median_house_value,ocean_proximity",
        _housing,
        "label: median_house_value         # named like what a model predicts",
    ),
    "titanic": (
        "PassengerId,Survived,Pclass,Name,Sex,Fare",
        _titanic,
        "label: Survived                   # named like what a model predicts",
    ),
}


def _init(tmp_path: Path, header: str, rows: list[str]) -> tuple[dict, str]:
    (tmp_path / "data.csv").write_text(header + "\n" + "\n".join(rows) + "\n")
    config = tmp_path / "data.yaml"
    assert main(["--source", str(tmp_path / "data.csv"), "--output", str(config)]) == 0
    text = config.read_text()
    return yaml.safe_load(text), text


@pytest.mark.parametrize("name", DATASETS)
def test_the_label_of_a_public_dataset_is_guessed_from_its_name(name, tmp_path):
    header, row, line = DATASETS[name]
    config, text = _init(tmp_path, header, [row(i) for i in range(300)])
    assert any(x.startswith(line) for x in text.splitlines()), text
    assert config["label"] == line.split()[1]


def test_an_id_first_is_the_key_never_the_label_and_a_last_class_is_a_commented_guess(tmp_path):
    rows = [f"{i},{i * 0.5},{i * 3},{('a', 'b', 'c')[i % 3]}" for i in range(200)]
    config, text = _init(tmp_path, "id,x1,x2,kind", rows)
    assert (config["key"], config.get("label")) == ("id", None)
    assert (
        "# label: kind                     # a guess: the last column, with 3 distinct values; "
        "uncomment it, or write the feature the model predicts"
    ) in text.splitlines()


def test_is_and_a_target_name_is_the_label_as_the_name_alone(tmp_path):
    rows = [f"{i * 1.5},m{i % 7},{int(i % 9 == 0)}" for i in range(200)]
    config, _ = _init(tmp_path, "amount,merchant,is_fraud", rows)
    assert config["label"] == "is_fraud"
    assert config["features"]["is_fraud"] == {"type": "int", "values": [0, 1]}  # two classes


def test_a_label_column_in_the_middle_is_the_label(tmp_path):
    rows = [f"{i},{('x', 'y')[i % 2]},{('p', 'q')[i % 2]}" for i in range(200)]
    config, _ = _init(tmp_path, "a,label,kind", rows)
    assert config["label"] == "label"


@pytest.mark.parametrize(
    "header, row, says",
    [
        (  # a class at each end
            "colour,size,shape",
            lambda i: f"{('red', 'blue')[i % 2]},{i * 3},{('round', 'flat', 'square')[i % 3]}",
            "unset: the first column 'colour' (2 values) and the last 'shape' (3 values) could "
            "each be a class; write the one the model predicts",
        ),
        (  # two names of what datasets predict
            "species,size,price",
            lambda i: f"{SPECIES[i % 3]},{i},{i * 2.5}",
            "unset: 'species' and 'price' are each named like what a model predicts; write the "
            "one it predicts",
        ),
        (  # nothing points to a column
            "name,size,weight",
            lambda i: f"n{i},{i},{i * 0.5}",
            "unset: no column is named like a label (label, target, class, y, species, price, "
            "...) and neither the first nor the last column holds a few repeated values; write "
            "the feature the model predicts",
        ),
    ],
)
def test_an_ambiguous_label_is_left_unset_and_the_config_says_why(header, row, says, tmp_path):
    config, text = _init(tmp_path, header, [row(i) for i in range(200)])
    assert "label" not in config
    assert f"# label:                          # {says}" in text.splitlines()


def _date_rows(written) -> list[str]:
    return [written(1 + i % 28, 1 + i % 12, 2020 + i % 5) for i in range(300)]


@pytest.mark.parametrize(
    "written, says",
    [
        (
            lambda d, m, y: f"{d:02d}/{m:02d}/{y}",
            "dates written day first (dd/mm/YYYY), e.g. '01/01/2020': kept as text; training "
            "reads only YYYY-MM-DD as dates, so as written it is a category (left out when "
            "nearly unique): write the dates as YYYY-MM-DD to train on them",
        ),
        (
            lambda d, m, y: f"{m}.{d}.{y} 10:30",
            "dates written month first (mm.dd.YYYY), e.g. '1.1.2020 10:30': kept as text;",
        ),
        (
            lambda d, m, y: f"{min(d, 12):02d}-{m:02d}-{y}",
            "dates written dd-mm-YYYY or mm-dd-YYYY (no value above 12 tells the day from the "
            "month), e.g. '01-01-2020'",
        ),
        (
            lambda d, m, y: f"{y}-{m:02d}-{d:02d}T08:00:00Z",
            "dates written YYYY-MM-DD: training reads their year, month and day of the week",
        ),
    ],
    ids=["day-first", "month-first", "either", "iso"],
)
def test_a_date_column_is_a_string_whose_comment_names_how_dates_are_written(
    written, says, tmp_path
):
    rows = [f"{i},{d}" for i, d in enumerate(_date_rows(written))]
    config, text = _init(tmp_path, "id,when", rows)
    assert config["features"]["when"] == {"type": "string"}
    (line,) = [x for x in text.splitlines() if x.startswith("  when:")]
    assert says in line


def test_text_that_is_not_dates_gets_no_date_note(tmp_path):
    rows = [f"{i},{40 + i % 20}/{i % 50}/2020,{i % 13}/30/1999" for i in range(300)]
    _, text = _init(tmp_path, "id,ratio,odd", rows)
    assert "dates written" not in text
