"""The live Slurm side of slurm-rl (see docs/slurm.md).

* :mod:`~slurm_rl.slurm.client`: ``SlurmClient`` protocol, ``CliSlurmClient``
  (squeue/sinfo/scontrol);
* :mod:`~slurm_rl.slurm.parse`, :mod:`~slurm_rl.slurm.scontrol`, :mod:`~slurm_rl.slurm.gres`:
  Slurm output from 22.05 (openapi/v0.0.38) to 24.x (data_parser) turned into
  :mod:`~slurm_rl.slurm.records`;
* :mod:`~slurm_rl.slurm.source`: ``SlurmSource`` gives a ``ClusterSnapshot``;
* :mod:`~slurm_rl.slurm.actuator`: ``SlurmActuator`` in shadow, advise or enforce mode;
* :mod:`~slurm_rl.slurm.deferral`: the daemon's side of ``plugins/job_submit.lua``.

The native dev cluster is :mod:`slurm_rl.devcluster`.
"""
