"""latlab-loadgen's own CPU per light participant, and how far it goes on this machine
(root: network namespaces).

The SFU runs in one network namespace, ``latlab-loadgen`` in another, a veth pair
between them (``lgb<pid>s``, ``lgb<pid>l``; removed at the end, also on Ctrl-C):
``--sfu janus`` (Debian's 1.1, configured as latlab configures it: room 1234, at most 16
publishers) or ``--sfu latlab-sfu`` (target/release/latlab-sfu over WHIP/WHEP, at most
16 publishers a subscriber; what it forwards to a leg follows that leg's bandwidth
estimate). The media are the lab's commands with ``pattern=smpte`` (``pattern=ball``
is mostly black: vp8enc makes about 85 kbit/s of it whatever the target) for 640x360
VP8 at 600 kbit/s, a key frame every 2 s, and Opus pink noise in 20 ms frames, 10 s
each.

Each point (``PxS``: P publishers, S subscribers, every subscriber receiving every
publisher) runs until the generator says ``ready``, settles for 2 s, then is measured
for ``--seconds``: the generator's CPU (user + system time of all its threads, from
its own ``--stats`` lines: getrusage), the SFU's (``/proc/PID/stat``) and the machine's
(``/proc/stat``; what neither used is ``others``), as % of one core; UDP datagrams
each namespace's kernel dropped for a full socket buffer; RTP packets sent and received
per second; frames sent more than 20 ms behind their schedule (the generator falling
behind); packets lost (RFC 3550, at the subscribers); and the generator's CPU time per
packet it sent or received.

    .venv/bin/python bench/bench_loadgen.py [--sfu janus|latlab-sfu] [--seconds 15]
        [--points 1x0,4x0,...]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from latlab.lab.sfu.janus import janus_config  # noqa: E402

LOADGEN = ROOT / "build" / "loadgen" / "latlab-loadgen"
LATLAB_SFU = ROOT / "target" / "release" / "latlab-sfu"
SFU_ADDR, LOAD_ADDR = "10.79.0.1", "10.79.0.2"
HZ = os.sysconf("SC_CLK_TCK")
POINTS = "1x0,4x0,16x0,1x8,1x32,4x8,4x16,4x32,8x16,8x24,16x16"
VIDEO = ("videotestsrc pattern=smpte num-buffers=300 ! "
         "video/x-raw,width=640,height=360,framerate=30/1 ! vp8enc deadline=1 "
         "target-bitrate=600000 keyframe-max-dist=60 ! avmux_ivf ! "
         "filesink location={}")  # fmt: skip
AUDIO = ("audiotestsrc wave=pink-noise volume=0.3 samplesperbuffer=960 num-buffers=500 ! "
         "audio/x-raw,rate=48000,channels=2 ! opusenc bitrate-type=vbr frame-size=20 ! "
         "oggmux ! filesink location={}")  # fmt: skip


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, timeout=30)


class Lab:
    """Two namespaces and a veth pair between them, Janus in the first."""

    def __init__(self, directory: Path, sfu: str) -> None:
        tag = f"lgb{os.getpid()}"
        self.kind = sfu
        self.sfu, self.load = f"{tag}s", f"{tag}l"
        self.directory = directory
        self.server: subprocess.Popen | None = None

    def up(self) -> None:
        sh("ip", "netns", "add", self.sfu)
        sh("ip", "netns", "add", self.load)
        sh("ip", "link", "add", f"{self.sfu}v", "netns", self.sfu, "type", "veth",
           "peer", "name", f"{self.load}v", "netns", self.load)  # fmt: skip
        for ns, addr in ((self.sfu, SFU_ADDR), (self.load, LOAD_ADDR)):
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", f"{ns}v")
            sh("ip", "-n", ns, "link", "set", f"{ns}v", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        if self.kind == "janus":
            for name, text in janus_config(self.directory, [SFU_ADDR], 8088).items():
                (self.directory / name).write_text(text, encoding="utf-8")
            argv = ["janus", "-C", str(self.directory / "janus.jcfg"), "-F", str(self.directory)]
            probe_url = f"http://{SFU_ADDR}:8088/janus/info"
        else:
            argv = [str(LATLAB_SFU), "--bind", SFU_ADDR, "--http-port", "8089", "--log", "warn"]
            probe_url = f"http://{SFU_ADDR}:8089/stats"
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:  # an SFU binds only once the veth runs
            if self.server is None or self.server.poll() is not None:
                self.server = subprocess.Popen(["ip", "netns", "exec", self.sfu, *argv],
                                              stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL)  # fmt: skip
            probe = subprocess.run(
                ["ip", "netns", "exec", self.load, "curl", "-sf", "-m", "1", probe_url],
                capture_output=True, timeout=5)  # fmt: skip
            if probe.returncode == 0:
                return
            time.sleep(0.2)
        raise SystemExit(f"bench_loadgen: {self.kind} did not answer in 15 s")

    def down(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signal.SIGINT)
            try:
                self.server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait(timeout=5)
        for ns in (self.sfu, self.load):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ  # utime, stime


def system_busy_s() -> float:
    cpu = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return (sum(cpu) - cpu[3] - cpu[4]) / HZ  # all but idle and iowait


def udp_drops(namespace: str) -> int:
    """UDP datagrams the namespace's kernel dropped for a full socket receive buffer."""
    snmp = subprocess.run(["ip", "netns", "exec", namespace, "cat", "/proc/net/snmp"],
                          capture_output=True, text=True, timeout=10).stdout  # fmt: skip
    udp = [line.split() for line in snmp.splitlines() if line.startswith("Udp:")]
    return int(dict(zip(udp[0], udp[1], strict=True))["RcvbufErrors"])


