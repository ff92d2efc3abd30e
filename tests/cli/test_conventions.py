"""The CLI follows click's conventions on every command, found by walking the click
command tree (so a command added later is checked too): ``-h`` and ``--help``, no
``<bool>`` (or other typer type tag) beside a flag, shell completion through click's
``_FAULTLAB_COMPLETE`` protocol, and a closed stdout pipe ending quietly."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import FL, REPO, fl, one_line_error

# Runs in one child process: every command path of the tree, each given -h and
# --help through faultlab's entry point (faultlab.cliopts.run), output captured.
WALK = r"""
import contextlib, io, json, sys
import typer
from faultlab import cliopts
from faultlab.cli import app

def paths(cmd, prefix=()):
    yield prefix
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        if not sub.hidden:
            yield from paths(sub, prefix + (name,))

res = []
for p in paths(typer.main.get_command(app)):
    for flag in ("-h", "--help"):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cliopts.run(typer.main.get_command(app), args=[*p, flag])
                code = None
            except SystemExit as e:
                code = e.code
        res.append({"path": list(p), "flag": flag, "code": code, "out": out.getvalue(), "err": err.getvalue()})
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def helps() -> list[dict]:
    cp = subprocess.run([sys.executable, "-c", WALK], capture_output=True, text=True, timeout=300, cwd=REPO,
                        env={**os.environ, "COLUMNS": "100"})
    assert cp.returncode == 0, cp.stderr[-3000:]
    return json.loads(cp.stdout)


def test_every_command_takes_h_and_help(helps):
    paths = {tuple(h["path"]) for h in helps}
    assert ("dataset", "info") in paths and ("scenario", "validate") in paths and ("inject",) in paths, paths
    for h in helps:
        where = " ".join(["faultlab", *h["path"], h["flag"]])
        assert h["code"] == 0, (where, h["err"][-500:])
        assert "Usage: faultlab" in h["out"] and "Traceback" not in h["out"] + h["err"], where


def test_no_type_tag_beside_any_option(helps):
    """No option of any command (ours or another module's) shows a typer type tag
    (``<str>``, ``<list[str]>``...) where its metavar belongs."""
    for h in helps:
        tag = re.search(r"<(bool|str|path|int|float|list\[[^]]*\])>", h["out"])
        assert tag is None, (h["path"], tag and tag.group(0))


def test_bash_completion_script_is_emitted_and_parses(tmp_path):
    cp = fl(env={"_FAULTLAB_COMPLETE": "bash_source"})
    assert cp.returncode == 0, cp.stderr
    assert "complete " in cp.stdout and "_FAULTLAB_COMPLETE=complete_bash" in cp.stdout, cp.stdout
    script = tmp_path / "faultlab.bash"
    script.write_text(cp.stdout)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True).returncode == 0
    for shell in ("zsh", "fish"):
        cp = fl(env={"_FAULTLAB_COMPLETE": f"{shell}_source"})
        assert cp.returncode == 0 and "_FAULTLAB_COMPLETE=complete_" + shell in cp.stdout, (shell, cp.stderr)


def test_bash_completion_completes_a_subcommand():
    cp = fl(env={"_FAULTLAB_COMPLETE": "complete_bash", "COMP_WORDS": "faultlab data", "COMP_CWORD": "1"})
    assert cp.returncode == 0 and cp.stdout.split() == ["dataset"], (cp.stdout, cp.stderr)
    cp = fl(env={"_FAULTLAB_COMPLETE": "complete_bash", "COMP_WORDS": "faultlab dataset info --j", "COMP_CWORD": "3"})
    assert cp.stdout.split() == ["--json"], (cp.stdout, cp.stderr)


