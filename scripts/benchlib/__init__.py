# SPDX-License-Identifier: MIT
"""benchlib: the parts of scripts/bench (the entry point: its options, main and cleanup).

  common.py         sizes of the generated checkpoints, units, BenchError, log, facts of
                    /proc and of the machine (RSS, meminfo, storage, idle CPUs)
  processes.py      every process and mount a run starts (Procs), ended on exit; the warm
                    Python worker's parent side (Worker)
  readers.py        how bytes are read and timed: whole files, random reads by forked readers
  table.py          the results: rows and groups, measure() of one sample, the rendered table
  base.py           Bench: setup (the binary, the checkpoints the sections need) and the state
                    every section shares; the run of the sections asked for; the table's header
  torch_workers.py  what runs in /usr/bin/python3 with torch: checkpoint generation, the warm
                    worker's operations
  sections/         one file per section; sections/__init__.py registers them (their --only
                    names, order, what they need)
"""
