"""Training-loop overhead in executed instructions: bench/loop.py's runs, counted, not timed.

On a shared machine the wall time of a run drifts by more than the few percent the loop
benchmark is about, so even its paired median moves by several percent between
invocations. The number of instructions a run executes does not drift: with
``PYTHONHASHSEED`` fixed, two counts of one run agree to about 0.1%. This script runs each
variant of ``bench/loop.py`` (the same model, data, work and checks) in its own process
under valgrind's callgrind with counting off, once uncounted (imports, lazy
initialisation, torch's first-call set-up), then once counted: the whole run as
``bench/loop.py`` times it (building the engine / trainer / runner, the loop, the log
records and checkpoints, the background checkpoint writer's thread included). Two run
lengths (``--iters`` and ``--short``) give the cost of one iteration as their difference
and the fixed cost (set-up, the end of the run) as the rest.

Instructions are not time: the interpreter's work between torch calls runs at fewer
instructions a cycle than torch's kernels do, so Python-heavy overhead costs more time
than its share of instructions. The figures are for comparing one change with another,
and one framework with another, free of the machine's load; the issue's target stays the
timed paired median of ``bench/loop.py``.

    python bench/instructions.py                      # hand, ignite, aspecthook: ~6 minutes
    python bench/instructions.py --variants aspecthook --aspects lr   # one aspect's cost
    python bench/instructions.py --json counts.json

Needs ``valgrind`` (with ``callgrind_control``) on the PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import loop  # bench/loop.py: its script folder is on sys.path

DEFAULT_VARIANTS = ("hand", "ignite", "aspecthook")


def child(variant: str, iters: int, aspects: tuple[str, ...]) -> None:
    """Inside callgrind: one uncounted run, then one counted run of ``variant``."""
    import torch

    loop.configure_sink()
    if variant == "lightning":
        loop.quiet_peers()
    dataset, x_eval, y_eval = loop.make_data()
    work = loop.Work(dataset, x_eval, y_eval, iters, 50, 1000)
    work = replace(work, aspects=aspects)
    torch.set_num_threads(1)
    loop.run_variant(variant, work)  # uncounted: everything done once per process
    pid = str(os.getpid())
    subprocess.run(["callgrind_control", "--instr=on", pid], check=True, capture_output=True)
    run = loop.run_variant(variant, work)
    subprocess.run(["callgrind_control", "--instr=off", pid], check=True, capture_output=True)
    print(json.dumps({"steps": run.steps, "checkpoints": run.checkpoints, "loss": run.eval_loss}))


def count(variant: str, iters: int, aspects: tuple[str, ...]) -> dict[str, Any]:
    """Instructions of one counted run of ``variant`` (all threads), and what it did."""
    with tempfile.TemporaryDirectory(prefix="aspecthook-bench-instructions-") as tmp:
        out = Path(tmp) / "callgrind.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "--child",
            variant,
            "--iters",
            str(iters),
            "--aspects",
            ",".join(aspects),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        proc = subprocess.run(command, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"{variant} at {iters} iterations failed:\n{proc.stderr[-3000:]}")
        totals = [line for line in out.read_text().splitlines() if line.startswith("totals:")]
        if not totals or int(totals[0].split()[1]) == 0:
            raise SystemExit(f"{variant}: callgrind counted nothing (callgrind_control failed?)")
        done = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"instructions": int(totals[0].split()[1]), **done}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--iters", type=int, default=3000, help="the long run (default 3000)")
    parser.add_argument("--short", type=int, default=1000, help="the short run (default 1000)")
    parser.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help=f"comma-separated, of {','.join(loop.VARIANTS)} (hand always runs); "
        f"default {','.join(DEFAULT_VARIANTS)}",
    )
    parser.add_argument(
        "--aspects", default="timer,lr,logger,checkpoint", help="the Runner's, as bench/loop.py"
    )
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the counts as JSON")
    parser.add_argument("--child", metavar="VARIANT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    aspects = tuple(a.strip() for a in args.aspects.split(",") if a.strip())
    if args.child:
        child(args.child, args.iters, aspects)
        return 0
    if not 0 < args.short < args.iters:
        parser.error("--short must be at least 1 and below --iters")
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        parser.error("needs valgrind and callgrind_control on the PATH (install valgrind)")
    chosen = {v.strip() for v in args.variants.split(",") if v.strip()}
    if chosen - set(loop.VARIANTS):
        parser.error(f"unknown variants {sorted(chosen - set(loop.VARIANTS))}")
    keys = [k for k in loop.VARIANTS if k == "hand" or k in chosen]
    jobs = [(k, n) for k in keys for n in (args.short, args.iters)]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        counted = dict(zip(jobs, pool.map(lambda job: count(*job, aspects), jobs), strict=True))

    rows: dict[str, dict[str, Any]] = {}
    for key in keys:
        short, long = counted[key, args.short], counted[key, args.iters]
        if long["steps"] != args.iters or long["loss"] != counted["hand", args.iters]["loss"]:
            raise SystemExit(f"{key} did not do the hand-written loop's work: {long}")
        per_iter = (long["instructions"] - short["instructions"]) / (args.iters - short["steps"])
        rows[key] = {
            "run": long["instructions"],
            "per_iter": per_iter,
            "fixed": long["instructions"] - per_iter * args.iters,
        }
    hand = rows["hand"]
    print(
        f"executed instructions (valgrind callgrind, all threads, PYTHONHASHSEED=0); "
        f"{args.iters} iterations, per iteration from the {args.short}-iteration run's count; "
        f"Runner aspects: {','.join(aspects)}"
    )
    head = f"{'variant':<20}{'run (M)':>10}{'vs hand':>10}{'per iter (k)':>14}"
    head += f"{'vs hand':>10}{'fixed (M)':>12}"
    print(head)
    print("-" * len(head))
    for key, row in rows.items():
        print(
            f"{loop.LABELS[key]:<20}{row['run'] / 1e6:>10.1f}{row['run'] / hand['run']:>9.4f}x"
            f"{row['per_iter'] / 1e3:>14.1f}{row['per_iter'] / hand['per_iter']:>9.4f}x"
            f"{(row['fixed'] - hand['fixed']) / 1e6:>+12.1f}"
        )
    print("fixed: the run's instructions outside its iterations, less the hand-written loop's")
    if args.json is not None:
        meta = {"iters": args.iters, "short": args.short, "aspects": ",".join(aspects)}
        args.json.write_text(json.dumps({"meta": meta, "variants": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
