"""The full kill test: kill a runtime at random instants of real setups, restart it, count leaks.

The figures of docs/reliability.md ("Killing the runtime"). As root, from the
repository::

    python tests/reliability/kill_report.py --json before.json --libcni ../main --label main
    python tests/reliability/kill_report.py --json after.json --label "this branch"
    python tests/reliability/kill_report.py --json go.json --impl go     # Go libcni 1.1.2
    python tests/reliability/kill_report.py --render before.json after.json go.json
    python tests/reliability/kill_report.py --trials 5 --ops add --no-instants  # a quick look
    python tests/reliability/kill_report.py --modes restart --no-instants --json r.json  # issue 28

For the runtime (``--impl``: libcni from the ``--libcni`` checkout, or a Go
runtime on Debian's Go libcni 1.1.2), each operation (``--ops``: ``setup`` is
``NetworkManager.setup``, ``add`` is ``add_network_list``; Go has only
``add``, as ``AddNetworkList``) and kill mode (``--modes``: ``process``, the
runtime alone; ``group``, the runtime and every plugin it started;
``restart``, the runtime alone while one of its plugins, made to dawdle, runs,
and the recovering runtime started at once, while the orphaned plugins still
run), ``--trials`` kills at uniformly random instants of the operation (of a
plugin's run, for ``restart``), cycling through the variants (the
container's namespace kept, with and without ``bridge``'s masquerading;
removed before gc, but for ``restart``; a live neighbour container);
then the exact instants, namespace kept and removed (``--no-instants`` to
skip them), and the instants at which a reference plugin cannot undo what it
did (``ipam-torn`` needs strace). ``killtest.py`` says how each trial runs,
what is counted and what a plugin limit is. It prints Markdown tables; with
``--json FILE`` it also writes every trial, and ``--render`` prints the
tables of several saved runs side by side. Exit status 1 when a trial leaked
for another reason than a plugin limit.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reliability.killtest import (
    GO_INSTANTS,
    PHASE_ORDER,
    PLUGIN_LIMIT_INSTANTS,
    PYTHON_INSTANTS,
    REPO,
    RESOURCES,
    WINDOW,
    Runner,
    Trial,
    build_go_runtime,
    clean_orphans,
    instant_trials,
    missing_requirements,
    random_trials,
    restart_trials,
)

NETWORK_RESOURCES = ("reservations", "veths", "ctr_ifaces", "chains", "rules")
#: The kill modes of random kills (the others: "instant", "none").
RANDOM_MODES = ("process", "group", "restart")
SHORT = {
    "reservations": "addr",
    "veths": "veth",
    "ctr_ifaces": "ctr if",
    "chains": "chains",
    "rules": "rules",
    "entries": "entries",
    "records": "records",
}


def _leaked_resources(t: Trial) -> str:
    parts = [f"{SHORT[k]} {v}" for k, v in t.leaks.items() if v]
    if t.gc_error:
        parts.append("gc error")
    if t.neighbour_damage:
        parts.append("live container damaged")
    if t.plugin_limit:
        parts.append(f"({t.plugin_limit})")
    return ", ".join(parts) or "-"


def _held(t: Trial) -> bool:
    """Whether the killed setup held network resources when the restarted runtime came."""
    return any(t.before_gc.get(r) for r in NETWORK_RESOURCES)


def summary_table(runs: Sequence[tuple[str, list[Trial]]]) -> list[str]:
    """One row per runtime, operation and kill mode (random kills only); the resource
    columns count the trials that left that resource after the restarted runtime's gc.

    ``restart`` only: "orphans at restart" counts the trials in which a plugin the
    killed runtime left still ran when the recovering runtime started, "left after a
    second gc" those in which a second gc (after the orphans ended) left something
    still; "held resources at restart" is not measured (the recovering runtime starts
    at once, with no time for a count)."""
    head = (
        "| runtime | operation | kill | trials | in the window | held resources at restart | "
        "orphans at restart | leaked | leaked in the window | addresses | veth pairs | "
        "iptables chains / rules | entries | records | gc failed | left after a second gc | "
        "plugin limits | temp files | lock files |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]

    def n(ts: Sequence[Trial], *what: str) -> int:
        return sum(1 for t in ts if any(t.leaks.get(w) for w in what))

    for label, trials in runs:
        groups: dict[tuple[str, str], list[Trial]] = defaultdict(list)
        for t in trials:
            if t.mode in RANDOM_MODES:
                groups[(t.op, t.mode)].append(t)
        for (op, mode), ts in groups.items():
            restart = mode == "restart"
            window = [t for t in ts if t.phase in WINDOW]
            leaked = [t for t in ts if t.leaked]
            cells = [
                label,
                op,
                mode,
                str(len(ts)),
                str(len(window)),
                "-" if restart else str(sum(_held(t) for t in ts)),
                str(sum(t.orphans_at_restart > 0 for t in ts)) if restart else "-",
                str(len(leaked)),
                f"{sum(t.leaked for t in window)}/{len(window)}",
                str(n(ts, "reservations")),
                str(n(ts, "veths", "ctr_ifaces")),
                f"{n(ts, 'chains')} / {n(ts, 'rules')}",
                str(n(ts, "entries")),
                str(n(ts, "records")),
                str(sum(1 for t in ts if t.gc_error)),
                str(sum(1 for t in leaked if _second_gc_left(t))),
                str(sum(1 for t in leaked if t.plugin_limit)),
                str(sum(t.temp for t in ts)),
                str(sum(t.locks for t in ts)),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def _second_gc_left(t: Trial) -> bool:
    """Whether a second gc (run when the first failed or left something) left something."""
    return t.after_second_gc is None or any(t.after_second_gc.values()) or bool(t.second_gc_error)


def phase_table(runs: Sequence[tuple[str, list[Trial]]]) -> list[str]:
    """Where the random kills landed, and which of them leaked what (all modes together)."""
    order = {p: i for i, p in enumerate(PHASE_ORDER)}
    lines = [
        "| runtime | operation | the kill landed | trials (process/group/restart) | leaked | "
        "what leaked (trials) |",
        "|---|---|---|---|---|---|",
    ]
    for label, trials in runs:
        groups: dict[tuple[str, str], list[Trial]] = defaultdict(list)
        for t in trials:
            if t.mode in RANDOM_MODES:
                groups[(t.op, t.phase)].append(t)
        for (op, phase), ts in sorted(groups.items(), key=lambda kv: (kv[0][0], order[kv[0][1]])):
            what: dict[str, int] = defaultdict(int)
            for t in ts:
                for r in RESOURCES:
                    if t.leaks.get(r):
                        what[SHORT[r]] += 1
                if t.gc_error:
                    what["gc error"] += 1
                if t.plugin_limit:
                    what[t.plugin_limit] += 1
            by_mode = "/".join(str(sum(t.mode == m for t in ts)) for m in RANDOM_MODES)
            lines.append(
                f"| {label} | {op} | {phase} | {len(ts)} ({by_mode}) | "
                f"{sum(t.leaked for t in ts)} | "
                + (", ".join(f"{k} {v}" for k, v in what.items()) or "-")
                + " |"
            )
    return lines


def instant_table(runs: Sequence[tuple[str, list[Trial]]]) -> list[str]:
    """What each exact instant left after gc: one row per runtime and instant, one column
    per operation and variant."""
    columns = [(op, v) for op in ("setup", "add") for v in ("kept", "gone")]
    lines = [
        "| runtime | instant | the kill landed | "
        + " | ".join(f"{op}, netns {v}" for op, v in columns)
        + " |",
        "|---|---|---|" + "---|" * len(columns),
    ]
    for label, trials in runs:
        cells: dict[str, dict[tuple[str, str], str]] = defaultdict(dict)
        phases: dict[str, str] = {}
        for t in trials:
            if t.mode == "instant":
                cells[t.kill_at][(t.op, t.variant)] = _leaked_resources(t)
                phases.setdefault(t.kill_at, t.phase)
        for kill_at, row in cells.items():
            lines.append(
                f"| {label} | {kill_at} | {phases[kill_at]} | "
                + " | ".join(row.get(c, "") for c in columns)
                + " |"
            )
    return lines


def report(runs: Sequence[tuple[str, list[Trial]]]) -> list[str]:
    out = [*summary_table(runs), "", *phase_table(runs)]
    if any(t.mode == "instant" for _, ts in runs for t in ts):
        out += ["", *instant_table(runs)]
    for label, trials in runs:
        leaks = [t for t in trials if t.leaked]
        out += ["", f"{label}: {len(leaks)} of {len(trials)} trials leaked."]
        out += [f"- {' '.join(t.describe()[:500].split())}" for t in leaks]
    return out


def _load(path: Path) -> tuple[str, list[Trial]]:
    data = json.loads(path.read_text())
    return data["label"], [Trial(**t) for t in data["trials"]]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--impl", choices=("python", "go"), default="python")
    ap.add_argument(
        "--libcni", type=Path, default=REPO, help="the libcni checkout the runtime imports"
    )
    ap.add_argument("--label", help="the runtime's name in the tables")
    ap.add_argument("--trials", type=int, default=40, help="random kills per operation and mode")
    ap.add_argument("--ops", default="setup,add")
    ap.add_argument("--modes", default=",".join(RANDOM_MODES))
    ap.add_argument("--no-instants", action="store_true")
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--json", type=Path, help="write every trial to this file")
    ap.add_argument(
        "--render",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="run nothing: print the tables of runs saved with --json, side by side",
    )
    ap.add_argument("--verbose", "-v", action="store_true", help="print each trial as it ends")
    args = ap.parse_args(argv)

    if args.render:
        runs = [_load(p) for p in args.render]
        print("\n".join(report(runs)))
        return 1 if any(t.leaked for _, ts in runs for t in ts) else 0

    impl = args.impl
    label = args.label or ("Go libcni 1.1.2" if impl == "go" else f"libcni ({args.libcni})")
    missing = missing_requirements(go=impl == "go")
    if missing:
        print("kill_report: needs " + "; ".join(missing), file=sys.stderr)
        return 2
    clean_orphans()
    base = Path(tempfile.mkdtemp(prefix="libcni-kill-"))
    rng = random.Random(args.seed)
    trials: list[Trial] = []
    start = time.monotonic()

    def note(t: Trial) -> None:
        trials.append(t)
        if args.verbose:
            print(f"  {t.describe()[:300]}", file=sys.stderr, flush=True)

    try:
        runner = Runner(base, libcni=args.libcni.resolve())
        if impl == "go":
            runner.go_runtime = build_go_runtime()
        for op in ["add"] if impl == "go" else args.ops.split(","):
            for mode in args.modes.split(","):
                print(f"{impl} {op} {mode}: {args.trials} trials", file=sys.stderr, flush=True)
                if mode == "restart":
                    kills = restart_trials(runner, impl, op, args.trials, rng)
                else:
                    kills = random_trials(runner, impl, op, mode, args.trials, rng)
                for t in kills:
                    note(t)
            if args.no_instants:
                continue
            print(f"{impl} {op}: instants", file=sys.stderr, flush=True)
            for variant in ("kept", "gone"):
                chosen = PYTHON_INSTANTS if impl == "python" else GO_INSTANTS
                for t in instant_trials(runner, impl, op, chosen, variant):
                    note(t)
            limits = [
                i for i in PLUGIN_LIMIT_INSTANTS if i != "ipam-torn" or shutil.which("strace")
            ]
            for t in instant_trials(runner, impl, op, limits, "kept"):
                note(t)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    elapsed = time.monotonic() - start
    print(f"Kill test: {label}, seed {args.seed}, {len(trials)} trials in {elapsed:.0f}s\n")
    print("\n".join(report([(label, trials)])))
    if args.json:
        data = {
            "label": label,
            "libcni": str(args.libcni.resolve()),
            "trials": [asdict(t) for t in trials],
        }
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    limit = {"torn reservation", "bridge DEL failed once"}
    return 1 if any(t.leaked and t.plugin_limit not in limit for t in trials) else 0


if __name__ == "__main__":
    sys.exit(main())
