"""Every CLI verb against a corpus of bad input: missing files, unreadable directories,
corrupt traces, wrong schema versions, malformed scenarios. Each case must end in one
line on stderr naming the file (or thing) at fault, the documented exit code
(docs/exit-codes.md) and no traceback."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from latlab.errors import ENVIRONMENT, USAGE
from tests.conftest import LATLAB

RUN_SCHEMA_WRONG = {"schema": "latlab.run/99", "processes": []}


def _corpus(root: Path) -> dict[str, Path]:
    """Bad inputs, each a path under ``root``."""
    files: dict[str, Path] = {"missing": root / "no-such-thing"}
    files["empty_dir"] = root / "empty"
    files["empty_dir"].mkdir()
    files["unreadable_dir"] = root / "unreadable"
    (files["unreadable_dir"] / "traces").mkdir(parents=True)
    (files["unreadable_dir"] / "traces" / "p-1.lltrace").write_bytes(b"x")
    os.chmod(files["unreadable_dir"] / "traces", 0)
    corrupt = root / "corrupt-run"
    (corrupt / "traces").mkdir(parents=True)
    (corrupt / "traces" / "p-1.lltrace").write_bytes(b"LLTRACE\0" + os.urandom(200))
    files["corrupt_trace"] = corrupt
    future = root / "future-trace"
    (future / "traces").mkdir(parents=True)
    (future / "traces" / "p-1.lltrace").write_bytes(b"LLTRACE\0" + struct.pack("<HH", 99, 0))
    files["future_trace"] = future
    wrong_run = root / "wrong-run-schema"
    (wrong_run / "traces").mkdir(parents=True)
    (wrong_run / "run.json").write_text(json.dumps(RUN_SCHEMA_WRONG))
    files["wrong_run_schema"] = wrong_run
    garbled = root / "garbled-run-json"
    (garbled / "traces").mkdir(parents=True)
    (garbled / "run.json").write_text("{not json")
    files["garbled_run_json"] = garbled
    sweep = root / "wrong-sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text(json.dumps({"schema": "latlab.sweep/99"}))
    files["wrong_sweep_schema"] = sweep
    files["bad_toml"] = root / "bad.toml"
    files["bad_toml"].write_text('name = "x"\n[hosts.a\n')
    files["bad_key"] = root / "bad-key.toml"
    files["bad_key"].write_text('name = "x"\nduration_s = 1\nnosuchkey = 3\n[hosts.a]\n')
    files["not_wav"] = root / "not.wav"
    files["not_wav"].write_text("RIFF but not really")
    files["wrong_dataset"] = root / "wrong-dataset"
    files["wrong_dataset"].mkdir()
    (files["wrong_dataset"] / "latlab-dataset.json").write_text('{"schema": "latlab.dataset/99"}')
    files["new_dataset"] = root / "new-dataset"  # made by the first ingest into it
    return files


# (argv with {placeholders} naming corpus entries, the entry the message must name, exit code)
CASES: list[tuple[list[str], str, int]] = [
    (["run", "{missing}"], "missing", USAGE),
    (["run", "{bad_toml}"], "bad_toml", USAGE),
    (["run", "{bad_key}"], "bad_key", USAGE),
    (["run", "{empty_dir}"], "empty_dir", USAGE),
    (["report", "{missing}"], "missing", USAGE),
    (["report", "{empty_dir}"], "empty_dir", USAGE),
    (["report", "{unreadable_dir}"], "unreadable_dir", USAGE),
    (["report", "{corrupt_trace}"], "corrupt_trace", USAGE),
    (["report", "{future_trace}"], "future_trace", USAGE),
    (["report", "{wrong_run_schema}"], "wrong_run_schema", USAGE),
    (["report", "{garbled_run_json}"], "garbled_run_json", USAGE),
    (["report", "{wrong_sweep_schema}"], "wrong_sweep_schema", USAGE),
    (["report", "{corrupt_trace}", "--json"], "corrupt_trace", USAGE),
    (["report", "{corrupt_trace}", "--html"], "corrupt_trace", USAGE),
    (["export", "{missing}", "--perfetto", "{missing}.json"], "missing", USAGE),
    (["export", "{corrupt_trace}", "--perfetto", "{missing}.json"], "corrupt_trace", USAGE),
    (["compare", "{missing}", "{empty_dir}"], "missing", USAGE),
    (["compare", "{corrupt_trace}", "{corrupt_trace}"], "corrupt_trace", USAGE),
    (["compare", "{wrong_sweep_schema}:1", "{empty_dir}"], "wrong_sweep_schema", USAGE),
    (["check", "{missing}", "--budget", "e2e.p99<40ms"], "missing", USAGE),
    (["check", "{future_trace}", "--budget", "e2e.p99<40ms"], "future_trace", USAGE),
    (["lab", "up", "{missing}"], "missing", USAGE),
    (["lab", "up", "{bad_key}"], "bad_key", USAGE),
    (["record", "--out", "{corrupt_trace}", "--", "true"], "corrupt_trace", USAGE),
    (["record", "--out", "{garbled_run_json}", "--name", "x", "--", "true"], "garbled_run_json",
     USAGE),
    (["signal", "decode", "{missing}"], "missing", USAGE),
    (["signal", "decode", "{not_wav}"], "not_wav", USAGE),
    (["signal", "compare", "{not_wav}", "{missing}"], "not_wav", USAGE),
    (["signal", "generate", "--out", "{missing}/x.wav", "--mix", "{not_wav}"], "not_wav",
     USAGE),
    (["ingest", "{corrupt_trace}", "--into", "{new_dataset}"], "corrupt_trace", USAGE),
    (["ingest", "{wrong_run_schema}", "--into", "{new_dataset}"], "wrong_run_schema", USAGE),
    (["ingest", "{empty_dir}", "--into", "{new_dataset}"], "empty_dir", USAGE),
    (["ingest", "{missing}", "--into", "{new_dataset}"], "missing", USAGE),
    (["ingest", "{wrong_sweep_schema}", "--into", "{new_dataset}"], "wrong_sweep_schema", USAGE),
    (["ingest", "{empty_dir}", "--into", "{wrong_dataset}"], "wrong_dataset", USAGE),
    (["ingest", "{empty_dir}", "--into", "{not_wav}"], "not_wav", USAGE),
    (["merge", "{missing}", "{empty_dir}", "--out", "{missing}-merged"], "missing", USAGE),
    (["merge", "{empty_dir}", "{corrupt_trace}", "--out", "{missing}-merged"], "empty_dir", USAGE),
    (["merge", "{corrupt_trace}", "{wrong_run_schema}", "--out", "{missing}-merged"],
     "corrupt_trace", USAGE),
    (["merge", "{garbled_run_json}", "{corrupt_trace}", "--out", "{missing}-merged"],
     "garbled_run_json", USAGE),
    (["query", "{missing}", "runs"], "missing", USAGE),
    (["query", "{empty_dir}", "percentiles"], "empty_dir", USAGE),
    (["query", "{wrong_dataset}", "worst"], "wrong_dataset", USAGE),
    (["query", "{wrong_dataset}", "--sql", "SELECT 1"], "wrong_dataset", USAGE),
]  # fmt: skip


def _latlab(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LATLAB, *argv], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def test_every_verb_answers_bad_input_with_one_line_and_its_exit_code(tmp_path: Path) -> None:
    files = _corpus(tmp_path)
    env = {**os.environ, "COLUMNS": "200", "LATLAB_STATE_DIR": str(tmp_path / "state")}
    argvs = [[arg.format(**files) for arg in argv] for argv, _, _ in CASES]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda argv: _latlab(argv, env), argvs))
    os.chmod(files["unreadable_dir"] / "traces", 0o755)
    wrong = []
    for argv, (_, named, code), result in zip(argvs, CASES, results, strict=True):
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        problems = []
        if "Traceback" in result.stderr + result.stdout:
            problems.append("traceback")
        if result.returncode != code:
            problems.append(f"exit {result.returncode}, not {code}")
        if len(lines) != 1 or not lines[0].startswith("latlab: error: "):
            problems.append(f"not one error line: {lines[:3]}")
        elif str(files[named]) not in lines[0]:
            problems.append(f"does not name {files[named]}: {lines[0]}")
        if problems:
            wrong.append(f"latlab {' '.join(argv)}: {'; '.join(problems)}")
    assert wrong == []


def test_a_missing_build_is_an_environment_problem(tmp_path: Path) -> None:
    """The machine, not the input, is at fault: exit 3, one line saying what to do."""
    env = {**os.environ, "LATLAB_PLUGIN_DIR": str(tmp_path / "no-tracer")}
    result = _latlab(["record", "--print-env", "--out", str(tmp_path / "r")], env)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == ENVIRONMENT and "Traceback" not in result.stderr
    assert len(lines) == 1 and "tracer plugin not built" in lines[0], lines


def test_a_damaged_standing_lab_state_is_named(tmp_path: Path) -> None:
    """lab exec and lab down on a lab state file that is not JSON: one line naming it."""
    state = tmp_path / "lab.json"
    state.write_text("{not json")
    env = {**os.environ, "LATLAB_STATE_DIR": str(tmp_path)}
    for argv in (["lab", "exec", "tx", "--", "true"], ["lab", "down"]):
        result = _latlab(argv, env)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == USAGE and "Traceback" not in result.stderr
        assert len(lines) == 1 and str(state) in lines[0], lines
