"""Black-box end to end in runs (``[signal]``): the rig, the join with probed units, errors.

Known answers on synthetic data for the clock and position mappings; on the real
stack, the rig looped on one JACK server must measure zero, and a delay planted on
the link must move the black box and the probed end to end by the same amount.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from latlab.analysis.blackbox import (
    BlackBoxError,
    RigLog,
    SignalEnds,
    delivery_times,
    follow_wakes,
    jack_capture_shift_ns,
    jack_to_monotonic,
    probed_end_to_end,
    read_sent_codes,
)
from latlab.ingest.browser_signal import DELIVERY_TIMING, write_timing_log
from latlab.lab.scenario import ScenarioError, parse_scenario
from latlab.pipeline import analyze_run
from latlab.rundir import BLACKBOX_FILE, RECEIVED_WAV
from latlab.rundir import SIGNAL as SIGNAL_DIR
from latlab.signal.commands import GenerateOptions, generate_file
from latlab.signal.wavio import read_wav, write_wav
from latlab.stitch.journeys import Journeys
from latlab.stitch.paths import StreamPath
from latlab.stitch.position import MISSING
from tests.conftest import (
    black_box_shifts,
    latlab,
    planted_link_delays,
    rig_code_delays,
    signal_on_one_device,
)

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "scenarios" / "l16-jack-blackbox.toml"
MS = 1_000_000


# --- known answers -------------------------------------------------------------------


def test_jack_clock_maps_to_monotonic_following_a_drift() -> None:
    # JACK's clock runs 136 ms behind and gains 10 us over 10 s against CLOCK_MONOTONIC;
    # the start and end brackets are 2 us wide (a wider one must be ignored).
    start = [[1_136_000_000 - 1000, 1_000_000, 1_136_000_000 + 1000], [0, 1_000_000, 9_999_999_999]]
    end = [[11_135_990_000 - 1000, 11_000_000, 11_135_990_000 + 1000]]
    jack_us = np.array([1_000_000, 6_000_000, 11_000_000])
    mono = jack_to_monotonic(jack_us, start, end)
    np.testing.assert_allclose(mono, [1_136_000_000, 6_135_995_000, 11_135_990_000], atol=1)


def test_jack_cycle_starts_follow_the_callbacks_where_the_estimate_wanders() -> None:
    # 10 ms cycles; JACK's estimate of their starts (its DLL) wanders by up to 3 ms and
    # back, as it did under load; each process callback runs 40 us to 2 ms into its cycle
    rng = np.random.default_rng(3)
    k = np.arange(1000)
    true_us = 1_000_000 + k * 10_000
    wander_us = np.round(3000 * np.sin(np.pi * k / 1000) ** 2)
    estimate_us = true_us - wander_us
    wake_us = true_us + np.where(k % 5 == 0, 40, rng.integers(40, 2000, len(k)))
    followed = follow_wakes(estimate_us, wake_us)
    error = followed - true_us  # a constant (the median wander) and the envelope's lag
    assert np.ptp(error) < 100, np.ptp(error)  # against a 3 ms wander left alone
    assert np.ptp(estimate_us - true_us) == 3000
    # an estimate that holds is left exactly as it was
    steady = follow_wakes(true_us, wake_us)
    assert np.array_equal(steady, true_us)


def test_sample_times_follow_cycles_and_leave_gaps_unknown() -> None:
    # three cycles of 480 frames at 48 kHz; an xrun lost 20 ms between the 2nd and 3rd
    log = RigLog(
        path=Path("inject.parquet"),
        rate=48000,
        position=np.array([0, 480, 960]),
        cycle_ns=np.array([1e9, 1e9 + 10 * MS, 1e9 + 40 * MS]),
        nframes=np.array([480, 480, 480]),
        xruns=1,
    )
    times = log.sample_times(np.array([0.0, 240.5, 480.0, 1000.0, 1440.0, -1.0]))
    expected = [1e9, 1e9 + 240.5 / 48000 * 1e9, 1e9 + 10 * MS, 1e9 + 40 * MS + 40 / 48000 * 1e9]
    np.testing.assert_allclose(times[:4], expected)
    assert np.isnan(times[4:]).all()  # after the last cycle and before the first
    # a code decoded a fifth of a sample before a block's start belongs to that block,
    # not at the end of the previous one (which the xrun put 20 ms earlier)
    early = log.sample_times(np.array([959.8]))
    np.testing.assert_allclose(early, [1e9 + 40 * MS - 0.2 / 48000 * 1e9])


def test_a_pushed_buffer_times_each_unit_at_its_push_and_samples_within_their_unit() -> None:
    # GStreamer pushes 20 ms Opus buffers at 1000 ms and 1030 ms; the probes time both
    # 10 ms units of a buffer at its push, so a code 12 ms into the first buffer (2 ms
    # into its second unit) reached the branch at 1002 ms, not 1012 ms
    log = RigLog(Path("out (trace)"), 48000, np.array([0, 960]), np.array([1e9, 1e9 + 30 * MS]),
                 np.array([960, 960]), 0, pushed=True)  # fmt: skip
    units = log.per_unit(10 * MS)
    assert units.position.tolist() == [0, 480, 960, 1440]
    assert units.nframes.tolist() == [480] * 4
    times = units.sample_times(np.array([0.0, 576.0, 960.0, 1500.0]))
    np.testing.assert_allclose(times, [1e9, 1e9 + 2 * MS, 1e9 + 30 * MS, 1e9 + 31.25 * MS])
    # a buffer shorter than a unit stays whole; a device's cycles play in real time
    short = RigLog(
        Path("out"), 48000, np.array([0]), np.array([0.0]), np.array([240]), 0, pushed=True
    )
    assert short.per_unit(10 * MS).nframes.tolist() == [240]
    device = replace(log, pushed=False)
    assert device.per_unit(10 * MS) is device
    assert device.sample_times(np.array([576.0]))[0] == pytest.approx(1e9 + 12 * MS)


def test_delivery_times_take_the_low_envelope_of_the_reads_and_follow_a_step() -> None:
    # 10 ms reads; the server delivers each read's last sample at 3 ms + its end, the
    # read returns up to 2 ms after that; after read 100 the timeline steps 1.5 ms later
    rate, reads = 48000, 200
    position = np.arange(reads) * 480
    true_ns = 3 * MS + position * (1e9 / rate) + np.where(np.arange(reads) >= 100, 1.5 * MS, 0)
    late_ns = np.random.default_rng(7).uniform(0, 2 * MS, reads)
    late_ns[::5] = 0  # every fifth read returns the moment its block is there
    returned = (true_ns + 10 * MS + late_ns).astype(np.int64)
    times = delivery_times(position, returned, np.full(reads, 480), rate)
    np.testing.assert_allclose(times[:90], true_ns[:90], atol=1)
    np.testing.assert_allclose(times[110:], true_ns[110:], atol=1)
    # next to the step the envelope takes the earlier timeline: never later than true
    assert np.all(times[90:110] <= true_ns[90:110] + 1)


def _delivered_copy(signal_dir: Path, name: str, log: str, lead: int, **names: str) -> None:
    """The sent file behind ``lead`` samples of silence, as a device rig recorded it: 10 ms
    reads, each returning the moment its last sample was there (from t = 1 s)."""
    sent = read_wav(signal_dir / "sent.wav")
    samples = np.concatenate([np.zeros(lead), sent.samples])
    write_wav(signal_dir / name, samples, sent.rate)
    position = np.arange(0, len(samples) - 480, 480)
    returned = 1e9 + (position + 480) * (1e9 / sent.rate)
    meta = {"rate": sent.rate, "timing": DELIVERY_TIMING, **names}
    write_timing_log(signal_dir / log, position, returned, np.full(len(position), 480), meta)


def test_a_device_injection_is_timed_where_its_own_recording_found_the_codes(
    tmp_path: Path,
) -> None:
    # the capture device delivered the codes 1000 samples into its recording, the playout
    # device 3000 samples into its own, both on one timeline: 2000 samples apart
    generate_file(GenerateOptions(out=tmp_path / "sent.wav", duration_s=2.0))
    _delivered_copy(tmp_path, "injected.wav", "inject.parquet", 1000, recording="injected.wav")
    _delivered_copy(tmp_path, RECEIVED_WAV, "record.parquet", 3000)
    delays = rig_code_delays(tmp_path)
    assert delays.found.sum() >= 5
    np.testing.assert_allclose(
        delays.black_box_ns[delays.found], 2000 / 48000 * 1e9, atol=2_000
    )  # 2 us: a tenth of a sample
    assert not delays.inferred.any()
    # a code the capture device's recording lost is placed by the others' lag, inferred
    injected = read_wav(tmp_path / "injected.wav")
    third = 1000 + round(read_sent_codes(tmp_path).time_s[2] * 48000)
    injected.samples[third - 2400 : third + 2400] = 0.0
    write_wav(tmp_path / "injected.wav", injected.samples, 48000)
    delays = rig_code_delays(tmp_path)
    assert delays.inferred[2] and delays.inferred.sum() == 1
    assert delays.black_box_ns[2] == pytest.approx(2000 / 48000 * 1e9, abs=2_000)
    (tmp_path / "injected.wav").unlink()
    with pytest.raises(BlackBoxError, match=r"injected.wav: no such file"):
        rig_code_delays(tmp_path)
    meta = {"rate": 0, "timing": DELIVERY_TIMING}
    write_timing_log(tmp_path / "inject.parquet", [0], [1], [480], meta)
    with pytest.raises(BlackBoxError, match=r"inject.parquet: a rig log with bad metadata"):
        rig_code_delays(tmp_path)


def test_a_code_lost_to_silence_is_a_dropout_and_a_damaged_one_is_not(tmp_path: Path) -> None:
    # the playout device's recording: 80 ms of silence over the third code (a dropout, as
    # an audio server plays when its stream underruns), noise instead of the fifth
    generate_file(GenerateOptions(out=tmp_path / "sent.wav", duration_s=2.0))
    _delivered_copy(tmp_path, "injected.wav", "inject.parquet", 1000, recording="injected.wav")
    _delivered_copy(tmp_path, RECEIVED_WAV, "record.parquet", 3000)
    assert rig_code_delays(tmp_path).found.all()
    received = read_wav(tmp_path / RECEIVED_WAV)
    at = [3000 + round(t * 48000) for t in read_sent_codes(tmp_path).time_s]
    received.samples[at[2] - 1920 : at[2] + 1920] = 0.0
    noise = np.random.default_rng(1).normal(0.0, 0.3, 4800)
    received.samples[at[4] - 2400 : at[4] + 2400] = noise.astype(np.float32)
    write_wav(tmp_path / RECEIVED_WAV, received.samples, 48000)
    delays = rig_code_delays(tmp_path)
    assert list(np.flatnonzero(~delays.found)) == [2, 4]
    assert list(np.flatnonzero(delays.dropout)) == [2]


def _journeys(starts_ms: list[float], end_to_end_ms: list[float]) -> Journeys:
    start = np.array(starts_ms) * MS
    times = np.stack([start, start + np.array(end_to_end_ms) * MS], axis=1).astype(np.int64)
    times[2, 1] = MISSING  # the third unit never arrived
    return Journeys(
        stream_id="s",
        media="audio",
        unit_ns=10 * MS,
        path=StreamPath(probes=(0, 1), ssrc=None),
        probe_names=["tx/src:src", "rx/sink:sink"],
        segment_kinds=["network"],
        unit_start=np.arange(len(start)) * 10 * MS,
        times=times,
        threads=np.zeros_like(times, dtype=np.int32),
        clock_domains=["monotonic"],
    )


def test_each_code_takes_the_end_to_end_of_the_unit_whose_window_holds_it() -> None:
    journeys = _journeys([100, 110, 120, 130], [50, 51, 52, 53])
    instants = np.array([100, 109.999, 110, 125, 135, 140, 99, np.nan]) * MS
    probed = probed_end_to_end(journeys, instants) / MS
    np.testing.assert_allclose(probed[:3], [50, 50, 51])
    assert np.isnan(probed[3])  # the unit that held it was lost
    assert probed[4] == pytest.approx(53)
    assert np.isnan(probed[5:]).all()  # after the last unit's window, before the first, unknown


def test_a_jack_injection_starts_the_probed_span_one_jack_period_after_the_capture_probe() -> None:
    # the source dates a period's first sample one period (5 ms) before the period
    # reached it; the rig's samples entered the graph then, so a code injected at
    # 110 ms is in the unit dated 100 ms, and its probed time runs from 105 ms
    journeys = _journeys([100, 110, 120, 130], [50, 51, 52, 53])
    log = RigLog(Path("inject.parquet"), 48000, np.array([0]), np.array([0.0]), np.array([240]), 0)
    shift = jack_capture_shift_ns(SignalEnds("jack", "", "jack", ""), log)
    assert shift == 5 * MS  # 240 frames at 48 kHz
    assert jack_capture_shift_ns(SignalEnds("gst", "tx", "jack", ""), log) == 0
    probed = probed_end_to_end(journeys, np.array([110.0, 115.0]) * MS, (0, 1), shift) / MS
    np.testing.assert_allclose(probed, [50 - 5, 51 - 5])


# --- scenario errors --------------------------------------------------------------------


def _with_signal(table: str) -> str:
    text = SCENARIO.read_text(encoding="utf-8")
    return text.split("[signal]")[0] + table


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            '[signal]\ninject = "nope"\ninject_client = "tx"\nrecord = "snd_rx"\n'
            'record_client = "rx"\n',
            "signal.inject: unknown device or process 'nope' (audio devices, GStreamer pipelines "
            "and browsers: snd_tx, snd_rx, receiver, sender)",
        ),
        ('[signal]\ninject = "snd_tx"\ninject_client = "tx"\n', "signal: missing 'record'"),
        (
            '[signal]\ninject = "snd_tx"\ninject_client = "t x"\nrecord = "snd_rx"\n'
            'record_client = "rx"\n',
            "signal.inject_client: invalid name 't x'",
        ),
        (
            '[signal]\ninject = "snd_tx"\ninject_client = "tx"\nrecord = "snd_rx"\n'
            'record_client = "rx"\ninterval_ms = 20\n',
            "signal.interval_ms: must be from 100 to 2000, not 20",
        ),
        (
            '[signal]\ninject = "snd_tx"\ninject_client = "tx"\nrecord = "snd_rx"\n'
            'record_client = "rx"\nspeed = 2\n',
            "signal: unknown key 'speed'",
        ),
    ],
)
def test_bad_signal_tables_are_one_line_errors(table: str, message: str) -> None:
    with pytest.raises(ScenarioError) as error:
        parse_scenario(_with_signal(table), "bb.toml")
    assert str(error.value).startswith(f"bb.toml: {message}")
    assert "\n" not in str(error.value)


def test_a_pulse_device_end_takes_no_client() -> None:
    table = '[signal]\ninject = "snd_tx"\ninject_client = "tx"\n'
    text = _with_signal(table + 'record = "snd_rx"\nrecord_client = "rx"\n').replace(
        'server = "jack"', 'server = "pulse"', 1
    )
    with pytest.raises(ScenarioError) as error:
        parse_scenario(text, "bb.toml")
    assert str(error.value) == (
        "bb.toml: signal.inject_client: only for a JACK device; 'snd_tx' is a PulseAudio "
        "device (the rig plays into its null sink and records its monitor)"
    )
    scenario = parse_scenario(text.replace('inject_client = "tx"\n', ""), "bb.toml")
    assert scenario.signal is not None
    assert scenario.signal.inject.describe() == {"kind": "pulse", "device": "snd_tx"}


# --- the real stack ---------------------------------------------------------------------


def _require_jack() -> None:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("jackd") is None:
        pytest.skip("jackd not installed")


@pytest.mark.exclusive
@pytest.mark.e2e
def test_rig_looped_on_one_jack_server_measures_zero(tmp_path: Path) -> None:
    """Player and recorder on one server, connected directly: every code in the same cycle.

    Each connects to the other (the player plays once the recorder is there)."""
    _require_jack()
    rig = [sys.executable, "-m", "latlab.lab.jack_signal"]
    with signal_on_one_device(tmp_path, "jack") as (env, signal_dir):
        recorder = subprocess.Popen(
            [*rig, "record", "--client", "latlab-inject", "--wav", str(signal_dir / RECEIVED_WAV),
             "--log", str(signal_dir / "record.parquet"), "--max-s", "10"],
            env=env, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        player = subprocess.Popen(
            [*rig, "inject", "--client", "latlab-record", "--wav", str(signal_dir / "sent.wav"),
             "--log", str(signal_dir / "inject.parquet"), "--exit-at-end"],
            env=env, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert player.stdout is not None and recorder.stdout is not None
        assert player.stdout.readline().strip() == "ready"
        assert recorder.stdout.readline().strip() == "ready"
        assert player.wait(timeout=30) == 0  # it exits once the whole file was played
        recorder.send_signal(signal.SIGINT)
        assert recorder.wait(timeout=10) == 0
    delays = rig_code_delays(signal_dir)
    assert delays.found.all() and len(delays.index) >= 15
    assert np.abs(delays.black_box_ns).max() < 5_000  # 5 us: a quarter of a sample


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[float, tuple[Path, dict]]:
    """A two-point sweep of the shipped scenario: link delay 5 ms, then 35 ms."""
    _require_jack()
    return planted_link_delays(SCENARIO, tmp_path_factory.mktemp("blackbox") / "sweep")


@pytest.mark.exclusive
@pytest.mark.e2e
def test_sweep_table_shows_the_black_box_per_point(planted: dict) -> None:
    sweep_dir = next(iter(planted.values()))[0].parents[1]
    result = latlab("report", str(sweep_dir), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "black box (time-coded signal) per point" in result.stdout
    sweep = json.loads((sweep_dir / "sweep.json").read_text())
    for point in sweep["points"]:
        figures = point["blackbox"]
        assert figures["codes"]["found"] == figures["codes"]["injected"]
        assert f"{figures['black_box']['p50_ms']:.2f}" in result.stdout


@pytest.mark.exclusive
@pytest.mark.e2e
def test_planted_link_delay_moves_black_box_and_probes_alike(planted: dict) -> None:
    """Within a run, black box and probes track each other code by code; between runs, a
    delay planted on the link moves both alike, and the probes see it exactly on the
    link. The receiver's own buffers may settle differently in the two runs (its jitter
    buffer held units 45.6 ms at 5 ms and 34.8 ms at 35 ms in one CI run, so the whole
    call moved by only 14.6 ms); the probes see that too, so the black box less what the
    probes saw move besides the link recovers the planted 30 ms. What neither can pin is
    how the playout sink's ring buffer lines up with the device's periods in each run:
    the probes place the samples' exit from the sink by the sink's schedule and the
    samples written before them, so the unexplained time may differ between two runs by
    up to one device period (10 ms here). The probed span starts one JACK period after
    the capture probe (a device source's samples are dated as if captured during the
    period before it reached the client) and ends where the samples leave the sink for
    JACK, which is where the recorder hears them; what is left is the error of the
    sink's estimated alignment with the device's cycles (the first cycle after the sink
    calibrated its clock, taken as soon after the pipeline played as the renders allow):
    +0.02 to +0.29 ms in 19 runs of 20, -2.8 ms in one whose sink thread resumed late,
    which the trace does not show (the least alignment the renders allow, used before,
    was +0.9 to +7.5 ms early in the same runs). Within a run it holds (0.01 to
    0.23 ms between codes) as long as the estimate places the samples where the sink
    does: when the sink resyncs on a RESYNC flag, after its discont-wait, after running
    dry or by its skew slaving, and skips what comes too late; and between JACK xruns,
    which may move how a device's cycles line up with its clients (in one CI run the
    recording device's server ran 38 µs late, and the black box 2.9 ms longer from the
    next code on, the probes unchanged): the run reports them, the codes between two
    are held to it apart."""
    period_ms = 10.0
    for run_dir, summary in planted.values():
        box = summary["blackbox"]
        codes = box["codes"]
        assert codes["injected"] >= 20
        assert codes["found"] == codes["injected"]
        assert codes["matched_to_units"] >= codes["injected"] - 1
        rows = pq.read_table(run_dir / BLACKBOX_FILE)
        unexplained = rows.column("unexplained_ms").to_numpy()
        xruns = rows.column("xruns_before").to_numpy()
        used = rows.column("in_window").to_numpy() & np.isfinite(unexplained)
        assert len(np.unique(xruns[used])) <= 1 + len(box["xruns"]["at_s"])
        for stretch in np.unique(xruns[used]):
            between = unexplained[used & (xruns == stretch)]
            assert between.max() - between.min() < 1.0, (box["xruns"], between)
        assert box["span"]["to"] == "receiver/jackaudiosink0:device"
        assert box["span"]["from_plus_ms"] == period_ms
        # early by 0.3 ms at most; late by how late the sink's thread resumed (< a period)
        assert -period_ms < box["unexplained"]["p50_ms"] < 1.0
    on_link, beyond_probes = black_box_shifts(planted)
    assert on_link == pytest.approx(30.0, abs=0.1)
    assert beyond_probes == pytest.approx(30.0, abs=period_ms + 0.5)


@pytest.mark.e2e
def test_a_damaged_recording_is_one_line_and_the_rest_of_the_run_stays(
    planted: dict, tmp_path: Path
) -> None:
    run_dir, _ = planted[5.0]
    copy = tmp_path / "damaged"
    shutil.copytree(run_dir, copy)
    (copy / SIGNAL_DIR / RECEIVED_WAV).write_bytes(b"RIFF\x00\x00")
    summary, _, _ = analyze_run(copy)
    assert summary["streams"] and summary["streams"][0]["end_to_end"]["count"] > 0
    assert summary["blackbox"]["error"].startswith(str(copy / SIGNAL_DIR / RECEIVED_WAV))
    result = latlab("report", str(copy), timeout=120)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("latlab: error:")]
    assert "received.wav: not a readable WAV file" in line
    html = latlab("report", str(copy), "--html", timeout=120)
    assert html.returncode == 1 and (copy / "report.html").is_file()
    assert "received.wav: not a readable WAV file" in html.stderr
