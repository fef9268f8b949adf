"""What an upgrade must not lose and how long new work waits while it runs, and the work each
stack's bundle (KAI, Kueue, Slurm) carries through it. Above the stacks: used by the upgrade
pipeline."""
