"""The documentation site builds with `mkdocs build --strict` (a broken link, a missing page or a stale nav entry
fails), and the configuration reference is the one gateway/config.py generates."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def mkdocs() -> list[str]:
    try:
        import material  # noqa: F401  (mkdocs-material: the theme mkdocs.yml names)
        import mkdocs  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":  # CI must not pass a check it never ran
            raise
        pytest.skip("needs mkdocs and mkdocs-material (pip install -e '.[docs]')")
    return [sys.executable, "-m", "mkdocs"]


def test_mkdocs_build_strict(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [*mkdocs(), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    home = (tmp_path / "site" / "index.html").read_text()
    assert 'class="mermaid"' in home and "flowchart LR" in home  # the architecture picture went in


def test_every_docs_page_is_in_the_nav():
    """A page outside the nav builds (mkdocs only notes it) but nobody finds it."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    nav = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)["nav"]

    def pages(entries):
        for entry in entries:
            for value in entry.values() if isinstance(entry, dict) else [entry]:
                yield from pages(value) if isinstance(value, list) else [value]

    listed = set(pages(nav))
    on_disk = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk - listed == set(), f"docs pages missing from mkdocs.yml's nav: {sorted(on_disk - listed)}"
    assert listed - on_disk == set(), f"nav entries without a page: {sorted(listed - on_disk)}"


def test_configuration_reference_is_current():
    done = subprocess.run(
        [sys.executable, "scripts/gen_config_reference.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_configuration_reference_names_every_key():
    import dataclasses

    from gateway import config as C

    page = (ROOT / "docs" / "configuration.md").read_text()
    for section in (C.ServerConfig, C.LimitsConfig, C.EngineConfig, C.VoiceConfig, C.BargeInConfig, C.ClusterConfig):
        for f in dataclasses.fields(section):
            assert f"| `{f.name}` |" in page, f"{section.__name__}.{f.name} is missing from docs/configuration.md"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_changed_default_makes_the_reference_stale(tmp_path):
    """The check can fail: a copy of the repository's generator and config with one default changed."""
    for rel in ("scripts/gen_config_reference.py", "gateway/config.py", "docs/configuration.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    (tmp_path / "gateway" / "__init__.py").write_text("")
    cfg = tmp_path / "gateway" / "config.py"
    cfg.write_text(cfg.read_text().replace("port: int = 8080", "port: int = 8090", 1))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "scripts/gen_config_reference.py"), "--check"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 1 and "stale" in done.stderr
