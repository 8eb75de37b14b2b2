"""Packaging glue: a wheel carries the device sources and committed results inside the package.

pyproject.toml holds the metadata; this file only adds one build step. The folders listed in
a07_softmax/paths.py (DATA_DIRS) are copied to a07_softmax/_data/ in the build tree, where
a07_softmax.paths.root() finds them when the package is not running from a checkout. Editable
installs skip the copy: they read the checkout itself.
"""
import ast
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def data_dirs():
    tree = ast.parse((HERE / "a07_softmax" / "paths.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DATA_DIRS":
            return ast.literal_eval(node.value)
    raise RuntimeError("DATA_DIRS not found in a07_softmax/paths.py")


class BuildWithSources(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "a07_softmax" / "_data"
        skip = shutil.ignore_patterns("bin", "__pycache__", ".ipynb_checkpoints", "*.pyc")
        for name in data_dirs():
            if (HERE / name).is_dir():
                shutil.copytree(HERE / name, dest / name, ignore=skip, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildWithSources})
