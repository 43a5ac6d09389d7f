# SPDX-License-Identifier: MIT
"""The results: a Row of samples (one per run) and its median, Groups of rows with their (ref)
row, measure() of one sample (a failure marks the row, not the run), and the table rendered as
text or Markdown."""

import statistics
import subprocess

from benchlib.common import BenchError, log


class Row:
    def __init__(self, label, unit, ref=False, higher_better=False, extra_unit=None):
        self.label = label
        self.unit = unit
        self.ref = ref
        self.higher_better = higher_better
        self.samples = []
        self.extra = []          # a second metric shown in the note column
        self.extra_unit = extra_unit
        self.failed = None
        self.note = ""
        self.ref_row = None      # the row this one is compared with (default: the group's ref)

    def add(self, value, extra=None):
        self.samples.append(value)
        if extra is not None:
            self.extra.append(extra)

    def fail(self, why):
        if self.failed is None:
            self.failed = why
            log(f"failed: {self.label}: {why}")

    def median(self):
        return statistics.median(self.samples) if self.samples and not self.failed else None


class Group:
    def __init__(self, title):
        self.title = title
        self.rows = []

    def row(self, *args, **kwargs):
        r = Row(*args, **kwargs)
        self.rows.append(r)
        return r


def measure(row, fn):
    """Runs fn() for one sample of row; a failure marks the row and is not fatal."""
    if row.failed:
        return None
    try:
        return fn()
    except (BenchError, OSError, subprocess.SubprocessError, ValueError) as e:
        row.fail(str(e) or type(e).__name__)
        return None


def fmt(v, unit):
    if v is None:
        return ""
    if unit == "IOPS":
        return f"{v / 1000:.1f}k" if v >= 1000 else f"{v:.0f}"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def fmt_ratio(x):
    if x >= 10:
        return f"{x:.1f}x"
    if x >= 0.1:
        return f"{x:.2f}x"
    return f"{x:.2g}x"


def render(header, groups, markdown):
    cols = ["Contestant", "Median", "Unit", "Min..max", "vs ref", "Notes"]
    lines = []
    body = []  # (is_title, cells)
    for g in groups:
        body.append((True, [g.title]))
        group_ref = next((r for r in g.rows if r.ref), None)
        for r in g.rows:
            m = r.median()
            ref = r.ref_row or group_ref
            refv = ref.median() if ref else None
            if r.failed:
                cells = [r.label, f"failed: {r.failed}"]  # spans the other columns
            else:
                rng = (f"{fmt(min(r.samples), r.unit)}..{fmt(max(r.samples), r.unit)}"
                       if len(r.samples) > 1 else "")
                if r.ref:
                    ratio = "1.00 (ref)"
                elif m is not None and refv and ref.unit == r.unit:
                    ratio = fmt_ratio(m / refv)
                else:
                    ratio = "n/a"
                note = r.note
                if r.extra:
                    e = statistics.median(r.extra)
                    note = (f"{fmt(e, r.extra_unit)} {r.extra_unit}" + (f"; {note}" if note else ""))
                cells = [r.label, fmt(m, r.unit), r.unit, rng, ratio, note]
            body.append((False, cells))
    if markdown:
        lines += [header[0], ""] + [f"- {h}" for h in header[1:]] + [""]
        lines.append("| " + " | ".join(cols) + " |")
        lines.append("|" + "|".join(["---", "---:", "---", "---:", "---:", "---"]) + "|")
        for is_title, cells in body:
            if is_title:
                lines.append(f"| **{cells[0]}** |  |  |  |  |  |")
            else:
                esc = [c.replace("|", "\\|") for c in cells]
                esc += [""] * (len(cols) - len(esc))
                lines.append("| " + " | ".join(esc) + " |")
    else:
        widths = [len(c) for c in cols]
        for is_title, cells in body:
            if not is_title:
                cells[0] = "  " + cells[0]
                widths[0] = max(widths[0], len(cells[0]))
                if len(cells) == len(cols):
                    widths = [max(w, len(c)) for w, c in zip(widths, cells)]
        right = {1, 3, 4}

        def line(cells):
            if len(cells) < len(cols):  # a failed row: the reason spans the value columns
                return "  ".join([cells[0].ljust(widths[0])] + cells[1:]).rstrip()
            out = []
            for i, (c, w) in enumerate(zip(cells, widths)):
                out.append(c.rjust(w) if i in right else c.ljust(w))
            return "  ".join(out).rstrip()
        total = sum(widths) + 2 * (len(widths) - 1)
        lines += header + [""]
        lines.append(line(cols))
        lines.append("-" * total)
        for is_title, cells in body:
            if is_title:
                lines.append("")
                lines.append(cells[0])
            else:
                lines.append(line(cells))
    return "\n".join(lines)

