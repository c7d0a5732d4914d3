"""Two builds of gruc side by side: one GRU layer's ``Engine.run``, timed in fresh processes that
alternate between the builds, round after round.

Why a script of its own: this VM's speed drifts by 15-40 % from one hour to the next and by 20 %
between two runs a minute apart (see ``docs/performance.md``), far more than the few per cent an
engine change is worth, so a change is only measured against the build before it, interleaved in
time.  Each round runs one process per build (``base`` first, then ``head``, swapped every other
round); each process builds the layer with its own build's code, runs it untimed for
:data:`WARM_SECONDS`, then times ``--repeats`` runs (each after another untimed moment), and
reports their median.  The head/base ratio is taken per round, from processes a few seconds apart,
and its median over the rounds is the answer; the spread of the per-round ratios says how far to
trust it.

``BASE`` is a git revision of this repository (checked out in a temporary worktree, removed
afterwards) or a directory holding another gruc tree; ``--head`` is this tree unless given.
``python benchmarks/ab.py HEAD~1 [--shape 100x64x256x256] [--phase fwd|all] [--rounds 5]``.
Writes ``benchmarks/results/ab.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WARM_SECONDS = 0.15
"""Untimed running before each timed run, as ``gru.py`` does: the previous process's BLAS threads
have stopped spinning, and the layer's memory is in the caches."""

HERE = Path(__file__).resolve().parent.parent


def time_layer(shape: tuple[int, int, int, int], phase: str, repeats: int) -> dict:
    """In a child process: the layer built by whatever ``gruc`` this process imports, its
    ``Engine.run`` timed; median and fastest seconds."""
    import gruc
    from _common import gruc_layer

    engine = gruc_layer(shape, phase)[0]
    times = []
    for _ in range(repeats):
        warm = time.perf_counter() + WARM_SECONDS
        engine.run(0)
        while time.perf_counter() < warm:
            engine.run(0)
        start = time.perf_counter()
        engine.run(0)
        times.append(time.perf_counter() - start)
    return {"gruc": str(Path(gruc.__file__).parent), "median_seconds": statistics.median(times),
            "fastest_seconds": min(times)}


def _child(tree: Path, args: argparse.Namespace) -> dict:
    """One timing process importing gruc from ``tree``."""
    environment = dict(os.environ, PYTHONPATH=str(tree))
    environment.setdefault("OPENBLAS_NUM_THREADS", "2")
    command = [sys.executable, __file__, "--child", "--shape", args.shape, "--phase", args.phase,
               "--repeats", str(args.repeats)]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.splitlines()[-1])
    if Path(result["gruc"]).resolve() != (tree / "gruc").resolve():
        raise SystemExit(f"ab.py: the child imported gruc from {result['gruc']}, not {tree}")
    return result


def _base_tree(base: str, scratch: Path) -> tuple[Path, str, bool]:
    """A directory holding the base build, how to name it, and whether it is a worktree made
    here (to be removed)."""
    if Path(base, "gruc").is_dir():
        return Path(base).resolve(), str(Path(base).resolve()), False
    found = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "--verify",
                            f"{base}^{{commit}}"], capture_output=True, text=True)
    if found.returncode:
        raise SystemExit(f"ab.py: {base!r} is neither a gruc tree nor a revision of {HERE}")
    revision = found.stdout.strip()
    tree = scratch / "base"
    subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", "--quiet", str(tree),
                    revision], check=True)
    return tree, revision, True


def compare(args: argparse.Namespace) -> dict:
    head = Path(args.head).resolve()
    with tempfile.TemporaryDirectory(prefix="gruc-ab-") as scratch:
        base, base_name, made = _base_tree(args.base, Path(scratch))
        try:
            rounds = []
            for number in range(args.rounds):
                order = [("base", base), ("head", head)][::1 if number % 2 == 0 else -1]
                timed = {name: _child(tree, args) for name, tree in order}
                ratio = timed["head"]["median_seconds"] / timed["base"]["median_seconds"]
                rounds.append({"base_ms": round(timed["base"]["median_seconds"] * 1e3, 2),
                               "head_ms": round(timed["head"]["median_seconds"] * 1e3, 2),
                               "head_over_base": round(ratio, 4)})
                print(f"round {number + 1}: base {rounds[-1]['base_ms']:8.2f} ms  head "
                      f"{rounds[-1]['head_ms']:8.2f} ms  head/base {ratio:.3f}", flush=True)
        finally:
            if made:
                subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force",
                                str(base)], check=False)
    ratios = [entry["head_over_base"] for entry in rounds]
    summary = {"base": base_name, "head": str(head), "shape": args.shape, "phase": args.phase,
               "repeats": args.repeats, "rounds": rounds,
               "median_head_over_base": round(statistics.median(ratios), 4),
               "head_over_base_range": [min(ratios), max(ratios)]}
    print(f"{args.shape} {args.phase}: head/base median {summary['median_head_over_base']:.3f} "
          f"(rounds from {min(ratios):.3f} to {max(ratios):.3f})")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", nargs="?", help="git revision or gruc tree to compare against")
    parser.add_argument("--head", default=str(HERE), help="the gruc tree under test (default: "
                        "this one)")
    parser.add_argument("--shape", default="100x64x256x256", help="T x B x I x H")
    parser.add_argument("--phase", default="fwd", choices=("fwd", "all"),
                        help="inference, or forward + backward + weight update")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per process")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = args.shape.lower().split("x")
    shape = tuple(int(size) for size in sizes if size.isdigit())
    if len(shape) != 4 or len(sizes) != 4 or min(shape) < 1 or args.rounds < 1 or args.repeats < 1:
        parser.error("--shape is T x B x I x H, four positive sizes; --rounds and --repeats at "
                     "least 1")
    if args.child:
        print(json.dumps(time_layer(shape, args.phase, args.repeats)))
        return
    if args.base is None:
        parser.error("name the base: a git revision or a gruc tree")
    from _common import write_result

    print(f"wrote {write_result('ab', compare(args))}")


if __name__ == "__main__":
    main()
