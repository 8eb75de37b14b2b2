"""python -m a07_softmax ...: the same program as the `a07` command."""
from .cli import main

raise SystemExit(main())
