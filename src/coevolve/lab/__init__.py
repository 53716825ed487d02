"""The lab: what reads finished runs (the run report, the compare table, the multi-seed study and
its statistics). Above the library: nothing under it imports the lab."""
