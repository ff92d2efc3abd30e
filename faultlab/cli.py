"""The ``faultlab`` command line (typer).

Errors from faultlab print as one line ``faultlab: error: FIELD: what (fix)`` on
stderr and exit non-zero: 2 for bad input, 3 for a refusal (foreign or conflicting
state), 1 for runtime failures. Nothing is half-applied: an inject that fails is
reverted before the error is printed.
"""

from __future__ import annotations

import signal

# A Ctrl-C while faultlab is still starting (nothing applied yet) ends it quietly, not
# with a KeyboardInterrupt traceback; _main restores Python's handler for every command
# but inject, which installs its own (faultlab.lifecycle.injectrun.SignalGuard).
signal.signal(signal.SIGINT, signal.SIG_DFL)

import inspect  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from importlib.metadata import PackageNotFoundError, version as package_version  # noqa: E402
from typing import Annotated, Optional  # noqa: E402

import typer  # noqa: E402
from rich.console import Console  # noqa: E402

from faultlab import cliopts, inputfile, safefs, synthlimits  # noqa: E402
from faultlab.errors import BadInput, FaultlabError, printable  # noqa: E402
# Lazy imports: inject's options are generated from the fault types' declarations, so the
# registry is loaded with the CLI; every other command imports what it needs inside its
# function when it runs, so ``faultlab --help`` stays fast.
from faultlab import injectors  # noqa: E402
from faultlab.injectors import FAULT_TYPES  # noqa: E402
from faultlab.injectors.registry import option_help, params_by_option  # noqa: E402
from faultlab.units import parse_duration  # noqa: E402

app = typer.Typer(context_settings=cliopts.CONTEXT_SETTINGS, no_args_is_help=True, rich_markup_mode="markdown", help="faultlab: fail-slow fault injection, labeling and detector scoring for synchronous distributed training.")
# no highlighting on any console: rich's highlighter takes time quadratic in a line's
# length, and lines quote text others wrote (a 40,000-character name took 9.6 s)
console = Console(stderr=True, highlight=False)


class _AsciiJsonConsole(Console):
    """A console whose ``print_json`` writes ASCII only (``\\uXXXX`` for the rest):
    the JSON quotes other users' text (their lease records' fields, folder names), and
    rich would write non-ASCII as it is, so a C1 control (U+009B, a CSI) or a
    bidirectional override of theirs would reach the terminal raw, which ``printable``
    keeps from every plain line."""

    def print_json(self, text=None, **kwargs) -> None:
        super().print_json(text, **{**kwargs, "ensure_ascii": True})


out = _AsciiJsonConsole(soft_wrap=True, highlight=False, width=None if sys.stdout.isatty() else 160)
#: progress and event lines when stdout carries --json
err_out = Console(stderr=True, soft_wrap=True, highlight=False, width=None if sys.stderr.isatty() else 160)


def _version(value: bool) -> None:
    if value:
        try:
            installed = package_version("faultlab")
        except PackageNotFoundError:  # run from a source tree that was never installed
            installed = "unknown"
        print(f"faultlab {installed}")
        raise typer.Exit(0)


@app.callback()
def _main(ctx: typer.Context, version: bool = typer.Option(False, "--version", is_eager=True, callback=_version, help="print faultlab's version and exit")) -> None:
    """faultlab: fail-slow fault injection, labeling and detector scoring for
    synchronous distributed training."""
    if ctx.invoked_subcommand != "inject":
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _fail(err: Exception) -> None:
    code = getattr(err, "exit_code", 1)
    print(f"faultlab: error: {err}", file=sys.stderr)
    raise typer.Exit(code)


def _param_ident(option: str) -> str:
    """The Python name of a fault option in ``inject``'s signature (``--cpu-fraction``
    -> ``opt_cpu_fraction``): apart from inject's own parameters."""
    return "opt_" + option[2:].replace("-", "_")


def _with_fault_options(fn):
    """``fn``'s signature with its ``**fault_opts`` replaced by one ``typer.Option`` per
    parameter option of the registered fault types (``Injector.PARAMS``), placed after
    ``--duration``: the metavar and help are the types' own, an option shared by
    several types says so (``registry.option_help``). Typer reads the signature."""
    sig = inspect.signature(fn)
    own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    fault = [inspect.Parameter(_param_ident(option), inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                               default=typer.Option(None, option, metavar=entries[0][1].metavar, help=option_help(entries)))
             for option, entries in params_by_option().items()]
    at = next(i for i, p in enumerate(own) if p.name == "duration") + 1
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own[:at]] + fault + \
             [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own[at:]]
    fn.__signature__ = sig.replace(parameters=params)
    fn.__annotations__ = {**{k: v for k, v in fn.__annotations__.items() if k != "fault_opts"},
                          **{p.name: Optional[str] for p in fault}}
    return fn


