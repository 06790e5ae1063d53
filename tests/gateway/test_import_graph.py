"""The gateway's import graph: arrows point one way (docs/architecture.md).

Read from the source (every `import`, lazy ones inside functions too), so a
test needs no server and an import that only runs on some path still counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gateway", "tts", "audio", "bench")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(package: str) -> dict[str, Path]:
    return {_module_name(p): p for p in (ROOT / package).rglob("*.py")}


ALL = {name: path for pkg in PACKAGES for name, path in _modules(pkg).items()}


def imports_of(module: str) -> set[str]:
    """Modules of ours that `module` imports (`from a.b import c` names a.b.c when that is a module)."""
    path = ALL[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in ALL else base for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] in PACKAGES or name.split(".")[0] == "aiohttp":
                found.add(name)
    return found


def graph(package: str = "gateway") -> dict[str, set[str]]:
    return {m: {i for i in imports_of(m) if i in ALL and i.startswith(package)} for m in ALL if m.startswith(package)}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_gateway_has_no_import_cycle():
    assert find_cycle(graph("gateway")) is None


def test_the_call_core_imports_no_leg_wire_http_app_or_web_framework():
    forbidden = ("gateway.legs", "gateway.wire", "gateway.http", "gateway.app", "gateway.cli", "aiohttp")
    core = [m for m in ALL if m.startswith("gateway.core")]
    assert len(core) >= 8
    bad = {m: sorted(i for i in imports_of(m) if i.startswith(forbidden)) for m in core}
    assert {m: b for m, b in bad.items() if b} == {}


def top_level_imports(module: str) -> set[str]:
    """Every top-level package `module` imports, ours or not."""
    tree = ast.parse(ALL[module].read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_wire_formats_are_pure_encode_decode():
    wires = [m for m in ALL if m.startswith("gateway.wire.")]
    assert {
        "gateway.wire.twilio",
        "gateway.wire.audiosocket",
        "gateway.wire.asterisk",
        "gateway.wire.telnyx",
        "gateway.wire.vonage",
        "gateway.wire.jambonz",
    } <= set(wires)
    for module in wires:
        assert not top_level_imports(module) & {"asyncio", "socket", "aiohttp", "websockets", "aiortc"}, module
        assert not {i for i in imports_of(module) if i.startswith(("gateway.core", "gateway.legs", "gateway.app"))}, (
            module
        )


def test_legs_do_not_import_each_other_or_the_app():
    for module in (m for m in ALL if m.startswith("gateway.legs.")):
        # accept, host and ws_media are shared helpers (no `install`), not legs: the WebSocket wires share ws_media.
        shared = ("gateway.legs.accept", "gateway.legs.host", "gateway.legs.ws_media")
        others = {i for i in imports_of(module) if i.startswith("gateway.legs.") and i not in shared}
        assert not others and "gateway.app" not in imports_of(module), module


def test_arrows_point_down_gateway_tts_audio():
    for module in ALL:
        deps = imports_of(module)
        if module.startswith("audio"):
            assert not {d for d in deps if d.startswith(("tts", "gateway", "bench"))}, module
        if module.startswith("tts"):
            assert not {d for d in deps if d.startswith(("gateway", "bench"))}, module
        if module.startswith("gateway") and module != "gateway.cli":
            assert not {d for d in deps if d.startswith("bench")}, module
            # public faces: tts itself, tts.frontend, and the engine service's package (tts.service, not its modules)
            internals = {
                d for d in deps if d.startswith("tts.") and not d.startswith("tts.frontend") and d != "tts.service"
            }
            assert not internals, f"{module} reaches behind tts's public face: {sorted(internals)}"
