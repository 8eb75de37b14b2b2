"""`a07`: the course's one command (also `python -m a07_softmax`; the Makefile calls it).

  a07 doctor            the preflight: what runs natively, in the interpreter, compile-only
  a07 run [--lab L]     the preflight, then every lab on the best backend this machine has
  a07 check NN          check an exercise (--solution: the reference solution)
  a07 grade DIR         check every learner's folder in DIR
  a07 bench             the benchmark (GPU): results/<gpu>/bench.json and plots
  a07 results           regenerate every committed GPU artefact (bench, run-cuda, notebooks)
  a07 notebooks         re-execute the notebooks on the CPU and store their outputs
  a07 slides            every notebook as a reveal.js deck
"""
from __future__ import annotations

import argparse
import sys


def _doctor(args) -> int:
    from .backend import doctor

    return doctor()


def _run(args) -> int:
    from . import backend, cpu_labs, cpu_target
    from .labs import run_all

    status = run_all(args.lab)
    if args.lab in ("all", "native") and not backend.detect().native and cpu_target.compiler():
        print("\n== Lab 1 and Lab 2 on the CPU target (the same CUDA sources, run on this CPU; correctness only)")
        status |= 0 if cpu_labs.run() else 1
    return status


def _check(args) -> int:
    from . import check

    if args.exercise == "generate":  # maintainers: rewrite exercises/ from solutions/
        changed = check.generate(check_only=args.dry_run)
        print("exercises up to date" if not changed else "regenerated: " + ", ".join(changed))
        return 1 if (changed and args.dry_run) else 0
    numbers = [args.exercise] if args.exercise != "all" else list(check.EXERCISES)
    ok = True
    for n in numbers:
        path = check.find(n, args.solution)
        print(f"checking exercise {n.zfill(2)} ({path.name}) ...", flush=True)
        results = check.run_check(n.zfill(2), path, timeout=args.timeout,
                                  progress=lambda name: print(f"  ... {name}", flush=True))
        ok &= check.report(n.zfill(2), path, results)
    return 0 if ok else 1


def _grade(args) -> int:
    from .grade import main as grade_main

    return grade_main([str(args.folder)], timeout=args.timeout)


def _bench(args) -> int:
    from .bench import main as bench_main

    return bench_main(args.rest)


def _results(args) -> int:
    from .record import main as record_main

    return record_main(args.rest)


def _notebooks(args) -> int:
    from .record import main as record_main

    return record_main(["refresh"])


def _slides(args) -> int:
    from .slides import build

    return build(args.out)


def parser() -> argparse.ArgumentParser:
    from . import __version__
    from .check import EXERCISES, TIMEOUT_S

    ap = argparse.ArgumentParser(prog="a07", description="A07 Softmax & Fused Kernels: the course's command.")
    ap.add_argument("--version", action="version", version=f"a07 {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("doctor", help="the preflight: what runs here and how").set_defaults(fn=_doctor)
    r = sub.add_parser("run", help="the preflight, then every lab on the best backend found")
    r.add_argument("--lab", choices=("all", "native", "triton"), default="all",
                   help="native: Lab 1 and 2 (CUDA/HIP); triton: Lab 3 (default: all)")
    r.set_defaults(fn=_run)
    c = sub.add_parser("check", help="check an exercise: a07 check 01 (or all)")
    c.add_argument("exercise", choices=[*EXERCISES, *[n.lstrip("0") for n in EXERCISES], "all", "generate"],
                   metavar="NN", help=f"exercise number ({', '.join(EXERCISES)}) or all")
    c.add_argument("--solution", action="store_true", help="check the reference solution instead")
    c.add_argument("--timeout", type=int, default=TIMEOUT_S, help=f"seconds per exercise (default {TIMEOUT_S})")
    c.add_argument("--dry-run", action="store_true", help=argparse.SUPPRESS)
    c.set_defaults(fn=_check)
    g = sub.add_parser("grade", help="check every learner's folder in DIR; writes DIR/grades.md and .csv")
    g.add_argument("folder", metavar="DIR")
    g.add_argument("--timeout", type=int, default=TIMEOUT_S, help=f"seconds per submission (default {TIMEOUT_S})")
    g.set_defaults(fn=_grade)
    for name, fn, what in (("bench", _bench, "the benchmark on this GPU (a07 bench --help)"),
                           ("results", _results, "regenerate the committed GPU artefacts (a07 results --help)")):
        p = sub.add_parser(name, help=what, add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(fn=fn)
    sub.add_parser("notebooks", help="re-execute the notebooks on the CPU, store the outputs").set_defaults(fn=_notebooks)
    s = sub.add_parser("slides", help="every notebook as a reveal.js deck")
    from pathlib import Path

    s.add_argument("--out", type=Path, default=Path("slides"), help="folder for the decks (default slides/)")
    s.set_defaults(fn=_slides)
    return ap


def main(argv=None) -> int:
    ap = parser()
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    if not getattr(args, "fn", None):
        ap.print_help()
        return 2
    return int(args.fn(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
