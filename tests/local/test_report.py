"""`ftbench report` and `ftbench results compare` over a results store written as `ftbench sweep` writes it.

The store holds report_cases' two sweeps (GPU with OOM and skipped points, CPU with no GPU data)
and runs of their own. The rows are written with `ResultsStore.record` directly: these tests are about
reading and drawing them (a real CPU sweep is tested with `ftbench sweep`).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from ftbench.api.spec import FineTuneExperimentSpec
from ftbench.api.sweep import FineTuneSweepSpec
from ftbench.catalog import load_catalog
from ftbench.cli import main
from ftbench.contracts.labels import SWEEP_LABEL, SWEEP_POINT_LABEL, SWEEP_REPEAT_LABEL
from ftbench.contracts.network import NetworkInEffect
from ftbench.contracts.results import Outcome, TrainerResult
from ftbench.local.store import ResultsStore, SweepSlot
from ftbench.report import front
from ftbench.report import network as net
from ftbench.report.cluster import from_objects, run_state
from ftbench.report.data import RunMeasurement, from_store
from ftbench.report.plots import BATCH_LABEL, MEMORY_LABEL, MFU_LABEL, POINT_LABEL, STEP_LABEL, TOKENS_LABEL
from ftbench.sweep.points import expand
from tests.local.report_cases import (
    CPU_SWEEP,
    GPU_SWEEP,
    NET_SWEEP,
    PREFLIGHT_SIZES,
    START,
    cpu_measure,
    gpu_measure,
    metrics,
    net_measure,
    network,
    succeeded,
    table,
    with_network,
)

pytest.importorskip("matplotlib")


class Recorder:
    """Writes runs into the store one second apart, as `ftbench run` and `ftbench sweep` do."""

    def __init__(self, home: Path) -> None:
        self.store = ResultsStore(home / "results.db")
        self.count = 0

    def run(self, name: str, spec: FineTuneExperimentSpec, result: TrainerResult,
            slot: SweepSlot | None = None) -> str:  # fmt: skip
        self.count += 1
        run_id = f"20261120-1200{self.count:02d}-{self.count:06x}"
        status = "Succeeded" if result.outcome == Outcome.SUCCEEDED else "Invalid"
        self.store.record(run_id=run_id, name=name, spec=spec, started_at=START + timedelta(seconds=self.count),
                          status=status, results=[result], run_dir=Path("/nonexistent") / run_id, slot=slot)  # fmt: skip
        return run_id

    def sweep(self, name: str, body: dict[str, Any], measure: Any) -> None:
        """Record the sweep and run its points smallest first, skipping what the pruning skips."""
        self.store.save_sweep(name, body)
        spec = FineTuneSweepSpec.model_validate(body)
        for point in expand(spec, load_catalog()).points:
            assert point.spec is not None
            for repeat in range(spec.repeats):
                result = measure(point.spec, repeat)
                if result is None:
                    break  # not run: predicted to run out of memory
                self.run(f"{name}-{point.index}-{repeat}", point.spec, result, SweepSlot(name, point.index, repeat))
                if result.outcome == Outcome.GPU_OOM:
                    break


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FTBENCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def recorded(home: Path) -> Recorder:
    recorder = Recorder(home)
    recorder.sweep("gpu-sweep", GPU_SWEEP, gpu_measure)
    recorder.sweep("cpu-sweep", CPU_SWEEP, cpu_measure)
    plain = FineTuneExperimentSpec.model_validate(CPU_SWEEP["template"] | {"batchSize": 4})
    recorder.run("quickstart", plain, succeeded(metrics(400.0, 0.0, 0.0, 0.3)))
    recorder.run("quickstart", plain, succeeded(metrics(440.0, 0.0, 0.0, 0.27)))
    return recorder


def test_report_tables_and_plot_files(recorded: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["report", "-o", str(out)]) == 0
    assert "report.md" in capsys.readouterr().out
    md = (out / "report.md").read_text()
    rows = {r["point"]: r for r in table(md, "## Sweep gpu-sweep")}
    assert len(rows) == 10
    assert rows["1"]["per-device batch"] == "4" and rows["1"]["phase"] == "Succeeded" and rows["1"]["repeats"] == "2"
    assert rows["2"]["phase"] == "GpuOom" and "CUDA out of memory" in rows["2"]["note"]
    assert [rows[p]["phase"] for p in "34"] == ["Skipped"] * 2
    assert rows["4"]["note"] == "predicted OOM from point 2 (numberGpus=1, batchSize=8)"
    assert rows["9"]["per-device batch"] == "16" and rows["9"]["phase"] == "GpuOom"
    # the table is plan_sweep's: means over repeats, CV of the repeats' median step times
    assert rows["0"]["tokens/s"] == f"{1000 * 2**0.5 * 1.01:,.1f}" and rows["0"]["step-time CV"] == "1.4%"
    assert "Best: point 8 (numberGpus=2, batchSize=16)" in md
    # Issue 47: the sweep's device time, the OOM runs (no result, so no device time known) named apart.
    assert re.search(r"Device-hours: [\d.e-]+ spent.*; 2 run\(s\) left no result and are not counted\.", md), md[:800]
    # two repeats per point: each objective has its t interval, and the best says what it is within noise of
    assert rows["8"]["trainTokensPerSecond 95% CI"] and rows["2"]["trainTokensPerSecond 95% CI"] == ""
    assert "with trainTokensPerSecond 5,713.4 (95% interval 4,994.7-6,432.2)." in md  # ahead beyond the noise
    cpu = table(md, "## Sweep cpu-sweep")
    # Issue 45.7: a figure that does not apply to CPU ranks reads n/a, never 0.0.
    assert [r["peak GPU mem %"] for r in cpu] == ["n/a", "n/a"] and [r["MFU %"] for r in cpu] == ["n/a", "n/a"]
    assert cpu[1]["tokens/s"] == "400.0"
    plain = table(md, "## Runs outside sweeps")
    assert [r["tokens/s"] for r in plain] == ["400.0", "440.0"]
    assert [r["noise"] for r in plain] == ["clean", "clean"]  # the runs' noise flags and intervals have columns
    assert "steady tokens/s ±95%" in plain[0]
    images = re.findall(r"!\[([^\]]*)\]\(([^)]+)\)", md)
    # 4 plots per sweep and for the runs outside sweeps, 2 of the scaling section (gpu-sweep varies numberGpus),
    # and each sweep's Pareto front (issue 61)
    assert len(images) == 16 and all((out / file).stat().st_size > 5000 for _, file in images)
    assert ("Peak GPU memory and the OOM frontier: peak GPU memory (% of device memory) vs per-device batch "
            "(samples per GPU or CPU rank per step)", "gpu-sweep-memory.png") in images  # fmt: skip
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 16
    front = table(md, "### Pareto front of gpu-sweep")
    assert front and all(r["predicted tokens/s (estimate)"] for r in front)  # predicted beside measured
    assert "8" in {r["point"] for r in front}  # the best point is on the front
    best = yaml.safe_load((out / "gpu-sweep-best.yaml").read_text())
    assert best["kind"] == "FineTuneExperiment" and best["spec"]["batchSize"] == 16
    assert not re.search(r"(src|href)=\"(https?:)?//", page)  # nothing outside the file


def test_report_of_one_sweep_in_svg(recorded: Recorder, tmp_path: Path) -> None:
    assert main(["report", "--sweep", "cpu-sweep", "--format", "svg", "-o", str(tmp_path)]) == 0
    md = (tmp_path / "report.md").read_text()
    assert "## Sweep cpu-sweep" in md and "gpu-sweep" not in md and "Runs outside sweeps" not in md
    page = (tmp_path / "report.html").read_text()
    assert page.count("<svg") == 5 and "<?xml" not in page
    # CPU runs: the plots say what is missing rather than failing
    assert "no GPU memory measured" in page and "no MFU measured" in page
    assert "one repeat per point: no spread to measure" in page


def test_report_usage_errors(recorded: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--sweep", "nope", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no sweep 'nope'" in err and "gpu-sweep" in err
    assert main(["report", "--namespace", "x", "-o", str(tmp_path)]) == 2
    assert "--from-cluster" in capsys.readouterr().err


def test_report_of_an_empty_store(home: Path, tmp_path: Path) -> None:
    assert main(["report", "-o", str(tmp_path)]) == 0
    assert "No runs yet" in (tmp_path / "report.md").read_text()


def test_store_loader_keeps_every_repeat(recorded: Recorder) -> None:
    data = from_store(recorded.store, load_catalog(), "gpu-sweep")
    [sweep] = data.sweeps
    assert [(r.point, r.repeat) for r in sweep.runs if r.point == 0] == [(0, 0), (0, 1)]
    assert {r.phase for r in sweep.runs if r.point in (3, 9)} == {"GpuOom"}
    assert json.dumps(sweep.runs[0].spec)  # wire form


# --- In a real browser: Debian's chromium, headless -------------------------------------------------

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars")  # fmt: skip
# Added to a copy of the page: what the browser made of each plot, written into the DOM for --dump-dom.
PROBE = """<script>
window.addEventListener("load", () => {
  const plots = [...document.querySelectorAll("figure.plot")].map((fig) => {
    const img = fig.querySelector("img");
    const labels = [fig.dataset.xlabel, fig.dataset.ylabel].map((label) => {
      const text = [...fig.querySelectorAll("svg text")].find((t) => t.textContent.trim() === label);
      const box = text ? text.getBBox() : null;
      return {label, width: box ? box.width : 0, height: box ? box.height : 0};
    });
    return {name: fig.dataset.name, img: img ? [img.complete, img.naturalWidth, img.naturalHeight] : null,
            svg: fig.querySelector("svg") ? fig.querySelector("svg").getBoundingClientRect().width : 0, labels};
  });
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify(plots);
  document.body.appendChild(out);
});
</script>"""


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("FTBENCH_REQUIRE_BROWSER") == "1":
            pytest.fail("FTBENCH_REQUIRE_BROWSER=1 but no chromium on PATH (apt-get install chromium)", pytrace=False)
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    return found


def browse(chromium: str, tmp_path: Path, *args: str) -> str:
    """Run headless chromium on its own empty profile; its stdout."""
    profile = Path(tempfile.mkdtemp(dir=tmp_path, prefix="chromium-"))
    done = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def probe(chromium: str, page: Path, tmp_path: Path) -> list[dict[str, Any]]:
    """Each plot as the browser rendered it (image decoded size, SVG label boxes)."""
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    dom = browse(chromium, tmp_path, "--virtual-time-budget=5000", "--dump-dom", probed.as_uri())
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    return list(json.loads(html.unescape(found.group(1))))


@pytest.mark.browser
@pytest.mark.slow
def test_html_report_renders_in_chromium(recorded: Recorder, tmp_path: Path, chromium: str) -> None:
    from PIL import Image  # matplotlib's own dependency

    out = tmp_path / "png"
    assert main(["report", "-o", str(out)]) == 0
    page = out / "report.html"
    plots = probe(chromium, page, tmp_path)
    assert len(plots) == 16
    assert all(p["img"] == [True, 700, 420] for p in plots), plots  # every PNG decoded at its size

    shot = tmp_path / "report.png"
    browse(chromium, tmp_path, f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri())
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 2000)
    colors = image.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 50  # text, lines and markers, not an empty page
    white = max(colors)[0] / (1280 * 2000)
    assert white < 0.97
    # the plots' own pixels: the first memory plot has the series colours and the OOM marker's red
    assert {(31, 119, 180), (255, 127, 14), (214, 39, 40)} <= {c for _, c in colors}


@pytest.mark.browser
@pytest.mark.slow
def test_svg_report_shows_axis_labels_in_chromium(recorded: Recorder, tmp_path: Path, chromium: str) -> None:
    out = tmp_path / "svg"
    assert main(["report", "--sweep", "gpu-sweep", "--format", "svg", "-o", str(out)]) == 0
    plots = probe(chromium, out / "report.html", tmp_path)
    assert [p["name"] for p in plots] == [
        "throughput", "memory", "mfu", "step-time-spread", "front", "scaling-throughput", "scaling-memory",
    ]  # fmt: skip
    for plot in plots:
        assert plot["svg"] > 300, plot  # laid out at a readable width
        # both axis labels are text the browser laid out with a size (not missing, not empty)
        assert [label["label"] for label in plot["labels"]] == [
            plot_labels(plot["name"])[0],
            plot_labels(plot["name"])[1],
        ]
        # laid out with a size: more than 3 px per character, so no label is squeezed or empty
        assert all(label["width"] > 3 * len(label["label"]) and label["height"] > 5 for label in plot["labels"]), plot


def plot_labels(name: str) -> tuple[str, str]:
    return {
        "throughput": (BATCH_LABEL, TOKENS_LABEL),
        "memory": (BATCH_LABEL, MEMORY_LABEL),
        "mfu": (BATCH_LABEL, MFU_LABEL),
        "step-time-spread": (POINT_LABEL, STEP_LABEL),
        "front": (front.XLABEL, front.YLABEL),
        "scaling-throughput": ("ranks", "train tokens/s (all ranks, GPU)"),
        "scaling-memory": ("ranks", "bytes per rank (largest rank)"),
    }[name]


def test_results_compare_side_by_side(recorded: Recorder, capsys: pytest.CaptureFixture[str]) -> None:
    runs = {r.name: r.id for r in recorded.store.runs()}
    a, b = runs["gpu-sweep-0-0"], runs["gpu-sweep-6-0"]  # 1 GPU batch 2 against 2 GPUs batch 4
    assert main(["results", "compare", a, b]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["run"] == [a, b]
    assert rows["spec.numberGpus"] == ["1", "2"] and rows["spec.batchSize"] == ["2", "4"]
    assert "spec.model" not in rows  # only what differs
    tokens_a, tokens_b = 1000 * 2**0.5, 1000 * 2 * 2**0.5
    assert rows["trainTokensPerSecond"] == [f"{tokens_a:,.1f}", f"{tokens_b:,.1f}", "+100.0%"]
    assert rows["gpuMemoryUtilizationPeakPercent"][2] == f"{46 / 42 - 1:+.1%}"
    # a unique id prefix works; a name shared by two runs is refused with their ids
    assert main(["results", "compare", a[:-3], "quickstart"]) == 2
    err = capsys.readouterr().err
    assert "2 runs named 'quickstart'" in err and runs["quickstart"] in err
    assert main(["results", "compare", "nope", b]) == 2
    assert "no run 'nope'" in capsys.readouterr().err
    # the oom run has no metrics: its column stays empty and there is no ratio
    assert main(["results", "compare", a, runs["gpu-sweep-2-0"]]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["status"] == ["Succeeded", "Invalid"] and rows["trainTokensPerSecond"] == [f"{tokens_a:,.1f}"]


def test_results_without_action_still_lists(recorded: Recorder, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["results"]) == 0
    assert "quickstart" in capsys.readouterr().out
    assert main(["results", "--export", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == len(recorded.store.runs())


# --- The network preflight: per point in the tables, busbw per size, whether the runs matched -----------


@pytest.fixture
def with_preflights(home: Path) -> Recorder:
    recorder = Recorder(home)
    recorder.sweep("net-sweep", NET_SWEEP, net_measure)
    plain = FineTuneExperimentSpec.model_validate(NET_SWEEP["template"] | {"batchSize": 4})
    for peak in (44.0, 46.0):  # two runs of their own on the same RoCE pair: within ±10 %
        recorder.run(
            "roce", plain, with_network(succeeded(metrics(3000.0, 50.0, 40.0, 0.5)), network("ib", peak, "RoCE"))
        )
    recorder.run("no-preflight", plain, succeeded(metrics(3000.0, 50.0, 40.0, 0.5)))
    return recorder


def test_report_shows_the_network_preflight(with_preflights: Recorder, tmp_path: Path) -> None:
    assert main(["report", "-o", str(tmp_path)]) == 0
    md = (tmp_path / "report.md").read_text()
    rows = table(md, "## Sweep net-sweep")
    assert [(r["transport"], r["peak busbw GB/s"]) for r in rows] == [
        ("ib (RoCE)", "45.0"), ("ib (RoCE)", "47.0"), ("socket", "10.0"),
    ]  # fmt: skip
    section = md.split("## Sweep net-sweep", 1)[1].split("## Runs outside sweeps", 1)[0]
    assert "### Network preflight" in section
    assert ("Did not match across the 3 runs with a network preflight: transport ib (RoCE) except point 2 repeat 0 "
            "(socket); peak busbw outside ±10% of the median 45.0 GB/s: point 2 repeat 0 (10.0 GB/s, -78%).") in section  # fmt: skip
    busbw = table(section, "### Network preflight")
    assert list(busbw[0]) == ["point", "repeat", "transport", "collective", "64 KiB", "1 MiB", "16 MiB", "128 MiB"]
    assert [(r["point"], r["collective"]) for r in busbw] == [
        (p, c) for p in "012" for c in ("allReduce", "allGather")
    ]  # fmt: skip
    assert busbw[0]["128 MiB"] == "45.00" and busbw[0]["64 KiB"] == "5.62" and busbw[1]["128 MiB"] == "36.00"
    assert f"![Network preflight: busbw against message size: {net.BUSBW_LABEL} vs {net.SIZE_LABEL}]" in section
    assert (tmp_path / "net-sweep-network-busbw.png").stat().st_size > 5000
    plain = table(md, "## Runs outside sweeps")
    assert [(r["transport"], r["peak busbw GB/s"]) for r in plain] == [("ib (RoCE)", "44.0"), ("ib (RoCE)", "46.0"),
                                                                       ("", "")]  # fmt: skip
    runs = md.split("## Runs outside sweeps", 1)[1]
    assert "Matched across the 2 runs with a network preflight: transport ib (RoCE) in every run, peak busbw " \
           "within ±10% of the median 45.0 GB/s." in runs  # fmt: skip
    ids = [r.id for r in with_preflights.store.runs()[3:5]]
    assert [r["run"] for r in table(runs, "### Network preflight")] == [ids[0], ids[0], ids[1], ids[1]]
    page = (tmp_path / "report.html").read_text()
    assert (
        page.count('src="data:image/png;base64,') == 4 + 1 + 1 + 4 + 1
    )  # the sweep's, its front, its busbw plot, the runs'


def test_no_network_columns_without_a_preflight(recorded: Recorder, tmp_path: Path) -> None:
    assert main(["report", "-o", str(tmp_path)]) == 0
    md = (tmp_path / "report.md").read_text()
    assert "transport" not in table(md, "## Sweep gpu-sweep")[0] and "Network preflight" not in md


def test_preflights_agree_or_name_the_outliers() -> None:
    def runs(*networks: NetworkInEffect) -> list[RunMeasurement]:
        return [RunMeasurement(f"r{i}", {}, "Succeeded", None, network=n) for i, n in enumerate(networks)]

    one = net.run_preflights(runs(network("ib", 45.0, "RoCE"), None))
    assert net.agreement(one).startswith("One run (r0) has a network preflight: nccl over ib (RoCE) on mlx5_0:1/RoCE")
    close = net.run_preflights(runs(*(network("ib", p, "RoCE") for p in (40.0, 44.0, 48.0))))  # median 44, ±4.4
    assert net.agreement(close).startswith("Matched across the 3 runs")
    far = net.run_preflights(runs(*(network("ib", p, "RoCE") for p in (39.0, 44.0, 48.0))))
    assert "outside ±10% of the median 44.0 GB/s: r0 (39.0 GB/s, -11%)" in net.agreement(far)
    assert "transport" not in net.agreement(far)  # one transport: only the peak is named
    links = net.run_preflights(runs(network("ib", 45.0, "RoCE"), network("ib", 45.0, "IB")))
    assert "transport ib (RoCE) except r1 (ib (IB))" in net.agreement(links)
    assert [net.run_columns(r) for r in runs(network("socket", 10.0), None)] == [("socket", "10.0"), ("", "")]
    # a size one run skipped (time budget) is an empty cell in its row
    short = net.run_preflights(runs(network("ib", 45.0, "RoCE"), network("ib", 45.0, "RoCE", PREFLIGHT_SIZES[:3])))
    headers, rows = net.bandwidth_table(short)
    assert headers[-1] == "128 MiB" and rows[2][-1] == "" and rows[0][-1] == "45.00"
    assert [net.size_text(s) for s in (65536, 65532, 3 << 30)] == ["64 KiB", "65,532 B", "3 GiB"]


def test_cluster_experiments_carry_their_preflight() -> None:
    preflight = network("ib", 45.0, "RoCE").model_dump(by_alias=True, mode="json")
    spec = NET_SWEEP["template"] | {"batchSize": 4}
    obj = {"metadata": {"name": "e1"}, "spec": spec,
           "status": {"phase": "Succeeded", "environment": {"engine": "trl", "network": preflight}}}  # fmt: skip
    child = {"metadata": {"name": "s-0-0", "labels": {SWEEP_LABEL: "s", SWEEP_POINT_LABEL: "0", SWEEP_REPEAT_LABEL: "0"}},
             "spec": spec, "status": obj["status"]}  # fmt: skip
    data = from_objects([], [obj], load_catalog(), "test")
    assert data.runs[0].network is not None and data.runs[0].network.peak_bus_bandwidth_gbps == 45.0
    assert run_state(child, 0, 0).network == data.runs[0].network
    assert from_objects([], [{"metadata": {"name": "e2"}, "spec": spec}], load_catalog(), "t").runs[0].network is None


def test_sweep_table_shows_each_points_preflight(with_preflights: Recorder, capsys: pytest.CaptureFixture[str]) -> None:
    from ftbench.cli.cmd_sweep import _print
    from ftbench.local.sweeps import stored_sweep

    state = stored_sweep(with_preflights.store, "net-sweep", load_catalog())
    assert state is not None and state.plan is not None
    _print(state, "table")  # what `ftbench sweep` prints at the end
    lines = capsys.readouterr().out.splitlines()
    assert "TRANSPORT" in lines[0] and "PEAK BUSBW GB/S" in lines[0]
    assert "ib (RoCE)  45.00" in lines[1] and "socket     10.00" in lines[3]
    _print(state, "json")  # and its JSON: the FineTuneSweep's status.points shape
    points = json.loads(capsys.readouterr().out)["points"]
    assert [(p["transport"], p["peakBusBandwidthGbps"]) for p in points] == [
        ("ib (RoCE)", 45.0), ("ib (RoCE)", 47.0), ("socket", 10.0),
    ]  # fmt: skip
