"""Every fault parameter of every example scenario and campaign removed in turn, fed
to the commands that read the file (``scenario validate``; ``campaign --dry-run`` for
a campaign; ``run`` for a scenario missing a required parameter): a variant is either
valid (validate says so, exit 0) or refused by each command in one line naming the
fault type and the parameter, exit 2, and no command prints a traceback. A
parameter the type declares required is always refused.

One child process runs every variant through faultlab's entry point
(:func:`faultlab.cliopts.run`), output captured, so the hundreds of commands take
seconds, not a process start each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from faultlab.injectors import FAULT_TYPES
from tests.helpers import REPO

EXAMPLES = sorted([*(REPO / "examples").glob("*.yaml"), *(REPO / "examples").glob("*/*.yaml")])

RUNNER = r"""
import contextlib, io, json, sys
import typer
from faultlab import cliopts
from faultlab.cli import app

res = []
for args in json.load(sys.stdin):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cliopts.run(typer.main.get_command(app), args=args)
            code = 0
        except SystemExit as e:
            code = e.code
        except BaseException as e:  # anything escaping the entry point is a finding
            code, err = -1, io.StringIO(f"Traceback: {type(e).__name__}: {e}")
    res.append({"args": args, "code": code, "out": out.getvalue(), "err": err.getvalue()})
print(json.dumps(res))
"""


def _variants(example: Path):
    """(fault type, parameter, variant) for each fault parameter of ``example``: a
    scenario's ``faults[i].params.P``, a campaign's ``types.T.params.P``."""
    data = yaml.safe_load(example.read_text())
    if isinstance(data.get("types"), dict):
        for t, spec in data["types"].items():
            for p in list((spec or {}).get("params") or {}):
                v = json.loads(json.dumps(data))
                del v["types"][t]["params"][p]
                yield t, p, v, True
    for i, f in enumerate(data.get("faults") or []):
        for p in list(f.get("params") or {}):
            v = json.loads(json.dumps(data))
            del v["faults"][i]["params"][p]
            yield f["type"], p, v, False


def _required(fault_type: str, param: str) -> bool:
    return any(p.name == param and p.required for p in FAULT_TYPES[fault_type].PARAMS)


def test_every_example_missing_each_parameter_is_valid_or_one_line(tmp_path):
    cases, commands = [], []
    for ex in EXAMPLES:
        for n, (ftype, param, variant, is_campaign) in enumerate(_variants(ex)):
            f = tmp_path / f"{ex.stem}-{n}-{ftype}-{param}.yaml"
            f.write_text(yaml.safe_dump(variant, sort_keys=False))
            runs = [["scenario", "validate", str(f)]]
            if is_campaign:
                runs.append(["campaign", str(f), "--dry-run", "--json"])
            elif _required(ftype, param):  # refused before anything runs
                runs.append(["run", str(f), "--out", str(tmp_path / "never")])
            cases.append((ex.name, ftype, param, len(commands), len(runs)))
            commands += runs
    assert len(cases) > 40 and any(_required(t, p) for _, t, p, _, _ in cases)
    cp = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(commands), capture_output=True, text=True,
                        timeout=600, cwd=tmp_path, env={**os.environ, "COLUMNS": "200"})
    assert cp.returncode == 0, cp.stderr[-3000:]
    res = json.loads(cp.stdout)
    refused = 0
    for ex, ftype, param, at, n in cases:
        got = res[at:at + n]
        for r in got:
            text = (r["out"] + r["err"]).strip()
            assert "Traceback" not in text and r["code"] != -1, (ex, ftype, param, r["args"], text[-2000:])
        if got[0]["code"] == 0:
            assert not _required(ftype, param), f"{ex}: {ftype} without its required {param} validates"
            assert all(r["code"] == 0 for r in got), (ex, ftype, param, [r["err"] for r in got])
            continue
        refused += 1
        for r in got:
            line = r["err"].strip()
            assert r["code"] == 2 and len(line.splitlines()) == 1 and line.startswith("faultlab: error: "), (ex, r["args"], line)
            assert ftype in line and param in line, f"{ex}: the refusal of {ftype} without {param} names them: {line}"
    assert refused >= 10, refused
    assert not (tmp_path / "never").exists()
