"""The SFU servers latlab starts (latlab.lab.sfu), without starting them: each scenario
``server`` has its class, LiveKit's configuration binds only the lab address it is given
and discovers nothing, its access tokens are signed JWTs with the grants of the member's
role, and its environment carries no settings of the caller's."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from latlab.errors import EnvironmentProblem
from latlab.lab.scenario import Room, parse_scenario
from latlab.lab.sfu import SERVERS, JanusServer, LiveKitServer, livekit
from latlab.lab.sfu.janus import feed_id
from latlab.lab.sfu.latlab import LatlabServer
from latlab.lab.sfu.livekit import (
    RTC_UDP_PORT,
    access_token,
    client_bundle,
    livekit_binary,
    livekit_config,
    server_environment,
    signed_jwt,
    to_yaml,
)

ADDR = "10.77.0.2"

SCENARIO = """
name = "sfu"
duration_s = 1
[hosts.sfu]
[hosts.pub]
[[links]]
between = ["pub", "sfu"]
[sfus.box]
host = "sfu"
server = "SERVER"
[processes.alice]
host = "pub"
browser = "chromium"
[rooms.meeting]
sfu = "box"
publishers = ["alice"]
"""


def test_every_scenario_server_has_its_class() -> None:
    assert dict(SERVERS) == {"janus": JanusServer, "livekit": LiveKitServer,
                             "latlab": LatlabServer}  # fmt: skip


@pytest.mark.parametrize(("server", "port"), [("janus", 8088), ("livekit", 7880)])
def test_an_sfu_listens_on_its_servers_usual_port_unless_told(server: str, port: int) -> None:
    text = SCENARIO.replace("SERVER", server)
    assert parse_scenario(text, "x.toml").sfus[0].http_port == port
    told = text.replace(f'server = "{server}"', f'server = "{server}"\nhttp_port = 9000')
    assert parse_scenario(told, "x.toml").sfus[0].http_port == 9000


def test_livekit_is_configured_on_the_lab_address_only() -> None:
    """Signalling, media and the candidates it offers on the one address; no ICE over
    TCP (its listener would take every address), no external IP discovery, no TURN."""
    config = livekit_config(ADDR, 7880, "latlabkey", "s" * 43)
    assert config["bind_addresses"] == [ADDR]
    rtc = config["rtc"]
    assert rtc == {"udp_port": RTC_UDP_PORT, "tcp_port": 0, "node_ip": ADDR,
                   "use_external_ip": False, "ips": {"includes": [f"{ADDR}/32"]}}  # fmt: skip
    assert config["turn"] == {"enabled": False}
    assert "redis" not in config and "prometheus_port" not in config
    assert config["keys"] == {"latlabkey": "s" * 43}


def test_livekit_configuration_is_written_as_block_yaml() -> None:
    config = {"port": 7880, "bind_addresses": [ADDR], "rtc": {"use_external_ip": False},
              "room": {"enabled_codecs": [{"mime": "audio/opus"}, {"mime": "video/vp8"}]},
              "empty": []}  # fmt: skip
    assert to_yaml(config) == (
        "port: 7880\n"
        "bind_addresses:\n"
        '  - "10.77.0.2"\n'
        "rtc:\n"
        "  use_external_ip: false\n"
        "room:\n"
        "  enabled_codecs:\n"
        '    - mime: "audio/opus"\n'
        '    - mime: "video/vp8"\n'
        "empty: []\n"
    )


def test_jwt_signature_is_hmac_sha256() -> None:
    """The example token of RFC 7519's HS256 (as jwt.io shows it), byte for byte."""
    claims = {"sub": "1234567890", "name": "John Doe", "iat": 1516239022}
    assert signed_jwt(claims, "your-256-bit-secret") == (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
        "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ."
        "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
    )


def _claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


@pytest.mark.parametrize("publish", [True, False])
def test_a_member_token_grants_its_role_in_its_room(publish: bool) -> None:
    claims = _claims(access_token("key", "secret", "bob", "meeting", publish=publish, now=1000))
    assert claims["iss"] == "key" and claims["sub"] == "bob"
    assert claims["nbf"] == 940 and claims["exp"] == 1000 + 24 * 3600
    video = claims["video"]
    assert video["room"] == "meeting" and video["roomJoin"] is True
    assert (video["canPublish"], video["canSubscribe"]) == (publish, not publish)


def test_livekit_takes_no_settings_from_the_callers_environment() -> None:
    env = {"PATH": "/usr/bin", "LIVEKIT_KEYS": "a: b", "LIVEKIT_CONFIG": "port: 1",
           "NODE_IP": "1.2.3.4", "UDP_PORT": "9", "REDIS_HOST": "r:6379",
           "HOME": "/root"}  # fmt: skip
    assert server_environment(env) == {"PATH": "/usr/bin", "HOME": "/root"}


def test_janus_feeds_are_numbered_by_place_among_the_publishers() -> None:
    room = Room(name="r", sfu="janus", publishers=("alice", "dave"), subscribers=("bob",))
    assert [feed_id(room, p) for p in room.publishers] == [1000, 1001]


@pytest.mark.parametrize(("name", "check"), [("LIVEKIT_SERVER", livekit_binary),
                                             ("CLIENT_BUNDLE", client_bundle)])  # fmt: skip
def test_a_livekit_not_built_says_to_run_the_setup(
    name: str, check: object, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "absent"
    monkeypatch.setattr(livekit, name, missing)
    with pytest.raises(EnvironmentProblem) as info:
        check()  # type: ignore[operator]
    assert str(info.value).startswith(f"{missing}: not ")
    assert str(info.value).endswith("run bash scripts/setup.sh")
