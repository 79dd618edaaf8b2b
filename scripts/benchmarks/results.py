"""Results: one row of the table per figure (`Row`, `dist_row` for a distribution), the
figures of the queues people use today beside ours (issue 8), and the table as printed on
the terminal and as markdown for the report."""

from __future__ import annotations

from .stats import fmt, median, pct

# The queues people use today, measured on this machine class (issue 8). Keys are row keys.
OTHERS = ["pueue 4.0.4", "task-spooler 1.0.1", "Slurm 22.05", "gflow 0.4.18", "bare sh -c"]
COMPARE = {
    "start_cli": ["165 ms", "5.0 ms", "774 ms", "1,121 ms", "2.9 ms"],
    "floor": ["-", "-", "-", "-", "2.9 ms"],
    "submit_cli_first": ["8.0 ms", "4.0 ms", "16 ms", "32.5 ms", "-"],
    "submit_cli_last": ["16.4 ms", "queue full at 993", "8 ms", "32.7 ms", "-"],
    "list_2000": ["115 ms", "16.5 ms (993)", "517 ms", "66 ms", "-"],
    "rss_2000": ["26 MB", "1.4 MB + 994 clients", "20 MB", "30 MB", "-"],
    "idle_cpu": ["120 ms", "0", "70 ms", "70 ms", "-"],
    "kill9": [
        "finished, shown as killed",
        "finished, forgotten",
        "finished, shown completed",
        "finished, shown finished",
        "-",
    ],
}


class Row:
    def __init__(
        self,
        key: str,
        figure: str,
        unit: str,
        p50=None,
        p90=None,
        p99=None,
        target: str = "-",
        n: int | None = None,
        text: str | None = None,
    ):
        self.key = key
        self.figure = figure
        self.unit = unit
        self.p50, self.p90, self.p99 = p50, p90, p99
        self.target = target
        self.n = n
        self.text = text  # a non-numeric result, shown in the p50 column

    def cells(self) -> list[str]:
        others = COMPARE.get(self.key, ["-"] * len(OTHERS))
        p50 = self.text if self.text is not None else fmt(self.p50)
        return [
            self.figure,
            p50,
            fmt(self.p90),
            fmt(self.p99),
            self.unit,
            "-" if self.n is None else str(self.n),
            self.target,
            *others,
        ]


HEADER = ["figure", "p50", "p90", "p99", "unit", "n", "target", *OTHERS]


def dist_row(key, figure, unit, values, target="-", tails=True) -> Row:
    if not values:
        return Row(key, figure, unit, target=target, text="not measured")
    return Row(
        key,
        figure,
        unit,
        p50=median(values),
        p90=pct(values, 90) if tails else None,
        p99=pct(values, 99) if tails else None,
        target=target,
        n=len(values),
    )


SHORT_HEADER = ["figure", "p50", "p90", "p99", "unit", "n", "target", "pueue", "tsp", "Slurm", "gflow", "sh -c"]


def print_table(rows: list[Row]) -> None:
    table = [SHORT_HEADER] + [r.cells() for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    for j, row in enumerate(table):
        print("  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())
        if j == 0:
            print("  ".join("-" * w for w in widths))


def markdown_table(rows: list[Row]) -> str:
    out = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in rows:
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in r.cells()) + " |")
    return "\n".join(out)
