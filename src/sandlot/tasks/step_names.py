"""What a step may be called: its name is its folder's (steps/<name>/), so it must be
one portable folder name, and no two may share a folder (Harbor 0.26's rules)."""

from __future__ import annotations

import re
import unicodedata

_BAD_CHARACTERS = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]')
_DEVICE_NAME = re.compile(r"(CON|PRN|AUX|NUL|CONIN\$|CONOUT\$|(?:COM|LPT)[1-9¹²³])",
                          re.IGNORECASE)


def step_name_problem(name: str) -> str | None:
    """Why `name` cannot be a step's folder on every OS (Harbor's rule), or None."""
    if (not name.strip() or name in {".", ".."} or name.endswith((".", " "))
            or _BAD_CHARACTERS.search(name)
            or _DEVICE_NAME.fullmatch(name.partition(".")[0].rstrip(" "))):
        return ("a step name must be one portable folder name: not empty, no '/', '\\', "
                "control or reserved characters (<>:\"|?*), no trailing dot or space, not a "
                "device name (CON, NUL, COM1...)")
    if len(name.encode()) > 255:
        return "a step name must be at most 255 bytes of UTF-8"
    return None


def step_name_key(name: str) -> str:
    """Names that would share a folder on a case-insensitive, normalizing filesystem."""
    return unicodedata.normalize("NFC", name).casefold()
