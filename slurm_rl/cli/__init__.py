"""The ``slurm-rl`` command line: the main command and its subcommands (:mod:`.main`,
``LAZY_COMMANDS``), each command module beside it, and the options they share
(:mod:`.options`). Every other part of ``slurm_rl`` sits below this one: nothing imports a
command."""