@app.command()
@_with_fault_options
def inject(
    type: str = typer.Option(..., "--type", metavar="TYPE", help=" | ".join(FAULT_TYPES)),
    node: str = typer.Option("local", "--node", metavar="BACKEND:NAME", help="local (this host), netns:NAME (a network namespace) or docker:CONTAINER; ssh nodes: their inventory names with --inventory; a bare NAME is refused"),
    target: Optional[str] = typer.Option(None, "--target", metavar="TARGET", help="; ".join(f"{t}: {c.target_help}" for t, c in FAULT_TYPES.items() if c.target_help)),
    duration: str = typer.Option("30s", "--duration", metavar="DURATION", help="how long the fault lasts, with a unit: 30s, 500ms, 2m"),
    force: bool = typer.Option(False, "--force", help="inject even over state faultlab did not create (it is recorded and restored after)"),
    grace: str = typer.Option("10s", "--grace", metavar="DURATION", help="the on-node watchdog reverts at duration + grace if faultlab is gone"),
    detach: bool = typer.Option(False, "--detach", help="return once the fault is verified; the lease's watchdog reverts it at the deadline"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the exact commands (inject, verify, revert) and apply nothing"),
    allow_unverified: bool = typer.Option(False, "--allow-unverified", help="keep a fault whose measured check fails (default: revert it, exit 3)"),
    as_json: bool = typer.Option(False, "--json", help="the plan (with --dry-run) or the fault injected as one JSON object on stdout: fault id, type, node, target, status, lease deadline"),
    inventory: Optional[Path] = typer.Option(None, "--inventory", metavar="FILE", help="inventory YAML of ssh nodes; --node names them (a,b,c) or --select picks them by label"),
    nodes_sel: Optional[str] = cliopts.select_option(),
    nodes_sel_old: Optional[str] = cliopts.select_old_option(),
    accept_new_host_key: bool = typer.Option(False, "--accept-new-host-key", help="ssh: pin the host key of a node not yet in known_hosts (a changed key is always refused)"),
    **fault_opts: Optional[str],
):
    """Inject one fail-slow fault on a node; stays in the foreground and reverts at the
    end, on Ctrl-C or SIGTERM (and the on-node lease reverts it if faultlab is killed)."""
    from faultlab.nodes import resolve_node

    try:
        injectors.check_type(type)
        duration_s = parse_duration(duration, "--duration")
        grace_s = parse_duration(grace, "--grace", allow_zero=True)
        opts = {option: fault_opts.get(_param_ident(option)) for option in params_by_option()}
        nodes_sel = nodes_sel or nodes_sel_old
        if inventory is not None or nodes_sel or "," in node:  # fan-out over several nodes: faultlab.nodes.cli
            from faultlab.lifecycle.fanout import inject_fanout

            return inject_fanout(type=type, node=node, nodes_sel=nodes_sel, inventory=inventory, accept_new=accept_new_host_key, target=target,
                                 duration_s=duration_s, grace_s=grace_s, opts=opts, force=force, detach=detach, dry_run=dry_run, as_json=as_json, out=out)
        n = resolve_node(node)
        inj = injectors.build(type, n, target=target, duration_s=duration_s, opts=opts, force=force)
        facts = inj.probe()
        plan = inj.plan(facts)
    except FaultlabError as e:
        _fail(e)
    if dry_run:
        p = plan.render(n)
        p["duration_s"] = duration_s
        if as_json:
            out.print_json(json.dumps(p))
        else:
            out.print(f"# {p['type']} on {n.describe()} target {p['target']} for {duration_s:g}s (fault {p['fault_id']})")
            out.print("# inject", markup=False)
            for line in p["inject"]:
                out.print(line, markup=False, soft_wrap=True)
            out.print("# verify", markup=False)
            for line in p["verify"]:
                out.print("#   " + line, markup=False)
            out.print("# revert", markup=False)
            for line in p["revert"]:
                out.print(line, markup=False, soft_wrap=True)
        return
    from faultlab.lifecycle.injectrun import run_inject

    raise typer.Exit(run_inject(inj, n, plan, duration_s=duration_s, grace_s=grace_s, detach=detach, as_json=as_json,
                                allow_unverified=allow_unverified, out=out, console=console))


#: the options of status, revert and recover that send them to the ssh nodes of an inventory
NodesInventory = Annotated[Optional[Path], typer.Option("--inventory", metavar="FILE", help="ssh nodes of this inventory instead of this host (with --node or --all-nodes)")]
NodesNames = Annotated[Optional[str], typer.Option("--node", metavar="NAME[,NAME]", help="with --inventory: these nodes")]
AllNodes = Annotated[bool, typer.Option("--all-nodes", help="with --inventory: every node of it")]


def _on_inventory_nodes(command: str, inventory: Optional[Path], rnode: Optional[str], all_nodes: bool, fault_id: Optional[str],
                        as_json: bool) -> None:
    """With --inventory, --node or --all-nodes: run ``command`` (status | revert |
    recover) on the inventory's ssh nodes (:func:`faultlab.lifecycle.remotecmds.run`) and
    exit with its code; otherwise return (the command acts on this host)."""
    if inventory is not None or rnode or all_nodes:
        from faultlab.lifecycle import remotecmds

        raise typer.Exit(remotecmds.run(command, inventory, rnode, all_nodes, fault_id, out, as_json))


@app.command()
def status(
    as_json: bool = typer.Option(False, "--json", help="the faults in force as a JSON list on stdout (problems found go to stderr)"),
    inventory: NodesInventory = None,
    rnode: NodesNames = None,
    all_nodes: AllNodes = False,
):
    """List every faultlab fault in force on this host, whoever started it (lease
    records, watchdogs, and faultlab-made objects no lease accounts for); with
    --inventory, those on its ssh nodes (records and watchdogs there)."""
    from faultlab.lifecycle.commands import print_status, status_rows

    _on_inventory_nodes("status", inventory, rnode, all_nodes, None, as_json)

    rows, problems = status_rows()
    from faultlab.nodes.testbed import untrusted_states

    problems = problems + untrusted_states()
    if as_json:
        out.print_json(json.dumps(rows))
        for p in problems:
            print(f"faultlab: warning: {p} (never acted on)", file=sys.stderr)
        return
    print_status(rows, problems, out)


def _check_fault_id(fault_id: str) -> None:
    """Exit 2 unless ``fault_id`` has the form of a fault id (``LEASE_ID``: letters, a
    dash, 4-12 hex digits, e.g. ``nic-3f9a1c``); a path or a typo is never looked up."""
    from faultlab.lifecycle.lease import LEASE_ID

    if not LEASE_ID.fullmatch(fault_id):
        _fail(BadInput(f"{fault_id!r} is not a fault id (TYPE-HEX: lower-case letters, a dash, 4-12 hex digits, e.g. nic-3f9a1c)",
                       field="FAULT_ID", fix="see faultlab status"))


@app.command()
def revert(
    fault_id: Optional[str] = typer.Argument(None, help="the fault to revert (see faultlab status)"),
    all_: bool = typer.Option(False, "--all", help="revert every fault in force on this host, also those a running faultlab holds; never the testbed of a running run (give its testbed-ID)"),
    as_json: bool = typer.Option(False, "--json", help="the faults reverted (and those refused, owned by another user) as a JSON list on stdout"),
    inventory: NodesInventory = None,
    rnode: NodesNames = None,
    all_nodes: AllNodes = False,
):
    """Revert a fault now (or all). Reverting a fault that is already gone is a no-op
    success; a fault of another user is not reverted (exit 3). --all ends every fault,
    also one a running faultlab inject/run holds (it finds it ended), but leaves the
    testbed of a running run alone (a FAULT_ID testbed-ID tears it down). With
    --inventory, on its ssh nodes (the watchdog there is told to revert now)."""
    from faultlab.lifecycle.commands import report_held, report_reverts, revert_faults

    if not fault_id and not all_:
        _fail(BadInput("give a FAULT_ID or --all", field="FAULT_ID", fix="see faultlab status"))
    if fault_id and all_:
        _fail(BadInput("give a FAULT_ID or --all, not both", field="FAULT_ID"))
    if fault_id:
        _check_fault_id(fault_id)
    _on_inventory_nodes("revert", inventory, rnode, all_nodes, fault_id, as_json)
    try:
        done, refused, held = revert_faults(None if all_ else fault_id, mode="all")
    except FaultlabError as e:
        _fail(e)
    report_held(held)
    raise typer.Exit(report_reverts(done, refused, fault_id, out, as_json))


@app.command()
def recover(
    as_json: bool = typer.Option(False, "--json", help="one JSON object on stdout: faults reverted, refused and held, testbeds removed, state files skipped"),
    inventory: NodesInventory = None,
    rnode: NodesNames = None,
    all_nodes: AllNodes = False,
):
    """Revert every fault left behind on this host: those whose controller is gone
    (its PID and start time), with or without their lease record, and faultlab objects
    no lease accounts for; remove testbeds whose controller is gone.

    A fault or testbed a running faultlab still holds is left alone (named; faultlab
    revert ID ends it). Files failing a trust or schema check are reported, never acted
    on (exit 1). With --inventory, every fault left on its ssh nodes (records, and
    watchdogs whose record was lost)."""
    from faultlab.lifecycle.commands import report_held, report_reverts, revert_faults
    from faultlab.nodes.backends import recover_testbeds
    from faultlab.nodes.testbed import untrusted_states

    _on_inventory_nodes("recover", inventory, rnode, all_nodes, None, as_json)

    try:
        done, refused, held = revert_faults(None, mode="recover")
        tbs = recover_testbeds(only_dead=True)
    except FaultlabError as e:
        _fail(e)
    skipped = untrusted_states()
    if as_json:
        out.print_json(json.dumps({"faults": done, "refused": refused, "held": held, "testbeds": tbs, "skipped": skipped}))
        code = report_reverts(done, refused, None, Console(file=open(os.devnull, "w")), False, quiet_empty=True)
    else:
        out.print(f"reverted {len([d for d in done if not d['left']])} fault(s): {', '.join(d['fault_id'] for d in done if not d['left']) or '-'}; "
                  f"removed {len(tbs)} testbed(s): {', '.join(tbs) or '-'}", markup=False)
        code = report_reverts([d for d in done if d["left"]], refused, None, out, False, quiet_empty=True)
        report_held(held)
        for line in skipped:
            print(f"faultlab: {line}", file=sys.stderr)
    raise typer.Exit(code or (1 if skipped else 0))


@app.command()
def doctor(
    node: str = typer.Option("local", "--node", metavar="BACKEND:NAME", help="local (this host), netns:NAME (a network namespace) or docker:CONTAINER; with --inventory, ssh node names (a,b); a bare NAME is refused"),
    inventory: Optional[Path] = typer.Option(None, "--inventory", metavar="FILE", help="inventory YAML: --node names its ssh nodes (default: every node)"),
    as_json: bool = typer.Option(False, "--json", help="one report (a list of them with --inventory) as JSON"),
):
    """Which fault types a node supports, and why not (any backend)."""
    from faultlab.doctor import diagnose
    from faultlab.nodes import resolve_node

    try:
        if inventory is not None:
            from faultlab.nodes import inventory as inv_mod

            inv = inv_mod.load(inventory)
            targets = inv_mod.ssh_nodes(inv, inv.select(node if node != "local" else None))
        else:
            targets = [resolve_node(node)]
        reports = [diagnose(t) for t in targets]
    except FaultlabError as e:
        _fail(e)
    if as_json:
        out.print_json(json.dumps(reports if inventory is not None else reports[0], default=str))
        return
    for report in reports:  # a node's own words (versions, paths, errors) reach the terminal printable only
        f = report["facts"]
        out.print(printable(f"node {report['node']}: python {f['python']}, cgroup cpu {f['cgroup_cpu']}, io {f['cgroup_io']}"
                            + (f"; {f['access']}" if f.get("access") else "")), markup=False, highlight=False)
        for name, r in report["types"].items():
            out.print(printable(f"  {'yes' if r['ok'] else 'no ':3}  {name:30} {r['why']}"), markup=False, highlight=False)


@app.command()
def demo(
    out_dir: Path = typer.Option(None, "--out", metavar="DIR", help="run directory (default ./faultlab-runs/RUN_ID, RUN_ID = demo-TIMESTAMP-XXXX)"),
    nodes: int = typer.Option(4, "--nodes", metavar="N", help="number of nodes (one rank each)"),
    duration: str = typer.Option("60s", "--duration", metavar="DURATION", help="training time"),
    backend: str = typer.Option("netns", "--backend", metavar="BACKEND", help="netns | docker | ssh (containers reached over SSH)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object on stdout: exit code, run directory and report; progress and tables go to stderr"),
    quiet: cliopts.Quiet = False,
):
    """The whole loop on this machine: a netns (or docker, ssh) testbed, real DDP-style training, a
    nic-slow and a cpu-contention fault, labels, a scored baseline detector."""
    from faultlab.nodes import extras

    try:
        if backend not in ("netns", "docker", "ssh"):
            raise BadInput(f"unknown backend {backend!r}", field="--backend", fix="give netns, docker or ssh")
        extras.require(backend)  # before the demo's modules load: one line, at once
        from faultlab.demo import run_demo

        res = run_demo(out_dir=out_dir, n_nodes=nodes, duration_s=parse_duration(duration, "--duration"), backend=backend,
                       console=cliopts.progress_console(quiet, err_out if as_json else out), result=err_out if as_json else out)
    except FaultlabError as e:
        _fail(e)
    if as_json:
        print(json.dumps(res, indent=1))
    raise typer.Exit(res["code"])


@app.command()
def synth(
    out_dir: Path = typer.Argument(..., metavar="DIR", help="the run directory to write (created)"),
    ranks: int = typer.Option(1024, "--ranks", metavar="R", help=synthlimits.RANKS_HELP),
    steps: int = typer.Option(10_000, "--steps", metavar="S", help=synthlimits.STEPS_HELP),
    seed: int = typer.Option(0, "--seed", metavar="N", help=synthlimits.SEED_HELP),
    as_json: bool = typer.Option(False, "--json", help="one JSON object on stdout: the run directory, rank-steps, blocks and the planted faults"),
):
    """Write a synthetic run of R ranks x S steps with planted faults of every kind the
    labeler labels (faultlab.synthrun), block by block in bounded memory; label it with
    faultlab label DIR."""
    from faultlab.synthrun import write_run

    if out_dir.exists():
        _fail(BadInput(f"{out_dir} exists", field="DIR", fix="give a new folder"))
    try:
        info = write_run(out_dir, ranks, steps, seed=seed)
    except FaultlabError as e:
        _fail(e)
    if as_json:
        print(json.dumps({"run_dir": str(out_dir), **info}, indent=1, default=str))
        return
    out.print(f"{info['rows']:,} rank-steps in {info['blocks']} block(s) of {info['block_steps']} steps, "
              f"{len(info['faults'])} planted faults -> {out_dir}", markup=False)


scenario_app = typer.Typer(no_args_is_help=True, help="Scenario files: validate them, print their JSON Schema.")
app.add_typer(scenario_app, name="scenario")

from faultlab.nodes.cli import testbed_app  # noqa: E402  (testbeds of every backend)

app.add_typer(testbed_app, name="testbed")


@scenario_app.command("validate")
def scenario_validate(file: Path = typer.Argument(..., help="a scenario or campaign YAML file"),
                      as_json: bool = typer.Option(False, "--json", help="one JSON object on stdout: the file, its kind (scenario or campaign), name and what it holds")):
    """Validate a scenario or campaign file; errors name the file, line and field."""
    from faultlab.scenario import Campaign, load

    try:
        sc = load(file)
    except FaultlabError as e:
        _fail(e)
    if isinstance(sc, Campaign):
        info = {"file": str(file), "kind": "campaign", "name": sc.name, "runs": sc.runs, "fault_types": list(sc.types)}
        line = f"{file}: valid campaign {sc.name!r}: {sc.runs} runs, fault types {', '.join(sc.types)}"
    else:
        info = {"file": str(file), "kind": "scenario", "name": sc.name, "nodes": sc.testbed.nodes, "backend": sc.testbed.backend,
                "workload": sc.workload.kind, "faults": len(sc.faults)}
        line = f"{file}: valid scenario {sc.name!r}: {sc.testbed.nodes} {sc.testbed.backend} nodes, {sc.workload.kind}, {len(sc.faults)} fault(s)"
    if as_json:
        print(json.dumps(info, indent=1))
    else:
        out.print(line, markup=False)


@scenario_app.command("schema")
def scenario_schema(campaign: bool = typer.Option(False, "--campaign", help="the campaign file's schema")):
    """Print the JSON Schema of scenario (or campaign) files."""
    from faultlab.scenario import schema

    out.print_json(json.dumps(schema("campaign" if campaign else "scenario")))


def _run_one(sc, out_dir: Path, label_it: bool, run_id: str | None = None, prefix: str = "", con: Console | None = None, nodes=None,
             allow_unverified: bool = False) -> dict:
    """One run, labeled and reported; lines go to ``con`` (stdout, or stderr with --json).
    A fault verify did not confirm is reverted at once (``unverified``) unless
    ``allow_unverified``."""
    from faultlab.progress import Progress
    from faultlab.runner import run as run_scenario

    con = con or out
    with Progress(con, prefix=prefix, live=None if con is out else False) as prog:
        res = run_scenario(sc, out_dir, console=con, progress=prog, run_id=run_id, nodes=nodes, allow_unverified=allow_unverified)
    # a fault not injected, or not in force (verify), fails the run's schedule: exit 3
    info = {"run_dir": str(out_dir), "code": res.code or (3 if res.failed_faults else 0), "injected": len(res.injections),
            "failed_faults": res.failed_faults}
    if res.signal is not None:  # it stopped the run (or came during its teardown): the caller stops too
        info["signal"] = res.signal.name
    if label_it and res.code == 0:
        from faultlab.labeler import label_run

        labels = label_run(out_dir)
        info["labels"] = len(labels)
        con.print(f"{out_dir}: {sum(r.get('status') != 'unverified' for r in res.injections)} fault(s) in force, {len(labels)} label(s)", markup=False)
    for f in res.failed_faults:  # an error is shown with --quiet too
        (err_out if con.quiet else con).print(f"faultlab: error: {f}", markup=False)
    from faultlab.report import write_report

    try:
        info["report"] = str(write_report(out_dir))
        con.print(f"report: {info['report']}", markup=False)
    except FaultlabError as e:  # e.g. a run that trained no step: the run stands, without a page
        con.print(f"no report: {e}", markup=False)
    return info


@app.command("run")
def run_cmd(
    ctx: typer.Context,
    scenario: Path = typer.Argument(..., help="a scenario YAML file (see examples/)"),
    out_dir: Optional[Path] = typer.Option(None, "--out", metavar="DIR", help="run directory (default ./faultlab-runs/RUN_ID, RUN_ID = NAME-TIMESTAMP-XXXX); with --repeat, a folder of runs"),
    repeat: int = typer.Option(1, "--repeat", min=1, metavar="N", help="run the scenario N times (seeds seed, seed+1, ...)"),
    label_it: bool = typer.Option(False, "--label", help="label each run when it ends (the default)"),
    no_label: bool = typer.Option(False, "--no-label", help="leave the runs unlabeled (faultlab label DIR labels one later)"),
    backend: Optional[str] = typer.Option(None, "--backend", metavar="BACKEND", help="override the scenario's testbed backend: netns | docker | ssh | local"),
    inventory: Optional[Path] = typer.Option(None, "--inventory", metavar="FILE", help="run on these ssh nodes (one rank each, in file order) instead of a testbed; faults' node: names inventory nodes"),
    nodes_sel: Optional[str] = cliopts.select_option(),
    nodes_sel_old: Optional[str] = cliopts.select_old_option(),
    as_json: bool = typer.Option(False, "--json", help="print each run's summary as JSON on stdout; progress goes to stderr"),
    allow_unverified: bool = typer.Option(False, "--allow-unverified", help="keep a fault whose measured check fails (default: revert it at once, record it as unverified)"),
    quiet: cliopts.Quiet = False,
):
    """Run one scenario: testbed, workload, fault schedule; a run directory per run
    (with --quiet, only each run directory is printed)."""
    from faultlab.scenario import Scenario, load

    cliopts.refuse_together(ctx, {"--label": label_it, "--no-label": no_label})
    label_it = not no_label

    try:
        inv_nodes = _inventory_nodes(inventory, nodes_sel or nodes_sel_old, backend)
        sc = load(scenario, "scenario", nodes=[x.name for x in inv_nodes] if inv_nodes else None)
        sc = _with_backend(sc, backend, inventory=inv_nodes is not None)
        from faultlab.rundir import new_run_id

        run_id = new_run_id(sc.name) if repeat == 1 else None  # the default folder is named by the run id
        base = Path(out_dir or Path("faultlab-runs") / (run_id or f"{sc.name}-{time.strftime('%Y%m%d-%H%M%S')}"))
        codes, infos = [], []
        con = cliopts.progress_console(quiet, err_out if as_json else out)
        for i in range(repeat):
            s_i = sc if repeat == 1 else Scenario.model_validate({**sc.model_dump(mode="json"), "seed": sc.seed + i,
                                                                  "workload": {**sc.model_dump(mode="json")["workload"], "duration": f"{sc.workload.duration}s" if sc.workload.duration else None},
                                                                  "faults": _faults_with_units(sc)},
                                                                 context={"nodes": [x.name for x in inv_nodes]} if inv_nodes else None)
            infos.append(_run_one(s_i, base if repeat == 1 else base / f"run-{i:03d}", label_it, run_id=run_id,
                                  prefix="" if repeat == 1 else f"[run {i + 1}/{repeat}]", con=con, nodes=inv_nodes, allow_unverified=allow_unverified))
            codes.append(infos[-1]["code"])
    except FaultlabError as e:
        _fail(e)
    if as_json:
        print(json.dumps(infos[0] if repeat == 1 else infos, indent=1))
    elif quiet:
        for info in infos:
            out.print(info["run_dir"], markup=False)
    raise typer.Exit(max(codes))


def _inventory_nodes(inventory: Path | None, selector: str | None, backend: str | None) -> list | None:
    """The inventory's ssh nodes for ``run``/``campaign --inventory`` (None without one)."""
    if inventory is None:
        if selector:
            raise BadInput("a label selection needs an inventory", field="--select", fix="add --inventory FILE")
        return None
    if backend not in (None, "ssh"):
        raise BadInput(f"--inventory names ssh nodes, not {backend}", field="--backend", fix="drop --backend, or give --backend ssh")
    from faultlab.nodes.inventory import run_nodes

    return run_nodes(inventory, selector)


def _with_backend(sc, backend: str | None, inventory: bool = False):
    """``sc`` with its testbed backend replaced by ``--backend`` (checked), whose Python
    packages are installed (BadInput naming the extra to install, before anything
    starts); on ``inventory`` nodes no testbed is made (their ssh package is checked
    with the inventory)."""
    from faultlab.nodes import extras

    if backend is not None:
        if backend not in ("netns", "docker", "ssh", "local"):
            raise BadInput(f"unknown backend {backend!r}", field="--backend", fix="give netns, docker, ssh or local")
        sc = sc.model_copy(update={"testbed": sc.testbed.model_copy(update={"backend": backend})})
    if not inventory:
        extras.require(sc.testbed.backend)
    return sc


def _faults_with_units(sc) -> list[dict]:
    out_ = []
    for f in sc.model_dump(mode="json")["faults"]:
        for k in ("at", "duration"):
            if f.get(k) is not None:
                f[k] = f"{f[k]}s"
        if f.get("repeat"):
            f["repeat"]["every"] = f"{f['repeat']['every']}s"
        out_.append({k: v for k, v in f.items() if v is not None})
    return out_


def schedule_table(c, schedules: list[dict]):
    """A rich Table of a campaign's drawn schedules: one row per fault (run, seed,
    type, node or rank, start, duration, parameters)."""
    from rich.table import Table

    t = Table(title=f"campaign {c.name}: {len(schedules)} runs, seed {c.seed} (--json for the raw schedules)")
    for col in ("run", "seed", "fault", "type", "node", "start", "duration", "params"):
        t.add_column(col)
    for s in schedules:
        faults = s["faults"] or [{}]
        for i, f in enumerate(faults):
            where = f.get("node") or (f"rank {f['rank']}" if f.get("rank") is not None else "")
            start = f.get("at") or (f"step {f['at_step']}" if f.get("at_step") is not None else "")
            params = ", ".join(f"{k}={v}" for k, v in (f.get("params") or {}).items())
            t.add_row(s["name"] if i == 0 else "", str(s["seed"]) if i == 0 else "", str(i) if f else "-",
                      f.get("type", "no faults"), where, str(start), str(f.get("duration", "")), params)
    return t


def _chosen_runs(only: str, n: int) -> range:
    """``--runs A:B`` as the range of drawn runs (0-based, B capped at ``n``). Raises
    BadInput (field ``--runs``)."""
    a, sep, b = only.partition(":")
    if not sep or not a.isdigit() or not b.isdigit() or int(a) >= int(b):
        raise BadInput(f"{only!r} is not A:B with A < B", field="--runs", fix="e.g. --runs 0:10")
    return range(int(a), min(int(b), n))


def _earlier_runs(prev: Path) -> list[dict]:
    """The runs of an earlier chunk's ``campaign.json`` (a JSON object whose ``runs`` is
    a list of objects, each with a ``schedule`` object); none when there is no such
    file. Read with no link followed below the folder and only as a regular file of at
    most ``inputfile.JSON_BYTES`` (``safefs.read_below``): a link there to another
    manifest would copy its runs into this one. Raises BadInput (field
    ``campaign.json``) for anything else: unreadable, not JSON, another shape."""
    fix = f"restore it, give another --out, or remove {prev} to start the manifest anew"
    try:
        data = safefs.read_below(prev.parent, prev.name, inputfile.JSON_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except safefs.UntrustedPath as e:
        raise BadInput(e.reason, field="campaign.json", fix=fix) from None
    except OSError as e:
        raise BadInput(f"cannot read {prev}: {e.strerror or e}", field="campaign.json", fix=fix) from None
    try:
        doc = safefs.parse_json(data, str(prev))
    except ValueError as e:  # bad or too deeply nested JSON
        raise BadInput(f"{prev} could not be read ({type(e).__name__}: {e})", field="campaign.json", fix=fix) from None
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list) or not all(isinstance(r, dict) and isinstance(r.get("schedule", {}), dict) for r in runs):
        raise BadInput(f"{prev} is not a campaign manifest (an object whose runs is a list of run objects)", field="campaign.json", fix=fix)
    return [{**r, "schedule": r.get("schedule", {})} for r in runs]


class _StopAfterRun:
    """While a campaign runs: SIGINT, SIGTERM or SIGHUP between runs (or while one is
    labeled and reported) is noted in ``signal``, and the campaign stops after that run;
    during a run, the runner stops the run (faults reverted, nodes torn down) and says
    which signal (``info["signal"]``)."""

    def __enter__(self):
        from faultlab.runner import STOP_SIGNALS

        self.signal = None
        self.old = {s: signal.signal(s, self._note) for s in STOP_SIGNALS}
        return self

    def _note(self, signum, frame) -> None:
        if self.signal is None:
            self.signal = signal.Signals(signum)
            print(f"faultlab: {self.signal.name}: stopping after this run", file=sys.stderr)

    def __exit__(self, *exc) -> None:
        for s, h in self.old.items():
            signal.signal(s, h)


def _resume_range(scs: list, not_run: list[str], chosen: range) -> str:
    """``A:B``, the ``--runs`` of a stopped campaign's runs not run (they follow the
    last one run, up to the end of ``chosen``)."""
    first = next(j for j in chosen if scs[j].name in set(not_run))
    return f"{first}:{chosen[-1] + 1}"


def _write_manifest(base: Path, manifest: dict) -> None:
    """``base/campaign.json``: a fresh file renamed over the name (a link planted there
    is replaced, never written through); an unwritable folder is one line, exit 2."""
    try:
        safefs.write_file_nofollow(base / "campaign.json", json.dumps(manifest, indent=1), 0o644)
    except FaultlabError as e:
        _fail(e)
    except OSError as e:
        _fail(BadInput(f"cannot write {base / 'campaign.json'}: {e.strerror or e}", field="--out", fix="give a writable folder"))


@app.command()
def campaign(
    ctx: typer.Context,
    file: Path = typer.Argument(..., help="a campaign YAML file (see examples/)"),
    out_dir: Optional[Path] = typer.Option(None, "--out", metavar="DIR", help="folder of runs (default ./faultlab-runs/NAME-TIMESTAMP)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the drawn schedules as a table and run nothing"),
    label_it: bool = typer.Option(False, "--label", help="label each run when it ends (the default)"),
    no_label: bool = typer.Option(False, "--no-label", help="leave the runs unlabeled (faultlab label DIR labels one later)"),
    as_json: bool = typer.Option(False, "--json", help="the schedules (with --dry-run) or the campaign's manifest as JSON on stdout; progress goes to stderr"),
    only: Optional[str] = typer.Option(None, "--runs", metavar="A:B", help="run only the drawn runs A..B-1 (0-based; chunks of a long campaign into one --out)"),
    backend: Optional[str] = typer.Option(None, "--backend", metavar="BACKEND", help="override the base scenario's testbed backend: netns | docker | ssh | local"),
    inventory: Optional[Path] = typer.Option(None, "--inventory", metavar="FILE", help="run on these ssh nodes (one rank each) instead of a testbed; faults are drawn on their names"),
    nodes_sel: Optional[str] = cliopts.select_option(),
    nodes_sel_old: Optional[str] = cliopts.select_old_option(),
    allow_unverified: bool = typer.Option(False, "--allow-unverified", help="keep faults whose measured check fails (default: revert each at once, record it as unverified)"),
    quiet: cliopts.Quiet = False,
):
    """Run a randomized campaign unattended: seeded, so the same seed gives the same
    schedules (with --quiet, only the closing line is printed). A failed run does not
    stop it; SIGINT (Ctrl-C) or SIGTERM stops it after cleaning up the run in progress,
    campaign.json saying which runs were done and which not, exit 130 or 143."""
    from faultlab.scenario import load

    cliopts.refuse_together(ctx, {"--label": label_it, "--no-label": no_label})
    label_it = not no_label
    inv_nodes = None
    try:
        inv_nodes = _inventory_nodes(inventory, nodes_sel or nodes_sel_old, backend)
        names = [x.name for x in inv_nodes] if inv_nodes else None
        c = load(file, "campaign", nodes=names)
        scs = [_with_backend(s, backend, inventory=inv_nodes is not None) for s in c.scenarios(names)]
    except FaultlabError as e:
        _fail(e)
    schedules = [{"name": s.name, "seed": s.seed, "faults": _faults_with_units(s)} for s in scs]
    if dry_run:
        if as_json:
            out.print_json(json.dumps(schedules))
        else:
            out.print(schedule_table(c, schedules))
        return
    base = Path(out_dir or Path("faultlab-runs") / f"{c.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    manifest = {"campaign": c.name, "seed": c.seed, "runs": []}
    con = cliopts.progress_console(quiet, err_out if as_json else out)
    chosen = range(len(scs))
    try:  # every input checked before the folder is made: nothing half-applied
        if only is not None:
            chosen = _chosen_runs(only, len(scs))
            earlier = _earlier_runs(base / "campaign.json")  # a later chunk adds to the manifest of the earlier ones
            manifest["runs"] = [r for r in earlier if r["schedule"].get("name") not in {scs[i].name for i in chosen}]
        # made from / with no link followed (safefs): a link planted at ./faultlab-runs (or
        # any part of --out) would have root make folders wherever it points first
        safefs.open_dir_nofollow(base, create=True).close()
    except safefs.NotAFolder as e:
        _fail(BadInput(f"cannot make {base}: {e.path} is not a folder", field="--out", fix="give a writable folder"))
    except FaultlabError as e:
        _fail(e)
    except OSError as e:
        _fail(BadInput(f"cannot make {e.filename or base}: {e.strerror or e}", field="--out", fix="give a writable folder"))
    with _StopAfterRun() as stop:
        for i, s in enumerate(scs):
            if i not in chosen or stop.signal:
                continue
            con.print(f"[bold]run {i + 1}/{len(scs)}[/] {s.name}")
            try:
                info = _run_one(s, base / s.name, label_it, prefix=f"[run {i + 1}/{len(scs)}]", con=con, nodes=inv_nodes, allow_unverified=allow_unverified)
            except Exception as e:  # unattended: one failed run must not stop the campaign
                info = {"run_dir": str(base / s.name), "code": 1, "error": f"{type(e).__name__}: {e}"}
                what = str(e) if isinstance(e, FaultlabError) else f"{type(e).__name__}: {e}"
                (err_out if con.quiet else con).print(f"{s.name} failed: {what}", markup=False)  # shown with --quiet too
            stop.signal = stop.signal or (signal.Signals[info["signal"]] if "signal" in info else None)
            manifest["runs"].append({**info, "schedule": schedules[i]})
            if stop.signal:
                done = {r["schedule"].get("name") for r in manifest["runs"]}
                manifest["stopped"] = {"signal": stop.signal.name, "not_run": [scs[j].name for j in chosen if scs[j].name not in done]}
            _write_manifest(base, manifest)
    if stop.signal:  # the run in progress was cleaned up; the rest is not run
        left = manifest["stopped"]["not_run"]
        (err_out if as_json else out).print(
            f"campaign {c.name}: stopped by {stop.signal.name}; {sum(not r['code'] for r in manifest['runs'])} run(s) complete, "
            f"{len(left)} not run -> {base / 'campaign.json'}" + (f"; the rest: faultlab campaign {file} --out {base} --runs {_resume_range(scs, left, chosen)}" if left else ""),
            markup=False)
        if as_json:
            print(json.dumps(manifest, indent=1))
        raise typer.Exit(128 + stop.signal)
    # the folder's manifest may also list another campaign file's runs (two files built
    # into one folder): the count and the exit code are this campaign's
    ours = [r for r in manifest["runs"] if r["schedule"].get("name") in {s.name for s in scs}]
    bad = [r for r in ours if r["code"]]
    try:  # the campaign's page: a thumbnail per run, the scores pooled with bootstrap CIs
        from faultlab.report import write_report

        manifest["report"] = str(write_report(base))
    except FaultlabError as e:
        con.print(f"no campaign report: {e}", markup=False)
    (err_out if as_json else out).print(f"campaign {c.name}: {len(ours) - len(bad)}/{len(scs)} runs complete -> {base}"
              + (f"; report: {manifest['report']}" if "report" in manifest else ""), markup=False)
    if as_json:
        print(json.dumps(manifest, indent=1))
    raise typer.Exit(1 if bad else 0)


from faultlab.labelcli import register as _register_label  # noqa: E402  (apart from the labeler package: no pandas)

_register_label(app)
from faultlab.scoring.cli import register as _register_score  # noqa: E402

_register_score(app)
from faultlab.scoring.leaderboard.cli import register as _register_leaderboard  # noqa: E402

_register_leaderboard(app)
from faultlab.datasets.cli import register as _register_dataset  # noqa: E402

_register_dataset(app)

from faultlab.report.cli import register as _register_report  # noqa: E402

_register_report(app)


def main() -> None:  # pragma: no cover
    """The ``faultlab`` entry point: the typer app as a click command, run with the
    conventions every command shares (:func:`faultlab.cliopts.run`)."""
    cliopts.run(typer.main.get_command(app))


if __name__ == "__main__":  # pragma: no cover
    main()
