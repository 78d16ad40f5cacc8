"""The native dev cluster: a private multi-node Slurm with emulated GPUs on this machine, for
trials and the integration tests (:mod:`.cluster`), and its configuration (:mod:`.config`).
Its ``slurm-rl devcluster`` command group is :mod:`slurm_rl.cli.devcluster`. Nothing at run
time (the daemon, the actuator) uses it."""
