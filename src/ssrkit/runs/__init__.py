"""What a self-play run directory is made into: the task pool of each round (`pool`), the run's report
(`report`), and tasks for other tools (`export`: SWE-bench, Harbor, SFT data)."""
