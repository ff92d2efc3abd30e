"""The conventions every ``faultlab`` command shares, applied once to the whole
command tree so that a command added anywhere inherits them.

- ``-h`` and ``--help`` (:data:`CONTEXT_SETTINGS` on the root app; click hands
  ``help_option_names`` down to every subcommand's context);
- shell completion for bash, zsh and fish through click's mechanism
  (``_FAULTLAB_COMPLETE=bash_source faultlab``; typer's ``--install-completion`` and
  ``--show-completion``, for the shell faultlab runs in or the one named after them,
  ``faultlab --show-completion zsh``: :func:`_completion_for_named_shell`);
- a metavar on every option that takes a value, none on a flag (:func:`with_metavars`);
- usage errors as one line, exit 2 (:func:`usage_line`);
- a closed stdout pipe (``faultlab status --json | head -c1``) ends quietly, exit 141
  as a process ended by SIGPIPE, with no traceback (:func:`run`);
- a renamed option kept as a hidden alias that prints a one-line notice (:func:`renamed`);
- options that contradict each other given together refused in one line naming them
  (:func:`refuse_together`): a flag and its opposite are two options, so that the last
  given never wins in silence;
- ``--quiet`` (:data:`Quiet`, :func:`progress_console`).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Annotated

import typer
from rich.console import Console
from typer._click.utils import PacifyFlushWrapper  # click's wrapper of a stdout it found closed (typer vendors click)
from typer._completion_shared import get_completion_script, install  # typer's completion scripts and installer

#: the root app's context settings; click passes them on to every subcommand
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}

#: the environment variable of click's completion protocol for the ``faultlab`` program
COMPLETE_VAR = "_FAULTLAB_COMPLETE"

#: the shells whose completion script faultlab prints and installs
SHELLS = ("bash", "zsh", "fish")

#: the help of typer's two completion options (flags of the root command)
COMPLETION_HELP = {
    "--install-completion": "install completion for the shell faultlab runs in, or for SHELL given after it (bash, zsh, fish)",
    "--show-completion": "print the completion script of the shell faultlab runs in, or of SHELL given after it (bash, zsh, fish)",
}

#: ``--quiet`` of every command that prints progress
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="print no progress: errors and the final result only")]


def progress_console(quiet: bool, console: Console) -> Console:
    """``console``, or one that prints nothing when ``quiet`` (``--quiet``)."""
    return Console(quiet=True) if quiet else console


def renamed(old: str, new: str):
    """The callback of a hidden option kept under its ``old`` name after it was renamed
    ``new``: when it is given, one line on stderr says to use ``new``; the value passes
    through (the command takes ``new``'s value, else ``old``'s)."""

    def notice(value):
        if value not in (None, [], (), False):
            print(f"faultlab: note: {old} is now {new} ({old} still works, but is deprecated)", file=sys.stderr)
        return value

    return notice


def refuse_together(ctx: typer.Context, given: dict[str, bool]) -> None:
    """A usage error (one line, exit 2) naming the options of ``given`` (option name ->
    whether the command line gave it) when two or more of them were given: they
    contradict each other, and the last one would otherwise win in silence."""
    on = [name for name, g in given.items() if g]
    if len(on) < 2:
        return
    param = next((p for p in ctx.command.params if on[0] in getattr(p, "opts", ())), None)
    raise typer.BadParameter(f"contradicts {' and '.join(on[1:])}, given too (give one of them)", ctx=ctx, param=param)


def select_option():
    """``--select KEY=VALUE``: inventory nodes by label (``--nodes N`` is always a count)."""
    return typer.Option(None, "--select", metavar="KEY=VALUE", help="with --inventory: only the nodes whose labels match, e.g. rack=3 (several: rack=3,role=gpu)")


def select_old_option():
    """The old spelling of ``--select``, hidden; a notice when used."""
    return typer.Option(None, "--nodes", hidden=True, callback=renamed("--nodes KEY=VALUE", "--select KEY=VALUE"))


def _no_metavar_on_help(cmd) -> None:
    """The help option click makes per command (``-h, --help``) shows no metavar (typer
    would print ``<bool>`` beside it)."""
    make = cmd.get_help_option

    def get_help_option(ctx):
        opt = make(ctx)
        if opt is not None:
            opt.metavar = ""
        return opt

    cmd.get_help_option = get_help_option


def with_metavars(cmd):
    """Every option and argument of every command of ``cmd``'s tree shows a metavar: its
    own, else its name in capitals (``--window WINDOW``, ``FAULT_ID``); flags, the help
    option included, show none (typer would print ``<bool>``, ``<str>``)."""
    for p in cmd.params:  # typer's own options and arguments (it vendors click): duck-typed
        kind = getattr(p, "param_type_name", "")
        if kind == "option" and p.metavar is None:
            p.metavar = "" if p.is_flag else p.name.upper()
        elif kind == "argument":
            if p.metavar is None:
                p.metavar = p.name.upper()
            p.display_type_rich = lambda ctx: None  # the metavar says it; no `<str>` column beside it
    _no_metavar_on_help(cmd)
    for sub in getattr(cmd, "commands", {}).values():
        with_metavars(sub)
    return cmd


def _completion_for_named_shell(args: list[str], prog_name: str) -> bool:
    """Answer ``faultlab --show-completion SHELL`` / ``--install-completion SHELL`` (or
    ``--show-completion=SHELL``) for the named shell; typer's options are flags that
    detect the shell, so SHELL would be read as a command. Returns False when ``args``
    are not such a request; exits 2 on a shell faultlab has no script for."""
    first, _, value = (args[0] if args else "").partition("=")
    if first not in COMPLETION_HELP or len(args) > (1 if value else 2) or not (value or len(args) == 2):
        return False
    shell = value or args[1]
    if shell not in SHELLS:
        print(f"faultlab: error: {first}: no completion for {shell!r} (give one of {', '.join(SHELLS)})", file=sys.stderr)
        sys.exit(2)
    if first == "--show-completion":
        print(get_completion_script(prog_name=prog_name, complete_var=COMPLETE_VAR, shell=shell))
    else:
        _, path = install(shell=shell, prog_name=prog_name, complete_var=COMPLETE_VAR)
        print(f"{shell} completion installed in {path}\nCompletion will take effect once you restart the terminal")
    sys.exit(0)


def _completion_help(cmd) -> None:
    """The root command's completion options say that a shell may follow them."""
    for p in cmd.params:
        for opt in getattr(p, "opts", []):
            if opt in COMPLETION_HELP:
                p.help = COMPLETION_HELP[opt]


