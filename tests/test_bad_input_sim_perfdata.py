"""scripts/derive_perf_tables.py on damaged performance data: each file it reads is checked
against perfdata/MANIFEST.tsv first (one line naming the file), and what still cannot be read
is named by file, line and column — never a traceback, never a quietly different table. The
real data's table is unchanged: test_perfmodel.py runs ``--check`` on it."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import load_script

FIRST = "gavel/physical_cluster_throughputs.json.gz"  # the first file the script reads
HEADER = "file\tsource_repo\tcommit\tsource_path\tbytes_uncompressed\tsha256_uncompressed\tgit_blob"
PLACEMENTS = "placement,local_bsz,step_time,sync_time\n1,20,0.15,0.001\n4,20,0.16,0.004\n"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_script("derive_perf_tables", "derive_perf_tables_bad_input")


def _perfdata(root: Path, listed: dict[str, bytes], written: dict[str, bytes]) -> Path:
    """A perfdata folder: ``written`` files on disk (gzipped when named .gz) and a manifest
    listing ``listed`` files with the sha256 of the given (uncompressed) content."""
    root.mkdir(parents=True, exist_ok=True)
    for name, content in written.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(content) if name.endswith(".gz") else content)
    rows = [f"{name}\tr\tc\t{name}\t{len(content)}\t{hashlib.sha256(content).hexdigest()}\tb"
            for name, content in listed.items()]
    (root / "MANIFEST.tsv").write_text("\n".join([HEADER, *rows]) + "\n")
    return root


def _error(script: ModuleType, perfdata: Path, capsys: pytest.CaptureFixture[str]) -> str:
    code = script.main(["--perfdata", str(perfdata), "--out", str(perfdata / "out.json")])
    captured = capsys.readouterr()
    assert code == 2 and not (perfdata / "out.json").exists()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def test_a_changed_file_is_named_by_its_checksum(
        script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    perfdata = _perfdata(tmp_path, {FIRST: b'{"v100": {}}'}, {FIRST: b'{"v100": {"x": 1}}'})
    error = _error(script, perfdata, capsys)
    assert error.startswith(f"error: {perfdata / FIRST}: sha256 ")
    assert error.endswith("is not MANIFEST.tsv's (a damaged or changed copy: restore it from "
                          "its source)")


def test_a_truncated_gzip_is_named(
        script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    content = b'{"v100": {"a": {"null": 1.0}}}' * 50
    perfdata = _perfdata(tmp_path, {FIRST: content}, {})
    (perfdata / FIRST).parent.mkdir(parents=True)
    (perfdata / FIRST).write_bytes(gzip.compress(content)[:40])
    assert _error(script, perfdata, capsys) == (
        f"error: {perfdata / FIRST}: cannot be read (Compressed file ended before the "
        "end-of-stream marker was reached)")


def test_a_missing_or_unlisted_file_is_named(
        script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = _perfdata(tmp_path / "a", {FIRST: b"{}"}, {})
    assert _error(script, missing, capsys) == (
        f"error: {missing / FIRST}: missing; MANIFEST.tsv lists it")
    unlisted = _perfdata(tmp_path / "b", {"other.csv": b""}, {FIRST: b"{}"})
    assert _error(script, unlisted, capsys) == (
        f"error: {unlisted / FIRST}: not listed in MANIFEST.tsv")


def test_a_manifest_without_its_checksum_column_is_named(
        script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "MANIFEST.tsv").write_text("file\tsource_repo\tcommit\tsource_path\nx\tr\tc\tp\n")
    assert _error(script, tmp_path, capsys) == (
        f"error: {tmp_path / 'MANIFEST.tsv'}:1: no column 'sha256_uncompressed' in the header")


def _pollux(tmp_path: Path, placements: str) -> Path:
    app = tmp_path / "pollux" / "imagenet"
    app.mkdir(parents=True)
    (app / "placements.csv").write_text(placements)
    (app / "scalability.csv").write_text("num_nodes,num_replicas,local_bsz,step_time,sync_time\n"
                                         "6,24,20,0.5,0.2\n")
    return app / "placements.csv"


@pytest.mark.parametrize(("placements", "where"), [
    (PLACEMENTS.replace("step_time", "steptime"), ":1: no column 'step_time' in the header"),
    ("placement,local_bsz,step_time,sync_time\n", ": no data rows"),
    ("", ":1: no column 'placement' in the header"),
    (PLACEMENTS.replace("0.16", "-0.16"), ":3: column 'step_time': '-0.16' is not a finite "
                                          "number > 0"),
    (PLACEMENTS.replace("0.15", "nan"), ":2: column 'step_time': 'nan' is not a finite "
                                        "number > 0"),
    (PLACEMENTS.replace("4,20", "4,2x"), ":3: column 'local_bsz': '2x' is not an integer > 0"),
])
def test_a_bad_pollux_file_is_named_by_line_and_column(
        script: ModuleType, tmp_path: Path, placements: str, where: str) -> None:
    path = _pollux(tmp_path, placements)
    with pytest.raises(script.PerfDataError) as caught:
        script.pollux_step_times(tmp_path, "imagenet")
    assert str(caught.value) == f"{path}{where}"


def test_pollux_reads_times_in_range_and_names_an_all_reduce_longer_than_its_step(
        script: ModuleType, tmp_path: Path) -> None:
    path = _pollux(tmp_path, PLACEMENTS)
    times = script.pollux_step_times(tmp_path, "imagenet", column="compute_time")
    assert times[((1,), 20)] == pytest.approx(0.149)
    assert times[((0, 6, 24), 20)] == pytest.approx(0.3)
    path.write_text(PLACEMENTS.replace("0.004", "0.2"))
    with pytest.raises(script.PerfDataError) as caught:
        script.pollux_step_times(tmp_path, "imagenet")
    assert str(caught.value) == f"{path}:3: column 'sync_time': 0.2 is not below step_time 0.16"


def test_elasticflow_leaves_unmeasured_cells_out_and_names_bad_ones(
        script: ModuleType, tmp_path: Path) -> None:
    folder = tmp_path / "elasticflow" / "throughputs_A100"
    folder.mkdir(parents=True)
    path = folder / "resnet50.csv"
    path.write_text("global_batch_size,1,2\n64,2.0,3.0\n128,nan,4.0\n256,,5.0\n")
    assert script.elasticflow_one_gpu_samples(tmp_path, "A100", "resnet50") == {64: 128.0}
    path.write_text("global_batch_size,1,2\n64,2.0,3.0\n128,-1.5,4.0\n")
    with pytest.raises(script.PerfDataError, match=r"resnet50.csv:3: column '1': '-1.5' is not"):
        script.elasticflow_one_gpu_samples(tmp_path, "A100", "resnet50")


def test_bad_json_is_named_by_line_and_column(script: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "chronus.json"
    path.write_text('{"vgg16": {"2": {"1": 1.0,\n "2" 0.5}}}')
    with pytest.raises(script.PerfDataError) as caught:
        script.load_json(path)
    assert str(caught.value) == f"{path}:2: column 6: Expecting ':' delimiter"
