"""Hand-written statistics.json dicts of the validation tests, as the contract's `Statistics`."""

from __future__ import annotations

from transforms.contract.layout import STATISTICS_FORMAT_VERSION
from transforms.contract.statistics import Statistics


def typed(raw: dict) -> Statistics:
    """A hand-written statistics.json as `Statistics`, completed where it leaves out what the
    checks do not read: its format_version, and each feature's missing_rate."""
    splits = {
        name: {
            **split,
            "features": {
                feature: {"missing_rate": s["missing"] / s["records"] if s["records"] else 0.0, **s}
                for feature, s in split["features"].items()
            },
        }
        for name, split in raw["splits"].items()
    }
    return Statistics.from_json(
        {"format_version": STATISTICS_FORMAT_VERSION, **raw, "splits": splits}
    )
