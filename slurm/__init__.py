"""The `slurm` executor: the console as the quota brain over an existing Slurm cluster (docs/slurm.md).

Slurm starts, signals and tracks the processes on every host; the console decides who runs, where
and who gives way. With SLURM_CONF set, the executor keeps Slurm's nodes as console nodes
(executor `slurm`) and turns each replica the console admits there into one Slurm batch job.
"""
