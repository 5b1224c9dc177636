"""Two example Python tools for runner: a function and a class (see pyproject.toml)."""
from __future__ import annotations

import csv
import re


def slugify(text: str, separator: str = "-", max_length: int = 60) -> str:
    """Turn a title into a URL slug.

    Lower-cases, keeps ASCII letters and digits, joins the words with the separator and cuts the
    result to max_length characters.
    """
    words = re.findall(r"[a-z0-9]+", text.lower())
    if not words:
        raise ValueError("the text has no letters or digits")
    return separator.join(words)[:max_length]


class CsvStats:
    """Sum, minimum and maximum of a numeric column of a CSV file in the workspace."""

    name = "csv_stats"
    guidance = "Use csv_stats for numbers in CSV files instead of writing a script."
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "the CSV file, relative to the workspace"},
            "column": {"type": "string", "description": "the header of the numeric column"},
        },
        "required": ["path", "column"],
    }

    def run(self, path: str, column: str) -> dict:
        with open(path, newline="") as f:
            values = [float(row[column]) for row in csv.DictReader(f) if row.get(column)]
        if not values:
            raise ValueError(f"no values in column {column!r}")
        return {"count": len(values), "sum": sum(values), "min": min(values), "max": max(values)}