def test_show_completion_in_bash():
    # "; exit $?": bash runs faultlab as its child (a lone command would be exec'd in its
    # place), so the shell faultlab finds above it is bash
    cp = subprocess.run(["bash", "-c", " ".join(map(str, FL)) + " --show-completion; exit $?"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and "complete -o default -F" in cp.stdout, cp.stderr


def test_show_completion_of_a_named_shell(tmp_path):
    """``--show-completion SHELL`` prints SHELL's script whatever shell runs faultlab
    (here bash): bash's parses in ``bash -n``; zsh's is a ``#compdef`` function (parsed by
    ``zsh -n`` where zsh is installed); fish's registers ``complete --command faultlab``
    (``-c``'s long form). Each script's protocol completes a subcommand."""
    def shown(shell: str) -> str:
        cp = subprocess.run(["bash", "-c", " ".join(map(str, FL)) + f" --show-completion {shell}; exit $?"],
                            capture_output=True, text=True, timeout=60)
        assert cp.returncode == 0 and cp.stderr == "", (shell, cp.stderr)
        return cp.stdout

    bash, zsh, fish = shown("bash"), shown("zsh"), shown("fish")
    assert len({bash, zsh, fish}) == 3
    (tmp_path / "c.bash").write_text(bash)
    assert "complete -o default -F _faultlab_completion faultlab" in bash
    assert subprocess.run(["bash", "-n", str(tmp_path / "c.bash")], capture_output=True).returncode == 0
    assert zsh.startswith("#compdef faultlab") and "compdef _faultlab_completion faultlab" in zsh and "complete -o" not in zsh, zsh
    if shutil.which("zsh"):
        (tmp_path / "c.zsh").write_text(zsh)
        assert subprocess.run(["zsh", "-n", str(tmp_path / "c.zsh")], capture_output=True).returncode == 0
    assert re.match(r"complete (-c|--command) faultlab ", fish) and "_FAULTLAB_COMPLETE=complete_fish" in fish, fish
    if shutil.which("fish"):
        (tmp_path / "c.fish").write_text(fish)
        assert subprocess.run(["fish", "--no-execute", str(tmp_path / "c.fish")], capture_output=True).returncode == 0
    cp = fl(env={"_FAULTLAB_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": "faultlab data"})
    assert '"dataset"' in cp.stdout, (cp.stdout, cp.stderr)
    cp = fl(env={"_FAULTLAB_COMPLETE": "complete_fish", "_TYPER_COMPLETE_FISH_ACTION": "get-args", "_TYPER_COMPLETE_ARGS": "faultlab dataset in"})
    assert cp.stdout.startswith("info\t"), (cp.stdout, cp.stderr)
    one_line_error(fl("--show-completion", "tcsh"), "--show-completion", "'tcsh'", "bash, zsh, fish")


@pytest.mark.parametrize("args", [["status", "--json"], ["scenario", "schema"], ["testbed", "inventory-schema"], ["--help"]])
def test_closed_pipe_ends_quietly(args):
    """The reader is gone before faultlab writes: the write fails with EPIPE, and
    faultlab ends as a process killed by SIGPIPE would be reported (141), silently."""
    p = subprocess.Popen([*FL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) == 141, err
    assert err == "", err


def test_status_json_into_head():
    assert shutil.which("head")
    cmd = " ".join(map(str, FL)) + " status --json | head -c1 >/dev/null; echo ${PIPESTATUS[0]}"
    cp = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert cp.stdout.strip() in ("0", "141"), (cp.stdout, cp.stderr)
    assert "Traceback" not in cp.stderr and "Exception ignored" not in cp.stderr, cp.stderr


QUIET_SCENARIO = """\
name: quiet
seed: 0
testbed: {backend: local, nodes: 2}
workload: {kind: ddp, duration: 8s, hidden: 64, batch: 32}
"""


def test_quiet_run_prints_only_its_run_directory(tmp_path):
    (tmp_path / "s.yaml").write_text(QUIET_SCENARIO)
    cp = subprocess.run([*FL, "run", "s.yaml", "--quiet", "--out", "r", "--no-label"], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    assert cp.stdout.splitlines() == ["r"] and cp.stderr == "", (cp.stdout, cp.stderr)
    assert (tmp_path / "r" / "steps.parquet").is_file()


def test_renamed_options_still_work_with_a_notice(tmp_path):
    """``--nodes KEY=VALUE`` (a selector, now ``--select``) and ``dataset build
    --out-root`` (spelled ``--out``) are hidden aliases: the same effect, one notice line."""
    for old, new in ((["run", "s.yaml", "--nodes", "rack=1"], ["run", "s.yaml", "--select", "rack=1"]),):
        a, b = fl(*old, cwd=tmp_path), fl(*new, cwd=tmp_path)
        assert a.returncode == b.returncode == 2
        notice, *rest = a.stderr.splitlines()
        assert notice.startswith("faultlab: note: --nodes KEY=VALUE is now --select") and rest == b.stderr.splitlines(), (a.stderr, b.stderr)
    cp = fl("dataset", "build", tmp_path / "none", "--name", "x", "--out-root", tmp_path / "o")
    assert cp.stderr.splitlines()[0].startswith("faultlab: note: --out-root is now --out"), cp.stderr
    assert "--out-root" not in fl("dataset", "build", "--help").stdout


def _commands(cmd, prefix=()):
    yield prefix, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _commands(sub, prefix + (name,))


#: commands without ``--json``, and why: what they print is JSON already
NO_JSON = {
    ("scenario", "schema"): "prints a JSON Schema",
    ("testbed", "inventory-schema"): "prints a JSON Schema",
}


def test_every_command_has_json_with_help_or_is_exempt():
    """Every command of the tree (found by walking it, so a command added later is
    checked too) takes ``--json`` with help text saying what it prints, or is in
    :data:`NO_JSON` with the reason."""
    import typer

    from faultlab.cli import app

    leaves = [(path, cmd) for path, cmd in _commands(typer.main.get_command(app)) if path and not getattr(cmd, "commands", None)]
    assert len(leaves) > 20 and set(NO_JSON) <= {p for p, _ in leaves}
    for path, cmd in leaves:
        opt = next((p for p in cmd.params if "--json" in getattr(p, "opts", [])), None)
        if path in NO_JSON:
            assert opt is None, f"faultlab {' '.join(path)} has --json: drop it from NO_JSON"
            continue
        assert opt is not None, f"faultlab {' '.join(path)} has no --json (add it, or say in NO_JSON why not)"
        assert len((opt.help or "").split()) >= 4, f"faultlab {' '.join(path)} --json's help does not say what it prints"


def test_json_of_the_file_commands_is_one_json_document(tmp_path):
    """``--json`` of synth, label, report, export and scenario validate: stdout is
    one JSON document naming what was written, the progress lines are not on it."""
    def js(*args):
        cp = fl(*args, "--json", timeout=300)
        assert cp.returncode == 0, (args, cp.stderr[-2000:])
        return json.loads(cp.stdout)

    run = tmp_path / "syn"
    assert js("synth", run, "--ranks", "4", "--steps", "200")["run_dir"] == str(run)
    got = js("label", run)
    assert got["labels"] > 0 and got["labels_path"] == str(run / "labels.parquet") and got["peer_groups"]
    assert js("report", run, "--out", tmp_path / "r.html")["report"] == str(tmp_path / "r.html")
    assert js("export", run, "--out", tmp_path / "t.json")["trace"] == str(tmp_path / "t.json")
    got = js("scenario", "validate", REPO / "examples" / "smoke-campaign.yaml")
    assert got["kind"] == "campaign" and got["runs"] > 1 and "io-slow" in got["fault_types"]


def test_label_import_help_lists_every_format():
    import typer

    from faultlab.cli import app
    from faultlab.labeler.importers import FORMATS

    label = typer.main.get_command(app).commands["label"]
    helptext = next(p.help for p in label.params if "--import" in getattr(p, "opts", []))
    assert len(FORMATS) >= 4
    for name in FORMATS:
        assert name in helptext, (name, helptext)


def test_install_completion_writes_a_script_bash_sources(tmp_path):
    """``faultlab --install-completion`` from bash (HOME in a temporary folder): the
    script is written, ~/.bashrc sources it, and a bash that sources it has faultlab's
    completion function registered."""
    env = {**os.environ, "HOME": str(tmp_path)}
    cmd = " ".join(map(str, FL)) + " --install-completion; exit $?"
    cp = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60, env=env)
    assert cp.returncode == 0, cp.stderr
    script = tmp_path / ".bash_completions" / "faultlab.sh"
    assert script.is_file() and str(script) in (tmp_path / ".bashrc").read_text()
    cp = subprocess.run(["bash", "-c", f"source '{script}' && complete -p faultlab"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and "_faultlab_completion" in cp.stdout, (cp.stdout, cp.stderr)


def test_install_completion_of_a_named_shell(tmp_path):
    """``faultlab --install-completion zsh`` (or fish) from bash writes that shell's
    script where that shell loads completions, not bash's."""
    env = {**os.environ, "HOME": str(tmp_path)}
    for shell, where, mark in (("zsh", ".zfunc/_faultlab", "#compdef faultlab"),
                               ("fish", ".config/fish/completions/faultlab.fish", "complete --command faultlab")):
        cp = subprocess.run(["bash", "-c", " ".join(map(str, FL)) + f" --install-completion {shell}; exit $?"],
                            capture_output=True, text=True, timeout=60, env=env)
        assert cp.returncode == 0 and f"{shell} completion installed" in cp.stdout, cp.stderr
        assert (tmp_path / where).read_text().startswith(mark)
    assert "fpath+=~/.zfunc" in (tmp_path / ".zshrc").read_text()
    assert not (tmp_path / ".bash_completions").exists()


#: the commands that print progress (phases, runs, blocks, datasets scored): each takes --quiet
PROGRESS_COMMANDS = {("run",), ("campaign",), ("demo",), ("label",), ("leaderboard",)}


def test_every_command_that_prints_progress_takes_quiet(tmp_path):
    import typer

    from faultlab.cli import app

    cmds = dict(_commands(typer.main.get_command(app)))
    for path in PROGRESS_COMMANDS:
        opt = next((p for p in cmds[path].params if "--quiet" in getattr(p, "opts", [])), None)
        assert opt is not None and "-q" in opt.opts and (opt.help or "").strip(), f"faultlab {' '.join(path)} has no --quiet"
    cp = fl("leaderboard", "--dataset", REPO / "datasets" / "faultlab-hw-v1", "--detector", "constant", "--boot", "0",
            "--quiet", "--out", tmp_path / "board", timeout=300)
    assert cp.returncode == 0 and cp.stderr == "", cp.stderr
    assert "constant" in cp.stdout and (tmp_path / "board" / "leaderboard.json").is_file()
