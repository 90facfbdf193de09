"""Instrument a program without editing it: ``aspecthook run`` with a config file.

This example writes a small, ordinary program to a temporary directory — ``app.py``, which
uses the standard library's ``json`` and a class of its own from ``inventory.py`` — and a
config file that times and logs every ``json.*`` call and times the ``Inventory`` methods.
Then it runs::

    python -m aspecthook run --aspects aspects.yaml --trace trace.json app.py --restock 3

and shows what came out: the program's own output (unchanged), the call logs and the
timing summary (on stderr), and the Chrome trace file. Nothing in ``app.py`` or
``inventory.py`` mentions aspecthook.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path

INVENTORY = '''
"""A tiny stock-keeping class: the program's own code, to be timed from outside."""
import json


class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, count):
        self.items[name] = self.items.get(name, 0) + count

    def save(self):
        return json.dumps(self.items, sort_keys=True)

    @classmethod
    def load(cls, text):
        inventory = cls()
        inventory.items = json.loads(text)
        return inventory
'''

APP = '''
"""Restock an inventory and print it; an ordinary script with an argument parser."""
import argparse

from inventory import Inventory

parser = argparse.ArgumentParser()
parser.add_argument("--restock", type=int, default=1)
args = parser.parse_args()

stock = Inventory()
for _ in range(args.restock):
    for fruit in ("apple", "pear", "plum"):
        stock.add(fruit, 2)
saved = stock.save()
print("saved:", saved)
print("loaded back:", Inventory.load(saved).items == stock.items)
'''

CONFIG = """
# Time and log every json.* call, and time the program's own Inventory methods.
# Dotted paths are woven when the program imports their module.
summary: true
weave:
  - target: "json.*"
    aspects: [Timed, {type: Logged, level: info, log_result: false}]
  - target: "inventory.Inventory.*"
    aspects: [Timed]
"""


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, text in (("inventory.py", INVENTORY), ("app.py", APP), ("aspects.yaml", CONFIG)):
            (work / name).write_text(textwrap.dedent(text).lstrip())

        command = ["--aspects", "aspects.yaml", "--trace", "trace.json", "app.py", "--restock", "3"]
        print("$ python -m aspecthook run", " ".join(command))
        done = subprocess.run(
            [sys.executable, "-m", "aspecthook", "run", *command],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=120,
        )
        print("\n--- the program's stdout (exactly as with plain python) ---")
        print(done.stdout, end="")
        print("\n--- stderr: a log line per json call, then the timing summary ---")
        print(done.stderr, end="")
        if done.returncode != 0:
            print(f"aspecthook run exited {done.returncode}", file=sys.stderr)
            return done.returncode

        trace = json.loads((work / "trace.json").read_text())
        events = trace["traceEvents"]
        calls = [e for e in events if e["ph"] == "X"]
        metadata = [e for e in events if e["ph"] == "M"]  # process and thread names
        print("\n--- trace.json: Trace Event Format, open it in https://ui.perfetto.dev ---")
        print(f"{len(calls)} complete events ('ph': 'X'), one per call:")
        for name, count in sorted(Counter(e["name"] for e in calls).items()):
            print(f"  {count:3} x {name}")
        print("first call:", json.dumps(calls[0]))
        print(f"and {len(metadata)} metadata events ('ph': 'M'):")
        for event in metadata:
            print(f"  {event['name']}: {event['args']['name']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
