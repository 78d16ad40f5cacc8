"""Training and evaluation of the dual agent: rollouts in the simulator, behaviour cloning of a
realisable heuristic, PPO with a centralised critic (MAPPO-style), held-out evaluation, and the
``slurm-rl train`` / ``slurm-rl evaluate`` commands. docs/training.md describes the method."""
