"""The leaderboard section of a dataset card (``README.md``): the tables
``faultlab leaderboard --dataset DIR --card`` writes there, one per mode (offline,
replay), each between its own pair of HTML comments so a later run replaces it.

A card without the section (one built before it existed, or re-rendered by
``dataset relabel``, whose new labels make any old table stale) gets it before its
``## Citation`` heading. The card is documentation: its new digest is written into
``MANIFEST.sha256`` (``dataset verify`` and ``sha256sum -c`` still check it) and the
dataset's identity, which leaves the card out
(:func:`faultlab.datasets.manifest.digest`), stays the same, so a leaderboard.json
made before the card was refreshed still verifies.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from faultlab import safefs
from faultlab.datasets import manifest
from faultlab.errors import BadInput

CARD = "README.md"
HEADING = "## Leaderboard"
MODES = ("offline", "replay")


def intro(name: str) -> str:
    """The section's opening paragraph for the dataset ``name``."""
    return (f"Every detector faultlab ships, ranked on this dataset by `faultlab leaderboard --dataset datasets/{name} --card` "
            f"(offline; add `--mode replay` for the online table), which writes the tables below. A card with no table here "
            "has not been ranked yet.")


def _markers(mode: str) -> tuple[str, str]:
    return f"<!-- faultlab leaderboard: {mode} -->", f"<!-- end faultlab leaderboard: {mode} -->"


def with_table(card: str, name: str, mode: str, table: str) -> str:
    """``card`` (the README's text) with the ``mode`` table replaced by ``table``
    (Markdown), the section added when the card has none. Raises ValueError for a
    mode other than offline or replay."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    start, end = _markers(mode)
    block = f"{start}\n{table.strip()}\n{end}"
    i, j = card.find(start), card.find(end)
    if i >= 0 and j > i:
        return card[:i] + block + card[j + len(end):]
    if HEADING not in card.splitlines():
        at = card.find("\n## Citation")
        section = f"{HEADING}\n\n{intro(name)}\n"
        card = card.rstrip("\n") + "\n\n" + section if at < 0 else card[: at + 1] + section + "\n" + card[at + 1:]
    h = card.index(f"\n{HEADING}\n") + len(HEADING) + 2
    nxt = card.find("\n## ", h)
    later = card.find(_markers("replay")[0], h) if mode == "offline" else -1
    at = later if 0 <= later and (nxt < 0 or later < nxt) else (nxt + 1 if nxt >= 0 else len(card))
    head = card[:at].rstrip("\n") + "\n\n"
    return head + block + "\n\n" + card[at:].lstrip("\n") if at < len(card) else head + block + "\n"


def put_table(root: str | Path, mode: str, table: str) -> None:
    """Write the ``mode`` table into the card of the dataset folder ``root`` and the
    card's new digest into its ``MANIFEST.sha256`` (each file atomically, no link
    followed), both read and written below the folder opened once: the folder holding
    it may be another user's, who could put a folder of theirs at its name meanwhile,
    whose manifest root would have written into its own dataset's. Raises BadInput
    (field ``--card``) when the folder has no card or manifest, or cannot be written."""
    root = Path(root)
    fix = "give a dataset folder made by faultlab dataset build, writable by you"
    try:
        with safefs.open_dir_nofollow(root) as folder:
            for f in (CARD, manifest.NAME):
                if not folder.exists(f):
                    raise BadInput(f"{root} has no {f}", field="--card", fix=fix)
            card = with_table(folder.read_text(CARD), root.name, mode, table)
            digests = manifest.read(root, folder.fd)  # the manifest of the folder whose card this is, not of one put at its name since
            digests[CARD] = hashlib.sha256(card.encode()).hexdigest()
            folder.write_atomic(CARD, card, 0o644)
            folder.write_atomic(manifest.NAME, manifest.text(digests), 0o644)
    except safefs.UntrustedPath as e:
        raise BadInput(str(e), field="--card", fix=fix) from None
    except OSError as e:
        raise BadInput(f"cannot write the card of {root} ({e.strerror or e})", field="--card", fix=fix) from None
