"""`sip.trunks`: the trunks outbound calls go out through, read strictly; every mistake is one line naming the key."""

import pytest

from gateway.config import ConfigError, load_config

TRUNK = {"name": "carrier", "address": "127.0.0.1:5070", "from": "sip:+15550100@carrier.example"}


def _load(*trunks):
    return load_config(None, {"sip": {"port": 5060, "allow": ["127.0.0.1"], "trunks": list(trunks)}})


def test_a_trunk_is_read_with_its_from_key(monkeypatch):
    monkeypatch.setenv("VOXGATE_TEST_TRUNK_PASSWORD", "s3cret")
    (trunk,) = _load(
        {**TRUNK, "transport": "udp", "user": "voxgate", "password_env": "VOXGATE_TEST_TRUNK_PASSWORD"}
    ).sip.trunks
    assert (trunk.name, trunk.address, trunk.transport, trunk.user) == ("carrier", "127.0.0.1:5070", "udp", "voxgate")
    assert trunk.from_ == "sip:+15550100@carrier.example" and trunk.srtp == "off"


def test_srtp_off_may_be_written_bare():
    """YAML 1.1 reads `srtp: off` as false; a trunk's srtp takes it as "off" as sip.srtp does."""
    assert _load({**TRUNK, "srtp": False}).sip.trunks[0].srtp == "off"


@pytest.mark.parametrize(
    "change, words",
    [
        ({"name": ""}, "sip.trunks: [0].name must be 1..64"),
        ({"address": "sip:carrier.example"}, "[0].address must be HOST[:PORT]"),
        ({"address": "carrier example"}, "[0].address must be HOST[:PORT]"),
        ({"address": "carrier.example:70000"}, "[0].address must be HOST[:PORT]"),
        ({"transport": "sctp"}, "[0].transport must be one of udp, tcp, tls"),
        ({"transport": "tls"}, "sip.trunks: use transport tls but sip.tls is not set"),
        ({"user": "voxgate"}, "[0].password_env and user go together"),
        ({"user": "voxgate", "password_env": "VOXGATE_NO_SUCH_VAR"}, "[0].password_env names 'VOXGATE_NO_SUCH_VAR'"),
        ({"user": "a b", "password_env": "PATH"}, "[0].user must be a user name"),
        ({"from": "+15550100"}, "[0].from must be a SIP URI with a user"),
        ({"from": None}, "[0].from must be a SIP URI"),
        ({"srtp": "required"}, "[0].srtp needs transport: tls: SDES keys travel in the SDP"),
        ({"srtp": "optional", "transport": "tcp"}, "[0].srtp needs transport: tls"),
        ({"srtp": "sometimes"}, "[0].srtp must be one of off, optional, required"),
        ({"ca_file": "/etc/hostname"}, "[0].ca_file is for a tls trunk's certificate"),
        ({"fromm": "sip:a@b"}, "sip.trunks[0].fromm: unknown key"),
    ],
)
def test_a_bad_trunk_is_refused_in_one_line(change, words):
    trunk = {k: v for k, v in {**TRUNK, **change}.items() if v is not None}
    with pytest.raises(ConfigError) as err:
        _load(trunk)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_trunk_names_are_unique_and_their_transport_is_open():
    with pytest.raises(ConfigError, match="name the same trunk twice"):
        _load(TRUNK, {**TRUNK, "address": "127.0.0.2"})
    with pytest.raises(ConfigError, match="sip.trunks: use a transport sip.transports does not open"):
        load_config(
            None,
            {
                "sip": {
                    "port": 5060,
                    "allow": ["127.0.0.1"],
                    "transports": ["tcp"],
                    "trunks": [TRUNK],
                }
            },
        )


def _load_tls(tmp_path, trunk: dict):
    from tests.sip.certs import self_signed

    cert, key = self_signed(tmp_path / "certs")
    tls = {"port": 0, "cert_file": str(cert), "key_file": str(key)}
    return load_config(None, {"sip": {"port": 5060, "allow": ["127.0.0.1"], "tls": tls, "trunks": [trunk]}})


def test_a_tls_trunk_with_srtp_and_its_ca_file_is_read(tmp_path):
    cert_dir = tmp_path / "certs"
    trunk = {**TRUNK, "transport": "tls", "srtp": "required", "ca_file": str(cert_dir / "cert.pem")}
    (read,) = _load_tls(tmp_path, trunk).sip.trunks
    assert (read.transport, read.srtp, read.ca_file) == ("tls", "required", str(cert_dir / "cert.pem"))
    assert read.target() == ("127.0.0.1", 5070)
    assert _load_tls(tmp_path, {**TRUNK, "address": "sip.carrier.example", "transport": "tls"}).sip.trunks[
        0
    ].target() == ("sip.carrier.example", 5061)  # TLS's default port when the address names none


def test_a_tls_trunks_ca_file_that_does_not_load_is_refused_in_one_line(tmp_path):
    garbage = tmp_path / "ca.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigError) as err:
        _load_tls(tmp_path, {**TRUNK, "transport": "tls", "ca_file": str(garbage)})
    assert "sip.trunks: [0]: " in str(err.value) and "does not load as PEM CA certificates" in str(err.value)
    assert "\n" not in str(err.value)
