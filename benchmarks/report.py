"""Print cpstore benchmark figures beside their same-run baselines as ratios.

Used two ways: ``benchmarks/conftest.py`` calls :func:`table` at the end of a
pytest-benchmark run, and ``python benchmarks/report.py RUN.json`` prints the
same table from a ``--benchmark-json`` file.

A benchmark takes part when its ``extra_info`` carries ``label`` (its name in
the table) and ``items`` (records per round, for a per-record time). A
measurement also names its ``baseline`` label (or a list of them, the
``target`` ratio belonging to the first). The
ratio is baseline time per item over measured time per item, so a baseline
timed on a smaller slice is scaled per record; higher means faster than the
baseline.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any


def _per_item(bench: Mapping[str, Any]) -> float:
    return float(bench["stats"]["median"]) / int(bench["extra_info"]["items"])


def _fmt_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _pairs(
    rows: list[Mapping[str, Any]], by_label: Mapping[str, Mapping[str, Any]]
) -> Iterable[tuple[Mapping[str, Any], Mapping[str, Any], Any]]:
    """(measurement, baseline, target) for each baseline a measurement names.

    ``baseline`` is a label or a list of labels: one timing is set against
    several baselines without being run again. ``target`` belongs to the first.
    """
    for bench in rows:
        info = bench["extra_info"]
        names = info.get("baseline", [])
        for i, name in enumerate([names] if isinstance(names, str) else names):
            base = by_label.get(name)
            if base is not None:
                yield bench, base, info.get("target") if i == 0 else None


def table(benchmarks: Iterable[Mapping[str, Any]]) -> list[str]:
    """Lines of the ratio table for every benchmark that carries a label."""
    rows = [b for b in benchmarks if "label" in b.get("extra_info", {})]
    by_label = {b["extra_info"]["label"]: b for b in rows}
    lines = []
    header = (
        f"{'figure':<44} {'median':>9} {'per item':>10} {'baseline':<28} "
        f"{'base/item':>10} {'ratio':>7} {'target':>7}  ok"
    )
    for bench, base, target in _pairs(rows, by_label):
        info = bench["extra_info"]
        ratio = _per_item(base) / _per_item(bench)
        lines.append(
            f"{info['label']:<44} {_fmt_time(bench['stats']['median']):>9} "
            f"{_fmt_time(_per_item(bench)):>10} {base['extra_info']['label']:<28} "
            f"{_fmt_time(_per_item(base)):>10} {ratio:>6.2f}x "
            + (
                f"{float(target):>6.2f}x  {'yes' if ratio >= float(target) else 'NO'}"
                if target is not None
                else f"{'-':>7}  -"
            )
        )
    if not lines:
        return []
    return [header, "-" * len(header), *lines]


#: Figures that are not a time ratio: extra_info key -> (name, unit, scale, higher is better).
#: A benchmark states its own target as ``<key>_target`` (in the key's raw unit);
#: baselines state none.
FIGURES: dict[str, tuple[str, str, float, bool]] = {
    "tokens_per_s": ("validation throughput", "M tokens/s", 1e6, True),
    "us_per_token": ("cursor cost", "us/token", 1.0, False),
    "disk_ratio": ("disk bytes / unique bytes", "x", 1.0, False),
    "peer_disk_ratio": ("peer disk bytes / unique bytes", "x", 1.0, False),
    "lmdbsaver_disk_ratio": ("LMDBSaver disk / unique bytes", "x", 1.0, False),
    "sqlitesaver_disk_ratio": ("SqliteSaver disk / unique bytes", "x", 1.0, False),
    "heap_peak_over_packed": ("Python heap peak / packed logs", "x", 1.0, False),
    "validate_heap_peak_over_packed": ("validate's own heap peak / packed", "x", 1.0, False),
    "peak_rss_over_packed": ("peak RSS / packed logs", "x", 1.0, False),
    "peak_rss_over_files": ("peak RSS / files", "x", 1.0, False),
    "peak_rss_less_interpreter_over_files": ("(peak RSS - interpreter) / files", "x", 1.0, False),
    "stdlib_peak_rss_over_files": ("stdlib loader's peak RSS / files", "x", 1.0, False),
    "peak_rss_over_files_plus_interpreter": ("peak RSS / (files + interpreter)", "x", 1.0, False),
    "record_tokens_per_s": ("bulk recording (array)", "M tokens/s", 1e6, True),
    "record_tuples_per_s": ("bulk recording (tuples)", "M tokens/s", 1e6, True),
    "record_packed_per_s": ("bulk recording (packed)", "M tokens/s", 1e6, True),
    "record_per_call_per_s": ("rec.token per call", "M tokens/s", 1e6, True),
    "record_reference_per_s": ("pure-Python reference packing", "M tokens/s", 1e6, True),
}


def figures(benchmarks: Iterable[Mapping[str, Any]]) -> list[str]:
    """Lines for the measured figures that are not ratios (throughput, memory, disk)."""
    lines = []
    for bench in benchmarks:
        info = bench.get("extra_info", {})
        name = bench.get("name") or info.get("label", "?")
        for key, (what, unit, scale, higher) in FIGURES.items():
            if key not in info:
                continue
            value = float(info[key]) / scale
            raw_target = info.get(f"{key}_target")
            target = None if raw_target is None else float(raw_target) / scale
            verdict = "-"
            if target is not None:
                verdict = "yes" if (value >= target if higher else value <= target) else "NO"
            bound = "-" if target is None else f"{'>=' if higher else '<='} {target:g}"
            lines.append(f"{what:<32} {value:>10.3g} {unit:<11} {bound:<9} {verdict:<4} {name}")
    if not lines:
        return []
    header = f"{'figure':<32} {'value':>10} {'unit':<11} {'target':<9} {'ok':<4} benchmark"
    return [header, "-" * len(header), *lines]


def interleaved(benchmarks: Iterable[Mapping[str, Any]]) -> list[str]:
    """Lines for the interleaved figures of bench_store.py: times and paired ratios.

    A contender's time is the median (min-max) of its per-item time over the
    repeats; a ratio is peer time / cpstore time paired within each repeat,
    its median (min-max). ``equal durability`` says whether both sides make the
    same crash promise.
    """
    lines: list[str] = []
    for bench in benchmarks:
        info = bench.get("extra_info", {}).get("interleaved")
        if not info:
            continue
        lines.append(f"{info['figure']} ({info['repeats']} interleaved repeats, per item)")
        for name, t in info["times"].items():
            lines.append(
                f"  {name:<24} {_fmt_time(t['median']):>9}  "
                f"({_fmt_time(t['min'])} - {_fmt_time(t['max'])})"
            )
        for r in info["ratios"]:
            target = r.get("target")
            verdict = "-" if target is None else ("yes" if r["median"] >= target else "NO")
            eq = r.get("equal_durability")
            eq_text = "" if eq is None else ("equal durability" if eq else "unequal durability")
            note = "; ".join(x for x in (eq_text, r.get("note", "")) if x)
            lines.append(
                f"  {r['ours']} vs {r['peer']}: {r['median']:.2f}x "
                f"({r['min']:.2f}-{r['max']:.2f})"
                + (f"  target >= {target:g}x {verdict}" if target is not None else "")
                + (f"  [{note}]" if note else "")
            )
    return lines


def main(argv: list[str]) -> int:
    """Print the table of a ``--benchmark-json`` file."""
    if len(argv) != 2:
        print("usage: python benchmarks/report.py RUN.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as fh:
        data = json.load(fh)
    for line in table(data["benchmarks"]):
        print(line)
    print()
    for line in figures(data["benchmarks"]):
        print(line)
    print()
    for line in interleaved(data["benchmarks"]):
        print(line)
    envs = {
        json.dumps(b["extra_info"]["environment"], sort_keys=True)
        for b in data["benchmarks"]
        if "environment" in b.get("extra_info", {})
    }
    for env in sorted(envs):
        print("\nenvironment: " + "; ".join(f"{k} {v}" for k, v in json.loads(env).items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
