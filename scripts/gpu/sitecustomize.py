"""Stands in for `wandb` in scripts/gpu-check.sh's Python site (part h) on the GPU machine.

Upstream Samudra's aggregators import wandb at module level, so its loader's tests and its
Trainer import it; neither logs anything in those runs. The real package is a 27 MB wheel that
would not fit beside the rest of a device run's carry, so this module registers an importable
`wandb` (and any `wandb.x.y`) whose attributes are placeholder classes; using one raises.
Python imports `sitecustomize` at startup from the site on PYTHONPATH. Nowhere else is it used.
"""

import importlib.abc
import importlib.machinery
import sys
import types


class _Placeholder:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("wandb is a stand-in in this run (scripts/gpu/sitecustomize.py)")


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "wandb" or fullname.startswith("wandb."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


# Last on the path: a real wandb, where one is installed, is found first.
sys.meta_path.append(_Finder())
