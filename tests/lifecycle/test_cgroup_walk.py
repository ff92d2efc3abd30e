"""The walk for faultlab's cgroups passes over a folder removed while it walks: on a
host where containers stop and users remove cgroups of their delegated subtrees, such
a folder is a normal event, never the end of root's status, revert or recover."""

from __future__ import annotations

import shutil

from faultlab.lifecycle.hostview import cgroups_named


def test_a_folder_removed_during_the_walk_is_passed_over(tmp_path):
    for i in range(6):
        (tmp_path / f"u{i}" / "deep" / f"faultlab-cpu-{i}").mkdir(parents=True)
    (tmp_path / "faultlab-io-top").mkdir()
    found, removed = [], set()
    for p in cgroups_named("faultlab-", str(tmp_path)):
        found.append(p.name)
        if not removed:  # every other user subtree goes away before the walk reaches it
            removed = {d.name for d in tmp_path.iterdir() if d.name.startswith("u") and d.name not in p.parts}
            for d in removed:
                shutil.rmtree(tmp_path / d)
    kept = {f"faultlab-cpu-{i}" for i in range(6) if f"u{i}" not in removed} | {"faultlab-io-top"}
    assert set(found) <= kept and len(found) >= 1, (found, removed)
    assert len(removed) >= 5, removed


def test_only_folders_named_with_the_prefix_are_found(tmp_path):
    (tmp_path / "a" / "faultlab-cpu-abc").mkdir(parents=True)
    (tmp_path / "a" / "faultlab-cpu-abc" / "faultlab-io-def").mkdir()
    (tmp_path / "a" / "other").mkdir()
    (tmp_path / "faultlab-file").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "a")
    got = sorted(str(p.relative_to(tmp_path)) for p in cgroups_named("faultlab-", str(tmp_path)))
    assert got == ["a/faultlab-cpu-abc", "a/faultlab-cpu-abc/faultlab-io-def"], got
