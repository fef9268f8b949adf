"""The ``slurm`` conformance suite: Slurm's CLI, the steps its cases share, and its drain cases."""