def last_stats(path: Path) -> dict:
    return json.loads(path.read_text().splitlines()[-1])


def late(report: dict) -> int:
    return sum(t.get("late_frames", 0) for p in report["participants"] for t in p["tracks"])


def point(lab: Lab, media: tuple[Path, Path], pubs: int, subs: int, seconds: float,
          directory: Path) -> dict:  # fmt: skip
    stats = directory / f"stats-{pubs}x{subs}.jsonl"
    if lab.kind == "janus":
        signalling = ["--sfu", "janus", "--url", f"http://{SFU_ADDR}:8088/janus"]
    else:
        base = f"http://{SFU_ADDR}:8089"
        signalling = ["--sfu", "whip", "--whip", base + "/whip/{room}?name={id}",
                      "--whep", base + "/whep/{room}?name={id}"]  # fmt: skip
    argv = ["ip", "netns", "exec", lab.load, str(LOADGEN), *signalling, "--publishers",
            str(pubs), "--subscribers", str(subs), "--video", str(media[0]), "--audio",
            str(media[1]), "--ice-ip", LOAD_ADDR, "--ready-timeout", "60s",
            "--stats", str(stats)]  # fmt: skip
    gen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([gen.stdout], [], [], 65)
        if not ready or gen.stdout.readline().strip() != "ready":
            gen.kill()
            _, err = gen.communicate(timeout=10)
            return {"point": f"{pubs}x{subs}", "error": " ".join(err.split())[:200]}
        time.sleep(2.2)  # settle; the stats lines come once a second
        server = lab.server.pid if lab.server else 0
        a, j0, s0 = last_stats(stats), proc_cpu_s(server), system_busy_s()
        d0 = (udp_drops(lab.load), udp_drops(lab.sfu))
        time.sleep(seconds)
        b, j1, s1 = last_stats(stats), proc_cpu_s(server), system_busy_s()
        d1 = (udp_drops(lab.load), udp_drops(lab.sfu))
        gen.send_signal(signal.SIGINT)
        out, err = gen.communicate(timeout=10)
    finally:
        if gen.poll() is None:
            gen.kill()
            gen.communicate(timeout=10)
    if gen.returncode != 0 or not out.strip():
        why = " ".join(err.split())[:200]
        return {"point": f"{pubs}x{subs}", "error": f"exit {gen.returncode}: {why}"}
    summary = json.loads(out.splitlines()[-1])
    dt = b["elapsed_s"] - a["elapsed_s"]
    loadgen_cpu = 100 * (b["cpu_s"] - a["cpu_s"]) / dt
    sfu_cpu = 100 * (j1 - j0) / seconds
    busy = 100 * (s1 - s0) / seconds  # % of one core
    sent = (b["totals"]["sent_packets"] - a["totals"]["sent_packets"]) / dt
    received = (b["totals"]["received_packets"] - a["totals"]["received_packets"]) / dt
    return {"point": f"{pubs}x{subs}", "publishers": pubs, "subscribers": subs,
            "sent_pps": round(sent, 1), "received_pps": round(received, 1),
            "loadgen_cpu_pct": round(loadgen_cpu, 1),
            "loadgen_us_per_packet": round(loadgen_cpu * 1e4 / (sent + received), 1),
            "sfu_cpu_pct": round(sfu_cpu, 1),
            "others_cpu_pct": round(busy - loadgen_cpu - sfu_cpu, 1),
            "machine_busy_pct": round(busy / os.cpu_count(), 1),
            "udp_drops_loadgen": d1[0] - d0[0], "udp_drops_sfu": d1[1] - d0[1],
            "late_frames": late(b) - late(a), "lost": summary["totals"].get("lost", 0),
            "received_total": summary["totals"]["received_packets"],
            "ready_s": summary["ready_s"]}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sfu", choices=("janus", "latlab-sfu"), default="janus")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--points", default=POINTS, help="PxS,... (publishers x subscribers)")
    args = parser.parse_args()
    if os.geteuid() != 0 or not LOADGEN.is_file():
        print("bench_loadgen: needs root and build/loadgen (bash scripts/setup.sh)",
              file=sys.stderr)  # fmt: skip
        return 2
    points = [tuple(int(v) for v in p.split("x")) for p in args.points.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-loadgen-") as tmp:
        directory = Path(tmp)
        media = (directory / "v.ivf", directory / "a.ogg")
        for description, path in ((VIDEO, media[0]), (AUDIO, media[1])):
            sh("gst-launch-1.0", "-q", *description.format(path).split())
        kbps = media[0].stat().st_size * 8 / 10 / 1000
        print(f"{args.sfu}; media: VP8 640x360 {kbps:.0f} kbit/s, Opus pink noise; "
              f"{os.cpu_count()} CPUs; {args.seconds:g} s a point")  # fmt: skip
        lab = Lab(directory, args.sfu)
        rows = []
        try:
            lab.up()
            for pubs, subs in points:
                row = point(lab, media, pubs, subs, args.seconds, directory)
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            lab.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