def usage_line(err) -> str:
    """One line for a usage error typer found (a range, a type, a missing or unknown
    option): ``faultlab: error: --repeat: Input should be greater than or equal to 1
    (see faultlab run --help)``, the option or argument named first; never typer's
    boxed multi-line form."""
    p = getattr(err, "param", None)
    ctx = getattr(err, "ctx", None)
    msg = " ".join(err.format_message().split())
    if p is not None and type(err).__name__ == "BadParameter":
        name = p.opts[0] if getattr(p, "param_type_name", "") == "option" and p.opts else (p.metavar or p.name.upper())
        msg = f"{name}: {' '.join(str(err.message).split())}"
    where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
    return f"faultlab: error: {msg}{where}"


def _click_completion_order() -> None:
    """Accept click's ``SHELL_source`` / ``SHELL_complete`` spelling of the completion
    instruction (``_FAULTLAB_COMPLETE=bash_source``) as well as typer's
    ``source_SHELL``: typer reads the instruction first, the shell second."""
    shell, _, instruction = os.environ.get(COMPLETE_VAR, "").partition("_")
    if shell in ("bash", "zsh", "fish") and instruction in ("source", "complete"):
        os.environ[COMPLETE_VAR] = f"{instruction}_{shell}"


def _stdout_file() -> tuple[int, int] | None:
    """(device, inode) of what fd 1 is open on, None when it is closed."""
    try:
        st = os.fstat(1)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _closed_pipe() -> None:
    """End as a process whose stdout reader went away: what is left to flush goes to
    /dev/null (as the Python docs recommend for SIGPIPE), exit 128 + SIGPIPE."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(128 + signal.SIGPIPE)


def run(cmd, prog_name: str = "faultlab", args: list[str] | None = None) -> None:
    """Run the click command ``cmd`` (the typer app as a click command) as the program
    ``prog_name`` on ``args`` (default: the command line) and exit: metavars filled in, completion requests answered, usage
    errors one line (exit 2), a closed stdout pipe quiet (exit 141)."""
    _click_completion_order()
    cmd = with_metavars(cmd)
    _completion_help(cmd)
    stdout, devnull = _stdout_file(), os.stat(os.devnull)
    try:
        try:
            if _completion_for_named_shell(sys.argv[1:] if args is None else list(args), prog_name):
                return  # pragma: no cover  (it exits)
            rv = cmd.main(args, prog_name=prog_name, standalone_mode=False)
        except SystemExit:
            # rich (Console.on_broken_pipe) answers EPIPE with exit 1 after moving
            # stdout onto /dev/null: the same end as ours, with SIGPIPE's status
            if stdout != _stdout_file() == (devnull.st_dev, devnull.st_ino):
                sys.exit(128 + signal.SIGPIPE)
            if isinstance(sys.stdout, PacifyFlushWrapper):  # click's mark of the pipe it found closed
                sys.stdout = sys.stdout.wrapped
                _closed_pipe()
            raise
        sys.stdout.flush()  # a reader gone before the last write shows here, not at interpreter exit
    except BrokenPipeError:
        _closed_pipe()
    except typer.TyperException as e:  # click's usage errors (typer vendors click)
        if type(e).__name__ != "NoArgsIsHelpError":  # that one has printed the help already
            print(usage_line(e), file=sys.stderr)
        sys.exit(getattr(e, "exit_code", 2))
    except typer.Abort:
        print("faultlab: aborted", file=sys.stderr)
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else 0)
