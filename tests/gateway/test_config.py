from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "configs").glob("*.yaml")))
def test_shipped_configs_load(name, monkeypatch):
    monkeypatch.setenv(
        "VOXGATE_CLUSTER_SECRET", "s" * 32
    )  # configs/cluster.yaml's secret_env must hold a secret at load
    cfg = load_config(ROOT / "configs" / name)
    assert cfg.voices and cfg.default_voice_name in cfg.voices


def write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "text,needle",
    [
        ("server:\n  prot: 1\n", "server.prot: unknown key"),
        ("colour: red\n", "colour: unknown key"),
        ("server:\n  port: eighty\n", "server.port: expected an integer"),
        ("server:\n  port: 70000\n", "server.port: must be 0..65535"),
        ("simulated:\n  capacity_x: -1\n", "simulated.capacity_x: must be > 0"),
        ("engine:\n  kind: gpt\n", "engine.kind: must be"),
        ("engine:\n  kind: remote\n", "engine.endpoints: must list at least one engine"),
        (
            "engine:\n  kind: remote\n  endpoints: [http://e:7000]\n",
            "engine.endpoints: entries must be tcp://HOST:PORT",
        ),
        (
            "engine:\n  kind: remote\n  endpoints: [tcp://e:7000, tcp://e:7000]\n",
            "engine.endpoints: lists an engine twice",
        ),
        ("engine:\n  kind: simulated\n  endpoints: [tcp://e:7000]\n", "engine.endpoints: are only for kind: remote"),
        (
            "engine:\n  kind: remote\n  endpoints: [ipc:///run/e.sock]\n  isolate: true\n",
            "engine.isolate: runs a local engine",
        ),
        ("voices:\n  anna:\n    stress: maybe\n", "voices.anna.stress: expected true or false"),
        ("server:\n  limits:\n    max_message_bytes: 10\n", "server.limits.max_message_bytes"),
        ("default_voice: bob\n", "default_voice: 'bob' is not in voices"),
        ("- a\n- b\n", "top level must be a mapping"),
        ("server: [\n", "not valid YAML"),
    ],
)
def test_bad_configs_are_refused_naming_file_and_key(tmp_path, text, needle):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value)
    assert needle in str(err.value)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")


def test_model_dir_comes_from_the_environment_when_unset(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXGATE_MODEL_DIR", str(tmp_path))
    cfg = load_config(write(tmp_path, "engine:\n  kind: auto\n"))
    assert cfg.engine.model_dir == str(tmp_path)


def test_overrides_merge_into_sections(tmp_path):
    cfg = load_config(write(tmp_path, "server:\n  port: 1234\n"), {"server": {"host": "0.0.0.0"}})
    assert (cfg.server.host, cfg.server.port) == ("0.0.0.0", 1234)


def test_barge_in_and_stt_sections_are_strict(tmp_path):
    from gateway.config import ConfigError, load_config

    cfg = load_config(
        None, {"barge_in": {"mode": "vad", "min_speech_ms": 300}, "stt": {"kind": "openai", "base_url": "http://x/v1"}}
    )
    assert cfg.barge_in.mode == "vad" and cfg.barge_in.min_speech_ms == 300.0 and cfg.stt.model == "whisper-1"
    for bad, where in [
        ({"barge_in": {"mode": "always"}}, "barge_in.mode"),
        ({"barge_in": {"detector": "x"}}, "barge_in.detector"),
        ({"barge_in": {"min_speech": 1}}, "barge_in.min_speech"),
        ({"stt": {"kind": "openai"}}, "stt.base_url"),
    ]:
        with pytest.raises(ConfigError, match=where.replace(".", r"\.")):
            load_config(None, bad)


def test_cluster_section_is_strict_and_absent_means_one_process(monkeypatch):
    from gateway.config import ConfigError, load_config

    assert load_config(None).cluster.enabled is False  # the embedded default: no Redis anywhere
    monkeypatch.setenv("VG_TEST_REDIS_PASSWORD", "s3cret")
    cfg = load_config(
        None,
        {
            "cluster": {
                "redis_url": "rediss://redis.internal:6380/2",
                "password_env": "VG_TEST_REDIS_PASSWORD",
                "node_id": "gw-1",
                "advertise_url": "http://10.0.0.5:8080",
            }
        },
    )
    assert cfg.cluster.enabled and cfg.cluster.node_id == "gw-1"
    for bad, where in [
        ({"redis_url": "http://h"}, "redis_url"),
        ({"node_id": "a"}, "node_id"),
        ({"redis_url": "redis://h", "password_env": "VG_TEST_UNSET_X"}, "password_env"),
        ({"redis_url": "redis://h", "advertise_url": "http://h/x"}, "advertise_url"),
        ({"redis_url": "redis://h", "claim_ttl_s": 0}, "claim_ttl_s"),
        ({"redis_url": "redis://h", "nodes": 2}, "nodes"),
    ]:
        with pytest.raises(ConfigError, match=r"cluster\." + where):
            load_config(None, {"cluster": bad})
    with pytest.raises(ConfigError) as err:  # a password in the URL is refused without being printed
        load_config(None, {"cluster": {"redis_url": "redis://u:hunter2@h:6379/0"}})
    assert "password_env" in str(err.value) and "hunter2" not in str(err.value)


def test_a_bare_yaml_off_switches_barge_in_and_stt_off(tmp_path):
    from gateway.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text("barge_in:\n  mode: off\nstt:\n  kind: off\n")
    cfg = load_config(path)
    assert cfg.barge_in.mode == "off" and cfg.stt.kind == "off"
