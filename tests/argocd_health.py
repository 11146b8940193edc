"""Run the Argo CD health check (deploy/argocd/health.lua) on an Evaluation, as Argo CD does.

Argo CD runs the script in gopher-lua with the live object as the global `obj` (JSON
objects and arrays as Lua tables) and reads `status` and `message` from the table it
returns; lupa runs the same script in a real Lua interpreter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lupa

SCRIPT = Path(__file__).resolve().parents[1] / "deploy" / "argocd" / "health.lua"


def argocd_health(evaluation: dict[str, Any]) -> tuple[str, str]:
    """(status, message) the health check gives `evaluation`."""
    lua = lupa.LuaRuntime(unpack_returned_tuples=False)
    lua.globals().obj = _to_lua(lua, evaluation)
    result = lua.execute(SCRIPT.read_text())
    return str(result["status"]), str(result["message"])


def _to_lua(lua: Any, value: Any) -> Any:
    # Lists become 1-based sequences (ipairs), as Argo CD's JSON → Lua conversion makes them.
    if isinstance(value, dict):
        return lua.table_from({key: _to_lua(lua, item) for key, item in value.items()})
    if isinstance(value, list):
        return lua.table_from([_to_lua(lua, item) for item in value])
    return value
