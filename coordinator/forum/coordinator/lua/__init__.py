"""The Lens's Lua scripts (data, not code): a package so ``*.lua`` ships as package data."""
