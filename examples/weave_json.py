"""Instrumenting code you do not own: weave unmodified standard-library code, see what runs.

It weaves timing (around advice) and structured logging (after advice) into ``json.dumps``
and ``json.loads`` by dotted path, without touching the json module's source, runs a
little workload, prints the timings, removes everything with one call, and shows that the
original functions are back.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from typing import Any

import structlog

import aspecthook as ah

log = structlog.get_logger("demo")
timings: dict[str, list[int]] = defaultdict(list)


class Timing(ah.Aspect):
    """Times every call of the join points it is woven into."""

    priority = ah.Priority.HIGHEST  # outermost around advice: time everything inside

    @ah.around()
    def time_call(self, ctx: ah.CallContext, proceed: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return proceed()
        finally:
            timings[ctx.joinpoint.name].append(time.perf_counter_ns() - start)


class Logging(ah.Aspect):
    """One structured log line per call, with a size-capped argument summary."""

    errors = "log"  # a logging failure must never break the host call

    @ah.after(every=250)
    def log_call(self, ctx: ah.CallContext) -> None:
        log.info("call", joinpoint=ctx.joinpoint.name, arg=repr(ctx.args[0])[:40])


def workload() -> None:
    for i in range(1000):
        text = json.dumps({"step": i, "values": list(range(i % 7))})
        json.loads(text)


def main() -> None:
    originals = (json.dumps, json.loads)
    handle = ah.weave("json.dumps", Timing(), Logging(), name="encode")
    handle_loads = ah.weave("json.loads", Timing(), Logging(), name="decode")
    workload()

    print()
    print(ah.describe("json.*"))
    print()
    for name, samples in sorted(timings.items()):
        samples.sort()
        print(
            f"{name:12} calls={len(samples):5}  median={samples[len(samples) // 2] / 1e3:7.2f} us"
            f"  max={samples[-1] / 1e3:7.2f} us"
        )

    handle.remove()
    handle_loads.remove()
    assert (json.dumps, json.loads) == originals  # the original objects are back
    print("\nunwoven: json.dumps and json.loads are the original functions again")


if __name__ == "__main__":
    main()
