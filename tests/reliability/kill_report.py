"""The full kill test: kill a runtime at random instants of real setups, restart it, count leaks.

The figures of docs/reliability.md ("Killing the runtime"). As root, from the
repository::

    python tests/reliability/kill_report.py                       # libcni of this checkout
    python tests/reliability/kill_report.py --libcni /other/checkout --label after
    python tests/reliability/kill_report.py --impl go             # Go libcni 1.1.2
    python tests/reliability/kill_report.py --trials 5 --ops add  # a quick look

For each runtime (``--impl``), operation (``--ops``: ``setup`` is
``NetworkManager.setup``, ``add`` is ``add_network_list``; Go only has
``add``) and kill mode (``process``: the runtime alone; ``group``: the runtime
and every plugin it started), ``--trials`` kills at uniformly random instants
of the operation; then the exact instants (``--no-instants`` to skip them).
The variants cycle: the container's namespace kept (with and without
``bridge``'s masquerading), removed before gc, and a live neighbour container. See ``killtest.py`` for how each trial runs and
what is counted. It prints Markdown tables, and with ``--json FILE`` writes
every trial. Exit status 1 when any trial leaked, 0 when none did.
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
)

NETWORK_RESOURCES = ("reservations", "veths", "ctr_ifaces", "chains", "rules")
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
    return ", ".join(parts) or "-"


def _held(t: Trial) -> bool:
    """Whether the killed setup held network resources when the restarted runtime came."""
    return any(t.before_gc.get(r) for r in NETWORK_RESOURCES)


def _second(ts: Sequence[Trial]) -> str:
    """Of the trials the first gc left unclean, how many a second gc cleaned."""
    again = [t for t in ts if t.after_second_gc is not None]
    if not again:
        return "-"
    clean = [t for t in again if not any(t.after_second_gc.values()) and not t.second_gc_error]
    return f"{len(clean)}/{len(again)}"


def summary_table(trials: Sequence[Trial], label: str) -> list[str]:
    """One row per (runtime, operation, kill mode)."""
    groups: dict[tuple[str, str, str], list[Trial]] = defaultdict(list)
    for t in trials:
        groups[(t.impl, t.op, t.mode)].append(t)
    head = (
        "| runtime | operation | kill | trials | in the window | held resources | leaked | "
        "leaked in the window | "
        + " | ".join(SHORT[r] for r in RESOURCES)
        + " | gc errors | clean after a 2nd gc | temp files | lock files |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for (impl, op, mode), ts in groups.items():
        window = [t for t in ts if t.phase in WINDOW]
        cells = [
            label if impl == "python" else "Go libcni 1.1.2",
            "setup"
            if op == "setup"
            else ("AddNetworkList" if impl == "go" else "add_network_list"),
            mode,
            str(len(ts)),
            str(len(window)),
            str(sum(_held(t) for t in ts)),
            str(sum(t.leaked for t in ts)),
            f"{sum(t.leaked for t in window)}/{len(window)}",
            *[str(sum(1 for t in ts if t.leaks.get(r))) for r in RESOURCES],
            str(sum(1 for t in ts if t.gc_error)),
            _second(ts),
            str(sum(t.temp for t in ts)),
            str(sum(t.locks for t in ts)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def phase_table(trials: Sequence[Trial]) -> list[str]:
    """Where the random kills landed, and which of them leaked what (all modes together)."""
    groups: dict[tuple[str, str, str], list[Trial]] = defaultdict(list)
    for t in trials:
        groups[(t.impl, t.op, t.phase)].append(t)
    order = {p: i for i, p in enumerate(PHASE_ORDER)}
    lines = [
        "| runtime | operation | the kill landed | trials (process/group) | leaked | what leaked (trials) |",
        "|---|---|---|---|---|---|",
    ]
    for (impl, op, phase), ts in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][1], order.get(kv[0][2], 99))
    ):
        what: dict[str, int] = defaultdict(int)
        for t in ts:
            for r in RESOURCES:
                if t.leaks.get(r):
                    what[SHORT[r]] += 1
            if t.gc_error:
                what["gc error"] += 1
        procs = sum(t.mode == "process" for t in ts)
        lines.append(
            f"| {impl} | {op} | {phase} | {len(ts)} ({procs}/{len(ts) - procs}) | "
            f"{sum(t.leaked for t in ts)} | "
            + (", ".join(f"{k} {v}" for k, v in what.items()) or "-")
            + " |"
        )
    return lines


def instant_table(trials: Sequence[Trial]) -> list[str]:
    lines = [
        "| runtime | operation | instant | netns | the kill landed | left after gc |",
        "|---|---|---|---|---|---|",
    ]
    for t in trials:
        lines.append(
            f"| {t.impl} | {t.op} | {t.kill_at} | {t.variant} | {t.phase} | {_leaked_resources(t)} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--impl", choices=("python", "go", "both"), default="python")
    ap.add_argument(
        "--libcni", type=Path, default=REPO, help="the libcni checkout the runtime imports"
    )
    ap.add_argument("--label", default="libcni", help="the name of that checkout in the tables")
    ap.add_argument("--trials", type=int, default=40, help="random kills per operation and mode")
    ap.add_argument("--ops", default="setup,add")
    ap.add_argument("--modes", default="process,group")
    ap.add_argument("--no-instants", action="store_true")
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--json", type=Path, help="write every trial to this file")
    ap.add_argument("--verbose", "-v", action="store_true", help="print each trial as it ends")
    args = ap.parse_args(argv)

    impls = ["python", "go"] if args.impl == "both" else [args.impl]
    missing = missing_requirements(go="go" in impls)
    if missing:
        print("kill_report: needs " + "; ".join(missing), file=sys.stderr)
        return 2
    clean_orphans()
    base = Path(tempfile.mkdtemp(prefix="libcni-kill-"))
    rng = random.Random(args.seed)
    trials: list[Trial] = []
    instants: list[Trial] = []
    start = time.monotonic()

    def note(t: Trial) -> None:
        if args.verbose:
            print(f"  {t.describe()[:300]}", file=sys.stderr, flush=True)

    try:
        runner = Runner(base, libcni=args.libcni.resolve())
        if "go" in impls:
            runner.go_runtime = build_go_runtime()
        for impl in impls:
            ops = ["add"] if impl == "go" else args.ops.split(",")
            for op in ops:
                for mode in args.modes.split(","):
                    print(f"{impl} {op} {mode}: {args.trials} trials", file=sys.stderr, flush=True)
                    for t in random_trials(runner, impl, op, mode, args.trials, rng):
                        note(t)
                        trials.append(t)
                if not args.no_instants:
                    chosen = PYTHON_INSTANTS if impl == "python" else GO_INSTANTS
                    print(f"{impl} {op}: instants", file=sys.stderr, flush=True)
                    for variant in ("kept", "gone"):
                        for t in instant_trials(runner, impl, op, chosen, variant):
                            note(t)
                            instants.append(t)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    elapsed = time.monotonic() - start
    out = [
        f"Kill test: libcni from {args.libcni.resolve()}, seed {args.seed}, "
        f"{len(trials) + len(instants)} trials in {elapsed:.0f}s",
        "",
        *summary_table(trials, args.label),
        "",
        *phase_table(trials),
    ]
    if instants:
        out += ["", *instant_table(instants)]
    leaks = [t for t in trials + instants if t.leaked]
    out += ["", f"{len(leaks)} of {len(trials) + len(instants)} trials leaked."]
    for t in leaks:
        out.append(f"- {t.describe()[:600]}")
    print("\n".join(out))
    if args.json:
        args.json.write_text(json.dumps([asdict(t) for t in trials + instants], indent=1) + "\n")
    return 1 if leaks else 0


if __name__ == "__main__":
    sys.exit(main())
