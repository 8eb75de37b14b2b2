"""python -m kernels {doctor | check NN | run | grade DIR}"""
import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv.pop(0) if argv else "doctor"
    if cmd == "doctor":
        from .backend import doctor

        return doctor()
    if cmd == "run":
        from .labs import run_all

        return run_all()
    if cmd == "check":
        from .check import main as check_main

        return check_main(argv)
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
