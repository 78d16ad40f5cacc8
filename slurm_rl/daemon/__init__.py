"""The live daemon: the shared decision loop against a real Slurm (see docs/daemon.md).

* :mod:`~slurm_rl.daemon.runner`: ``Daemon`` (``run_once``, ``run``, ``reload``, signals);
* :mod:`~slurm_rl.daemon.recorder`: ``StoreRecorder``, the cycle's audit trail;
* :mod:`~slurm_rl.daemon.guard`: ``GuardedScheduler``, no placement Slurm would refuse;
* :mod:`~slurm_rl.daemon.jobcomp`: outcomes from the jobcomp/filetxt log;
* :mod:`~slurm_rl.daemon.heartbeat`: the heartbeat the job_submit plugin checks;
* :mod:`~slurm_rl.cli.daemon`: the ``slurm-rl daemon`` command.

Its settings are the site config's ``[daemon]`` table (``DaemonConfig``, ``load_config``), in
:mod:`slurm_rl.config`, which ops, retrain and the store commands read as well.
"""
