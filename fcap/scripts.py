"""The frequency-cap scripts (``bidder.adapters.lua``: EVALSHA, loaded on NOSCRIPT).

Each script is ``fcap/lua/_lib.lua`` (shared helpers) followed by its own file, so
the window math exists once in Lua.
"""

from __future__ import annotations

from pathlib import Path

from bidder.adapters.lua import LuaScript

_LUA = Path(__file__).parent / "lua"


def _script(name: str) -> LuaScript:
    return LuaScript.read(_LUA / "_lib.lua", _LUA / f"{name}.lua")


CHECK = _script("check")
COUNT = _script("count")
RELEASE = _script("release")
COUNTED = _script("counted")
ALL = (CHECK, COUNT, RELEASE, COUNTED)
