"""The local results store: one SQLite file, one row per run, the full result JSON kept verbatim.

SQLite because it is in the standard library, survives concurrent `ftbench run`s, and exports to
CSV/JSON without a server. The headline columns exist so `ftbench results` can list runs without
parsing every JSON blob.
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ftbench.api.prediction_report import all_gather_bus_bytes
from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.catalog import Catalog
from ftbench.contracts.ado_names import ADO_COLUMNS, ado_rows
from ftbench.contracts.export import EXPORT_COLUMNS, EXPORT_SCHEMA_VERSION
from ftbench.contracts.network import NetworkInEffect
from ftbench.contracts.results import TrainerResult
from ftbench.predict.throughput import predict_throughput

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    experiment TEXT NOT NULL,
    engine TEXT NOT NULL,
    model TEXT NOT NULL,
    number_gpus INTEGER NOT NULL,
    batch_size INTEGER NOT NULL,
    model_max_length INTEGER NOT NULL,
    status TEXT NOT NULL,
    is_valid INTEGER,
    train_tokens_per_second REAL,
    run_dir TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    results_json TEXT NOT NULL,
    sweep TEXT,
    point INTEGER,
    repeat INTEGER
)
"""
# Stores written before sweeps existed lack the last three columns: added in place on open.
SWEEP_COLUMNS = (("sweep", "TEXT"), ("point", "INTEGER"), ("repeat", "INTEGER"))
SWEEPS_SCHEMA = """
CREATE TABLE IF NOT EXISTS sweeps (
    name TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    spec_json TEXT NOT NULL
)
"""

# Rows of ado's own runs (`ftbench results --import ado FILE`), kept beside ftbench's: what ado measured is
# kept under ado's property names, the parameters as the ftbench spec they map to (ftbench.local.ado_rows).
ADO_SCHEMA = """
CREATE TABLE IF NOT EXISTS ado_runs (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    line INTEGER NOT NULL,
    imported_at TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    is_valid INTEGER NOT NULL,
    measured_json TEXT NOT NULL
)
"""


@dataclass(frozen=True)
class RunRecord:
    id: str
    name: str
    started_at: str
    finished_at: str | None
    experiment: str
    engine: str
    model: str
    number_gpus: int
    batch_size: int
    model_max_length: int
    status: str
    is_valid: bool | None
    train_tokens_per_second: float | None
    run_dir: str
    spec: dict[str, Any]
    results: list[dict[str, Any]]
    sweep: str | None = None  # the `ftbench sweep` this run belongs to, with its point and repeat
    point: int | None = None
    repeat: int | None = None

    @property
    def prediction_error_percent(self) -> float | None:
        """How far the run's memory prediction was off its measured tensor peak (the last result that says)."""
        for result in reversed(self.results):
            value = (result.get("metrics") or {}).get("predictionErrorPercent")
            if value is not None:
                return float(value)
        return None

    def throughput_error_percent(self, catalog: Catalog) -> float | None:
        """(predicted - measured steady tokens/s) / measured x 100 of the last result that measured it (the
        prediction is pure arithmetic on the spec: ftbench.predict.throughput; with the inter-node bus bandwidth
        of the run's network preflight where it had one)."""
        try:
            spec = FineTuneExperimentSpec.model_validate(self.spec)
        except ValueError:
            return None
        predicted = predict_throughput(spec, catalog)
        for result in reversed(self.results):
            measured = (result.get("metrics") or {}).get("steadyStateTokensPerSecond")
            if predicted is not None and measured:
                network = (result.get("environment") or {}).get("network")
                bus = all_gather_bus_bytes(NetworkInEffect.model_validate(network) if network else None)
                if bus:
                    predicted = predicted.with_bus_bandwidth(bus)
                return 100.0 * (predicted.tokens_per_second_estimate - measured) / measured
        return None

    @property
    def rows_trained(self) -> str:
        """`1366/4096`: rows that kept a trained token of the rows offered (the last result that counted them)."""
        for result in reversed(self.results):
            metrics = result.get("metrics") or {}
            if metrics.get("rowsTrained") is not None:
                offered = metrics.get("rowsOffered")
                return f"{metrics['rowsTrained']}" + ("" if offered is None else f"/{offered}")
        return ""

    def as_dict(self) -> dict[str, Any]:
        """The run as `ExportedRun` (ftbench.contracts.export) writes it: its schema is published."""
        extra = {"sweep": self.sweep, "point": self.point, "repeat": self.repeat} if self.sweep else {}
        columns = {c: getattr(self, c) for c in EXPORT_COLUMNS}
        return {"schema_version": EXPORT_SCHEMA_VERSION, **columns, **extra, "spec": self.spec, "results": self.results}


@dataclass(frozen=True)
class AdoRecord:
    """One of ado's runs, imported: the spec it maps to, whether it ran, what ado measured."""

    id: str
    source: str
    line: int
    imported_at: str
    spec: dict[str, Any]
    is_valid: bool
    measured: dict[str, float]


@dataclass(frozen=True)
class SweepRecord:
    """A sweep `ftbench sweep` ran here: its spec is the record of what it measures."""

    name: str
    created_at: str
    spec: dict[str, Any]


@dataclass(frozen=True)
class SweepSlot:
    """Which sweep point and repeat a run measures."""

    sweep: str
    point: int
    repeat: int


class ResultsStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute(SCHEMA)
            db.execute(SWEEPS_SCHEMA)
            db.execute(ADO_SCHEMA)
            have = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
            for column, kind in SWEEP_COLUMNS:
                if column not in have:
                    db.execute(f"ALTER TABLE runs ADD COLUMN {column} {kind}")

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=30)) as db, db:
            yield db

    def record(
        self,
        *,
        run_id: str,
        name: str,
        spec: FineTuneExperimentSpec,
        started_at: datetime,
        status: str,
        results: list[TrainerResult],
        run_dir: Path,
        slot: SweepSlot | None = None,
    ) -> None:
        """Insert or update a run (called at start with no results, and again at the end)."""
        # The headline is the mean over results (the repeats or trials of one run).
        measured = [r.metrics.train_tokens_per_second for r in results if r.metrics is not None]
        valid = [r.is_valid for r in results if r.is_valid is not None]
        is_valid = None if not valid else all(valid)
        row = (
            run_id,
            name,
            started_at.isoformat(),
            datetime.now(UTC).isoformat() if results else None,
            spec.experiment.value,
            spec.engine.value,
            spec.model,
            spec.number_gpus,
            spec.batch_size,
            spec.model_max_length,
            status,
            None if is_valid is None else int(is_valid),
            sum(measured) / len(measured) if measured else None,
            str(run_dir),
            json.dumps(spec.to_wire()),
            json.dumps([json.loads(r.to_json()) for r in results]),
            slot.sweep if slot else None,
            slot.point if slot else None,
            slot.repeat if slot else None,
        )
        with self._connect() as db:
            db.execute(f"INSERT OR REPLACE INTO runs VALUES ({','.join('?' * len(row))})", row)

    def runs(self, sweep: str | None = None) -> list[RunRecord]:
        """Every run, or one sweep's runs, oldest first."""
        query, args = "SELECT * FROM runs ORDER BY started_at", tuple[str, ...]()
        if sweep is not None:
            query, args = "SELECT * FROM runs WHERE sweep = ? ORDER BY started_at", (sweep,)
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(query, args).fetchall()
        return [_record(row) for row in rows]

    def save_sweep(self, name: str, spec: dict[str, Any]) -> None:
        """Record a sweep's spec once (a resumed sweep keeps its first record)."""
        with self._connect() as db:
            db.execute("INSERT OR IGNORE INTO sweeps VALUES (?, ?, ?)",
                       (name, datetime.now(UTC).isoformat(), json.dumps(spec)))  # fmt: skip

    def sweep(self, name: str) -> SweepRecord | None:
        return next((s for s in self.sweeps() if s.name == name), None)

    def sweeps(self) -> list[SweepRecord]:
        with self._connect() as db:
            rows = db.execute("SELECT name, created_at, spec_json FROM sweeps ORDER BY created_at").fetchall()
        return [SweepRecord(name, created, json.loads(spec)) for name, created, spec in rows]

    def import_ado(self, source: str, rows: Sequence[Any]) -> int:
        """Keep ado's rows that map onto a spec (ftbench.local.ado_rows.AdoRow); the same file imported again
        replaces its rows. Returns how many were kept."""
        now = datetime.now(UTC).isoformat()
        kept = [r for r in rows if r.spec is not None]
        with self._connect() as db:
            db.executemany(
                "INSERT OR REPLACE INTO ado_runs VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(f"ado:{source}:{r.line}", source, r.line, now, json.dumps(r.spec), int(r.is_valid),
                  json.dumps(r.measured)) for r in kept],
            )  # fmt: skip
        return len(kept)

    def ado_runs(self) -> list[AdoRecord]:
        with self._connect() as db:
            rows = db.execute("SELECT * FROM ado_runs ORDER BY source, line").fetchall()
        return [
            AdoRecord(id, source, line, at, json.loads(spec), bool(valid), json.loads(measured))
            for id, source, line, at, spec, valid, measured in rows
        ]

    def export(self, fmt: str, names: str = "ftbench") -> str:
        """All runs as CSV or JSON (see `export_runs`)."""
        return export_runs(self.runs(), fmt, names)


def export_runs(runs: Sequence[RunRecord], fmt: str, names: str = "ftbench") -> str:
    """Runs (of this store, or a cluster's experiments) as CSV or JSON; names "ado" writes one row
    per trial with ado's property and parameter names (ftbench.contracts.ado_names), so ado analyses
    read ftbench runs, followed by the run id, status and engine columns ado does not have."""
    if names == "ado":
        rows = [
            row
            for r in runs
            for row in ado_rows(r.experiment, r.spec, r.results, run_id=r.id, status=r.status, engine=r.engine)
        ]
        if fmt == "json":
            return json.dumps(rows, indent=2)
        return _csv(ADO_COLUMNS, [[row[c] for c in ADO_COLUMNS] for row in rows])
    if fmt == "json":
        return json.dumps([r.as_dict() for r in runs], indent=2)
    return _csv(EXPORT_COLUMNS, [[getattr(run, c) for c in EXPORT_COLUMNS] for run in runs])


def _csv(header: tuple[str, ...], rows: list[list[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


_RECORD_FIELDS = frozenset(f.name for f in fields(RunRecord))


def _record(row: sqlite3.Row) -> RunRecord:
    """A `runs` row read by column name, since RunRecord's fields are the table's columns: only the JSON
    columns (spec_json, results_json) are parsed and is_valid (SQLite's 0/1) made a bool again. Columns
    RunRecord does not know (a newer ftbench's) are left out, as reading by position did."""
    columns = dict(row)
    spec, results, valid = columns.pop("spec_json"), columns.pop("results_json"), columns.pop("is_valid")
    known = {name: value for name, value in columns.items() if name in _RECORD_FIELDS}
    is_valid = None if valid is None else bool(valid)
    return RunRecord(**known, spec=json.loads(spec), results=json.loads(results), is_valid=is_valid)
