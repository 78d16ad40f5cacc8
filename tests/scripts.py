"""The project's scripts (scripts/*.py are not a package) loaded as modules for tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str, module_name: str | None = None) -> ModuleType:
    """``scripts/<name>.py`` as a module, registered in ``sys.modules`` under ``module_name``
    (default ``name``): a dataclass defined in it looks its module up there."""
    module_name = module_name or name
    spec = importlib.util.spec_from_file_location(module_name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
