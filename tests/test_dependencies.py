"""pyproject.toml and environment.yml declare the same packages."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _norm(req: str) -> str:
    return re.sub(r"\s+", "", req.split("#")[0]).lower().replace("_", "-")


def pyproject_deps():
    d = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {_norm(r) for r in d["dependencies"]}, {_norm(r) for rs in d["optional-dependencies"].values() for r in rs}


def env_pip_deps():
    lines, active, commented = [], False, []
    for line in (ROOT / "environment.yml").read_text().splitlines():
        if re.match(r"^\s+- pip:\s*$", line):
            active = True
            continue
        if active:
            m = re.match(r"^\s+- (.+)$", line)
            c = re.match(r"^\s+#\s*- (.+)$", line)
            if m:
                lines.append(_norm(m.group(1)))
            elif c:
                commented.append(_norm(c.group(1)))
    return {x for x in lines if x != "-e."}, set(commented)


def test_same_packages_in_both_files():
    deps, extras = pyproject_deps()
    env, env_optional = env_pip_deps()
    assert deps == env, f"only in pyproject: {deps - env}; only in environment.yml: {env - deps}"
    assert extras == env_optional, "the CuPy extras must be offered (commented) in environment.yml too"


def test_the_course_needs_are_declared():
    deps, extras = pyproject_deps()
    names = {re.split(r"[<>=;!~ ]", d)[0] for d in deps | extras}
    for need in ("numpy", "matplotlib", "torch", "triton", "jupyterlab", "nbval", "pytest", "tqdm",
                 "cuda-bindings", "nvidia-cuda-nvrtc", "cupy-cuda12x", "cupy-cuda13x"):
        assert need in names, need
