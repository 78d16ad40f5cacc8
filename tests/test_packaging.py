"""What ``pip install slurm-rl`` puts on a host: the package, and beside it (under
``<prefix>/share/slurm-rl``) the default policy bundles, the store's Alembic migrations, the
cluster specs and the job_submit plugin, which an installed daemon and ``slurm-rl simulate``
find without a checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from slurm_rl import paths
from slurm_rl.errors import SlurmRLError
from slurm_rl.store import migrate

REPO = Path(__file__).resolve().parents[1]
SHIPPED = ("policies/default/meta.json", "policies/default/weights.pt",
           "policies/no-communication/weights.pt", "sim/clusters/philly-hetero.toml",
           "sim/clusters/venus.toml", "plugins/job_submit.lua", "db/env.py",
           "db/script.py.mako", "db/versions/0001_initial.py", "db/versions/0005_intents.py",
           "db/versions/0006_one_active_version.py")
HEAD_REVISION = "0006_one_active_version"


def test_shipped_prefers_the_checkout_then_the_install(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    checkout, share = tmp_path / "checkout", tmp_path / "share"
    monkeypatch.setattr(paths, "REPO_DIR", checkout)
    monkeypatch.setattr(paths, "SHARE_DIRS", (tmp_path / "elsewhere", share))
    (share / "plugins").mkdir(parents=True)
    (share / "plugins" / "job_submit.lua").write_text("-- installed")
    assert paths.shipped("plugins/job_submit.lua") == share / "plugins" / "job_submit.lua"
    (checkout / "plugins").mkdir(parents=True)
    (checkout / "plugins" / "job_submit.lua").write_text("-- checkout")
    assert paths.shipped("plugins/job_submit.lua") == checkout / "plugins" / "job_submit.lua"
    assert paths.shipped("policies/default") == checkout / "policies" / "default"  # neither


def test_missing_migrations_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "REPO_DIR", tmp_path / "checkout")
    monkeypatch.setattr(paths, "SHARE_DIRS", (tmp_path / "share",))
    with pytest.raises(SlurmRLError, match="store's migrations are missing .*reinstall"):
        migrate.migrations_dir()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(out), str(REPO)],
                   check=True, capture_output=True, text=True, timeout=300)
    (found,) = out.glob("slurm_rl-*.whl")
    return found


def test_the_wheel_ships_the_policies_migrations_cluster_specs_and_plugin(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    data = {n.split(".data/data/share/slurm-rl/", 1)[1] for n in names if ".data/data/" in n}
    assert set(SHIPPED) <= data, sorted(data)


def test_an_installed_daemon_finds_the_default_policy_and_migrations(wheel: Path,
                                                                    tmp_path: Path) -> None:
    """Installed into a fresh prefix; the dependencies come from this environment, the
    package only from the wheel (the checkout is not on the path). A new store is upgraded
    to the head revision from the installed migrations."""
    prefix = tmp_path / "prefix"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(prefix / "bin" / "python"),
                    "install", "-q", "--no-deps", str(wheel)], check=True, timeout=300)
    deps = next(p for p in sys.path if p.endswith("site-packages"))
    probe = ("import slurm_rl; from slurm_rl.live_policy import make_policy;"
             "from slurm_rl.paths import default_bundle_path as d;"
             "from slurm_rl.slurm.deferral import plugin_source as p;"
             "from slurm_rl.store import migrate; from slurm_rl.store.repository import Store;"
             "make_policy('rl+rl', seed=0, bundle=None); s = Store('sqlite:///store.sqlite');"
             "print(slurm_rl.__file__, d(), p(), migrate.migrations_dir(),"
             " *migrate.revisions(s.engine))")
    ran = subprocess.run([str(prefix / "bin" / "python"), "-c", probe], cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": deps}, capture_output=True,
                         text=True, timeout=300, check=False)
    assert ran.returncode == 0, ran.stderr
    module, bundle, plugin, migrations, current, head = ran.stdout.split()
    share = prefix / "share" / "slurm-rl"
    assert module.startswith(str(prefix))
    assert (bundle, plugin, migrations) == (str(share / "policies" / "default"),
                                            str(share / "plugins" / "job_submit.lua"),
                                            str(share / "db"))
    assert current == head == HEAD_REVISION
