"""Print the sentences tests/test_results.py expects the docs, the README and the notebooks to quote,
recomputed from the committed results: after a new GPU run, each line is what the prose must now
say. The tests compare with `... in doc` / `... in text`; here every such comparison prints its
sentence and passes, so one run lists them all (an assertion about the results themselves still
fails, and is printed as such).

  python tests/print_quotes.py                       every test that reads prose
  python tests/print_quotes.py test_docs_performance_quotes_the_attention_sweep
"""
from __future__ import annotations

import inspect
import re
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


class _Recorder:
    """Stands where a test holds its prose: `sentence in recorder` prints the sentence and answers
    `present` (a test's `not in doc` asks the absent one: what the prose must not say)."""

    def __init__(self, present: bool):
        self.present = present

    def __contains__(self, sentence):
        print(f"  {sentence}" if self.present else f"  (must not say) {sentence}")
        return self.present


def main(argv=None) -> int:
    names = argv if argv is not None else sys.argv[1:]
    path = HERE / "test_results.py"
    prose = re.compile(r"\bin (doc|text)\b")
    source = prose.sub("in _PROSE", re.sub(r"\bnot in (doc|text)\b", "not in _ABSENT", path.read_text()))
    module = types.ModuleType("tests.test_results_quotes")
    module.__file__, module.__package__ = str(path), "tests"   # its `from .helpers import ...`
    module.__dict__["_PROSE"], module.__dict__["_ABSENT"] = _Recorder(True), _Recorder(False)
    exec(compile(source, str(path), "exec"), module.__dict__)
    # inspect reads the file as written (the line numbers are the same): its `in doc` / `in text`
    reads_prose = [n for n, f in module.__dict__.items() if n.startswith("test_") and callable(f)
                   and prose.search(inspect.getsource(f))]
    status = 0
    for name in names or reads_prose:
        fn = module.__dict__[name]
        if inspect.signature(fn).parameters:
            print(f"{name}: takes fixtures, not run here")
            continue
        print(f"{name}:")
        try:
            fn()
        except AssertionError as e:
            print(f"  FAILED: an assertion on the results themselves, or one whose prose must be absent "
                  f"(printed above: check it by hand): {e}")
            status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
