"""pyproject.toml's layers, and environment.yml declaring the same packages."""
import re
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from a07_softmax.paths import ROOT

LAYERS_IN_ENV = ("lab", "test")  # environment.yml installs these extras; the CuPy ones are offered commented


def _norm(req: str) -> str:
    return re.sub(r"\s+", "", req.split("#")[0]).lower().replace("_", "-").replace('"', "'")


def _name(req: str) -> str:
    return re.split(r"[<>=;!~ \[]", req)[0]


def project():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


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


def test_environment_yml_installs_the_same_packages():
    p = project()
    want = {_norm(r) for r in p["dependencies"]}
    want |= {_norm(r) for layer in LAYERS_IN_ENV for r in p["optional-dependencies"][layer]}
    optional = {_norm(r) for k, rs in p["optional-dependencies"].items() if k not in LAYERS_IN_ENV for r in rs}
    env, env_commented = env_pip_deps()
    assert env == want, f"only in pyproject: {want - env}; only in environment.yml: {env - want}"
    assert env_commented == optional, "the CuPy extras must be offered (commented) in environment.yml too"


def test_test_and_lab_tools_are_not_runtime_dependencies():
    """A learner's install carries what the course runs with; pytest, nbval and JupyterLab come in
    their own layers."""
    p = project()
    runtime = {_name(_norm(r)) for r in p["dependencies"]}
    assert not runtime & {"pytest", "nbval", "jupyterlab", "nbconvert", "ipykernel", "tqdm"}, runtime
    assert {"pytest", "nbval"} <= {_name(_norm(r)) for r in p["optional-dependencies"]["test"]}
    assert "jupyterlab" in {_name(_norm(r)) for r in p["optional-dependencies"]["lab"]}


def test_packages_without_macos_or_windows_wheels_carry_markers():
    """triton is Linux-only and the NVIDIA packages have no macOS wheels: without markers
    `pip install -e .` fails there."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pragma: no cover
        import pytest

        pytest.skip("packaging is not installed: cannot evaluate the markers")
    reqs = {Requirement(r).name: Requirement(r) for r in project()["dependencies"]}
    mac = {"platform_system": "Darwin", "sys_platform": "darwin", "platform_machine": "arm64"}
    win = {"platform_system": "Windows", "sys_platform": "win32", "platform_machine": "AMD64"}
    for name, req in reqs.items():
        on_mac = req.marker is None or req.marker.evaluate(mac)
        on_win = req.marker is None or req.marker.evaluate(win)
        if name in ("triton",):
            assert not on_mac and not on_win, name
        if name in ("cuda-bindings", "nvidia-cuda-nvrtc"):
            assert not on_mac and on_win, name
    assert {"numpy", "matplotlib", "torch"} <= set(reqs)


def test_the_cli_is_a_console_script():
    assert project()["scripts"]["a07"] == "a07_softmax.cli:main"
