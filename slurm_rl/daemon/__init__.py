"""The live daemon: the shared decision loop against a real Slurm (see docs/daemon.md).

* :mod:`~slurm_rl.daemon.config`: ``DaemonConfig`` and ``load_config`` (TOML ``[daemon]``
  table plus command-line overrides);
* :mod:`~slurm_rl.daemon.runner`: ``Daemon`` (``run_once``, ``run``, ``reload``, signals);
* :mod:`~slurm_rl.daemon.recorder`: ``StoreRecorder``, the cycle's audit trail;
* :mod:`~slurm_rl.daemon.guard`: ``GuardedScheduler``, no placement Slurm would refuse;
* :mod:`~slurm_rl.daemon.jobcomp`: outcomes from the jobcomp/filetxt log;
* :mod:`~slurm_rl.daemon.heartbeat`: the heartbeat the job_submit plugin checks;
* :mod:`~slurm_rl.daemon.cli`: the ``slurm-rl daemon`` command.
"""
